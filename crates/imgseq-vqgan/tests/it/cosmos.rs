//! Parity with NVIDIA's Cosmos tokenizer code (`scripts/make_cosmos_fixtures.py` builds small
//! DI and CI tokenizers with `cosmos_tokenizer.networks`, random weights, and saves them as the
//! release does: traced `encoder.jit` / `decoder.jit` in bfloat16): every FSQ token, the codes
//! and latents, the decodes; the config read off the archives; the released DI16x16 network's
//! shapes; damaged sources refused in one line.

use crate::common::{as_i64, psnr, rel_diff};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use imgseq_core::tokenizer::{Encoded, Tokenizer};
use imgseq_vqgan::cosmos::config::{CosmosConfig, Kind, PatchMethod};
use imgseq_vqgan::cosmos::{self, CosmosModel, CosmosTokenizer};
use std::path::PathBuf;

fn fx(name: &str) -> PathBuf {
    crate::common::fixture("cosmos", name)
}

#[test]
fn cosmos_di_gives_the_familys_tokens_codes_and_decode() {
    let io = crate::common::io_of("cosmos");
    let l = cosmos::load(&fx("di"), &Device::Cpu).unwrap();
    let m = &l.model;
    let c = m.config();
    assert_eq!(
        c.kind,
        Kind::Discrete {
            levels: vec![8, 8, 8, 5, 5, 5]
        }
    );
    assert_eq!(
        (c.channels, c.channels_mult.as_slice(), c.num_res_blocks),
        (32, &[1, 1][..], 1)
    );
    assert_eq!(
        (c.patch_size, c.spatial_compression, c.z_channels),
        (4, 8, 16)
    );
    assert_eq!(
        (
            c.encoder_attn_levels.as_slice(),
            c.decoder_attn_levels.as_slice()
        ),
        (&[1][..], &[1][..])
    );
    assert!(matches!(c.patch_method, PatchMethod::Haar { .. }));
    assert_eq!(m.fsq().unwrap().size(), 64_000);

    let idx = m.encode_indices(&io["x"]).unwrap();
    assert_eq!(idx.dims(), &[2, 8, 8]);
    let want = as_i64(&io["di_tokens"]);
    let got = as_i64(&idx);
    let same = got.iter().zip(&want).filter(|(a, b)| a == b).count();
    assert_eq!(same, want.len(), "tokens: {same} of {} equal", want.len());
    let codes = m.fsq().unwrap().codes(&idx).unwrap();
    assert_eq!(rel_diff(&codes, &io["di_codes"]), 0.0, "codes");

    let y = m.decode_indices(&io["di_tokens"]).unwrap();
    let p = psnr(&y, &io["di_decoded"]);
    let rel = rel_diff(&y, &io["di_decoded"]);
    eprintln!(
        "DI: tokens {same}/{}, decode PSNR {p:.1} dB, max rel {rel:.2e}",
        want.len()
    );
    assert!(p >= 40.0, "decode PSNR {p}");
}

#[test]
fn cosmos_ci_gives_the_familys_latents_and_decode() {
    let io = crate::common::io_of("cosmos");
    let l = cosmos::load(&fx("ci/encoder.jit"), &Device::Cpu).unwrap();
    let m = &l.model;
    assert_eq!(
        m.config().kind,
        Kind::Continuous {
            latent_channels: 16
        }
    );
    assert!(m.fsq().is_none());
    let z = m.encode_latents(&io["x"]).unwrap();
    let rel_z = rel_diff(&z, &io["ci_latents"]);
    let y = m.decode_latents(&io["ci_latents"]).unwrap();
    let p = psnr(&y, &io["ci_decoded"]);
    eprintln!("CI: latents max rel {rel_z:.2e}, decode PSNR {p:.1} dB");
    assert!(rel_z <= 1e-4, "latents {rel_z}");
    assert!(p >= 40.0, "decode PSNR {p}");
}

