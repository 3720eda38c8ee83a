//! Parity with diffusers' own `AutoencoderDC` (`scripts/make_dcae_fixtures.py`: random
//! weights and BatchNorm statistics, `save_pretrained` folders): latents ≤ 1e-4 relative,
//! decode ≥ 40 dB against diffusers' decode — a pixel-(un)shuffle model with EfficientViT
//! blocks on both attention branches (linear and quadratic) and BatchNorm/ReLU decoder
//! levels, and a SANA-like one (stride-2 conv input, `Conv` down and `interpolate` up
//! blocks); the pipeline's scaling; bad configs and weights as one-line errors.

use crate::common::{fixture, io_of, psnr, rel_diff};
use candle_core::{Device, Tensor};
use imgseq_core::tokenizer::{Encoded, Tokenizer};
use imgseq_vqgan::dcae::{self, DcaeTokenizer};
use std::path::PathBuf;

fn fx(name: &str) -> PathBuf {
    fixture("dcae", name)
}

fn io(what: &str) -> Tensor {
    io_of("dcae")[what].clone()
}

fn check(name: &str) {
    let m = dcae::load(&fx(name), None, &Device::Cpu).unwrap().model;
    let z = m.encode_raw(&io(&format!("{name}.x"))).unwrap();
    let r = rel_diff(&z, &io(&format!("{name}.latent")));
    eprintln!("{name}: latent relative diff {r:.2e}");
    assert!(r < 1e-4, "{name}: latent relative diff {r}");
    let rec = m.decode_raw(&io(&format!("{name}.latent"))).unwrap();
    let db = psnr(&rec, &io(&format!("{name}.recon")));
    eprintln!("{name}: decode {db:.1} dB against diffusers'");
    assert!(db >= 40.0, "{name}: decode {db:.1} dB against diffusers'");
}

#[test]
fn dc_ae_with_efficientvit_blocks_matches_diffusers() {
    check("dc");
}

#[test]
fn sana_like_dc_ae_with_conv_and_interpolate_blocks_matches_diffusers() {
    check("sana");
}

#[test]
fn tokens_are_the_pipelines_scaled_latents_and_decode_back() {
    let m = dcae::load(&fx("sana"), None, &Device::Cpu).unwrap().model;
    let t = DcaeTokenizer::new(m, 32, None).unwrap();
    assert_eq!(t.shape(), vec![4, 8, 8]);
    let Encoded::Latents(l) = t.encode(&io("sana.x")).unwrap() else {
        panic!("latents expected")
    };
    let z = Tensor::from_vec(l.data.clone(), (2, 4, 8, 8), &Device::Cpu).unwrap();
    assert!(rel_diff(&z, &io("sana.scaled")) < 1e-4);
    let pics = t.decode_encoded(&Encoded::Latents(l)).unwrap();
    assert_eq!((pics.len(), pics[0].dimensions()), (2, (32, 32)));
    // Patch tokens of the same latents, 2×2: 16 tokens of 16 values.
    let m = dcae::load(&fx("sana"), None, &Device::Cpu).unwrap().model;
    let p = DcaeTokenizer::new(m, 32, Some(2)).unwrap();
    let Encoded::Embeddings(e) = p.encode(&io("sana.x")).unwrap() else {
        panic!("patch tokens expected")
    };
    assert_eq!((e.n, e.tokens, e.dim), (2, 16, 16));
    assert_eq!(p.decode_encoded(&Encoded::Embeddings(e)).unwrap().len(), 2);
    // A side that is not a multiple of the compression is named.
    let m = dcae::load(&fx("dc"), None, &Device::Cpu).unwrap().model;
    let e = DcaeTokenizer::new(m, 36, None).err().unwrap().to_string();
    assert!(e.contains("size") && e.contains("multiple of 8"), "{e}");
}

#[test]
fn bad_dc_ae_configs_and_weights_are_one_line_errors() {
    let d = tempfile::tempdir().unwrap();
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fx("dc/config.json")).unwrap()).unwrap();
    std::fs::copy(
        fx("dc/diffusion_pytorch_model.safetensors"),
        d.path().join("diffusion_pytorch_model.safetensors"),
    )
    .unwrap();
    for (field, value, want) in [
        (
            "upsample_block_type",
            serde_json::json!("bilinear"),
            "upsample_block_type",
        ),
        (
            "decoder_act_fns",
            serde_json::json!("gelu"),
            "decoder_act_fns",
        ),
        (
            "encoder_block_types",
            serde_json::json!(["ResBlock"]),
            "per-level",
        ),
        (
            "attention_head_dim",
            serde_json::json!(0),
            "attention_head_dim",
        ),
        ("latent_channels", serde_json::json!(16), "shape"),
    ] {
        let mut c = cfg.clone();
        c[field] = value;
        std::fs::write(d.path().join("config.json"), c.to_string()).unwrap();
        let e = dcae::load(d.path(), None, &Device::Cpu)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(want) && !e.contains('\n'), "{field}: {e}");
    }
    // A tensor the model does not read is named.
    let mut t =
        candle_core::safetensors::load(fx("dc/diffusion_pytorch_model.safetensors"), &Device::Cpu)
            .unwrap();
    t.insert(
        "extra.weight".into(),
        Tensor::zeros(3, candle_core::DType::F32, &Device::Cpu).unwrap(),
    );
    candle_core::safetensors::save(&t, d.path().join("diffusion_pytorch_model.safetensors"))
        .unwrap();
    std::fs::write(d.path().join("config.json"), cfg.to_string()).unwrap();
    let e = dcae::load(d.path(), None, &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("extra.weight"), "{e}");
}

/// dc-ae-f32c32-sana-1.0's layout at its released size (random weights):
/// `make_dcae_fixtures.py --released DIR` writes DIR (not committed; ~1.3 GB); run with
/// `IMGSEQ_DCAE_RELEASED=DIR cargo test -p imgseq-vqgan --test it dcae:: -- --ignored`.
#[test]
#[ignore]
fn released_size_dc_ae_f32c32_matches_diffusers() {
    let dir = PathBuf::from(std::env::var("IMGSEQ_DCAE_RELEASED").expect("IMGSEQ_DCAE_RELEASED"));
    let m = dcae::load(&dir, None, &Device::Cpu).unwrap().model;
    let io = candle_core::safetensors::load(dir.join("io.safetensors"), &Device::Cpu).unwrap();
    let t = std::time::Instant::now();
    let z = m.encode_raw(&io["x"]).unwrap();
    let t_enc = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    let rec = m.decode_raw(&io["latent"]).unwrap();
    let t_dec = t.elapsed().as_secs_f64();
    assert_eq!(z.dims(), &[1, 32, 16, 16]);
    let (r, db) = (rel_diff(&z, &io["latent"]), psnr(&rec, &io["recon"]));
    eprintln!(
        "released DC-AE f32c32 512²: latent relative diff {r:.2e}, decode {db:.1} dB, \
         encode {t_enc:.2} s, decode {t_dec:.2} s"
    );
    assert!(r < 1e-4 && db >= 40.0);
}
