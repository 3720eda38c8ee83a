//! Parity with HF transformers' ViTForImageClassification (fixtures written by
//! `scripts/make_vit_fixtures.py`): weights load by their HF names, and embeddings, every
//! hidden state and the logits match within 1e-4 relative; the gradients of both training
//! engines (fused and candle autograd) match PyTorch autograd's within 1e-4.

use crate::common::{assert_grads_close, autograd_step, fixtures, rel_err, RefTargets};
use candle_core::{DType, Device, Tensor};
use imgseq_vit::checkpoint::{load_classifier, load_tensors};
use imgseq_vit::fused::{FusedViT, ParamLayout, Targets};

#[test]
fn hf_vit_hidden_states_and_logits_match() {
    let dev = Device::Cpu;
    let (cfg, model) = load_classifier(&fixtures().join("tiny"), &dev).unwrap();
    assert_eq!(cfg.num_labels(), 5);
    let io = load_tensors(fixtures().join("tiny_io.safetensors"), &dev).unwrap();
    let x = &io["pixel_values"];
    let out = model.vit.forward_all(x, false).unwrap();
    assert_eq!(out.hidden_states.len(), cfg.num_hidden_layers + 1);
    for (i, h) in out.hidden_states.iter().enumerate() {
        let e = rel_err(h, &io[&format!("hidden_states.{i}")]);
        assert!(e <= 1e-4, "hidden_states.{i}: rel err {e}");
    }
    let e = rel_err(&out.last_hidden_state, &io["last_hidden_state"]);
    assert!(e <= 1e-4, "last_hidden_state: rel err {e}");
    let logits = model.forward(x, false).unwrap();
    let e = rel_err(&logits, &io["logits"]);
    assert!(e <= 1e-4, "logits: rel err {e}");
}

#[test]
fn hf_interpolate_pos_encoding_48px_gives_145_tokens_and_matches() {
    let dev = Device::Cpu;
    let (_cfg, model) = load_classifier(&fixtures().join("tiny"), &dev).unwrap();
    let io = load_tensors(fixtures().join("tiny_io.safetensors"), &dev).unwrap();
    let x = &io["pixel_values_48"];
    let emb = model.vit.embeddings.forward(x, true).unwrap();
    assert_eq!(emb.dims(), &[1, 145, 32]);
    let e = rel_err(&emb, &io["embeddings_48"]);
    assert!(e <= 1e-4, "embeddings_48: rel err {e}");
    let logits = model.forward(x, true).unwrap();
    let e = rel_err(&logits, &io["logits_48"]);
    assert!(e <= 1e-4, "logits_48: rel err {e}");
}

#[test]
fn other_size_without_interpolation_is_an_error() {
    let dev = Device::Cpu;
    let (_cfg, model) = load_classifier(&fixtures().join("tiny"), &dev).unwrap();
    let x = Tensor::zeros((1, 3, 48, 48), candle_core::DType::F32, &dev).unwrap();
    let err = model.forward(&x, false).unwrap_err().to_string();
    assert!(err.contains("interpolation"), "{err}");
}

