//! Parity with bytedance/1d-tokenizer's TiTok (`scripts/make_titok_fixtures.py` builds it with
//! the repository's own modules, random weights, saved by `TiTok.save_pretrained`): the
//! latents, every token and the decode of the tokens, for the legacy VQ layout with the
//! MaskGIT-VQGAN pixel decoder (TiTok-L-32 / B-64 / S-128) and the VQ8k layout that predicts
//! pixels; and the network at TiTok-L-32's size.

use crate::common::{as_i64, psnr_unit, rel_diff};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use imgseq_core::tokenizer::Tokenizer;
use imgseq_vqgan::titok::{self, TitokConfig, TitokModel, TitokTokenizer};
use std::path::PathBuf;

fn fx(name: &str) -> PathBuf {
    crate::common::fixture("titok", name)
}

fn check(dir: &str) {
    let io = crate::common::io_of(&format!("titok/{dir}"));
    let l = titok::load(&fx(dir), None, &Device::Cpu).unwrap();
    let m = &l.model;
    assert_eq!(m.config().num_latent_tokens, 8);
    let z = m.encode_latents(&io["x"]).unwrap();
    let rel_z = rel_diff(&z, &io["z"]);
    assert!(rel_z < 1e-4, "{dir}: latents {rel_z}");
    let idx = m.encode(&io["x"]).unwrap();
    assert_eq!(idx.dims(), &[2, 1, 8]);
    assert_eq!(as_i64(&idx), as_i64(&io["tokens"]), "{dir}: tokens");
    let y = m.decode_tokens(&io["tokens"]).unwrap();
    let (p, rel) = (psnr_unit(&y, &io["decoded"]), rel_diff(&y, &io["decoded"]));
    eprintln!("titok {dir}: latents {rel_z:.2e}, decode PSNR {p:.1} dB, max rel {rel:.2e}");
    assert!(p >= 40.0, "{dir}: decode PSNR {p}");
    assert!(rel < 1e-4, "{dir}: decode {rel}");
}

#[test]
fn titok_legacy_folder_gives_upstream_latents_tokens_and_pixel_decoder_output() {
    check("l");
}

#[test]
fn titok_vq8k_folder_gives_upstream_latents_tokens_and_pixels() {
    check("vq8k");
}

#[test]
fn titok_tokenizer_gives_one_row_of_latent_tokens_and_refuses_other_shapes() {
    let io = crate::common::io_of("titok/l");
    let t = TitokTokenizer::new(
        titok::load(&fx("l"), None, &Device::Cpu).unwrap().model,
        None,
    )
    .unwrap();
    let d = t.describe();
    assert_eq!(
        (d.family.as_str(), d.output.shape.clone(), d.input.size),
        ("titok", vec![1, 8], 32)
    );
    assert_eq!(d.output.codebook_size, Some(32));
    assert_eq!(d.input.range, imgseq_core::image_io::PixelRange::ZeroOne);
    let tokens = t.encode(&io["x"]).unwrap().into_tokens().unwrap();
    assert_eq!((tokens.n, tokens.h, tokens.w), (2, 1, 8));
    assert_eq!(tokens.data, as_i64(&io["tokens"]));
    let imgs = t.decode(&tokens).unwrap();
    assert_eq!((imgs.len(), imgs[0].dimensions()), (2, (32, 32)));
    let mut bad = tokens.clone();
    bad.data[2] = 32;
    let e = t.decode(&bad).unwrap_err().to_string();
    assert!(e.contains("32") && e.contains("codebook"), "{e}");
    let mut grid = tokens.clone();
    (grid.h, grid.w) = (2, 4);
    let e = t.decode(&grid).unwrap_err().to_string();
    assert!(e.contains("one row of 8"), "{e}");
    assert!(TitokTokenizer::new(t.model, Some(64)).is_err());
}

#[test]
fn titok_weights_of_another_size_are_refused_in_one_line_naming_the_file() {
    let d = tempfile::tempdir().unwrap();
    std::fs::copy(
        fx("l/model.safetensors"),
        d.path().join("model.safetensors"),
    )
    .unwrap();
    let cfg = std::fs::read_to_string(fx("l/config.json")).unwrap();
    std::fs::write(
        d.path().join("config.json"),
        cfg.replace("\"num_latent_tokens\": 8", "\"num_latent_tokens\": 16"),
    )
    .unwrap();
    let e = titok::load(d.path(), None, &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("model.safetensors") && e.contains("shape"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

/// TiTok-L-32 (`configs/infer/TiTok/titok_l32.yaml`: ViT-L encoder and decoder, 32 latent
/// tokens of 12 dims, 4,096 codes, the released MaskGIT-VQGAN pixel decoder) with zero weights:
/// a 256² picture gives one row of 32 tokens and decodes to 256². About 1.7 GB of weights:
/// run with `--ignored`.
#[test]
#[ignore]
fn titok_l32_gives_32_tokens_at_256_px() {
    let cfg = TitokConfig::titok_l32();
    let m = TitokModel::new(&cfg, VarBuilder::zeros(DType::F32, &Device::Cpu)).unwrap();
    let x = Tensor::zeros((1, 3, 256, 256), DType::F32, &Device::Cpu).unwrap();
    let idx = m.encode(&x).unwrap();
    assert_eq!(idx.dims(), &[1, 1, 32]);
    assert_eq!(m.decode_tokens(&idx).unwrap().dims(), &[1, 3, 256, 256]);
}
