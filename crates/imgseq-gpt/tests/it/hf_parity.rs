//! Parity with HF transformers' GPT2LMHeadModel on random-weight fixtures
//! (scripts/make_gpt_fixtures.py): logits, the loss and its gradients, and the saved layout.

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use imgseq_core::weights::load_tensors;
use imgseq_gpt::checkpoint::{self, load, CONFIG_FILE, WEIGHTS_FILE};
use imgseq_gpt::{Gpt2LMHeadModel, GptConfig};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn io(name: &str) -> HashMap<String, Tensor> {
    load_tensors(
        fixtures().join(format!("{name}_io.safetensors")),
        &Device::Cpu,
    )
    .unwrap()
}

fn rel_err(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.dims(), b.dims());
    let a = a
        .to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap();
    let b = b
        .to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap();
    let num = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    let den = b.iter().map(|y| y.abs()).fold(0.0, f64::max).max(1e-30);
    num / den
}

fn ids(io: &HashMap<String, Tensor>) -> Tensor {
    io["input_ids"].to_dtype(DType::U32).unwrap()
}

fn check_logits(name: &str) {
    let (_, model) = load(&fixtures().join(name), &Device::Cpu).unwrap();
    let io = io(name);
    let logits = model.forward(&ids(&io), None).unwrap();
    let e = rel_err(&logits, &io["logits"]);
    assert!(e <= 1e-4, "{name}: logits relative error {e:e}");
}

#[test]
fn logits_match_hf_gpt2_exact_gelu() {
    check_logits("gelu");
}

#[test]
fn logits_match_hf_gpt2_gelu_new_and_plain_config() {
    check_logits("gelu_new");
    let cfg = GptConfig::load(fixtures().join("gelu_new").join(CONFIG_FILE)).unwrap();
    assert_eq!(cfg.n_inner(), 48);
    assert!(
        cfg.layout().is_err(),
        "a plain GPT-2 config is not an image model"
    );
}

#[test]
fn imgseq_fields_survive_hf_save_pretrained() {
    let cfg = GptConfig::load(fixtures().join("gelu").join(CONFIG_FILE)).unwrap();
    let l = cfg.layout().unwrap();
    assert_eq!(l.n_codes, 32);
    assert_eq!(l.class_names, ["tee", "trouser", "bag", "boot"]);
    assert_eq!((l.h, l.w), (4, 4));
    assert_eq!(l.uncond_token(), 36);
    assert_eq!(cfg.vocab_size, l.vocab_size());
}

/// Loss and gradients through our kernels' backward (causal attention, layer norm, GELU,
/// linear) match PyTorch autograd.
#[test]
fn loss_and_gradients_match_torch_autograd() {
    let dir = fixtures().join("gelu");
    let cfg = GptConfig::load(dir.join(CONFIG_FILE)).unwrap();
    let saved = load_tensors(dir.join(WEIGHTS_FILE), &Device::Cpu).unwrap();
    let vars = VarMap::new();
    let model = Gpt2LMHeadModel::new(
        &cfg,
        VarBuilder::from_varmap(&vars, DType::F32, &Device::Cpu),
    )
    .unwrap();
    let data = vars.data().lock().unwrap();
    for (k, v) in data.iter() {
        v.set(&saved[k]).unwrap();
    }
    let named: HashMap<String, Var> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    drop(data);
    let io = io("gelu");
    let ids = ids(&io);
    let (b, t) = ids.dims2().unwrap();
    let x = ids.narrow(1, 0, t - 1).unwrap();
    let y = ids.narrow(1, 1, t - 1).unwrap();
    assert_eq!(b, 3);
    let loss = model.loss(&x, &y, 32).unwrap();
    let want = io["loss"].to_vec1::<f32>().unwrap()[0];
    let got = loss.to_scalar::<f32>().unwrap();
    assert!(
        (got - want).abs() <= 1e-5 * want.abs().max(1.0),
        "loss {got} vs {want}"
    );
    let grads = loss.backward().unwrap();
    let mut checked = 0;
    for (k, g_ref) in io
        .iter()
        .filter_map(|(k, v)| k.strip_prefix("grad.").map(|p| (p, v)))
    {
        let g = grads.get(named[k].as_tensor()).unwrap();
        let e = rel_err(g, g_ref);
        assert!(e <= 1e-4, "grad of {k}: relative error {e:e}");
        checked += 1;
    }
    assert_eq!(checked, 7);
}

