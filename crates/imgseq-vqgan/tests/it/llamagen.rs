//! Parity with LlamaGen's VQ model (`scripts/make_llamagen_fixtures.py`: LlamaGen's
//! `vq_model.py` written out, random weights) in both released layouts — the `torch.save`
//! `.pt` (weights under `model`, an `argparse.Namespace` beside them, no config) and
//! `model.safetensors` + `config.json` — and ADM's centre crop, bit-exact with Pillow.

use crate::common::{as_i64, rel_diff};
use candle_core::{DType, Device, Tensor};
use imgseq_vqgan::family::{Family, Resize};
use imgseq_vqgan::{load, load_model, preprocess, VqConfig, VqModel};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/llamagen")
        .join(name)
}

fn io() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fx("io.safetensors"), &Device::Cpu).unwrap()
}

/// The `.pt` alone in a folder (no config.json to find).
fn pt_alone() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("vq_ds16_c2i.pt");
    std::fs::copy(fx("vq_tiny.pt"), &p).unwrap();
    (d, p)
}

fn pt_model() -> VqModel {
    let (_d, p) = pt_alone();
    load_model(&p, None, &Device::Cpu).unwrap()
}

/// The Hugging Face layout (`PyTorchModelHubMixin.save_pretrained`): the script checked that
/// its model.safetensors holds exactly the `.pt`'s tensors; written here from the `.pt`.
fn hf_folder() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let sd = imgseq_torch::read_state_dict(fx("vq_tiny.pt"), &Device::Cpu).unwrap();
    let map: HashMap<String, Tensor> = sd.into_iter().map(|(k, t)| (k, t.tensor)).collect();
    candle_core::safetensors::save(&map, d.path().join("model.safetensors")).unwrap();
    std::fs::copy(fx("config.json"), d.path().join("config.json")).unwrap();
    d
}

#[test]
fn adm_center_crop_is_bit_exact_with_pillow() {
    let img = imgseq_core::image_io::load_rgb(fx("photo.png")).unwrap();
    assert_eq!(img.dimensions(), (300, 211));
    let crop = preprocess::adm_center_crop(&img, 32).unwrap();
    let want = io()["crop"].flatten_all().unwrap().to_vec1::<u8>().unwrap();
    assert_eq!(crop.as_raw(), &want, "ADM crop differs from Pillow's");
}

#[test]
fn pt_without_config_is_described_by_its_weights() {
    let m = pt_model();
    let c = m.config();
    assert_eq!(c.variant.family, Family::Llamagen);
    assert!(c.variant.l2_norm);
    assert_eq!(c.variant.resize, Resize::AdmCenterCrop);
    assert_eq!((c.ddconfig.ch, c.ddconfig.num_res_blocks), (32, 1));
    assert_eq!(c.ddconfig.ch_mult, vec![1, 1]);
    assert_eq!((c.ddconfig.z_channels, c.embed_dim, c.n_embed), (16, 8, 64));
    assert_eq!(c.downsample_factor(), 2);
}

#[test]
fn latents_indices_and_reconstruction_match_llamagen() {
    let m = pt_model();
    let io = io();
    let x = &io["x"];
    let z = m.encode_latents(x).unwrap();
    let r = rel_diff(&z, &io["z"]);
    assert!(r < 1e-4, "z relative diff {r}");
    let q = m.encode(x).unwrap();
    assert_eq!(q.indices.dims(), &[1, 16, 16]);
    assert_eq!(as_i64(&q.indices), as_i64(&io["indices"]));
    let rec = m.decode_indices(&io["indices"]).unwrap();
    let r = rel_diff(&rec, &io["recon"]);
    assert!(r < 1e-4, "reconstruction relative diff {r}");
    let mse = (&rec - &io["recon"])
        .unwrap()
        .sqr()
        .unwrap()
        .mean_all()
        .unwrap();
    let psnr = 10.0 * (4.0 / mse.to_scalar::<f32>().unwrap().max(1e-20)).log10();
    assert!(psnr > 40.0, "PSNR {psnr}");
    eprintln!(
        "llamagen: z rel diff {:.1e}, reconstruction rel diff {r:.1e}, PSNR {psnr:.1} dB",
        rel_diff(&z, &io["z"])
    );
    // The quantized latents are the normalised codebook rows (what decode_code uses).
    let rec2 = m.decode(&q.quantized).unwrap();
    assert!(rel_diff(&rec2, &io["recon"]) < 1e-4);
}

