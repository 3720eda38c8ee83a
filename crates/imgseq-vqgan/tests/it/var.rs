//! Parity with VAR's VQVAE (FoundationVision/VAR; `scripts/make_var_fixtures.py` builds it with
//! VAR's own `VQVAE`, `Encoder`, `Decoder` and multi-scale quantizer, random weights, the
//! released scales and φ sharing at a small width) read from its plain state dict: the latents,
//! every one of the 680 multi-scale codes, the reconstruction, the decode of the first three
//! scales and of random codes.

use crate::common::{as_i64, psnr, rel_diff};
use candle_core::{DType, Device, Tensor};
use imgseq_core::tokenizer::Tokenizer;
use imgseq_core::tokens::TokenGrid;
use imgseq_vqgan::var::{self, PhiSharing, VarConfig, VarTokenizer, PATCH_NUMS_256};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

fn fx(name: &str) -> PathBuf {
    crate::common::fixture("var", name)
}

fn io() -> HashMap<String, Tensor> {
    crate::common::io_of("var")
}

fn rows(t: &[i64], len: usize) -> Vec<&[i64]> {
    t.chunks(len).collect()
}

#[test]
fn var_pth_gives_vars_latents_multi_scale_codes_and_pictures() {
    let m = var::load(&fx("tiny.pth"), &Device::Cpu).unwrap();
    let c = m.config();
    assert_eq!(
        (c.vocab_size, c.z_channels, c.ch, c.quant_conv_ks),
        (64, 8, 32, 3)
    );
    assert_eq!((c.phi_sharing, c.phis), (PhiSharing::Partial, 4));
    let io = io();
    let x = &io["x"];
    let f = m.encode_latents(x).unwrap();
    let rel = rel_diff(&f, &io["f"]);
    assert!(rel < 1e-4, "latents: relative {rel}");
    let got = m.encode(x).unwrap();
    let want = as_i64(&io["idx"]);
    assert_eq!(got.concat(), want, "the 680 codes of both pictures");
    let all = m.decode(&rows(&want, 680), &PATCH_NUMS_256).unwrap();
    let p = psnr(&all, &io["recon"]);
    assert!(p > 40.0, "reconstruction: {p} dB");
    // The first three scales (1 + 4 + 9 tokens) alone: what VAR shows after three steps.
    let first3: Vec<i64> = rows(&want, 680)
        .iter()
        .flat_map(|r| r[..14].to_vec())
        .collect();
    let k3 = m.decode(&rows(&first3, 14), &PATCH_NUMS_256).unwrap();
    let p3 = psnr(&k3, &io["recon_k3"]);
    assert!(p3 > 40.0, "first 3 scales: {p3} dB");
    let tokens = as_i64(&io["tokens"]);
    let dec = m.decode(&rows(&tokens, 680), &PATCH_NUMS_256).unwrap();
    let pt = psnr(&dec, &io["tokens_dec"]);
    assert!(pt > 40.0, "random codes: {pt} dB");
    eprintln!("VAR parity: reconstruction {p:.1} dB, 3 scales {p3:.1} dB, codes {pt:.1} dB");
}