/// What we save is exactly what GPT2LMHeadModel expects: its parameter names and shapes
/// (HF's own save of the same architecture), the tied head left out, and it loads back.
#[test]
fn saved_folder_has_exactly_hf_keys_and_shapes() {
    let hf = load_tensors(fixtures().join("gelu").join(WEIGHTS_FILE), &Device::Cpu).unwrap();
    let cfg = GptConfig::load(fixtures().join("gelu").join(CONFIG_FILE)).unwrap();
    let vars = VarMap::new();
    Gpt2LMHeadModel::new(
        &cfg,
        VarBuilder::from_varmap(&vars, DType::F32, &Device::Cpu),
    )
    .unwrap();
    let ours = checkpoint::var_tensors(&vars);
    let shapes = |m: &HashMap<String, Tensor>| -> Vec<(String, Vec<usize>)> {
        let mut v: Vec<_> = m
            .iter()
            .map(|(k, t)| (k.clone(), t.dims().to_vec()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(shapes(&ours), shapes(&hf));
    assert!(!ours.contains_key("lm_head.weight"));
    assert!(ours.contains_key("transformer.h.1.attn.c_attn.weight"));
    assert_eq!(
        ours["transformer.h.0.attn.c_attn.weight"].dims(),
        [32, 96],
        "Conv1D is (in, out)"
    );
    let d = tempfile::tempdir().unwrap();
    checkpoint::save(d.path(), &cfg, &ours).unwrap();
    let (cfg2, _) = load(d.path(), &Device::Cpu).unwrap();
    assert_eq!(cfg2, cfg);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join(CONFIG_FILE)).unwrap())
            .unwrap();
    assert_eq!(v["model_type"], "gpt2");
    assert_eq!(v["architectures"][0], "GPT2LMHeadModel");
    assert_eq!(v["activation_function"], "gelu");
    assert_eq!(v["imgseq_n_codes"], 32);
}

#[test]
fn bad_weight_files_are_one_line_errors() {
    let src = fixtures().join("gelu");
    let cfg = GptConfig::load(src.join(CONFIG_FILE)).unwrap();
    let mut t = load_tensors(src.join(WEIGHTS_FILE), &Device::Cpu).unwrap();
    let d = tempfile::tempdir().unwrap();
    // A missing tensor.
    let ln = t.remove("transformer.ln_f.bias").unwrap();
    checkpoint::save(d.path(), &cfg, &t).unwrap();
    let e = load(d.path(), &Device::Cpu).unwrap_err().to_string();
    assert!(e.contains("missing tensor `transformer.ln_f.bias`"), "{e}");
    assert_eq!(e.lines().count(), 1);
    // An extra one.
    t.insert("transformer.ln_f.bias".into(), ln);
    t.insert(
        "transformer.extra".into(),
        Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap(),
    );
    checkpoint::save(d.path(), &cfg, &t).unwrap();
    let e = load(d.path(), &Device::Cpu).unwrap_err().to_string();
    assert!(
        e.contains("unexpected tensor(s) not used by the model: transformer.extra"),
        "{e}"
    );
    // A config whose vocabulary does not fit the weights.
    t.remove("transformer.extra");
    let mut bad = cfg.clone();
    bad.vocab_size = 38;
    bad.imgseq_n_codes = Some(33);
    checkpoint::save(d.path(), &bad, &t).unwrap();
    let e = load(d.path(), &Device::Cpu).unwrap_err().to_string();
    assert!(
        e.contains("transformer.wte.weight") && e.contains("[37, 32]"),
        "{e}"
    );
    // Missing folder.
    let e = load(&d.path().join("nope"), &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no such file or folder"), "{e}");
}

/// Many rows (a training-size batch) go through the `ops::linear` path of `Conv1D`, few rows
/// (generation) through a direct multiply by the stored (in, out) weight: both match HF.
#[test]
fn logits_match_hf_on_a_training_size_batch() {
    let (_, model) = load(&fixtures().join("gelu"), &Device::Cpu).unwrap();
    let io = io("gelu");
    let ids = Tensor::cat(&vec![ids(&io); 25], 0).unwrap(); // (75, 17): 1275 rows
    let want = Tensor::cat(&vec![io["logits"].clone(); 25], 0).unwrap();
    let e = rel_err(&model.forward(&ids, None).unwrap(), &want);
    assert!(e <= 1e-4, "logits relative error {e:e}");
}
