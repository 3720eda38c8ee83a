//! Parity with transformers' `Emu3VQVAE` (`scripts/make_emu3_fixtures.py` builds it with
//! transformers' own class, random weights) from a `save_pretrained` folder and from a full
//! model's file: the latents, every token, and the decode of the tokens; the same against
//! BAAI's own `Emu3VisionVQModel` in its own layout (that of BAAI/Emu3-VisionTokenizer); and
//! the network at the released Emu3-VisionTokenizer's sizes.

use crate::common::{as_i64, psnr, rel_diff};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use imgseq_core::tokenizer::Tokenizer;
use imgseq_vqgan::emu3::{self, Emu3Config, Emu3Model, Emu3Tokenizer};
use std::collections::HashMap;
use std::path::PathBuf;

fn fx(name: &str) -> PathBuf {
    crate::common::fixture("emu3", name)
}

fn io() -> HashMap<String, Tensor> {
    crate::common::io_of("emu3")
}

#[test]
fn emu3_folder_and_full_model_give_transformers_latents_tokens_and_decode() {
    let io = io();
    let want = as_i64(&io["tokens"]);
    for src in ["vq", "full/model.safetensors"] {
        let l = emu3::load(&fx(src), None, &Device::Cpu).unwrap();
        let m = &l.model;
        let c = m.config();
        assert_eq!(
            (c.codebook_size, c.embed_dim, c.num_attention_heads),
            (64, 4, 2)
        );
        let h = m.encode_latents(&io["x"]).unwrap();
        let rel_h = rel_diff(&h, &io["h"]);
        assert!(rel_h < 1e-4, "{src}: latents {rel_h}");
        let idx = m.encode(&io["x"]).unwrap();
        assert_eq!(idx.dims(), &[2, 16, 16]);
        assert_eq!(as_i64(&idx), want, "{src}: tokens");
        // The decode of transformers' tokens (the same as ours).
        let y = m.decode_indices(&io["tokens"]).unwrap();
        let p = psnr(&y, &io["decoded"]);
        let rel = rel_diff(&y, &io["decoded"]);
        eprintln!("{src}: latents {rel_h:.2e}, decode PSNR {p:.1} dB, max rel {rel:.2e}");
        assert!(p >= 40.0, "{src}: decode PSNR {p}");
        assert!(rel < 1e-4, "{src}: decode {rel}");
    }
}

#[test]
fn emu3_original_layout_gives_baai_latents_tokens_and_decode() {
    let io = crate::common::io_of("emu3/orig");
    let l = emu3::load(&fx("orig"), None, &Device::Cpu).unwrap();
    let m = &l.model;
    assert_eq!(
        (m.config().hidden_size, m.config().num_attention_heads),
        (32, 1)
    );
    let h = m.encode_latents(&io["x"]).unwrap();
    let rel_h = rel_diff(&h, &io["h"]);
    assert!(rel_h < 1e-4, "latents {rel_h}");
    assert_eq!(as_i64(&m.encode(&io["x"]).unwrap()), as_i64(&io["tokens"]));
    let y = m.decode_indices(&io["tokens"]).unwrap();
    let (p, rel) = (psnr(&y, &io["decoded"]), rel_diff(&y, &io["decoded"]));
    eprintln!("orig: latents {rel_h:.2e}, decode PSNR {p:.1} dB, max rel {rel:.2e}");
    assert!(p >= 40.0 && rel < 1e-4, "decode PSNR {p}, rel {rel}");
}

#[test]
fn emu3_tokenizer_round_trips_its_grid_and_refuses_codes_outside_the_codebook() {
    let l = emu3::load(&fx("vq"), None, &Device::Cpu).unwrap();
    let t = Emu3Tokenizer::new(l.model, 32).unwrap();
    let d = t.describe();
    assert_eq!(
        (d.family.as_str(), d.output.shape.clone()),
        ("emu3", vec![16, 16])
    );
    let tokens = t.encode(&io()["x"]).unwrap().into_tokens().unwrap();
    assert_eq!((tokens.n, tokens.h, tokens.w), (2, 16, 16));
    assert_eq!(tokens.data, as_i64(&io()["tokens"]));
    let imgs = t.decode(&tokens).unwrap();
    assert_eq!((imgs.len(), imgs[0].dimensions()), (2, (32, 32)));
    let mut bad = tokens.clone();
    bad.data[5] = 64;
    let e = t.decode(&bad).unwrap_err().to_string();
    assert!(e.contains("64") && e.contains("codebook"), "{e}");
    assert!(Emu3Tokenizer::new(t.model, 33).is_err());
}

#[test]
fn emu3_config_of_a_folder_is_refused_in_one_line_when_it_is_not_emu3() {
    let d = tempfile::tempdir().unwrap();
    std::fs::copy(
        fx("vq/model.safetensors"),
        d.path().join("model.safetensors"),
    )
    .unwrap();
    std::fs::write(
        d.path().join("config.json"),
        r#"{"model_type": "chameleon_vqgan"}"#,
    )
    .unwrap();
    let e = emu3::load(d.path(), None, &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("config.json") && e.contains("emu3_vqgan"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    // Weights of another model under an Emu3 config: the missing tensor is named.
    std::fs::write(
        d.path().join("config.json"),
        r#"{"model_type": "emu3_vqgan"}"#,
    )
    .unwrap();
    let e = emu3::load(d.path(), None, &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("model.safetensors") && e.contains("shape"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

/// The released Emu3-VisionTokenizer's network (transformers' `Emu3VQVAEConfig` defaults:
/// 256 base channels, [1, 2, 2, 4], 2 blocks, attention at level 3 with 1024 wide single-head
/// attention, 32,768 codes of 4) built with zero weights: a 64² picture gives an 8×8 grid
/// and decodes to 64². About 1 GB of weights: run with `--ignored`.
#[test]
#[ignore]
fn released_config_builds_and_gives_an_8x8_grid_at_64_px() {
    let cfg = Emu3Config::default();
    let m = Emu3Model::new(&cfg, VarBuilder::zeros(DType::F32, &Device::Cpu)).unwrap();
    let x = Tensor::zeros((1, 3, 64, 64), DType::F32, &Device::Cpu).unwrap();
    let idx = m.encode(&x).unwrap();
    assert_eq!(idx.dims(), &[1, 8, 8]);
    let y = m.decode_indices(&idx).unwrap();
    assert_eq!(y.dims(), &[1, 3, 64, 64]);
}
