//! The `/v1/` endpoints: request → checked input (on the blocking pool) → the model's queue →
//! JSON, PNG or `.npy`.

use crate::http::{
    content_type_is, f32_le, i64_le, npy_response, png_base64, png_bytes, read_body, wants_npy,
    ApiError, NPY, Q,
};
use crate::models::Kind;
use crate::state::{AppState, Served};
use crate::work::{Output, Task};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use image::RgbImage;
use imgseq_core::image_io::{decode_rgb_bytes, header_of_bytes};
use imgseq_core::tokens::TokenGrid;
use imgseq_gpt::sample::SampleOptions;
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;

type Answer = Result<Response, ApiError>;

/// Query parameters of the image endpoints.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ImageQuery {
    /// The model (default: the first of the kind the endpoint needs).
    pub model: Option<String>,
    /// Allow enlarging images smaller than the model's input.
    #[serde(default)]
    pub upscale: bool,
    /// Classes to return (classify).
    pub k: Option<usize>,
}

/// Query of the endpoints that only name a model.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ModelQuery {
    pub model: Option<String>,
}

/// The checked picture of a request body: not empty, an image whose header declares at most
/// `max_pixels`, decoded, brought to the model's input (VQ: the family's crop and side).
fn picture(
    bytes: &[u8],
    served: &Served,
    max_pixels: u64,
    upscale: bool,
) -> Result<RgbImage, ApiError> {
    let name = Path::new("request body");
    if bytes.is_empty() {
        return Err(ApiError::bad(
            "request body: empty (expected a png, jpeg, webp or bmp image)",
        ));
    }
    let (_, (w, h)) = header_of_bytes(name, bytes)?;
    let pixels = w as u64 * h as u64;
    if pixels > max_pixels {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body: the image is {w}x{h} = {pixels} pixels, more than the limit of {max_pixels}"),
        ));
    }
    let img = decode_rgb_bytes(name, bytes)?;
    Ok(match &served.input {
        Some(spec) => spec.prepare(name, &img, upscale)?,
        None => img,
    })
}

/// Queues `task` on `served`'s queue (503 when it is full) to be answered by `deadline`.
fn submit(
    served: &Served,
    task: Task,
    deadline: tokio::time::Instant,
) -> Result<crate::queue::Answer, ApiError> {
    served
        .queue
        .submit(task, deadline.into_std())
        .map_err(|r| match r {
            crate::queue::Refused::Full => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the queue of model {} is full; try again shortly",
                    served.info.name
                ),
            )
            .retry(1),
            crate::queue::Refused::Closed => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is shutting down",
            ),
        })
}

fn too_late(state: &AppState) -> ApiError {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        format!(
            "the request was not answered within its deadline of {} s",
            state.cfg.deadline.as_secs_f64()
        ),
    )
}

/// When a request that arrives now must be answered: its deadline counts from its arrival, so
/// reading and preparing its image count too (the handler takes it first, before the body).
fn deadline_of(state: &AppState) -> tokio::time::Instant {
    tokio::time::Instant::now() + state.cfg.deadline
}

/// Runs `task` on `served`'s queue within the request's `deadline`.
async fn run(
    state: &AppState,
    served: &Served,
    task: Task,
    deadline: tokio::time::Instant,
) -> Result<Output, ApiError> {
    let answer = submit(served, task, deadline)?;
    match tokio::time::timeout_at(deadline, answer).await {
        Err(_) => Err(too_late(state)),
        Ok(Err(_)) => Err(ApiError::internal("the model's worker stopped")),
        Ok(Ok(r)) => Ok(r?),
    }
}

/// Reads an image body and prepares it for `served` on the blocking pool, by the request's
/// `deadline` (504 after it).
async fn image_task(
    state: &Arc<AppState>,
    served: &Arc<Served>,
    headers: &HeaderMap,
    body: Body,
    upscale: bool,
    deadline: tokio::time::Instant,
) -> Result<RgbImage, ApiError> {
    let prepared = async {
        let bytes = read_body(
            headers,
            body,
            state.cfg.max_body_bytes,
            state.cfg.body_timeout,
        )
        .await?;
        let (s, max) = (served.clone(), state.cfg.max_pixels);
        tokio::task::spawn_blocking(move || picture(&bytes, &s, max, upscale))
            .await
            .map_err(|_| ApiError::internal("decoding the image panicked"))?
    };
    tokio::time::timeout_at(deadline, prepared)
        .await
        .map_err(|_| too_late(state))?
}

