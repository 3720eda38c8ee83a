//! The OpenAPI 3 description of the `/v1/` API (served at `/v1/openapi.json`; the committed
//! `docs/openapi.json` is checked equal to it by a test).

use serde_json::{json, Value};

fn err(desc: &str) -> Value {
    json!({"description": desc, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

fn q(name: &str, desc: &str, ty: &str) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": desc, "schema": {"type": ty}})
}

/// The answers every model endpoint may give besides success.
fn errors() -> Value {
    json!({
        "400": err("bad input: empty, truncated or non-image body, out-of-range tokens, wrong shapes, unknown parameters"),
        "401": err("missing or wrong bearer token (when the server has one)"),
        "404": err("no such model"),
        "408": err("the body was not received in time"),
        "413": err("body larger than the limit, or an image with more pixels than the limit (read from its header)"),
        "429": err("more connections than the limit"),
        "500": err("the model failed or panicked on this request"),
        "503": err("the model's queue is full (see Retry-After) or the server is shutting down"),
        "504": err("not answered within the request deadline"),
    })
}

fn with_errors(ok: Value) -> Value {
    let mut r = errors();
    r["200"] = ok;
    r
}

fn image_body() -> Value {
    json!({"required": true, "description": "the image file's bytes (png, jpeg, webp, bmp)",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}})
}

fn json_ok(schema: Value) -> Value {
    json!({"description": "success", "content": {"application/json": {"schema": schema}}})
}

fn image_op(summary: &str, params: Vec<Value>, ok: Value) -> Value {
    json!({"post": {"summary": summary, "parameters": params, "requestBody": image_body(), "responses": with_errors(ok)}})
}

fn grid() -> Value {
    json!({"type": "array", "items": {"type": "array", "items": {"type": "integer"}},
        "description": "rows of codebook indices, raster order"})
}

fn sample_body() -> Value {
    json!({"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["class"], "properties": {
        "model": {"type": "string"}, "class": {"description": "class name or index"},
        "n": {"type": "integer", "default": 1}, "temperature": {"type": "number", "default": 1.0, "minimum": 0, "maximum": 1000, "description": "0 (greedy) or 0.001 to 1000"},
        "top_k": {"type": "integer", "minimum": 1}, "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "guidance": {"type": "number", "default": 1.0, "minimum": -100, "maximum": 100, "description": "classifier-free guidance scale (1: none)"}, "seed": {"type": "integer", "default": 0}}}}}})
}

/// The endpoints the viewer's ViT position map and GPT stream read.
fn viewer_paths() -> Value {
    let npy = json!({"schema": {"type": "string", "format": "binary"}});
    json!({
        "/v1/models/{name}/positions": {"get": {
            "summary": "ViT position similarity: for each patch position, the cosine similarity of its learned position embedding with every other position's (CLS excluded; patches row-major, row * side + column; Accept: application/x-npy for float32 (patches, patches))",
            "parameters": [{"name": "name", "in": "path", "required": true, "description": "a served ViT model", "schema": {"type": "string"}}],
            "responses": with_errors(json!({"description": "success", "content": {
                "application/json": {"schema": {"type": "object", "properties": {
                    "model": {"type": "string"}, "side": {"type": "integer", "description": "patches per side"},
                    "patches": {"type": "integer"}, "cls_excluded": {"type": "boolean"},
                    "similarity": {"type": "array", "items": {"type": "array", "items": {"type": "number"}},
                        "description": "(patches, patches), in [-1, 1]"}}}},
                "application/x-npy": npy}}))}},
        "/v1/sample/stream": {"post": {
            "summary": "GPT sampling streamed as NDJSON: one line per completed row of tokens (rows_done, the rows so far, and the pictures of the grid whose rows from rows_done on are a copy of the last sampled row), then a line with done: true and the finished tokens and images (equal to /v1/sample's). Errors before the first line are plain error answers; later ones end the stream with an {\"error\": ...} line. Sampling stops when the client goes away or the deadline passes.",
            "requestBody": sample_body(),
            "responses": with_errors(json!({"description": "NDJSON lines", "content": {
                "application/x-ndjson": {"schema": {"type": "object", "properties": {
                    "model": {"type": "string"}, "class": {"type": "string"},
                    "rows_done": {"type": "integer", "description": "rows of tokens sampled; later rows of the pictures are placeholders"},
                    "done": {"type": "boolean", "description": "present (true) on the last line only"},
                    "grid": {"type": "array", "items": {"type": "integer"}},
                    "tokens": {"type": "array", "items": grid(), "description": "per image, the rows sampled so far"},
                    "images_png": {"type": "array", "items": {"type": "string", "format": "byte"}},
                    "error": {"type": "string"}}}}}}))}},
    })
}

/// The description.
pub fn spec() -> Value {
    let mut s = base_spec();
    if let (Some(paths), Value::Object(more)) = (s["paths"].as_object_mut(), viewer_paths()) {
        paths.extend(more);
    }
    s
}

fn base_spec() -> Value {
    let model = q(
        "model",
        "model name (default: the first served model of the kind needed)",
        "string",
    );
    let upscale = q(
        "upscale",
        "allow enlarging images smaller than the model's input",
        "boolean",
    );
    let npy = json!({"schema": {"type": "string", "format": "binary"}});
    json!({
        "openapi": "3.0.3",
        "info": {"title": "imgseq serve", "version": "1",
            "description": "Image tokenizers as a service: VQ tokens and back, ViT embeddings and classes, token GPT samples. Errors are one-line JSON objects {\"error\": \"...\"}."},
        "paths": {
            "/healthz": {"get": {"summary": "liveness, the served models and each one's batch bound (max_batch_pixels, input_pixels, max_batch_images)", "responses": {"200": json_ok(json!({"type": "object"}))}}},
            "/metrics": {"get": {"summary": "Prometheus metrics: requests, latency, queue depth, batch size and bound, streams stopped",
                "responses": {"200": {"description": "Prometheus text", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
            "/v1/models": {"get": {"summary": "the served models", "responses": {"200": json_ok(json!({"type": "object",
                "properties": {"models": {"type": "array", "items": {"$ref": "#/components/schemas/Model"}}}}))}}},
            "/v1/openapi.json": {"get": {"summary": "this description", "responses": {"200": json_ok(json!({"type": "object"}))}}},
            "/v1/tokenize": image_op("image -> VQ tokens (Accept: application/x-npy for an int64 (h, w) .npy); a model whose outputs are embeddings (a vision tower, a VAE opened with patch tokens) -> its (tokens, dim) embeddings, answered as /v1/embed answers (float32 (1, tokens, dim) .npy); a VAE -> its latent map (float32 (1, C, h, w) .npy)",
                vec![model.clone(), upscale.clone()],
                json!({"description": "success", "content": {
                    "application/json": {"schema": {"oneOf": [
                        {"type": "object", "properties": {
                            "model": {"type": "string"}, "grid": {"type": "array", "items": {"type": "integer"}},
                            "codebook_size": {"type": "integer"}, "tokens": grid()}},
                        {"type": "object", "properties": {
                            "model": {"type": "string"}, "tokens": {"type": "integer"}, "dim": {"type": "integer"},
                            "embeddings": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}}},
                        {"type": "object", "properties": {
                            "model": {"type": "string"}, "shape": {"type": "array", "items": {"type": "integer"}},
                            "latents": {"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}}}}]}},
                    "application/x-npy": npy.clone()}})),
            "/v1/roundtrip": image_op("image -> tokens -> image, with PSNR and SSIM (pictures as base64 PNG)",
                vec![model.clone(), upscale.clone()],
                json_ok(json!({"type": "object", "properties": {
                    "model": {"type": "string"}, "grid": {"type": "array", "items": {"type": "integer"}},
                    "codebook_size": {"type": "integer"}, "tokens": grid(),
                    "psnr": {"type": "number"}, "ssim": {"type": "number"},
                    "input_png": {"type": "string", "format": "byte", "description": "the model's input picture (cropped)"},
                    "reconstruction_png": {"type": "string", "format": "byte"}}}))),
            "/v1/detokenize": {"post": {"summary": "tokens -> PNG", "parameters": [model.clone()],
                "requestBody": {"required": true, "content": {
                    "application/json": {"schema": {"type": "object", "required": ["tokens"], "properties": {"tokens": grid()}}},
                    "application/x-npy": npy.clone()}},
                "responses": with_errors(json!({"description": "the picture", "content": {"image/png": npy.clone()}}))}},
            "/v1/embed": image_op("image -> ViT tokens: CLS + patches, positions added, or a named vision tower's (CLIP, SigLIP, DINOv2) hidden states, as /v1/tokenize gives them (Accept: application/x-npy for float32 (1, tokens, dim))",
                vec![model.clone(), upscale.clone()],
                json!({"description": "success", "content": {
                    "application/json": {"schema": {"type": "object", "properties": {
                        "model": {"type": "string"}, "tokens": {"type": "integer"}, "dim": {"type": "integer"},
                        "embeddings": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}}}},
                    "application/x-npy": npy.clone()}})),
            "/v1/classify": image_op("image -> the k most probable ViT classes",
                vec![model.clone(), upscale, q("k", "classes to return (default 5)", "integer")],
                json_ok(json!({"type": "object", "properties": {"model": {"type": "string"},
                    "top": {"type": "array", "items": {"type": "object", "properties": {
                        "index": {"type": "integer"}, "label": {"type": "string"}, "probability": {"type": "number"}}}}}}))),
            "/v1/sample": {"post": {"summary": "GPT: images of a class (tokens and base64 PNGs; Accept: application/x-npy for int64 (n, h, w) tokens)",
                "requestBody": sample_body(),
                "responses": with_errors(json!({"description": "success", "content": {
                    "application/json": {"schema": {"type": "object", "properties": {
                        "model": {"type": "string"}, "class": {"type": "string"},
                        "grid": {"type": "array", "items": {"type": "integer"}},
                        "tokens": {"type": "array", "items": grid()},
                        "images_png": {"type": "array", "items": {"type": "string", "format": "byte"}}}}},
                    "application/x-npy": npy}}))}},
        },
        "components": {
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
                "Model": {"type": "object", "properties": {
                    "name": {"type": "string"}, "kind": {"type": "string", "enum": ["vq", "vit", "gpt"]},
                    "label": {"type": "string"}, "description": {"type": "object"}, "input_size": {"type": "integer"},
                    "codebook_size": {"type": "integer"}, "grid": {"type": "array", "items": {"type": "integer"}},
                    "classes": {"type": "array", "items": {"type": "string"}}, "channels": {"type": "integer"}}},
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"bearer": []}],
    })
}
