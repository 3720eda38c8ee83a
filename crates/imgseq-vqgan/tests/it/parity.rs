//! Parity with the independent PyTorch re-implementation of taming's VQGAN
//! (`scripts/make_vqgan_fixtures.py`), and strict / safe loading. No Python needed.

use crate::common::{as_i64, rel_diff};
use candle_core::{DType, Device, Tensor};
use imgseq_core::AuditedWeights;
use imgseq_torch::{self as ckpt, StorageDType};
use imgseq_vqgan::{load, load_model, VqConfig, VqModel};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/vqgan")
        .join(name)
}

fn io() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fx("tiny_io.safetensors"), &Device::Cpu).unwrap()
}

fn model() -> VqModel {
    load_model(
        fx("tiny.safetensors"),
        Some(&fx("tiny_config.json")),
        &Device::Cpu,
    )
    .unwrap()
}

fn x() -> Tensor {
    io()["x"].to_dtype(DType::F32).unwrap()
}

#[test]
fn encoder_latents_match_reference() {
    let z = model().encode_latents(&x()).unwrap();
    let r = rel_diff(&z, &io()["z"]);
    assert!(r < 1e-4, "z relative diff {r}");
}

#[test]
fn indices_match_exactly_and_quantized_is_the_codebook() {
    let m = model();
    let io = io();
    let q = m.encode(&x()).unwrap();
    assert_eq!(q.indices.dims(), &[2, 12, 12]);
    assert_eq!(as_i64(&q.indices), as_i64(&io["indices"]));
    let distinct: std::collections::BTreeSet<i64> = as_i64(&q.indices).into_iter().collect();
    assert!(distinct.len() > 8, "indices barely vary: {distinct:?}");
    // The straight-through output equals the codebook rows (up to z + (zq − z) rounding).
    let looked_up = m.quantizer().lookup(&io["indices"]).unwrap();
    assert!(rel_diff(&q.quantized, &looked_up) < 1e-6);
    let loss = q.loss.to_scalar::<f32>().unwrap();
    let want = io["loss"].to_vec1::<f32>().unwrap()[0];
    assert!((loss - want).abs() / want < 1e-4, "loss {loss} vs {want}");
}

#[test]
fn reconstruction_matches_reference() {
    let m = model();
    let io = io();
    let rec = m.decode_indices(&io["indices"]).unwrap();
    let r = rel_diff(&rec, &io["reconstruction"]);
    assert!(r < 1e-4, "reconstruction relative diff {r}");
    let q = m.encode(&x()).unwrap();
    let rec2 = m.decode(&q.quantized).unwrap();
    assert!(rel_diff(&rec2, &io["reconstruction"]) < 1e-4);
}

#[test]
fn batch_of_two_equals_two_singles() {
    let m = model();
    let x = x();
    let both = m.encode(&x).unwrap().indices;
    for i in 0..2 {
        let one = m.encode(&x.narrow(0, i, 1).unwrap()).unwrap().indices;
        assert_eq!(as_i64(&one), as_i64(&both.narrow(0, i, 1).unwrap()));
    }
}

#[test]
fn taming_yaml_equals_json_config() {
    let y = VqConfig::from_file(fx("tiny_model.yaml")).unwrap();
    let j = VqConfig::from_file(fx("tiny_config.json")).unwrap();
    assert_eq!(y, j);
}

#[test]
fn ckpt_tensors_equal_safetensors() {
    let sd = ckpt::read_state_dict(fx("tiny.ckpt"), &Device::Cpu).unwrap();
    let st = candle_core::safetensors::load(fx("tiny.safetensors"), &Device::Cpu).unwrap();
    let sd: HashMap<String, ckpt::CkptTensor> = sd.into_iter().collect();
    for (k, v) in &st {
        let c = sd.get(k).unwrap_or_else(|| panic!("{k} missing from ckpt"));
        assert_eq!(c.dtype, StorageDType::F16, "{k}");
        assert_eq!(c.tensor.dtype(), DType::F32);
        let a = c.tensor.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let b = v
            .to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(c.tensor.dims(), v.dims(), "{k}");
        assert_eq!(a, b, "{k}");
    }
    assert_eq!(sd.len(), st.len() + 3, "model tensors + 3 loss.* tensors");
    // A strided view sharing its storage, and a bfloat16 tensor.
    let io = io();
    let view = &sd["loss.discriminator.view"];
    assert_eq!(view.tensor.dims(), &[3, 3]);
    assert_eq!(
        view.tensor.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        io["ckpt.loss.discriminator.view"]
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    );
    assert_eq!(sd["loss.logvar"].dtype, StorageDType::BF16);
    assert_eq!(
        sd["loss.logvar"].tensor.to_vec1::<f32>().unwrap(),
        vec![0.5, -1.25]
    );
}