#[test]
fn weights_with_missing_key_name_the_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Device::Cpu;
    let mut t = load_tensors(fixtures().join("tiny/model.safetensors"), &dev).unwrap();
    t.remove("vit.layernorm.bias");
    imgseq_vit::checkpoint::save_tensors(dir.path().join("model.safetensors"), &t).unwrap();
    std::fs::copy(
        fixtures().join("tiny/config.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    let err = load_classifier(dir.path(), &dev).err().unwrap().to_string();
    assert!(
        err.contains("model.safetensors") && err.contains("vit.layernorm.bias"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
}

#[test]
fn config_and_weights_that_disagree_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Device::Cpu;
    std::fs::copy(
        fixtures().join("tiny/model.safetensors"),
        dir.path().join("model.safetensors"),
    )
    .unwrap();
    let mut cfg = imgseq_vit::ViTConfig::load(fixtures().join("tiny/config.json")).unwrap();
    cfg.hidden_size = 48;
    cfg.save(dir.path().join("config.json")).unwrap();
    let err = load_classifier(dir.path(), &dev).err().unwrap().to_string();
    assert!(
        err.contains("model.safetensors") && err.contains("shape"),
        "{err}"
    );
}

#[test]
fn unexpected_extra_tensor_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Device::Cpu;
    let mut t = load_tensors(fixtures().join("tiny/model.safetensors"), &dev).unwrap();
    t.insert(
        "vit.pooler.dense.weight".into(),
        Tensor::zeros((32, 32), candle_core::DType::F32, &dev).unwrap(),
    );
    imgseq_vit::checkpoint::save_tensors(dir.path().join("model.safetensors"), &t).unwrap();
    std::fs::copy(
        fixtures().join("tiny/config.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    let err = load_classifier(dir.path(), &dev).err().unwrap().to_string();
    assert!(err.contains("vit.pooler.dense.weight"), "{err}");
}

/// The whole backward pass (custom kernels' backwards included) against PyTorch autograd:
/// gradients of the mean cross-entropy w.r.t. every parameter.
#[test]
fn hf_vit_training_gradients_match_pytorch_autograd() {
    use candle_nn::{VarBuilder, VarMap};
    let dev = Device::Cpu;
    let cfg = imgseq_vit::ViTConfig::load(fixtures().join("tiny/config.json")).unwrap();
    let weights = load_tensors(fixtures().join("tiny/model.safetensors"), &dev).unwrap();
    let io = load_tensors(fixtures().join("tiny_io.safetensors"), &dev).unwrap();
    let vars = VarMap::new();
    let model = imgseq_vit::ViTForImageClassification::new(
        &cfg,
        VarBuilder::from_varmap(&vars, candle_core::DType::F32, &dev),
    )
    .unwrap();
    let data = vars.data().lock().unwrap().clone();
    assert_eq!(
        data.len(),
        weights.len(),
        "trainable variables vs checkpoint tensors"
    );
    for (name, var) in &data {
        var.set(&weights[name]).unwrap();
    }
    let labels = io["labels"].to_dtype(candle_core::DType::U32).unwrap();
    let logits = model.forward(&io["pixel_values"], false).unwrap();
    let loss = imgseq_vit::loss::cross_entropy_smoothed(&logits, &labels, 0.0).unwrap();
    let want_loss = io["loss"].to_vec1::<f32>().unwrap()[0];
    assert!((loss.to_scalar::<f32>().unwrap() - want_loss).abs() < 1e-5 * want_loss.abs().max(1.0));
    let grads = loss.backward().unwrap();
    let max_abs = |t: &Tensor| {
        t.abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    };
    let mut worst = (0f32, String::new());
    for (name, var) in &data {
        let g = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("no gradient for {name}"));
        let want = &io[&format!("grad.{name}")];
        if name.ends_with("attention.key.bias") {
            // Adding a constant to every key shifts all scores of a query equally: softmax is
            // invariant, so this gradient is exactly zero in theory (rounding noise in both).
            assert!(
                max_abs(want) < 1e-6 && max_abs(g) < 1e-5,
                "{name}: {} vs {}",
                max_abs(g),
                max_abs(want)
            );
            continue;
        }
        let e = rel_err(g, want);
        if e > worst.0 {
            worst = (e, name.clone());
        }
    }
    assert!(worst.0 <= 1e-4, "grad.{}: rel err {}", worst.1, worst.0);
}

#[test]
fn judge_cls_features_are_hf_last_hidden_state_token_0() {
    // The Fréchet-distance features are the CLS row of HF's `last_hidden_state`.
    let dev = Device::Cpu;
    let clf = imgseq_vit::inference::Classifier::load(&fixtures().join("tiny")).unwrap();
    let io = load_tensors(fixtures().join("tiny_io.safetensors"), &dev).unwrap();
    let x = &io["pixel_values"];
    let f = clf.cls_features(x).unwrap();
    let want = io["last_hidden_state"]
        .narrow(1, 0, 1)
        .unwrap()
        .squeeze(1)
        .unwrap();
    let e = rel_err(&f, &want);
    assert!(e <= 1e-4, "cls features: rel err {e}");
    // Another input size is refused, not interpolated.
    let small = x.narrow(2, 0, 4).unwrap().narrow(3, 0, 4).unwrap();
    assert!(clf.cls_features(&small).is_err());
}

#[test]
fn judge_reports_what_evaluate_and_cls_features_report() {
    use imgseq_vit::data::{make_batch, ImageSet};
    let clf = imgseq_vit::inference::Classifier::load(&fixtures().join("tiny")).unwrap();
    let c = clf.cfg.num_channels;
    let n = 37;
    let mut seed = 11u64;
    let bytes: Vec<u8> = (0..n * c * 32 * 32)
        .map(|_| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            (seed >> 56) as u8
        })
        .collect();
    let labels: Vec<u16> = (0..n as u16).map(|i| i % 5).collect();
    let names = (0..5).map(|i| format!("class_{i}")).collect();
    let set = ImageSet::new(bytes, labels, (c, 32, 32), names).unwrap();
    let (report, features) = clf.judge(&set, false).unwrap();
    let want = clf.evaluate(&set, false).unwrap();
    assert_eq!(report.confusion, want.confusion);
    assert_eq!(report.accuracy, want.accuracy);
    let idx: Vec<usize> = (0..n).collect();
    let (x, _) = make_batch(&set, &idx, &clf.normalize, None, &Device::Cpu).unwrap();
    let f = clf.cls_features(&x).unwrap();
    let got = Tensor::from_vec(features, f.dims(), &Device::Cpu).unwrap();
    assert!(rel_err(&got, &f) <= 1e-6);
}

/// The training loss — plain, with label smoothing 0.1 on hard labels, and with label
/// smoothing on soft targets — and every parameter gradient, of both engines, against
/// PyTorch's `cross_entropy(logits, target, label_smoothing=ε)` + autograd.
#[test]
fn both_engines_training_loss_and_gradients_match_pytorch() {
    let dev = Device::Cpu;
    let cfg = imgseq_vit::ViTConfig::load(fixtures().join("tiny/config.json")).unwrap();
    let layout = ParamLayout::new(&cfg);
    let weights = load_tensors(fixtures().join("tiny/model.safetensors"), &dev).unwrap();
    let params = layout.from_tensors(&weights, "").unwrap();
    let io = load_tensors(fixtures().join("tiny_io.safetensors"), &dev).unwrap();
    let flat = |key: &str| -> Vec<f32> {
        io[key]
            .flatten_all()
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let labels =
        |key: &str| -> Vec<u32> { io[key].to_dtype(DType::U32).unwrap().to_vec1().unwrap() };
    for (prefix, soft) in [("", false), ("ls.", false), ("soft.", true)] {
        let (x, y) = if prefix.is_empty() {
            (flat("pixel_values"), labels("labels"))
        } else {
            (flat("ls.pixel_values"), labels("ls.labels"))
        };
        let probs = flat("soft.targets");
        let eps = if prefix.is_empty() { 0.0 } else { 0.1 };
        let want_loss = flat(&format!("{prefix}loss"))[0] as f64;
        let want = layout.from_tensors(&io, &format!("{prefix}grad.")).unwrap();

        let mut net = FusedViT::new(&cfg).unwrap().with_shard_images(4);
        let mut g = vec![f32::NAN; layout.len()];
        let targets = if soft {
            Targets::Probs(&probs)
        } else {
            Targets::Labels(&y)
        };
        let loss = net
            .forward_backward(&params, &mut g, &x, targets, eps)
            .unwrap();
        let what = format!("fused vs PyTorch `{prefix}`");
        assert!(
            (loss - want_loss).abs() < 1e-5 * want_loss.max(1.0),
            "{what}: loss {loss} vs {want_loss}"
        );
        assert_grads_close(&layout, &g, &want, 1e-4, &what);

        let targets = if soft {
            RefTargets::Probs(&probs)
        } else {
            RefTargets::Labels(&y)
        };
        let (_, loss, g) = autograd_step(&cfg, &params, &x, targets, eps);
        let what = format!("autograd vs PyTorch `{prefix}`");
        assert!(
            (loss - want_loss).abs() < 1e-5 * want_loss.max(1.0),
            "{what}: loss {loss} vs {want_loss}"
        );
        assert_grads_close(&layout, &g, &want, 1e-4, &what);
    }
}
