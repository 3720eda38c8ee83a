//! The API gives what the libraries (and so the CLI) give, batched or not.

use crate::common::{config, png, repo, tiny_gpt, tiny_vit, tiny_vq, Server};
use imgseq_core::tokens::TokenGrid;
use imgseq_serve::{ModelSpec, ServeConfig};
use std::time::Duration;

fn grid_of(v: &serde_json::Value) -> Vec<i64> {
    v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().map(|t| t.as_i64().unwrap()))
        .collect()
}

/// The served VQ as the library loads it (config beside the weights, precision `auto`).
fn library_vq() -> imgseq_vqgan::VqModel {
    let file = imgseq_vqgan::load::resolve_weights(&tiny_vq()).unwrap();
    let config = imgseq_vqgan::load::default_config_path(&file).ok();
    let mut m =
        imgseq_vqgan::load_model(&file, config.as_deref(), &candle_core::Device::Cpu).unwrap();
    m.choose_precision(imgseq_kernels::PrecisionRequest::Auto)
        .unwrap();
    m
}

#[test]
fn tokenize_equals_the_cli_encode_path_in_json_and_npy() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("a.png");
    std::fs::write(&img, png(50, 40)).unwrap();
    let model = library_vq();
    let want = imgseq_vqgan::inference::encode_files(
        &model,
        std::slice::from_ref(&img),
        32,
        false,
        1,
        false,
    )
    .unwrap();
    let s = Server::start(config());
    let r = s.post("/v1/tokenize?model=vq", &[], &png(50, 40));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    assert_eq!(j["grid"], serde_json::json!([16, 16]));
    assert_eq!(j["codebook_size"], 32);
    assert_eq!(grid_of(&j), want.data);
    let r = s.post(
        "/v1/tokenize",
        &[("Accept", "application/x-npy")],
        &png(50, 40),
    );
    assert_eq!(r.header("content-type"), Some("application/x-npy"));
    let a = imgseq_core::npy::parse_npy("answer", &r.body).unwrap();
    assert_eq!(a.shape, vec![16, 16]);
    assert_eq!(a.as_i64().unwrap(), &want.data[..]);
}

#[test]
fn detokenize_and_roundtrip_equal_the_library_decode_and_scores() {
    let model = library_vq();
    let spec = model.config().input_spec(32);
    let pic = spec
        .prepare(
            std::path::Path::new("a"),
            &image::load_from_memory(&png(40, 40)).unwrap().to_rgb8(),
            false,
        )
        .unwrap();
    let rt = imgseq_vqgan::eval::roundtrip(&model, &pic).unwrap();
    let s = Server::start(config());
    let r = s.post("/v1/roundtrip", &[], &png(40, 40));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    assert_eq!(grid_of(&j), rt.tokens.data);
    assert!((j["psnr"].as_f64().unwrap() - rt.psnr).abs() < 1e-9);
    assert!((j["ssim"].as_f64().unwrap() - rt.ssim).abs() < 1e-9);
    let body = serde_json::json!({ "tokens": j["tokens"] }).to_string();
    let r = s.post(
        "/v1/detokenize",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), Some("image/png"));
    let img = image::load_from_memory(&r.body).unwrap().to_rgb8();
    assert_eq!(img, rt.reconstruction);
    // The same tokens as .npy.
    let mut npy = imgseq_core::npy::npy_header("<i8", &[16, 16]);
    npy.extend(rt.tokens.data.iter().flat_map(|t| t.to_le_bytes()));
    for ct in ["application/x-npy", "APPLICATION/X-NPY"] {
        let r = s.post("/v1/detokenize", &[("Content-Type", ct)], &npy);
        assert_eq!(
            image::load_from_memory(&r.body).unwrap().to_rgb8(),
            rt.reconstruction,
            "{ct}"
        );
    }
    // Not the .npy media type: read as JSON, which it is not.
    let r = s.post(
        "/v1/detokenize",
        &[("Content-Type", "application/x-npyfoo")],
        &npy,
    );
    assert_eq!(r.status, 400);
}