fn unexpected() -> ApiError {
    ApiError::internal("the model gave an unexpected kind of result")
}

fn rows(g: &TokenGrid) -> Vec<&[i64]> {
    g.data.chunks(g.w.max(1)).collect()
}

/// `POST /v1/tokenize`: image → tokens, or a vision tower's embeddings (answered as
/// `/v1/embed` answers the ViT's).
pub async fn tokenize(
    State(state): State<Arc<AppState>>,
    Q(q): Q<ImageQuery>,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    let deadline = deadline_of(&state);
    let served = state.model(q.model.as_deref(), Kind::Vq)?;
    let pic = image_task(&state, &served, &headers, body, q.upscale, deadline).await?;
    let g = match run(&state, &served, Task::Encode(pic), deadline).await? {
        Output::Tokens(g) => g,
        Output::Embedding(e) => return Ok(embeddings_answer(&served.info.name, &e, &headers)),
        Output::Latents(l) => return Ok(latents_answer(&served.info.name, &l, &headers)),
        _ => return Err(unexpected()),
    };
    if wants_npy(&headers) {
        return Ok(npy_response("<i8", &[g.h, g.w], i64_le(&g.data)));
    }
    Ok(Json(json!({
        "model": served.info.name,
        "grid": [g.h, g.w],
        "codebook_size": served.info.codebook_size,
        "tokens": rows(&g),
    }))
    .into_response())
}

/// `POST /v1/roundtrip`: image → tokens → image, with PSNR and SSIM.
pub async fn roundtrip(
    State(state): State<Arc<AppState>>,
    Q(q): Q<ImageQuery>,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    let deadline = deadline_of(&state);
    let served = state.model(q.model.as_deref(), Kind::Vq)?;
    let pic = image_task(&state, &served, &headers, body, q.upscale, deadline).await?;
    let input = png_base64(&pic)?;
    let Output::Roundtrip {
        tokens,
        reconstruction,
        psnr,
        ssim,
    } = run(&state, &served, Task::Roundtrip(pic), deadline).await?
    else {
        return Err(unexpected());
    };
    Ok(Json(json!({
        "model": served.info.name,
        "grid": [tokens.h, tokens.w],
        "codebook_size": served.info.codebook_size,
        "tokens": rows(&tokens),
        "psnr": psnr,
        "ssim": ssim,
        "input_png": input,
        "reconstruction_png": png_base64(&reconstruction)?,
    }))
    .into_response())
}

/// The token grid of a detokenize body: JSON `{"tokens": [[...], ...]}` or a `.npy` (h, w)
/// integer array, checked against the model's codebook.
fn token_grid(headers: &HeaderMap, bytes: &[u8], n_codes: usize) -> Result<TokenGrid, ApiError> {
    let is_npy = content_type_is(headers, NPY);
    let name = Path::new("request body");
    let (h, w, data) = if is_npy {
        let a = imgseq_core::npy::parse_npy(name, bytes)?;
        let Some(v) = a.as_i64() else {
            return Err(ApiError::bad(
                "request body: tokens must be an integer array",
            ));
        };
        match a.shape[..] {
            [h, w] => (h, w, v.to_vec()),
            _ => {
                return Err(ApiError::bad(format!(
                    "request body: tokens must be a (rows, columns) array, got shape {:?}",
                    a.shape
                )))
            }
        }
    } else {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Body {
            tokens: Vec<Vec<i64>>,
        }
        let b: Body = serde_json::from_slice(bytes).map_err(|e| {
            ApiError::bad(format!(
                "request body: {e} (expected {{\"tokens\": [[...], ...]}})"
            ))
        })?;
        let (h, w) = (b.tokens.len(), b.tokens.first().map_or(0, |r| r.len()));
        if let Some(i) = b.tokens.iter().position(|r| r.len() != w) {
            return Err(ApiError::bad(format!(
                "request body: token row {i} has {} entries, row 0 has {w}",
                b.tokens[i].len()
            )));
        }
        (h, w, b.tokens.concat())
    };
    if h == 0 || w == 0 {
        return Err(ApiError::bad("request body: the token grid is empty"));
    }
    let g = TokenGrid {
        n: 1,
        h,
        w,
        batched: false,
        data,
    };
    g.check_codebook(name, n_codes)?;
    Ok(g)
}

