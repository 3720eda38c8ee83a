//! Parity with transformers' `JanusVQVAE` (`scripts/make_janus_fixtures.py`: random weights, a
//! small `JanusVQVAEConfig`, `save_pretrained`): the folder as transformers writes it, the VQ
//! inside a full Janus model's file, both quantizer searches (the original Janus's
//! l2-normalised one by default, transformers' raw argmin by the config), and the image
//! processor's resize + pad to square, bit-exact with Pillow.

use crate::common::{as_i64, psnr};
use candle_core::{DType, Device, Tensor};
use imgseq_vqgan::family::{Distance, Family, Resize};
use imgseq_vqgan::{load, load_model, VqModel};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/janus")
        .join(name)
}

fn io() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fx("io.safetensors"), &Device::Cpu).unwrap()
}

/// The fixture folder, optionally with `imgseq_search` added to its config.json.
fn folder(search: Option<&str>) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::copy(fx("model.safetensors"), d.path().join("model.safetensors")).unwrap();
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fx("config.json")).unwrap()).unwrap();
    if let Some(s) = search {
        v["imgseq_search"] = serde_json::json!(s);
    }
    std::fs::write(d.path().join("config.json"), v.to_string()).unwrap();
    d
}

fn model(search: Option<&str>) -> VqModel {
    let d = folder(search);
    load_model(d.path(), None, &Device::Cpu).unwrap()
}

fn check_parity(m: &VqModel, indices: &str, recon: &str) -> f32 {
    let io = io();
    let q = m.encode(&io["x"]).unwrap();
    assert_eq!(q.indices.dims(), &[1, 8, 8]);
    assert_eq!(as_i64(&q.indices), as_i64(&io[indices]), "{indices}");
    let rec = m.decode_indices(&io[indices]).unwrap();
    let p = psnr(&rec, &io[recon]);
    assert!(p > 40.0, "{recon}: PSNR {p}");
    p
}

#[test]
fn save_pretrained_folder_matches_the_original_janus_search() {
    let m = model(None);
    let c = m.config();
    assert_eq!(c.variant.family, Family::Janus);
    assert!(c.variant.l2_norm);
    assert_eq!(c.variant.distance, Distance::Expanded);
    assert_eq!(c.variant.resize, Resize::PadToSquare);
    assert_eq!(
        (c.ddconfig.ch, c.ddconfig.ch_mult.clone()),
        (32, vec![1, 1, 2])
    );
    assert_eq!((c.n_embed, c.embed_dim, c.downsample_factor()), (64, 8, 4));
    let z = m.encode_latents(&io()["x"]).unwrap();
    let dz = (&z - &io()["z"]).unwrap().abs().unwrap().max_all().unwrap();
    let mz = io()["z"].abs().unwrap().max_all().unwrap();
    let rel = dz.to_scalar::<f32>().unwrap() / mz.to_scalar::<f32>().unwrap();
    assert!(rel < 1e-4, "z relative diff {rel}");
    let p = check_parity(&m, "indices_l2", "recon_l2");
    eprintln!("janus (l2 search): z rel diff {rel:.1e}, decode PSNR {p:.1} dB");
}

#[test]
fn transformers_search_setting_matches_janusvqvae_forward() {
    let m = model(Some("transformers"));
    assert_eq!(m.config().variant.distance, Distance::Unnormalised);
    let p = check_parity(&m, "indices_hf", "recon_hf");
    eprintln!("janus (transformers search): decode PSNR {p:.1} dB");
    // The two searches differ on this model (its entries have varied lengths).
    assert_ne!(as_i64(&io()["indices_l2"]), as_i64(&io()["indices_hf"]));
}

#[test]
fn full_janus_model_file_yields_its_vq() {
    let d = tempfile::tempdir().unwrap();
    let prefix = std::fs::read_to_string(fx("full_prefix.txt")).unwrap();
    let prefix = prefix.trim();
    assert_eq!(prefix, imgseq_vqgan::janus::FULL_PREFIX);
    let vq = candle_core::safetensors::load(fx("model.safetensors"), &Device::Cpu).unwrap();
    let mut full: HashMap<String, Tensor> = vq
        .into_iter()
        .map(|(k, t)| (format!("{prefix}{k}"), t))
        .collect();
    let other = Tensor::zeros((4, 2), DType::F32, &Device::Cpu).unwrap();
    full.insert("model.language_model.embed_tokens.weight".into(), other);
    candle_core::safetensors::save(&full, d.path().join("model.safetensors")).unwrap();
    std::fs::copy(fx("full_config.json"), d.path().join("config.json")).unwrap();
    let m = load_model(d.path(), None, &Device::Cpu).unwrap();
    check_parity(&m, "indices_l2", "recon_l2");
    let s = load::inspect(d.path()).unwrap();
    assert_eq!(s.family, Some(Family::Janus));
}

#[test]
fn weights_are_audited_under_janus_names() {
    let d = folder(None);
    let w = d.path().join("model.safetensors");
    let mut map = candle_core::safetensors::load(&w, &Device::Cpu).unwrap();
    let t = map.remove("decoder.up.0.attn.0.q.weight").unwrap();
    map.insert("decoder.up.0.attn.0.query.weight".into(), t);
    candle_core::safetensors::save(&map, &w).unwrap();
    let e = load_model(d.path(), None, &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("missing tensor `decoder.up.0.attn.0.q.weight`"),
        "{e}"
    );
    // Every tensor of the untouched file is used: its family is told by the names alone.
    let s = load::inspect(fx("model.safetensors")).unwrap();
    assert_eq!(s.family, Some(Family::Janus));
}

#[test]
fn pad_to_square_is_bit_exact_with_the_janus_image_processor() {
    let m = model(None);
    let spec = m.config().input_spec(32);
    let img = spec.load(&fx("photo.png"), false).unwrap();
    let want = io()["square"]
        .flatten_all()
        .unwrap()
        .to_vec1::<u8>()
        .unwrap();
    assert_eq!(
        img.as_raw(),
        &want,
        "resize + pad differs from transformers'"
    );
    let x = spec.to_tensor(&[img]).unwrap();
    let d = (&x - &io()["x"]).unwrap().abs().unwrap().max_all().unwrap();
    assert!(d.to_scalar::<f32>().unwrap() < 1e-6);
    let q = m.encode(&x).unwrap();
    assert_eq!(as_i64(&q.indices), as_i64(&io()["indices_l2"]));
}