#[test]
fn model_from_ckpt_and_yaml_gives_same_tokens() {
    let m = load_model(fx("tiny.ckpt"), Some(&fx("tiny_model.yaml")), &Device::Cpu).unwrap();
    let q = m.encode(&x()).unwrap();
    assert_eq!(as_i64(&q.indices), as_i64(&io()["indices"]));
}

#[test]
fn lightning_extras_are_read_without_executing() {
    let c = ckpt::Checkpoint::open(fx("tiny.ckpt")).unwrap();
    let keys = c.top_level_keys();
    for k in [
        "hyper_parameters",
        "epoch",
        "global_step",
        "callbacks",
        "optimizer_states",
        "state_dict",
    ] {
        assert!(keys.contains(&k.to_string()), "{keys:?}");
    }
}

fn tensors() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fx("tiny.safetensors"), &Device::Cpu).unwrap()
}

fn build_from(map: HashMap<String, Tensor>) -> String {
    let cfg = VqConfig::from_file(fx("tiny_config.json")).unwrap();
    let w = AuditedWeights::new("w.safetensors", map);
    match load::build(&cfg, &w, &Device::Cpu) {
        Ok(_) => panic!("loading should fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn missing_tensor_is_an_error() {
    let mut m = tensors();
    m.remove("decoder.up.1.attn.0.proj_out.weight");
    let e = build_from(m);
    assert_eq!(
        e,
        "w.safetensors: missing tensor `decoder.up.1.attn.0.proj_out.weight`"
    );
}

#[test]
fn wrong_shape_is_an_error() {
    let mut m = tensors();
    m.insert(
        "quantize.embedding.weight".into(),
        Tensor::zeros((16, 8), DType::F32, &Device::Cpu).unwrap(),
    );
    let e = build_from(m);
    assert!(
        e.starts_with("w.safetensors: ") && e.contains("quantize.embedding.weight"),
        "{e}"
    );
    assert!(e.contains("[16, 8]") && e.contains("[32, 8]"), "{e}");
    assert_eq!(e.lines().count(), 1);
}

#[test]
fn unexpected_tensor_is_an_error_but_loss_is_ignored() {
    let mut m = tensors();
    m.insert(
        "encoder.down.0.block.0.temb_proj.weight".into(),
        Tensor::zeros(1, DType::F32, &Device::Cpu).unwrap(),
    );
    let e = build_from(m);
    assert!(e.contains("1 unexpected") && e.contains("temb_proj"), "{e}");
    let mut m = tensors();
    m.insert(
        "loss.perceptual_loss.net.w".into(),
        Tensor::zeros(1, DType::F32, &Device::Cpu).unwrap(),
    );
    let cfg = VqConfig::from_file(fx("tiny_config.json")).unwrap();
    load::build(&cfg, &AuditedWeights::new("w.safetensors", m), &Device::Cpu).unwrap();
}

#[test]
fn out_of_range_index_is_an_error() {
    let m = model();
    let idx = Tensor::from_vec(vec![0i64, 5, 32, 1], (1, 2, 2), &Device::Cpu).unwrap();
    let e = m.decode_indices(&idx).unwrap_err().to_string();
    assert!(e.contains("32") && e.contains("n_embed = 32"), "{e}");
    let idx = Tensor::from_vec(vec![0i64, -1, 3, 1], (1, 2, 2), &Device::Cpu).unwrap();
    assert!(m.decode_indices(&idx).is_err());
}

#[test]
fn malicious_pickle_is_refused() {
    let e = match ckpt::read_state_dict(fx("evil.ckpt"), &Device::Cpu) {
        Ok(_) => panic!("evil.ckpt was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("evil.ckpt"), "{e}");
    assert!(e.contains("pickle references `os.system`"), "{e}");
    let e = load_model(fx("evil.ckpt"), Some(&fx("tiny_config.json")), &Device::Cpu).unwrap_err();
    assert!(e.to_string().contains("os.system"));
}

#[test]
fn truncated_checkpoint_is_a_one_line_error() {
    let bytes = std::fs::read(fx("tiny.ckpt")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for cut in [bytes.len() / 2, bytes.len() - 30, 100] {
        let p = dir.path().join("cut.ckpt");
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let e = match ckpt::read_state_dict(&p, &Device::Cpu) {
            Ok(_) => panic!("truncated file accepted ({cut} bytes)"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("cut.ckpt"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

#[test]
fn missing_storage_is_an_error() {
    let e = match ckpt::read_state_dict(fx("missing_storage.ckpt"), &Device::Cpu) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("missing_storage.ckpt") && e.contains("data/1") && e.contains("missing"),
        "{e}"
    );
}

#[test]
fn inspect_lists_both_formats() {
    let a = load::inspect(fx("tiny.ckpt")).unwrap();
    let b = load::inspect(fx("tiny.safetensors")).unwrap();
    assert_eq!(a.tensors.len(), b.tensors.len() + 3);
    assert!(
        a.scalars.contains(&("epoch".to_string(), "3".to_string())),
        "{:?}",
        a.scalars
    );
    let emb = b
        .tensors
        .iter()
        .find(|t| t.name == "quantize.embedding.weight")
        .unwrap();
    assert_eq!(
        (emb.dtype.as_str(), emb.shape.as_slice()),
        ("float16", &[32usize, 8][..])
    );
    let lv = a.tensors.iter().find(|t| t.name == "loss.logvar").unwrap();
    assert_eq!(lv.dtype, "bfloat16");
}

#[test]
fn convert_drops_loss_and_roundtrips() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model.safetensors");
    let r = load::convert_checkpoint(
        &fx("tiny.ckpt"),
        Some(&fx("tiny_model.yaml")),
        &out,
        Default::default(),
    )
    .unwrap();
    assert_eq!(r.dropped, 3);
    assert_eq!(r.config_path, dir.path().join("config.json"));
    let conv = candle_core::safetensors::load(&out, &Device::Cpu).unwrap();
    let orig = tensors();
    assert_eq!(conv.len(), orig.len());
    for (k, v) in &orig {
        assert_eq!(conv[k].dtype(), DType::F16, "{k}");
        let a = conv[k]
            .to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let b = v
            .to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(a, b, "{k}");
    }
    let m = load_model(&out, None, &Device::Cpu).unwrap();
    assert_eq!(
        as_i64(&m.encode(&x()).unwrap().indices),
        as_i64(&io()["indices"])
    );
    // A config that does not fit: nothing is written.
    let out2 = dir.path().join("sub").join("bad.safetensors");
    std::fs::create_dir_all(out2.parent().unwrap()).unwrap();
    let bad = dir.path().join("bad.json");
    let mut cfg = VqConfig::from_file(fx("tiny_config.json")).unwrap();
    cfg.n_embed = 64;
    std::fs::write(&bad, cfg.to_json_string()).unwrap();
    assert!(
        load::convert_checkpoint(&fx("tiny.ckpt"), Some(&bad), &out2, Default::default()).is_err()
    );
    assert_eq!(
        std::fs::read_dir(out2.parent().unwrap()).unwrap().count(),
        0
    );
}

/// `weights convert --taming-yaml`: the model.yaml written beside reads back as the config.
#[test]
fn convert_writes_a_taming_model_yaml_that_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model.safetensors");
    let opts = load::ConvertOptions {
        taming_yaml: true,
        ..Default::default()
    };
    let r = load::convert_checkpoint(&fx("tiny.ckpt"), Some(&fx("tiny_model.yaml")), &out, opts)
        .unwrap();
    let yaml = r.yaml_path.expect("model.yaml written");
    assert_eq!(yaml, dir.path().join("model.yaml"));
    assert_eq!(
        VqConfig::from_taming_yaml_file(&yaml).unwrap(),
        VqConfig::from_file(&r.config_path).unwrap()
    );
}

/// The preset asks for exactly the tensors (names and shapes) of taming's
/// `vqgan_imagenet_f16_1024` state dict, as listed by the PyTorch re-implementation.
#[test]
fn preset_matches_taming_f16_1024_layout() {
    let text = std::fs::read_to_string(fx("f16_1024_keys.txt")).unwrap();
    let one = Tensor::zeros(1, DType::F32, &Device::Cpu).unwrap();
    let mut map = HashMap::new();
    let mut params = 0;
    for line in text.lines() {
        let (name, shape) = line.split_once(' ').unwrap();
        let shape: Vec<usize> = shape.split(',').map(|s| s.parse().unwrap()).collect();
        params += shape.iter().product::<usize>();
        // A broadcast view: no memory for the 72 M parameters.
        let t = one
            .reshape(vec![1; shape.len()])
            .unwrap()
            .broadcast_as(shape)
            .unwrap();
        map.insert(name.to_string(), t);
    }
    assert_eq!(map.len(), 343);
    assert_eq!(params, 72_141_699);
    for k in [
        "encoder.down.4.attn.1.q.weight",
        "encoder.down.2.block.0.nin_shortcut.weight",
        "decoder.up.4.attn.2.proj_out.bias",
        "decoder.up.1.block.0.nin_shortcut.weight",
        "decoder.up.4.upsample.conv.weight",
    ] {
        assert!(map.contains_key(k), "{k}");
    }
    let cfg = VqConfig::vqgan_imagenet_f16_1024();
    let w = AuditedWeights::new("f16_1024", map);
    let m = load::build(&cfg, &w, &Device::Cpu).unwrap();
    assert_eq!(m.config().downsample_factor(), 16);
}