/// A model's batch bound in pixels caps its batches (here two 32² inputs), shows in
/// /healthz and /metrics, and the defaults follow the family (VQ 256², ViT 256 images).
#[test]
fn batches_stay_within_the_models_pixel_bound() {
    let mut cfg = config();
    cfg.batch_wait = Duration::from_millis(300);
    cfg.batch_pixels = vec![("vq".into(), 2 * 32 * 32)];
    let s = Server::start(cfg);
    let h = s.get("/healthz").json();
    assert_eq!(h["batching"]["vq"]["max_batch_pixels"], 2048);
    assert_eq!(h["batching"]["vq"]["max_batch_images"], 2);
    assert_eq!(h["batching"]["vit"]["max_batch_images"], 256);
    assert_eq!(h["batching"]["vit"]["max_batch_pixels"], 256 * 32 * 32);
    std::thread::scope(|sc| {
        for _ in 0..6 {
            sc.spawn(|| assert_eq!(s.post("/v1/tokenize", &[], &png(36, 36)).status, 200));
        }
    });
    let m = String::from_utf8(s.get("/metrics").body).unwrap();
    let count = |le: &str| -> u64 {
        let key = format!("imgseq_batch_size_bucket{{model=\"vq\",le=\"{le}\"}} ");
        m.lines()
            .find_map(|l| l.strip_prefix(&key))
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(count("2"), count("+Inf"), "a batch over 2 images:\n{m}");
    assert!(count("2") > count("1"), "no batch of two:\n{m}");
    assert!(m.contains("imgseq_max_batch_images{model=\"vq\"} 2"), "{m}");
    assert!(
        m.contains("imgseq_max_batch_pixels{model=\"vit\"} 262144"),
        "{m}"
    );
    drop(s);
    let mut cfg = config();
    cfg.batch_pixels = vec![("nope".into(), 5)];
    let e = imgseq_serve::server::AppState::load(cfg)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("names no served model"), "{e}");
}

#[test]
fn concurrent_requests_are_batched_and_answered_as_alone() {
    let mut cfg = config();
    cfg.batch_wait = Duration::from_millis(300);
    let s = Server::start(cfg);
    let single = grid_of(&s.post("/v1/tokenize", &[], &png(36, 36)).json());
    let answers: Vec<Vec<i64>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..6)
            .map(|_| sc.spawn(|| grid_of(&s.post("/v1/tokenize", &[], &png(36, 36)).json())))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for a in answers {
        assert_eq!(a, single);
    }
    let m = String::from_utf8(s.get("/metrics").body).unwrap();
    let count = |le: &str| -> u64 {
        let key = format!("imgseq_batch_size_bucket{{model=\"vq\",le=\"{le}\"}} ");
        m.lines()
            .find_map(|l| l.strip_prefix(&key))
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(
        count("+Inf") > count("1"),
        "no batch of more than one request:\n{m}"
    );
    assert!(m.contains("imgseq_queue_depth{model=\"vq\"} 0"), "{m}");
    assert!(
        m.contains("imgseq_requests_total{route=\"/v1/tokenize\",status=\"200\"} 7"),
        "{m}"
    );
}

#[test]
fn vit_embed_and_classify_equal_the_cli_paths() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("a.png");
    std::fs::write(&img, png(30, 20)).unwrap();
    let m = imgseq_vit::inference::Classifier::load(&tiny_vit()).unwrap();
    let x = m
        .load_images(std::slice::from_ref(&img), m.cfg.image_size, false)
        .unwrap();
    let top = m.top_k(&x, 3).unwrap().remove(0);
    let emb = m
        .embed(&x)
        .unwrap()
        .tokens
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let s = Server::start(config());
    let j = s.post("/v1/classify?k=3", &[], &png(30, 20)).json();
    let got: Vec<(usize, f64)> = j["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["index"].as_u64().unwrap() as usize,
                t["probability"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got.len(), 3);
    for ((gi, gp), (wi, wp)) in got.iter().zip(&top) {
        assert_eq!(gi, wi);
        assert!((gp - *wp as f64).abs() < 1e-6);
    }
    assert_eq!(j["top"][0]["label"], m.cfg.label(top[0].0));
    let r = s.post(
        "/v1/embed",
        &[("Accept", "application/x-npy")],
        &png(30, 20),
    );
    let a = imgseq_core::npy::parse_npy("answer", &r.body).unwrap();
    assert_eq!(a.shape, vec![1, 65, 32]);
    assert_eq!(a.as_f32().unwrap(), &emb[..]);
}

