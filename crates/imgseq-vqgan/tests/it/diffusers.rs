//! Parity with diffusers' own `VQModel` (`scripts/make_diffusers_fixtures.py`: random
//! weights, `save_pretrained` folders): the attention as Linear `to_q/to_k/to_v/to_out.0`
//! and under the older `query/key/value/proj_attn` names, `norm_num_groups` ≠ 32, code size
//! ≠ latent channels, `torch.cdist` indices, and an aMUSEd-like model (no middle attention,
//! [0, 1] pixels told by the pipeline's `model_index.json`).

use crate::common::{as_i64, rel_diff};
use candle_core::{DType, Device, Tensor};
use imgseq_vqgan::family::{Distance, Family, Range};
use imgseq_vqgan::{load, load_model, VqModel};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/diffusers")
        .join(name)
}

fn io(model: &str, what: &str) -> Tensor {
    let m = candle_core::safetensors::load(fx("io.safetensors"), &Device::Cpu).unwrap();
    m[&format!("{model}.{what}")].clone()
}

/// Our models read and write [-1, 1] whatever the network's range.
fn to_ours(x: &Tensor, range: Range) -> Tensor {
    match range {
        Range::MinusOneOne => x.clone(),
        Range::ZeroOne => ((x * 2.0).unwrap() - 1.0).unwrap(),
    }
}

fn check(m: &VqModel, name: &str, range: Range) {
    let x = to_ours(&io(name, "x"), range);
    let z = m.encode_latents(&x).unwrap();
    let r = rel_diff(&z, &io(name, "latents"));
    assert!(r < 1e-4, "{name}: latents relative diff {r}");
    let q = m.encode(&x).unwrap();
    assert_eq!(
        as_i64(&q.indices),
        as_i64(&io(name, "indices")),
        "{name}: indices"
    );
    let rec = m.decode_indices(&io(name, "indices")).unwrap();
    let r = rel_diff(&rec, &to_ours(&io(name, "recon"), range));
    assert!(r < 1e-4, "{name}: reconstruction relative diff {r}");
    // ≥ 40 dB PSNR against diffusers' decode, in the model's own range.
    let want = to_ours(&io(name, "recon"), range);
    let mse = (rec - &want)
        .unwrap()
        .sqr()
        .unwrap()
        .mean_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let psnr = 10.0 * (4.0 / mse.max(1e-20)).log10();
    assert!(psnr > 40.0, "{name}: PSNR {psnr}");
    eprintln!(
        "{name}: latents rel diff {:.1e}, reconstruction rel diff {r:.1e}, PSNR {psnr:.1} dB",
        rel_diff(&z, &io(name, "latents"))
    );
}

#[test]
fn vqmodel_folder_matches_diffusers() {
    let m = load_model(fx("vq"), None, &Device::Cpu).unwrap();
    let c = m.config();
    assert_eq!(c.variant.family, Family::Diffusers);
    assert_eq!(c.variant.distance, Distance::Cdist);
    assert_eq!(c.variant.norm_groups, 4);
    assert_eq!((c.ddconfig.z_channels, c.embed_dim, c.n_embed), (4, 3, 64));
    assert_eq!(c.variant.range, Range::MinusOneOne);
    check(&m, "vq", Range::MinusOneOne);
}

#[test]
fn legacy_attention_names_give_the_same_model() {
    let m = load_model(
        fx("vq/legacy.safetensors"),
        Some(&fx("vq/config.json")),
        &Device::Cpu,
    )
    .unwrap();
    check(&m, "vq", Range::MinusOneOne);
}

#[test]
fn amused_like_model_reads_zero_one_pixels_and_has_no_mid_attention() {
    let m = load_model(
        fx("amused/vqvae/diffusion_pytorch_model.safetensors"),
        None,
        &Device::Cpu,
    )
    .unwrap();
    let c = m.config();
    assert_eq!(c.variant.range, Range::ZeroOne);
    assert!(!c.variant.mid_attn);
    assert_eq!(c.downsample_factor(), 4);
    check(&m, "amused", Range::ZeroOne);
}

#[test]
fn convert_keeps_the_family_options() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("model.safetensors");
    let r = load::convert_checkpoint(&fx("amused/vqvae"), None, &out, Default::default()).unwrap();
    assert_eq!(r.family, Family::Diffusers);
    assert_eq!(r.dropped, 0);
    let st = candle_core::safetensors::load(&out, &Device::Cpu).unwrap();
    assert!(st.contains_key("decoder.up.2.upsample.conv.weight"));
    assert!(
        !st.keys().any(|k| k.contains("attn")),
        "no attention in this model"
    );
    let m = load_model(&out, None, &Device::Cpu).unwrap();
    assert_eq!(m.config().variant.range, Range::ZeroOne);
    check(&m, "amused", Range::ZeroOne);
    // Linear attention weights become 1×1 convs in our layout.
    let r = load::convert_checkpoint(
        &fx("vq/legacy.safetensors"),
        Some(&fx("vq/config.json")),
        &out,
        Default::default(),
    )
    .unwrap();
    assert_eq!(r.family, Family::Diffusers);
    let st = candle_core::safetensors::load(&out, &Device::Cpu).unwrap();
    assert_eq!(st["encoder.mid.attn_1.q.weight"].dims(), &[16, 16, 1, 1]);
    check(
        &load_model(&out, None, &Device::Cpu).unwrap(),
        "vq",
        Range::MinusOneOne,
    );
}

#[test]
fn inspect_names_the_family() {
    let s = load::inspect(fx("vq")).unwrap();
    assert_eq!(s.family, Some(Family::Diffusers));
}

#[test]
fn hostile_diffusers_inputs_give_one_line_errors() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("vqvae");
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(
        fx("vq/diffusion_pytorch_model.safetensors"),
        dir.join("diffusion_pytorch_model.safetensors"),
    )
    .unwrap();
    // No config: named.
    let e = load_model(&dir, None, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("needs its config.json") && !e.contains('\n'),
        "{e}"
    );
    let text = std::fs::read_to_string(fx("vq/config.json")).unwrap();
    for (from, to, want) in [
        (
            "\"norm_type\": \"group\"",
            "\"norm_type\": \"spatial\"",
            "`norm_type`",
        ),
        (
            "\"num_vq_embeddings\": 64",
            "\"num_vq_embeddings\": 65",
            "`quantize.embedding.weight` has shape [64, 3]",
        ),
        (
            "\"norm_num_groups\": 4",
            "\"norm_num_groups\": 3",
            "GroupNorm(3)",
        ),
        (
            "\"latent_channels\": 4",
            "\"latent_channels\": \"4\"",
            "`latent_channels`",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        std::fs::write(dir.join("config.json"), text.replace(from, to)).unwrap();
        let e = load_model(&dir, None, &Device::Cpu)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want) && !e.contains('\n'), "{to}: {e}");
    }
    // An extra tensor is named.
    let mut map: HashMap<String, Tensor> =
        candle_core::safetensors::load(fx("vq/diffusion_pytorch_model.safetensors"), &Device::Cpu)
            .unwrap();
    map.insert(
        "encoder.down_blocks.0.resnets.0.time_emb_proj.weight".into(),
        Tensor::zeros(2, DType::F32, &Device::Cpu).unwrap(),
    );
    std::fs::write(dir.join("config.json"), &text).unwrap();
    candle_core::safetensors::save(&map, dir.join("diffusion_pytorch_model.safetensors")).unwrap();
    let e = load_model(&dir, None, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unexpected tensor(s)") && e.contains("time_emb_proj"),
        "{e}"
    );
}
