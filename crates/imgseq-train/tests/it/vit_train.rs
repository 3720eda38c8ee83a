//! Training runs on a toy set: both engines start from the same weights, a run interrupted
//! and resumed equals an uninterrupted one bit for bit (EMA included), the EMA weights are
//! what is evaluated and saved, and a run started on one engine resumes on the other.

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use imgseq_train::vit::{
    evaluate, init_flat, init_weights, train_with, Engine, TrainConfig, OPTIMIZER_FILE, RAW_PREFIX,
};
use imgseq_vit::checkpoint::{load_classifier, load_tensors};
use imgseq_vit::data::{Augment, ImageSet, Normalize};
use imgseq_vit::fused::ParamLayout;
use imgseq_vit::{ViTConfig, ViTForImageClassification};
use std::collections::HashMap;
use std::path::Path;

/// 1×8×8 images in 2×2 patches of 4 (5 tokens), width 8, 2 heads, 2 layers.
fn tiny_cfg() -> ViTConfig {
    let mut c = ViTConfig::seed(1, &["dark", "bright"]);
    c.image_size = 8;
    c.patch_size = 4;
    c.hidden_size = 8;
    c.num_attention_heads = 2;
    c.intermediate_size = 12;
    c.num_hidden_layers = 2;
    c
}

/// `n` images: class 0 dark, class 1 bright, with a little pattern.
fn toy_set(n: usize, salt: usize) -> ImageSet {
    let mut bytes = Vec::new();
    let mut labels = Vec::new();
    for i in 0..n {
        let c = (i + salt) % 2;
        for p in 0..64 {
            let base = if c == 1 { 170 } else { 30 };
            bytes.push((base + (p * 7 + i * 13 + salt) % 60) as u8);
        }
        labels.push(c as u16);
    }
    ImageSet::new(
        bytes,
        labels,
        (1, 8, 8),
        vec!["dark".into(), "bright".into()],
    )
    .unwrap()
}

/// A recipe whose learning rate does not depend on the number of epochs (min_lr = lr after
/// the warm-up), so a 1-epoch run resumed to 3 epochs follows the 3-epoch run exactly.
fn recipe(epochs: usize, ema: f64) -> TrainConfig {
    TrainConfig {
        dataset: "toy".into(),
        input_size: Some(8),
        epochs,
        batch_size: 8,
        lr: 5e-3,
        min_lr: 5e-3,
        weight_decay: 0.05,
        warmup_epochs: 0.5,
        label_smoothing: 0.1,
        seed: 3,
        ema,
        soft_labels: None,
        distill: 0.5,
        augment: Augment {
            shift: 1,
            hflip: true,
            erase_prob: 0.25,
        },
        normalize: Normalize {
            image_mean: vec![0.4],
            image_std: vec![0.3],
        },
    }
}

fn tensors(path: &Path) -> HashMap<String, Vec<f32>> {
    load_tensors(path, &Device::Cpu)
        .unwrap()
        .into_iter()
        .map(|(k, t)| {
            let v = t
                .flatten_all()
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            (k, v)
        })
        .collect()
}

#[test]
fn engines_start_from_the_same_initial_weights() {
    let cfg = ViTConfig::fashion_mnist();
    let layout = ParamLayout::new(&cfg);
    let flat = init_flat(&layout, 0.02, 5);
    let vars = VarMap::new();
    ViTForImageClassification::new(
        &cfg,
        VarBuilder::from_varmap(&vars, DType::F32, &Device::Cpu),
    )
    .unwrap();
    init_weights(&vars, 0.02, 5).unwrap();
    let data = vars.data().lock().unwrap();
    for s in &layout.specs {
        let v = data[&s.name]
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(&flat[s.range()], v.as_slice(), "{}", s.name);
    }
}