#[test]
fn gpt_sample_equals_the_library_sampler() {
    let dir = tempfile::tempdir().unwrap();
    let gpt = tiny_gpt(dir.path());
    let cfg = ServeConfig {
        models: vec![ModelSpec {
            name: "g".into(),
            path: gpt.clone(),
        }],
        ..config()
    };
    let s = Server::start(cfg);
    let body = br#"{"class": "b", "n": 2, "seed": 7, "top_k": 5}"#;
    let j = s.post("/v1/sample", &[], body).json();
    assert_eq!(j["class"], "b");
    assert_eq!(j["images_png"].as_array().unwrap().len(), 2);
    let (c, model) = imgseq_gpt::checkpoint::load(&gpt, &candle_core::Device::Cpu).unwrap();
    let layout = c.layout().unwrap();
    let o = imgseq_gpt::sample::SampleOptions {
        top_k: Some(5),
        seed: 7,
        batch: 2,
        ..Default::default()
    };
    let req = imgseq_gpt::sample::Request {
        class: Some(1),
        prefix: vec![],
    };
    let want =
        imgseq_gpt::sample::generate(&model, &layout, &[req.clone(), req], &o, false).unwrap();
    let got: Vec<Vec<i64>> = j["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            g.as_array()
                .unwrap()
                .iter()
                .flat_map(|r| r.as_array().unwrap().iter().map(|t| t.as_i64().unwrap()))
                .collect()
        })
        .collect();
    let want: Vec<Vec<i64>> = want
        .iter()
        .map(|s| s.iter().map(|&t| t as i64).collect())
        .collect();
    assert_eq!(got, want);
    let e = s
        .post("/v1/sample", &[], br#"{"class": "zebra"}"#)
        .error(400);
    assert!(e.contains("zebra"), "{e}");
    let e = s
        .post("/v1/sample", &[], br#"{"class": 0, "n": 1000}"#)
        .error(400);
    assert!(e.contains("n 1000"), "{e}");
    // Settings the f32 arithmetic cannot honour are 400 with the range, not the least
    // likely token (temperature 1e-50 is 0 in f32) or every token alike (guidance 1e308).
    for (body, setting) in [
        (&br#"{"class": 0, "temperature": 1e-50}"#[..], "temperature"),
        (br#"{"class": 0, "guidance": 1e308}"#, "guidance"),
        (br#"{"class": 0, "top_p": 0}"#, "top_p"),
    ] {
        let e = s.post("/v1/sample", &[], body).error(400);
        assert!(e.contains(setting), "{e}");
    }
}

#[test]
fn openapi_is_the_committed_one_and_names_only_routed_paths() {
    let s = Server::start(config());
    let served = s.get("/v1/openapi.json").json();
    let path = repo().join("docs/openapi.json");
    let text = serde_json::to_string_pretty(&served).unwrap() + "\n";
    if std::env::var_os("IMGSEQ_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap();
    assert!(
        committed == text,
        "docs/openapi.json differs from the served description; rerun with IMGSEQ_BLESS=1"
    );
    for (p, ops) in served["paths"].as_object().unwrap() {
        // A path parameter: the served ViT.
        let p = p.replace("{name}", "vit");
        for method in ops.as_object().unwrap().keys() {
            let r = crate::common::request(s.addr, &method.to_uppercase(), &p, &[], b"");
            assert!(
                r.status != 404 && r.status != 405,
                "{method} {p}: {}",
                r.status
            );
        }
    }
}

#[test]
fn bearer_token_guards_the_api_but_not_health_or_viewer() {
    let cfg = ServeConfig {
        token: Some("s3cret".into()),
        ..config()
    };
    let s = Server::start(cfg);
    let e = s.get("/v1/models").error(401);
    assert!(e.contains("token"), "{e}");
    assert_eq!(
        s.post(
            "/v1/tokenize",
            &[("Authorization", "Bearer wrong")],
            &png(32, 32)
        )
        .status,
        401
    );
    assert_eq!(s.get("/metrics").status, 401);
    // The scheme's name is case-insensitive (RFC 9110 §11.1).
    for auth in ["Bearer s3cret", "bearer s3cret", "BEARER s3cret"] {
        let r =
            crate::common::request(s.addr, "GET", "/v1/models", &[("Authorization", auth)], b"");
        assert_eq!(r.status, 200, "{auth}");
    }
    assert_eq!(s.get("/healthz").status, 200);
    let page = s.get("/");
    assert_eq!(page.status, 200);
    assert!(String::from_utf8_lossy(&page.body).contains("viewer.js"));
}

#[test]
fn stopping_drains_the_requests_in_flight() {
    let mut s = Server::start(config());
    let addr = s.addr;
    let slow = std::thread::spawn(move || {
        crate::common::request(addr, "POST", "/v1/_test?action=sleep&ms=800", &[], b"")
    });
    std::thread::sleep(Duration::from_millis(300));
    s.begin_stop();
    let r = slow.join().unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    drop(s);
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still accepting after the stop"
    );
}

#[test]
fn detokenize_of_any_grid_gives_a_picture_of_its_size_times_the_factor() {
    let s = Server::start(config());
    let g = TokenGrid {
        n: 1,
        h: 2,
        w: 3,
        batched: false,
        data: vec![0; 6],
    };
    let body = serde_json::json!({"tokens": [[0, 1, 2], [3, 4, 5]]}).to_string();
    let r = s.post("/v1/detokenize", &[], body.as_bytes());
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let img = image::load_from_memory(&r.body).unwrap();
    assert_eq!(
        (img.width() as usize, img.height() as usize),
        (g.w * 2, g.h * 2)
    );
}

#[test]
fn every_family_fixture_is_served_through_the_loader_and_described_without_paths() {
    let fx = |p: &str| repo().join("tests/fixtures").join(p);
    let families = [
        ("taming", fx("vqgan/tiny.safetensors")),
        ("llamagen", fx("llamagen/vq_tiny.pt")),
        ("diffusers", fx("diffusers/vq")),
        ("janus", fx("janus")),
        ("ibq", fx("ibq/ibq_tiny.ckpt")),
        ("open_magvit2", fx("lfq/tiny.ckpt")),
        ("var", fx("var/tiny.pth")),
        ("titok", fx("titok/l")),
        (
            "maskgit-vqgan",
            fx("maskgit/maskgit-vqgan-imagenet-f16-256.bin"),
        ),
        ("emu3", fx("emu3/vq")),
        ("cosmos", fx("cosmos/di")),
    ];
    let mut cfg = config();
    cfg.models = families
        .iter()
        .map(|(name, path)| imgseq_serve::ModelSpec {
            name: name.to_string(),
            path: path.clone(),
        })
        .collect();
    let s = Server::start(cfg);
    let models = s.get("/v1/models").json();
    let listed = models["models"]
        .as_array()
        .or(models.as_array())
        .unwrap()
        .clone();
    let text = serde_json::to_string(&listed).unwrap();
    assert!(
        !text.contains(&*repo().display().to_string()),
        "a server path shown: {text}"
    );
    for (name, _) in families {
        let m = listed.iter().find(|m| m["name"] == name).unwrap();
        assert_eq!(m["description"]["family"], name, "{m}");
        assert_eq!(
            m["description"]["weights"]["sha256"]
                .as_str()
                .unwrap()
                .len(),
            64
        );
        let r = s.post(&format!("/v1/tokenize?model={name}"), &[], &png(40, 40));
        assert_eq!(
            r.status,
            200,
            "{name}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let j = r.json();
        assert_eq!(j["grid"], m["grid"], "{name}");
        let body = serde_json::json!({ "tokens": j["tokens"] }).to_string();
        let r = s.post(
            &format!("/v1/detokenize?model={name}"),
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        );
        assert_eq!(
            r.status,
            200,
            "{name}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let img = image::load_from_memory(&r.body).unwrap();
        assert_eq!((img.width(), img.height()), (32, 32), "{name}");
    }
}

/// `--model NAME=hf:ORG/NAME/FILE` serves a Hub model (from the loopback mock, into a temporary
/// cache): `/v1/models` names it by its public source at the resolved commit, and it tokenizes.
#[test]
fn a_hub_model_is_served_and_named_by_its_source_at_its_commit() {
    use imgseq_hub::mock::{MockFile, MockHub, MockRepo};
    let commit = "beef0123456789abcdef0123456789abcdef0123";
    let fx = |p: &str| repo().join("tests/fixtures/vqgan").join(p);
    let files = [("tiny.safetensors", true), ("tiny_config.json", false)]
        .into_iter()
        .map(|(n, lfs)| {
            let bytes = std::fs::read(fx(n)).unwrap();
            (n.to_string(), MockFile { bytes, lfs })
        })
        .collect();
    let mock = MockHub::start(vec![(
        "org/taming".into(),
        MockRepo {
            commit: commit.into(),
            files,
            token: None,
        },
    )]);
    let cache = tempfile::tempdir().unwrap();
    // Only this test of the binary reads these variables.
    std::env::set_var("HF_ENDPOINT", &mock.url);
    std::env::set_var("HF_HUB_CACHE", cache.path());
    let mut cfg = config();
    cfg.models = vec![ModelSpec {
        name: "hub".into(),
        path: "hf:org/taming/tiny.safetensors".into(),
    }];
    let s = Server::start(cfg);
    let models = s.get("/v1/models").json();
    let text = models.to_string();
    assert!(
        text.contains(&format!("hf:org/taming@{commit}/tiny.safetensors")),
        "{text}"
    );
    assert!(
        !text.contains(&*cache.path().display().to_string()),
        "{text}"
    );
    assert_eq!(
        s.post("/v1/tokenize?model=hub", &[], &png(40, 40)).status,
        200
    );
}

#[test]
fn a_vision_tower_is_served_through_tokenize_as_its_embeddings() {
    // The tiny CLIP tower (32² input, 8² patches, width 32): 16 patches + CLS.
    let tower = repo().join("tests/fixtures/clip/vision");
    let pic = png(50, 40);
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("a.png");
    std::fs::write(&img, &pic).unwrap();
    // What the library (and `imgseq encode --model`) gives for the picture.
    let t = imgseq_models::open(&tower, &imgseq_models::OpenOptions::default()).unwrap();
    let spec = imgseq_core::tokenizer::Tokenizer::input(&t);
    let x = spec.load_all(std::slice::from_ref(&img), false).unwrap();
    let want = match imgseq_core::tokenizer::Tokenizer::encode_pictures(&t, &x).unwrap() {
        imgseq_core::tokenizer::Encoded::Embeddings(e) => e,
        other => panic!("the tower gave {other:?}"),
    };
    let cfg = ServeConfig {
        models: vec![ModelSpec {
            name: "clip".into(),
            path: tower,
        }],
        vq_size: None,
        ..config()
    };
    let s = Server::start(cfg);
    let r = s.post("/v1/tokenize?model=clip", &[], &pic);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    assert_eq!(
        (j["tokens"].as_u64(), j["dim"].as_u64()),
        (Some(17), Some(32))
    );
    let got: Vec<f32> = j["embeddings"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| {
            let row = row.as_array().unwrap();
            assert_eq!(row.len(), 32);
            row.iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(got, want.data);
    let r = s.post(
        "/v1/tokenize?model=clip",
        &[("Accept", "application/x-npy")],
        &pic,
    );
    let a = imgseq_core::npy::parse_npy("answer", &r.body).unwrap();
    assert_eq!(a.shape, vec![1, 17, 32]);
    assert_eq!(a.as_f32().unwrap(), &want.data[..]);
    // /v1/embed names the tower and answers the same.
    let r = s.post(
        "/v1/embed?model=clip",
        &[("Accept", "application/x-npy")],
        &pic,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let a = imgseq_core::npy::parse_npy("answer", &r.body).unwrap();
    assert_eq!(a.as_f32().unwrap(), &want.data[..]);
    // The picture round trip needs codebook tokens: refused with one line.
    let r = s.post("/v1/roundtrip?model=clip", &[], &pic);
    assert!(r.status >= 400 && r.status < 500, "{}", r.status);
}

#[test]
fn a_vaes_latent_map_is_served_through_tokenize() {
    // The SD-like VAE (f4, 4 channels) and the SANA-like DC-AE (f4, 4 channels) at 32².
    for (name, dir) in [
        ("sd", "tests/fixtures/kl/sd"),
        ("dcae", "tests/fixtures/dcae/sana"),
    ] {
        let vae = repo().join(dir);
        let pic = png(50, 40);
        let tmp = tempfile::tempdir().unwrap();
        let img = tmp.path().join("a.png");
        std::fs::write(&img, &pic).unwrap();
        let o = imgseq_models::OpenOptions {
            size: Some(32),
            ..Default::default()
        };
        let t = imgseq_models::open(&vae, &o).unwrap();
        let spec = imgseq_core::tokenizer::Tokenizer::input(&t);
        let x = spec.load_all(std::slice::from_ref(&img), false).unwrap();
        let want = match imgseq_core::tokenizer::Tokenizer::encode_pictures(&t, &x).unwrap() {
            imgseq_core::tokenizer::Encoded::Latents(l) => l,
            other => panic!("{name}: the VAE gave {other:?}"),
        };
        let cfg = ServeConfig {
            models: vec![ModelSpec {
                name: name.into(),
                path: vae,
            }],
            vq_size: Some(32),
            ..config()
        };
        let s = Server::start(cfg);
        let r = s.post(&format!("/v1/tokenize?model={name}"), &[], &pic);
        assert_eq!(
            r.status,
            200,
            "{name}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let j = r.json();
        assert_eq!(j["shape"], serde_json::json!([4, 8, 8]), "{name}: {j}");
        let got: Vec<f32> = j["latents"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m.as_array().unwrap().iter())
            .flat_map(|r| r.as_array().unwrap().iter())
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(got, want.data, "{name}");
        let r = s.post(
            &format!("/v1/tokenize?model={name}"),
            &[("Accept", "application/x-npy")],
            &pic,
        );
        let a = imgseq_core::npy::parse_npy("answer", &r.body).unwrap();
        assert_eq!(a.shape, vec![1, 4, 8, 8], "{name}");
        assert_eq!(a.as_f32().unwrap(), &want.data[..], "{name}");
    }
}
