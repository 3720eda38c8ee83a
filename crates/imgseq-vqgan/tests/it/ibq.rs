//! Parity with IBQ (TencentARC/SEED-Voken; `scripts/make_ibq_fixtures.py` builds the model from
//! their `Encoder`, `Decoder`, `IndexPropagationQuantize` and `LitEma` with random weights) as
//! published: a Lightning `.ckpt` with EMA copies and `loss.*` tensors, and their LightningCLI
//! yaml. The EMA weights are used by default, as their evaluation does; the raw ones on request.

use crate::common::{as_i64, psnr};
use candle_core::{Device, Tensor};
use imgseq_vqgan::family::{Distance, Family};
use imgseq_vqgan::{ibq, load, load_model, VqConfig, VqModel};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/ibq")
        .join(name)
}

fn io() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fx("io.safetensors"), &Device::Cpu).unwrap()
}

fn check(m: &VqModel, indices: &str, recon: &str) -> f32 {
    let io = io();
    let q = m.encode(&io["x"]).unwrap();
    assert_eq!(as_i64(&q.indices), as_i64(&io[indices]), "{indices}");
    let rec = m.decode_indices(&io[indices]).unwrap();
    let p = psnr(&rec, &io[recon]);
    assert!(p > 40.0, "{recon}: PSNR {p}");
    p
}

#[test]
fn lightning_ckpt_and_yaml_match_ibq_with_its_ema_weights() {
    let m = load_model(
        fx("ibq_tiny.ckpt"),
        Some(&fx("ibq_tiny_model.yaml")),
        &Device::Cpu,
    )
    .unwrap();
    let c = m.config();
    assert_eq!(c.variant.family, Family::Ibq);
    assert_eq!(c.variant.distance, Distance::InnerProduct);
    assert_eq!(
        (c.n_embed, c.embed_dim, c.downsample_factor()),
        (256, 16, 2)
    );
    let z = m.encode_latents(&io()["x"]).unwrap();
    let dz = (&z - &io()["z_ema"])
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap();
    let mz = io()["z_ema"].abs().unwrap().max_all().unwrap();
    let rel = dz.to_scalar::<f32>().unwrap() / mz.to_scalar::<f32>().unwrap();
    assert!(rel < 1e-4, "z relative diff {rel}");
    let p = check(&m, "indices_ema", "recon_ema");
    // The yaml beside the checkpoint is found and names the family (the tensor names are
    // taming's).
    let m2 = load_model(fx("ibq_tiny.ckpt"), None, &Device::Cpu).unwrap();
    assert_eq!(m2.config().variant.family, Family::Ibq);
    assert_eq!(
        load::inspect(fx("ibq_tiny.ckpt")).unwrap().family,
        Some(Family::Ibq)
    );
    eprintln!("ibq (EMA): z rel diff {rel:.1e}, decode PSNR {p:.1} dB");
}

#[test]
fn raw_training_weights_on_request() {
    let path = fx("ibq_tiny.ckpt");
    let cfg = VqConfig::from_file(fx("ibq_tiny_model.yaml")).unwrap();
    let sd = imgseq_torch::read_state_dict(&path, &Device::Cpu).unwrap();
    let items: Vec<_> = sd.into_iter().map(|(k, t)| (k, t.tensor, ())).collect();
    let raw = ibq::select(items, &path, false).unwrap();
    let map: HashMap<String, Tensor> = raw.into_iter().map(|(k, t, _)| (k, t)).collect();
    let w = imgseq_core::AuditedWeights::new(&path, map);
    let m = load::build(&cfg, &w, &Device::Cpu).unwrap();
    let p = check(&m, "indices_raw", "recon_raw");
    eprintln!("ibq (raw): decode PSNR {p:.1} dB");
    assert_ne!(as_i64(&io()["indices_raw"]), as_i64(&io()["indices_ema"]));
}

#[test]
fn convert_keeps_the_ema_weights_and_drops_the_training_tensors() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("model.safetensors");
    let r = load::convert_checkpoint(
        &fx("ibq_tiny.ckpt"),
        Some(&fx("ibq_tiny_model.yaml")),
        &out,
        Default::default(),
    )
    .unwrap();
    assert_eq!(r.family, Family::Ibq);
    let m = load_model(&out, None, &Device::Cpu).unwrap();
    assert_eq!(m.config().variant.distance, Distance::InnerProduct);
    check(&m, "indices_ema", "recon_ema");
}
