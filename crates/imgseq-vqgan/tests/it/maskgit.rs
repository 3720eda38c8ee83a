//! Parity with bytedance/1d-tokenizer's MaskGIT-VQGAN (`PretrainedTokenizer` of
//! `modeling/titok.py`; `scripts/make_titok_fixtures.py` builds it with the repository's own
//! modules, random weights, saved as the released state dict): the latents, every token, and
//! the decode of the tokens; and the network at the released size.

use crate::common::{as_i64, psnr_unit, rel_diff};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use imgseq_core::tokenizer::Tokenizer;
use imgseq_vqgan::maskgit::{self, MaskGitConfig, MaskGitModel, MaskGitTokenizer};
use std::path::PathBuf;

fn weights() -> PathBuf {
    crate::common::fixture("maskgit", "maskgit-vqgan-imagenet-f16-256.bin")
}

#[test]
fn maskgit_state_dict_gives_upstream_latents_tokens_and_clamped_decode() {
    let io = crate::common::io_of("maskgit");
    assert!(maskgit::is_maskgit_file(&weights()));
    let m = maskgit::load(&weights(), &Device::Cpu).unwrap();
    let c = m.config();
    assert_eq!(
        (c.hidden_channels, c.channel_mult.clone(), c.num_res_blocks),
        (32, vec![2, 1], 1)
    );
    assert_eq!((c.num_embeddings, c.embedding_dim), (64, 8));
    let z = m.encode_latents(&io["x"]).unwrap();
    let rel_z = rel_diff(&z, &io["z"]);
    assert!(rel_z < 1e-4, "latents {rel_z}");
    let idx = m.encode(&io["x"]).unwrap();
    assert_eq!(idx.dims(), &[2, 16, 16]);
    assert_eq!(as_i64(&idx), as_i64(&io["tokens"]), "tokens");
    let tokens = io["tokens"].reshape((2, 16, 16)).unwrap();
    let y = m.decode_indices(&tokens).unwrap();
    let (p, rel) = (psnr_unit(&y, &io["decoded"]), rel_diff(&y, &io["decoded"]));
    eprintln!("maskgit: latents {rel_z:.2e}, decode PSNR {p:.1} dB, max rel {rel:.2e}");
    assert!(p >= 40.0, "decode PSNR {p}");
    assert!(rel < 1e-4, "decode {rel}");
}

#[test]
fn maskgit_tokenizer_reads_zero_one_pictures_and_refuses_codes_outside_the_codebook() {
    let io = crate::common::io_of("maskgit");
    let t = MaskGitTokenizer::new(maskgit::load(&weights(), &Device::Cpu).unwrap(), None).unwrap();
    let d = t.describe();
    assert_eq!(
        (d.family.as_str(), d.output.shape.clone(), d.input.size),
        ("maskgit-vqgan", vec![16, 16], 32)
    );
    assert_eq!(d.input.range, imgseq_core::image_io::PixelRange::ZeroOne);
    let tokens = t.encode(&io["x"]).unwrap().into_tokens().unwrap();
    assert_eq!(tokens.data, as_i64(&io["tokens"]));
    let imgs = t.decode(&tokens).unwrap();
    assert_eq!((imgs.len(), imgs[0].dimensions()), (2, (32, 32)));
    let mut bad = tokens.clone();
    bad.data[3] = 64;
    let e = t.decode(&bad).unwrap_err().to_string();
    assert!(e.contains("64") && e.contains("codebook"), "{e}");
    assert!(MaskGitTokenizer::new(t.model, Some(33)).is_err());
}

/// The released `maskgit-vqgan-imagenet-f16-256` network (upstream's hard-coded config)
/// with zero weights: a 256² picture gives a 16×16 grid and decodes to 256².
#[test]
#[ignore]
fn released_maskgit_builds_and_gives_16x16_codes_at_256_px() {
    let cfg = MaskGitConfig::default();
    let m = MaskGitModel::new(&cfg, VarBuilder::zeros(DType::F32, &Device::Cpu)).unwrap();
    let x = Tensor::zeros((1, 3, 256, 256), DType::F32, &Device::Cpu).unwrap();
    let idx = m.encode(&x).unwrap();
    assert_eq!(idx.dims(), &[1, 16, 16]);
    assert_eq!(m.decode_indices(&idx).unwrap().dims(), &[1, 3, 256, 256]);
}