/// 1 epoch, then resumed to 3, gives the same files as 3 epochs in one go, bit for bit.
fn check_resume_is_exact(engine: Engine, ema: f64) {
    let cfg = tiny_cfg();
    let (tr, te) = (toy_set(40, 0), toy_set(12, 1));
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let sa = train_with(&cfg, &recipe(3, ema), &tr, &te, &a, false, engine).unwrap();
    train_with(&cfg, &recipe(1, ema), &tr, &te, &b, false, engine).unwrap();
    let sb = train_with(&cfg, &recipe(3, ema), &tr, &te, &b, true, engine).unwrap();
    let what = format!("{engine:?}, ema {ema}");
    assert_eq!((sa.epochs_done, sa.steps_done), (3, 15), "{what}");
    assert_eq!((sb.epochs_done, sb.steps_done), (3, 15), "{what}");
    assert_eq!(sa.train_loss, sb.train_loss, "{what}");
    assert_eq!(sa.test_accuracy, sb.test_accuracy, "{what}");
    for f in ["model.safetensors", OPTIMIZER_FILE] {
        let (ta, tb) = (tensors(&a.join(f)), tensors(&b.join(f)));
        assert_eq!(ta.len(), tb.len(), "{what}: {f}");
        for (k, v) in &ta {
            assert!(v == &tb[k], "{what}: {f}: `{k}` differs after resuming");
        }
    }
}

#[test]
fn fused_run_with_ema_resumed_equals_uninterrupted() {
    check_resume_is_exact(Engine::Fused, 0.9);
}

#[test]
fn fused_run_resumed_equals_uninterrupted() {
    check_resume_is_exact(Engine::Fused, 0.0);
}

#[test]
fn autograd_run_with_ema_resumed_equals_uninterrupted() {
    check_resume_is_exact(Engine::Autograd, 0.9);
}

/// With an EMA, model.safetensors holds the EMA weights — what the epoch's test accuracy was
/// measured on — and optimizer.safetensors the raw weights; without, no raw copy is kept.
#[test]
fn ema_weights_are_evaluated_and_saved_and_raw_weights_kept() {
    let cfg = tiny_cfg();
    let (tr, te) = (toy_set(40, 0), toy_set(40, 1));
    let dir = tempfile::tempdir().unwrap();
    for (engine, ema) in [
        (Engine::Fused, 0.8),
        (Engine::Autograd, 0.8),
        (Engine::Fused, 0.0),
    ] {
        let out = dir.path().join(format!("{engine:?}-{ema}"));
        let st = train_with(&cfg, &recipe(2, ema), &tr, &te, &out, false, engine).unwrap();
        let opt = tensors(&out.join(OPTIMIZER_FILE));
        let model = tensors(&out.join("model.safetensors"));
        let raw: Vec<&String> = opt.keys().filter(|k| k.starts_with(RAW_PREFIX)).collect();
        if ema == 0.0 {
            assert!(
                raw.is_empty(),
                "{engine:?}: raw weights saved without an EMA"
            );
        } else {
            assert_eq!(raw.len(), model.len(), "{engine:?}");
            let moved = model
                .iter()
                .filter(|(k, v)| **v != opt[&format!("{RAW_PREFIX}{k}")])
                .count();
            assert!(
                moved > model.len() / 2,
                "{engine:?}: EMA equals the raw weights"
            );
        }
        let (_, m) = load_classifier(&out, &Device::Cpu).unwrap();
        let r = evaluate(&m, &cfg, &te, &recipe(2, ema).normalize, 16, false).unwrap();
        assert_eq!(
            Some(&r.accuracy),
            st.test_accuracy.last(),
            "{engine:?}, ema {ema}: the saved model is not what was evaluated"
        );
    }
}