/// `POST /v1/detokenize`: tokens → PNG.
pub async fn detokenize(
    State(state): State<Arc<AppState>>,
    Q(q): Q<ModelQuery>,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    let deadline = deadline_of(&state);
    let served = state.model(q.model.as_deref(), Kind::Vq)?;
    let bytes: Bytes = read_body(
        &headers,
        body,
        state.cfg.max_body_bytes,
        state.cfg.body_timeout,
    )
    .await?;
    let n_codes = served.info.codebook_size.unwrap_or(0);
    let grid = token_grid(&headers, &bytes, n_codes)?;
    // The decoder's memory grows with the grid: refuse grids far beyond the model's own.
    if let Some([gh, gw]) = served.info.grid {
        if grid.h > 4 * gh || grid.w > 4 * gw {
            return Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!(
                "request body: a {}x{} token grid is larger than this server decodes (at most {}x{})",
                grid.h, grid.w, 4 * gh, 4 * gw
            )));
        }
    }
    let Output::Image(img) = run(&state, &served, Task::Decode(grid), deadline).await? else {
        return Err(unexpected());
    };
    Ok(([(header::CONTENT_TYPE, "image/png")], png_bytes(&img)?).into_response())
}

/// `POST /v1/embed`: image → the ViT's CLS + patch tokens, or a named vision tower's
/// (CLIP, SigLIP, DINOv2) hidden states.
pub async fn embed(
    State(state): State<Arc<AppState>>,
    Q(q): Q<ImageQuery>,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    let deadline = deadline_of(&state);
    let tower = q.model.as_deref().and_then(|n| {
        state.models.iter().find(|m| {
            m.info.name == n
                && m.info.kind == Kind::Vq
                && m.info.description.as_ref().is_some_and(|d| {
                    d.output.kind == imgseq_core::tokenizer::OutputKind::Embeddings
                })
        })
    });
    let served = match tower {
        Some(m) => m.clone(),
        None => state.model(q.model.as_deref(), Kind::Vit)?,
    };
    let pic = image_task(&state, &served, &headers, body, q.upscale, deadline).await?;
    let task = match tower {
        Some(_) => Task::Encode(pic),
        None => Task::Embed(pic),
    };
    let Output::Embedding(e) = run(&state, &served, task, deadline).await? else {
        return Err(unexpected());
    };
    Ok(embeddings_answer(&served.info.name, &e, &headers))
}

/// One picture's (tokens, dim) embeddings: float32 (1, tokens, dim) `.npy` when asked for,
/// else JSON rows.
fn embeddings_answer(
    model: &str,
    e: &imgseq_core::tokenizer::Embeddings,
    headers: &HeaderMap,
) -> Response {
    if wants_npy(headers) {
        return npy_response("<f4", &[1, e.tokens, e.dim], f32_le(&e.data));
    }
    let tokens: Vec<&[f32]> = e.data.chunks(e.dim.max(1)).collect();
    Json(json!({
        "model": model,
        "tokens": e.tokens,
        "dim": e.dim,
        "embeddings": tokens,
    }))
    .into_response()
}