#[test]
fn image_file_to_tokens_matches_llamagen() {
    // The whole user path: file → ADM crop → [-1, 1] → tokens.
    let m = pt_model();
    let img =
        preprocess::load_square(&fx("photo.png"), 32, false, m.config().variant.resize).unwrap();
    let x = imgseq_vqgan::data::to_batch(&[img]).unwrap();
    assert!(rel_diff(&x, &io()["x"]) < 1e-6);
    let q = m.encode(&x).unwrap();
    assert_eq!(as_i64(&q.indices), as_i64(&io()["indices"]));
}

#[test]
fn safetensors_and_config_layout_gives_the_same_model() {
    let d = hf_folder();
    // `--weights` may name the folder or the file.
    for w in [d.path().to_path_buf(), d.path().join("model.safetensors")] {
        let m = load_model(&w, None, &Device::Cpu).unwrap();
        assert_eq!(m.config().variant.family, Family::Llamagen);
        let q = m.encode(&io()["x"]).unwrap();
        assert_eq!(as_i64(&q.indices), as_i64(&io()["indices"]));
    }
}

#[test]
fn convert_writes_our_layout_with_the_family_recorded() {
    let (d, p) = pt_alone();
    let out = d.path().join("conv/model.safetensors");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let r = load::convert_checkpoint(&p, None, &out, Default::default()).unwrap();
    assert_eq!(r.family, Family::Llamagen);
    assert_eq!(r.dropped, 1, "only quantize.codebook_used is dropped");
    let cfg = VqConfig::from_file(&r.config_path).unwrap();
    assert_eq!(cfg.variant.family, Family::Llamagen);
    let text = std::fs::read_to_string(&r.config_path).unwrap();
    assert!(
        text.contains("\"llamagen\"") && text.contains("\"l2_norm\": true"),
        "{text}"
    );
    let st = candle_core::safetensors::load(&out, &Device::Cpu).unwrap();
    assert!(st.contains_key("encoder.down.0.block.0.norm1.weight"));
    assert!(st.contains_key("decoder.up.1.attn.0.q.weight"));
    assert_eq!(
        st["encoder.conv_in.weight"].dtype(),
        DType::F16,
        "stored dtype kept"
    );
    let m = load_model(&out, None, &Device::Cpu).unwrap();
    let q = m.encode(&io()["x"]).unwrap();
    assert_eq!(as_i64(&q.indices), as_i64(&io()["indices"]));
    let rec = m.decode_indices(&io()["indices"]).unwrap();
    assert!(rel_diff(&rec, &io()["recon"]) < 1e-4);
}