/// The run files are the same for both engines: a fused run resumes on autograd.
#[test]
fn a_fused_run_resumes_on_the_autograd_engine() {
    let cfg = tiny_cfg();
    let (tr, te) = (toy_set(40, 0), toy_set(12, 1));
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let sa = train_with(&cfg, &recipe(2, 0.5), &tr, &te, &a, false, Engine::Fused).unwrap();
    train_with(&cfg, &recipe(1, 0.5), &tr, &te, &b, false, Engine::Fused).unwrap();
    let sb = train_with(&cfg, &recipe(2, 0.5), &tr, &te, &b, true, Engine::Autograd).unwrap();
    assert_eq!(sb.epochs_done, 2);
    assert_eq!(sa.train_loss[0], sb.train_loss[0]);
    let (la, lb) = (sa.train_loss[1], sb.train_loss[1]);
    assert!(
        (la - lb).abs() < 1e-3 * la,
        "epoch 2 loss {la} (fused) vs {lb} (resumed on autograd)"
    );
}

#[test]
fn ema_outside_0_to_1_is_refused_naming_the_setting() {
    let e = recipe(1, 1.0).validate().unwrap_err().to_string();
    assert_eq!(e, "ema 1 must be in [0, 1) (0 = off)");
    assert!(recipe(1, -0.1).validate().is_err());
    // A training.json written before --ema existed reads as EMA off.
    let mut v = serde_json::to_value(recipe(1, 0.0)).unwrap();
    v.as_object_mut().unwrap().remove("ema");
    let tc: TrainConfig = serde_json::from_value(v).unwrap();
    assert_eq!(tc.ema, 0.0);
}

/// Distillation: with soft labels equal to the one-hot labels the run is the plain run (the
/// target is the same), on both engines; a teacher that disagrees changes the run, and both
/// engines agree on it; soft labels that do not fit the training set are refused by name.
#[test]
fn soft_labels_mix_into_the_targets_on_both_engines() {
    let cfg = tiny_cfg();
    let (tr, te) = (toy_set(40, 0), toy_set(12, 1));
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, rows: &dyn Fn(usize) -> [f32; 2]| {
        let p = dir.path().join(name);
        let v: Vec<f32> = (0..tr.n).flat_map(rows).collect();
        imgseq_core::npy::write_npy_f32(&p, &[tr.n, 2], &v).unwrap();
        p.display().to_string()
    };
    let onehot = write("onehot.npy", &|i| {
        if tr.labels[i] == 0 {
            [1.0, 0.0]
        } else {
            [0.0, 1.0]
        }
    });
    let unsure = write("unsure.npy", &|_| [0.5, 0.5]);
    let runs = std::cell::Cell::new(0);
    let run = |engine: Engine, soft: Option<&String>| {
        let mut tc = recipe(1, 0.0);
        tc.soft_labels = soft.cloned();
        runs.set(runs.get() + 1);
        let out = dir.path().join(format!("run-{}", runs.get()));
        train_with(&cfg, &tc, &tr, &te, &out, false, engine)
            .unwrap()
            .train_loss[0]
    };
    for engine in [Engine::Fused, Engine::Autograd] {
        let (plain, same) = (run(engine, None), run(engine, Some(&onehot)));
        assert!(
            (plain - same).abs() < 1e-5 * plain,
            "{engine:?}: {plain} vs {same}"
        );
    }
    let (f, a) = (
        run(Engine::Fused, Some(&unsure)),
        run(Engine::Autograd, Some(&unsure)),
    );
    assert!((f - a).abs() < 1e-4 * f, "fused {f} vs autograd {a}");
    assert!(
        (f - run(Engine::Fused, None)).abs() > 1e-3,
        "the teacher changed nothing"
    );
    // Shape and content are checked before training.
    let bad = dir.path().join("bad.npy");
    imgseq_core::npy::write_npy_f32(&bad, &[tr.n - 1, 2], &vec![0.5; (tr.n - 1) * 2]).unwrap();
    let mut tc = recipe(1, 0.0);
    tc.soft_labels = Some(bad.display().to_string());
    let e = train_with(
        &cfg,
        &tc,
        &tr,
        &te,
        &dir.path().join("x"),
        false,
        Engine::Fused,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("bad.npy") && e.contains("soft labels of shape [39, 2]"),
        "{e}"
    );
    tc.distill = 1.5;
    assert!(tc.validate().unwrap_err().to_string().contains("distill"));
}