/// The same picture gives the same 680 codes alone, in a batch of 8 and on 1 or 2 threads.
#[test]
fn var_tokens_do_not_depend_on_the_batch_or_the_threads() {
    let t = VarTokenizer::new(var::load(&fx("tiny.pth"), &Device::Cpu).unwrap(), None).unwrap();
    assert_eq!(t.size, 32);
    let x = io()["x"].clone();
    let one = x.narrow(0, 0, 1).unwrap();
    let alone = t.encode(&one).unwrap().into_tokens().unwrap();
    let eight = Tensor::cat(&[&x, &x, &x, &x], 0).unwrap();
    let batch = t.encode(&eight).unwrap().into_tokens().unwrap();
    assert_eq!((batch.n, batch.h, batch.w), (8, 1, 680));
    for i in [0, 2, 4, 6] {
        assert_eq!(batch.image(i), &alone.data[..], "picture {i} of 8");
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let single = pool.install(|| t.encode(&one).unwrap().into_tokens().unwrap());
    assert_eq!(single.data, alone.data, "1 thread");
}

#[test]
fn var_tokenizer_describes_its_scales_and_refuses_bad_rows() {
    let t = VarTokenizer::new(var::load(&fx("tiny.pth"), &Device::Cpu).unwrap(), None).unwrap();
    let d = t.describe();
    assert_eq!(
        (d.family.as_str(), d.output.shape.clone()),
        ("var", vec![1, 680])
    );
    assert_eq!(d.config["v_patch_nums"], serde_json::json!(PATCH_NUMS_256));
    let grid = |w: usize, v: i64| TokenGrid {
        n: 1,
        h: 1,
        w,
        batched: false,
        data: vec![v; w],
    };
    assert_eq!(t.decode(&grid(14, 3)).unwrap().len(), 1);
    let e = t.decode(&grid(600, 0)).unwrap_err().to_string();
    assert!(e.contains("first k scales") && e.contains("600"), "{e}");
    let e = t.decode(&grid(680, 64)).unwrap_err().to_string();
    assert!(
        e.contains("64") && e.contains("outside the codebook"),
        "{e}"
    );
    // An input side with no published scale list.
    let m = var::load(&fx("tiny.pth"), &Device::Cpu).unwrap();
    let e = VarTokenizer::new(m, Some(48)).err().unwrap().to_string();
    assert!(e.contains("16×16") && e.contains("24×24"), "{e}");
}

/// The released layout (`VQVAE(vocab_size=4096, z_channels=32, ch=160, share_quant_resi=4)`,
/// its tensor names and shapes as VAR's code makes them): 680 tokens at 256².
#[test]
fn the_released_layout_reads_as_var_d16_to_d30s_tokenizer() {
    let text = std::fs::read_to_string(fx("released_shapes.json")).unwrap();
    let shapes: BTreeMap<String, Vec<usize>> = serde_json::from_str(&text).unwrap();
    let c = VarConfig::from_shapes(&shapes, Path::new("vae_ch160v4096z32.pth")).unwrap();
    assert_eq!(
        (
            c.vocab_size,
            c.z_channels,
            c.ch,
            c.ch_mult.clone(),
            c.num_res_blocks
        ),
        (4096, 32, 160, vec![1, 1, 2, 2, 4], 2)
    );
    assert_eq!(c.vq.downsample_factor(), 16);
    let p = c.patch_nums(256 / 16).unwrap();
    assert_eq!(VarConfig::tokens(&p), 680);
    assert_eq!(c.vq.ddconfig.attn_resolutions, vec![16]);
    assert!(var::is_var_keys(shapes.keys().map(String::as_str)));
}

/// A VAR file whose tensors do not fit together: one line naming the file and the problem,
/// never a panic.
#[test]
fn var_files_that_do_not_fit_are_refused_naming_the_file() {
    let tensors: HashMap<String, Tensor> =
        imgseq_vqgan::load::read_all_tensors(&fx("tiny.pth"), &Device::Cpu).unwrap();
    let d = tempfile::tempdir().unwrap();
    let case = |name: &str, edit: &dyn Fn(&mut HashMap<String, Tensor>)| {
        let mut t = tensors.clone();
        edit(&mut t);
        let p = d.path().join(format!("{name}.safetensors"));
        candle_core::safetensors::save(&t, &p).unwrap();
        let e = match var::load(&p, &Device::Cpu) {
            Ok(_) => panic!("{name}: loaded"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(&format!("{name}.safetensors")), "{name}: {e}");
        assert_eq!(e.lines().count(), 1, "{name}: {e}");
        e
    };
    // The same tensors as safetensors load (the reader is not the point).
    let p = d.path().join("same.safetensors");
    candle_core::safetensors::save(&tensors, &p).unwrap();
    assert!(var::load(&p, &Device::Cpu).is_ok());
    let e = case("codebook", &|t| {
        t.insert(
            "quantize.embedding.weight".into(),
            Tensor::zeros((64, 7), DType::F32, &Device::Cpu).unwrap(),
        );
    });
    assert!(e.contains("disagree"), "{e}");
    case("qkv", &|t| {
        let k = t
            .keys()
            .find(|k| k.ends_with("attn_1.qkv.weight"))
            .unwrap()
            .clone();
        let w = t[&k].narrow(0, 0, 10).unwrap();
        t.insert(k, w);
    });
    let e = case("phi", &|t| {
        t.retain(|k, _| !k.starts_with("quantize.quant_resi."));
    });
    assert!(e.contains("φ") || e.contains("VAR"), "{e}");
    case("extra", &|t| {
        t.insert(
            "quantize.quant_resi.qresi_ls.0.extra".into(),
            Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap(),
        );
    });
    case("phi_shape", &|t| {
        t.insert(
            "quantize.quant_resi.qresi_ls.1.weight".into(),
            Tensor::zeros((8, 8, 1, 1), DType::F32, &Device::Cpu).unwrap(),
        );
    });
}