#[test]
fn cosmos_tokenizers_encode_and_decode_through_the_tokenizer_trait() {
    let io = crate::common::io_of("cosmos");
    let di = CosmosTokenizer::new(
        cosmos::load(&fx("di"), &Device::Cpu).unwrap().model,
        64,
        None,
    )
    .unwrap();
    assert_eq!(di.codebook_size(), Some(64_000));
    assert_eq!(di.describe().output.shape, [8, 8]);
    let Encoded::Tokens(t) = di.encode(&io["x"]).unwrap() else {
        panic!("DI gives tokens")
    };
    assert_eq!(t.data, as_i64(&io["di_tokens"]));
    assert_eq!(di.decode(&t).unwrap().len(), 2);
    let mut bad = t.clone();
    bad.data[3] = 64_000;
    let e = di.decode(&bad).unwrap_err().to_string();
    assert!(e.contains("outside the codebook"), "{e}");

    let ci = CosmosTokenizer::new(
        cosmos::load(&fx("ci"), &Device::Cpu).unwrap().model,
        64,
        None,
    )
    .unwrap();
    assert_eq!(ci.codebook_size(), None);
    assert_eq!(ci.describe().output.shape, [16, 8, 8]);
    let e = ci.encode(&io["x"]).unwrap();
    let Encoded::Latents(lat) = &e else {
        panic!("CI gives latents")
    };
    assert_eq!(lat.shape, [16, 8, 8]);
    assert_eq!(ci.decode_encoded(&e).unwrap().len(), 2);
    // Sizes that are not a multiple of the compression, and patches on a DI, are refused.
    let m = cosmos::load(&fx("di"), &Device::Cpu).unwrap().model;
    assert!(CosmosTokenizer::new(m, 60, None).is_err());
    let m = cosmos::load(&fx("di"), &Device::Cpu).unwrap().model;
    assert!(CosmosTokenizer::new(m, 64, Some(2)).is_err());
}

#[test]
fn cosmos_sources_without_a_decoder_or_with_foreign_archives_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fx("di/encoder.jit"), dir.path().join("encoder.jit")).unwrap();
    let e = cosmos::load(dir.path(), &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("decoder.jit") && e.lines().count() == 1, "{e}");
    // A CI decoder beside a DI encoder.
    std::fs::copy(fx("ci/decoder.jit"), dir.path().join("decoder.jit")).unwrap();
    let e = cosmos::load(dir.path(), &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.lines().count() == 1 && e.contains("decoder.jit"), "{e}");
    assert!(e.contains("different tokenizers"), "{e}");
    // A truncated encoder.
    let b = std::fs::read(fx("di/encoder.jit")).unwrap();
    std::fs::write(dir.path().join("encoder.jit"), &b[..b.len() / 3]).unwrap();
    let e = cosmos::load(dir.path(), &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("encoder.jit") && e.lines().count() == 1, "{e}");
    // A DI decoder beside a CI encoder.
    std::fs::copy(fx("ci/encoder.jit"), dir.path().join("encoder.jit")).unwrap();
    std::fs::copy(fx("di/decoder.jit"), dir.path().join("decoder.jit")).unwrap();
    let e = cosmos::load(dir.path(), &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.lines().count() == 1 && e.contains("different tokenizers"),
        "{e}"
    );
}

/// The released DI16x16 network (configs.py `discrete_image`: channels 128, mult [2, 4, 4],
/// two res blocks, no attention outside the middle, z 256, FSQ [8, 8, 8, 5, 5, 5], Haar patch
/// 4, compression 16) with zero weights: a 256² picture gives 16×16 = 256 tokens and decodes
/// to 256². About 330 MB of weights: run with `--ignored`.
#[test]
#[ignore]
fn released_di16x16_gives_256_tokens_at_256_px() {
    let cfg = CosmosConfig {
        name: "DI".into(),
        kind: Kind::Discrete {
            levels: vec![8, 8, 8, 5, 5, 5],
        },
        in_channels: 3,
        out_channels: 3,
        channels: 128,
        channels_mult: vec![2, 4, 4],
        num_res_blocks: 2,
        z_channels: 256,
        patch_size: 4,
        patch_method: PatchMethod::Haar {
            taps: [std::f32::consts::FRAC_1_SQRT_2; 2],
        },
        spatial_compression: 16,
        num_downsamples: 2,
        num_upsamples: 2,
        encoder_attn_levels: vec![],
        decoder_attn_levels: vec![],
    };
    let vb = || VarBuilder::zeros(DType::F32, &Device::Cpu);
    let m = CosmosModel::new(&cfg, vb(), vb()).unwrap();
    let t = CosmosTokenizer::new(m, 256, None).unwrap();
    assert_eq!(t.describe().output.shape, [16, 16]);
    let x = Tensor::zeros((1, 3, 256, 256), DType::F32, &Device::Cpu).unwrap();
    let Encoded::Tokens(g) = t.encode(&x).unwrap() else {
        panic!("tokens")
    };
    assert_eq!((g.h, g.w, g.data.len()), (16, 16, 256));
    assert_eq!(t.decode(&g).unwrap()[0].dimensions(), (256, 256));
}