/// `--fold-l2-norm`: LlamaGen's l2-normalised search becomes taming's plain one over a
/// unit-length codebook, and gives LlamaGen's own tokens and reconstructions.
#[test]
fn folding_the_l2_norm_keeps_llamagens_tokens_with_the_plain_search() {
    let (d, p) = pt_alone();
    let out = d.path().join("fold/model.safetensors");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let fold = load::ConvertOptions {
        fold_l2_norm: true,
        ..Default::default()
    };
    let r = load::convert_checkpoint(&p, None, &out, fold).unwrap();
    assert!(r.folded_l2_norm);
    let cfg = VqConfig::from_file(&r.config_path).unwrap();
    assert!(!cfg.variant.l2_norm, "the written config searches plainly");
    let st = candle_core::safetensors::load(&out, &Device::Cpu).unwrap();
    let cb = st["quantize.embedding.weight"]
        .to_dtype(DType::F32)
        .unwrap();
    let norms = cb.sqr().unwrap().sum(1).unwrap().sqrt().unwrap();
    for n in norms.to_vec1::<f32>().unwrap() {
        assert!((n - 1.0).abs() < 2e-3, "row length {n} (f16 storage)");
    }
    let m = load_model(&out, None, &Device::Cpu).unwrap();
    let q = m.encode(&io()["x"]).unwrap();
    assert_eq!(as_i64(&q.indices), as_i64(&io()["indices"]));
    let rec = m.decode_indices(&io()["indices"]).unwrap();
    assert!(rel_diff(&rec, &io()["recon"]) < 1e-3);
    // A model without l2_norm has nothing to fold: an error naming the file, nothing written.
    let out2 = d.path().join("again/model.safetensors");
    std::fs::create_dir_all(out2.parent().unwrap()).unwrap();
    let e = load::convert_checkpoint(&out, None, &out2, fold)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not l2-normalised") && e.contains("model.safetensors"),
        "{e}"
    );
    assert!(!out2.exists());
}

#[test]
fn inspect_names_the_family_and_lists_the_model_entry() {
    let s = load::inspect(fx("vq_tiny.pt")).unwrap();
    assert_eq!(s.family, Some(Family::Llamagen));
    assert!(
        s.top_level_keys.contains(&"args".to_string()),
        "{:?}",
        s.top_level_keys
    );
    assert!(s.tensors.iter().any(|t| t.name == "quantize.codebook_used"));
}

#[test]
fn a_config_that_disagrees_with_the_weights_is_refused() {
    let d = hf_folder();
    let cfg = d.path().join("config.json");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace("\"codebook_size\": 64", "\"codebook_size\": 65"),
    )
    .unwrap();
    let e = load_model(d.path(), None, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("config.json: field `codebook_size` is 65 but the weights") && !e.contains('\n'),
        "{e}"
    );
}

#[test]
fn unexpected_and_malformed_tensors_are_refused() {
    let sd = imgseq_torch::read_state_dict(fx("vq_tiny.pt"), &Device::Cpu).unwrap();
    let base: HashMap<String, Tensor> = sd.into_iter().map(|(k, t)| (k, t.tensor)).collect();
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("model.safetensors");
    let try_load = |map: &HashMap<String, Tensor>| {
        candle_core::safetensors::save(map, &p).unwrap();
        load_model(&p, None, &Device::Cpu).unwrap_err().to_string()
    };
    let mut m = base.clone();
    m.insert(
        "encoder.extra.weight".into(),
        Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap(),
    );
    let e = try_load(&m);
    assert!(
        e.contains("unexpected tensor(s)") && e.contains("encoder.extra.weight"),
        "{e}"
    );
    let mut m = base.clone();
    m.insert(
        "quantize.codebook_used".into(),
        Tensor::zeros((2, 2), DType::F32, &Device::Cpu).unwrap(),
    );
    let e = try_load(&m);
    assert!(
        e.contains("`quantize.codebook_used` has shape [2, 2]"),
        "{e}"
    );
    let mut m = base.clone();
    m.remove("decoder.conv_blocks.1.res.1.conv2.bias");
    let e = try_load(&m);
    assert!(
        e.contains("missing tensor `decoder.conv_blocks.1.res.1.conv2.bias`"),
        "{e}"
    );
    let mut m = base;
    m.insert(
        "decoder.mid.1.q.weight".into(),
        Tensor::zeros((32, 32), DType::F32, &Device::Cpu).unwrap(),
    );
    let e = try_load(&m);
    assert!(
        e.contains("`decoder.mid.1.q.weight` has shape [32, 32]"),
        "{e}"
    );
}