/// A VAE's latent map: JSON `{"model", "shape": [C, h, w], "latents": [[[...]]]}` (C maps of
/// h rows), or a float32 (1, C, h, w) `.npy`.
fn latents_answer(
    model: &str,
    l: &imgseq_core::tokenizer::Latents,
    headers: &HeaderMap,
) -> Response {
    let mut shape = vec![1];
    shape.extend(&l.shape);
    if wants_npy(headers) {
        return npy_response("<f4", &shape, f32_le(&l.data));
    }
    let row = l.shape.last().copied().unwrap_or(1).max(1);
    let rows: Vec<&[f32]> = l.data.chunks(row).collect();
    let per_map = l.shape.get(1).copied().unwrap_or(1).max(1);
    let maps: Vec<&[&[f32]]> = rows.chunks(per_map).collect();
    Json(json!({"model": model, "shape": l.shape, "latents": maps})).into_response()
}

/// `POST /v1/classify`: image → the k most probable classes.
pub async fn classify(
    State(state): State<Arc<AppState>>,
    Q(q): Q<ImageQuery>,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    let deadline = deadline_of(&state);
    let served = state.model(q.model.as_deref(), Kind::Vit)?;
    let k = q.k.unwrap_or(5);
    if k == 0 || k > 1000 {
        return Err(ApiError::bad(format!("k {k} must be between 1 and 1000")));
    }
    let pic = image_task(&state, &served, &headers, body, q.upscale, deadline).await?;
    let Output::TopK(top) = run(&state, &served, Task::Classify(pic, k), deadline).await? else {
        return Err(unexpected());
    };
    let classes = &served.info.classes;
    let top: Vec<Value> = top
        .iter()
        .map(|&(i, p)| json!({"index": i, "label": classes.get(i).cloned().unwrap_or_else(|| i.to_string()), "probability": p}))
        .collect();
    Ok(Json(json!({ "model": served.info.name, "top": top })).into_response())
}

/// Body of `POST /v1/sample`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SampleBody {
    pub model: Option<String>,
    /// A class name or index.
    pub class: Value,
    #[serde(default = "one")]
    pub n: usize,
    #[serde(default = "one_f")]
    pub temperature: f64,
    pub top_k: Option<usize>,
    pub top_p: Option<f64>,
    #[serde(default = "one_f")]
    pub guidance: f64,
    #[serde(default)]
    pub seed: u64,
}

fn one() -> usize {
    1
}
fn one_f() -> f64 {
    1.0
}

/// A checked sample request: its model, class index, count and options.
async fn sample_request(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Arc<Served>, usize, usize, SampleOptions), ApiError> {
    let bytes = read_body(
        headers,
        body,
        state.cfg.max_body_bytes,
        state.cfg.body_timeout,
    )
    .await?;
    let b: SampleBody =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::bad(format!("request body: {e}")))?;
    let served = state.model(b.model.as_deref(), Kind::Gpt)?;
    let classes = &served.info.classes;
    let class = match &b.class {
        Value::Number(n) => n
            .as_u64()
            .map(|i| i as usize)
            .filter(|&i| i < classes.len()),
        Value::String(s) => classes.iter().position(|c| c == s),
        _ => None,
    }
    .ok_or_else(|| {
        ApiError::bad(format!(
            "class {} is not one of the model's {} classes ({})",
            b.class,
            classes.len(),
            classes.join(", ")
        ))
    })?;
    let max = state.cfg.max_samples;
    if b.n == 0 || b.n > max {
        return Err(ApiError::bad(format!(
            "n {} must be between 1 and {max}",
            b.n
        )));
    }
    let options = SampleOptions {
        temperature: b.temperature,
        top_k: b.top_k,
        top_p: b.top_p,
        guidance: b.guidance,
        seed: b.seed,
        batch: b.n,
    };
    options.validate()?;
    Ok((served, class, b.n, options))
}

/// `POST /v1/sample`: a class → generated images (tokens and PNGs).
pub async fn sample(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Answer {
    let deadline = deadline_of(&state);
    let (served, class, n, options) = sample_request(&state, &headers, body).await?;
    let classes = &served.info.classes;
    let task = Task::Sample {
        class,
        n,
        options,
        stream: None,
    };
    let Output::Samples { tokens, images } = run(&state, &served, task, deadline).await? else {
        return Err(unexpected());
    };
    if wants_npy(&headers) {
        return Ok(npy_response(
            "<i8",
            &[tokens.n, tokens.h, tokens.w],
            i64_le(&tokens.data),
        ));
    }
    let grids: Vec<Vec<&[i64]>> = (0..tokens.n)
        .map(|i| tokens.image(i).chunks(tokens.w.max(1)).collect())
        .collect();
    let pngs = images
        .iter()
        .map(png_base64)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Json(json!({
        "model": served.info.name,
        "class": classes[class],
        "grid": [tokens.h, tokens.w],
        "tokens": grids,
        "images_png": pngs,
    }))
    .into_response())
}

