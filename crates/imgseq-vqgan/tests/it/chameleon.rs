//! Parity with transformers' `ChameleonVQVAE` (Chameleon / Anole; `scripts/make_chameleon_fixtures.py`
//! builds it with transformers' own class, random weights) from a `save_pretrained` folder and
//! from a full model's file: the latents and every token; decoding says that this layout has
//! no decoder.

use crate::common::rel_diff;
use candle_core::{DType, Device, Tensor};
use imgseq_core::tokenizer::Tokenizer;
use imgseq_kernels::PrecisionRequest;
use imgseq_vqgan::family::Family;
use imgseq_vqgan::{load_model, VqTokenizer};
use std::collections::HashMap;
use std::path::PathBuf;

fn fx(name: &str) -> PathBuf {
    crate::common::fixture("chameleon", name)
}

fn io() -> HashMap<String, Tensor> {
    crate::common::io_of("chameleon")
}

#[test]
fn chameleon_folder_and_full_model_give_transformers_tokens() {
    let io = io();
    let want: Vec<i64> = io["tokens"]
        .flatten_all()
        .unwrap()
        .to_dtype(DType::I64)
        .unwrap()
        .to_vec1()
        .unwrap();
    for src in ["vq/model.safetensors", "full/model.safetensors"] {
        let m = load_model(fx(src), None, &Device::Cpu).unwrap();
        let c = m.config();
        assert_eq!(c.variant.family, Family::Chameleon, "{src}");
        assert_eq!((c.n_embed, c.embed_dim), (64, 16));
        assert!(!m.has_decoder());
        let h = m.encode_latents(&io["x"]).unwrap();
        let rel = rel_diff(&h, &io["h"]);
        assert!(rel < 1e-4, "{src}: latents {rel}");
        let got: Vec<i64> = m
            .encode(&io["x"])
            .unwrap()
            .indices
            .to_dtype(DType::I64)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(got, want, "{src}");
    }
}

#[test]
fn chameleon_without_decoder_encodes_under_auto_and_refuses_to_decode_in_one_line() {
    let mut m = load_model(fx("vq/model.safetensors"), None, &Device::Cpu).unwrap();
    let choice = m.choose_precision(PrecisionRequest::Auto).unwrap();
    assert_eq!(choice.precision, imgseq_kernels::Precision::F32);
    let t = VqTokenizer::new(m, 32).unwrap();
    let x = io()["x"].clone();
    let tokens = t.encode(&x).unwrap().into_tokens().unwrap();
    assert_eq!((tokens.n, tokens.h, tokens.w), (2, 16, 16));
    let e = t.decode(&tokens).unwrap_err().to_string();
    assert!(e.contains("no decoder") && e.contains("vqgan.ckpt"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert_eq!(t.describe().family, "chameleon");
}

/// Chameleon's tokens decode with the release's original image tokenizer
/// (`tokenizer/vqgan.ckpt` + `vqgan.yaml`: taming's VQModel as Chameleon's own
/// `chameleon/inference/vqgan.py` builds it; `scripts/make_chameleon_vqgan_fixtures.py`):
/// the same tokens as Chameleon's module, and its decode within 40 dB.
#[test]
fn chameleon_original_vqgan_ckpt_encodes_and_decodes_as_chameleons_module() {
    let io = crate::common::io_of("chameleon/vqgan");
    let m = load_model(
        fx("vqgan/vqgan.ckpt"),
        Some(&fx("vqgan/vqgan.yaml")),
        &Device::Cpu,
    )
    .unwrap();
    assert!(m.has_decoder());
    let want: Vec<i64> = io["tokens"]
        .flatten_all()
        .unwrap()
        .to_dtype(DType::I64)
        .unwrap()
        .to_vec1()
        .unwrap();
    let q = m.encode(&io["x"]).unwrap();
    let got: Vec<i64> = q
        .indices
        .to_dtype(DType::I64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    assert_eq!(got, want);
    let rec = m.decode_indices(&q.indices).unwrap();
    let db = crate::common::psnr(&rec, &io["recon"]);
    assert!(db >= 40.0, "decode {db:.1} dB against Chameleon's");
}