/// `POST /v1/sample/stream`: as `/v1/sample`, answered as NDJSON while the GPT samples: a
/// line per completed row of tokens (the rows so far and their picture), then the finished
/// images ([`crate::stream`]). Queue, deadline and errors before the first row are answered
/// as by `/v1/sample`; later errors end the stream with an `{"error": ...}` line.
pub async fn sample_stream(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    let (served, class, n, options) = sample_request(&state, &headers, body).await?;
    let rows = served.info.grid.map_or(1, |g| g[0]);
    let (tx, mut rx) = tokio::sync::mpsc::channel(rows + 2);
    let deadline = deadline_of(&state);
    let sink = crate::stream::RowSink {
        tx,
        deadline: deadline.into_std(),
        model: served.info.name.clone(),
        class: served.info.classes[class].clone(),
        metrics: state.metrics.clone(),
    };
    let task = Task::Sample {
        class,
        n,
        options,
        stream: Some(sink),
    };
    let mut answer = submit(&served, task, deadline)?;
    // The status waits for the first line: errors before it (a full queue, a deadline passed
    // in the queue, a failed model) are plain error answers.
    let first = tokio::select! {
        line = rx.recv() => line,
        r = &mut answer => match r {
            Ok(Err(e)) => return Err(e.into()),
            _ => rx.recv().await,
        },
        _ = tokio::time::sleep_until(deadline) => return Err(too_late(&state)),
    };
    let Some(first) = first else {
        return Err(ApiError::internal("the model's worker stopped"));
    };
    let body = crate::stream::LineBody {
        first: Some(first),
        rx,
        done: false,
    };
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::new(body),
    )
        .into_response())
}

/// `GET /v1/models/{name}/positions`: the ViT's position-similarity matrix (n × n, n the
/// patch count, CLS excluded): the cosine similarity of each patch position's learned vector
/// with every other's, row-major by patch (row · side + column).
pub async fn positions(
    State(state): State<Arc<AppState>>,
    axum::extract::Path(name): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Answer {
    let served = state.model(Some(&name), Kind::Vit)?;
    let Some(p) = &served.positions else {
        return Err(ApiError::internal("the ViT's positions were not computed"));
    };
    if wants_npy(&headers) {
        return Ok(npy_response("<f4", &[p.n, p.n], f32_le(&p.similarity)));
    }
    let rows: Vec<&[f32]> = p.similarity.chunks(p.n.max(1)).collect();
    Ok(Json(json!({
        "model": served.info.name,
        "side": p.side,
        "patches": p.n,
        "cls_excluded": true,
        "similarity": rows,
    }))
    .into_response())
}

/// Query of the test route.
#[cfg(feature = "test-hooks")]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestQuery {
    pub model: Option<String>,
    pub action: String,
    #[serde(default)]
    pub ms: u64,
}

/// `POST /v1/_test?action=panic|sleep&ms=N` (tests only): work that panics in the worker or
/// holds it for `ms` (at most 10 s).
#[cfg(feature = "test-hooks")]
pub async fn test_task(State(state): State<Arc<AppState>>, Q(q): Q<TestQuery>) -> Answer {
    let deadline = deadline_of(&state);
    let served = state.model(q.model.as_deref(), Kind::Vq)?;
    let task = match q.action.as_str() {
        "panic" => Task::Panic,
        "sleep" => Task::Hold(std::time::Duration::from_millis(q.ms.min(10_000))),
        a => {
            return Err(ApiError::bad(format!(
                "action {a:?}: expected panic or sleep"
            )))
        }
    };
    run(&state, &served, task, deadline).await?;
    Ok(Json(json!({"done": q.action})).into_response())
}
