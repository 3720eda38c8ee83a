//! Training: learning on synthetic shards, exact resume, run-folder rules, bad inputs.

use crate::gpt_common::*;
use imgseq_gpt::checkpoint;
use imgseq_gpt::data;
use imgseq_train::gpt::{bits_per_token, train, EvalPoint, TrainConfig, EVAL_LOG, STATE_FILE};

fn recipe(steps: usize) -> TrainConfig {
    TrainConfig {
        tokens: vec![],
        val: vec![],
        steps,
        batch_size: 8,
        lr: 3e-3,
        min_lr: 1e-4,
        warmup_steps: 3,
        weight_decay: 0.1,
        grad_clip: 1.0,
        class_dropout: 0.2,
        seed: 7,
        eval_every: 4,
        checkpoint_every: 5,
        val_limit: 0,
    }
}

#[test]
fn shards_load_with_labels_names_and_unlabelled_samples() {
    let d = tempfile::tempdir().unwrap();
    write_shards(d.path(), 20, 3, 3, 4, 16, 5);
    let set = data::load(&[d.path().to_path_buf()]).unwrap();
    assert_eq!(set.len(), 20);
    assert_eq!((set.h, set.w), (3, 4));
    assert_eq!(set.n_codes, Some(16));
    assert_eq!(set.labels.iter().filter(|l| l.is_none()).count(), 4);
    assert_eq!(set.labels[0], Some(0));
    assert_eq!(set.labels[4], None);
    assert_eq!(set.n_classes(), 3);
    assert_eq!(set.class_names.get(&1).map(String::as_str), Some("boot"));
    let want: Vec<u32> = image_tokens(2, 5, 3, 4, 16)
        .iter()
        .map(|&t| t as u32)
        .collect();
    assert_eq!(set.image(5), want.as_slice());
}

#[test]
fn training_lowers_held_out_bits_per_token() {
    let d = tempfile::tempdir().unwrap();
    let (tr, va, run) = (
        d.path().join("tr"),
        d.path().join("va"),
        d.path().join("run"),
    );
    write_shards(&tr, 96, 2, 3, 4, 16, 0);
    write_shards(&va, 24, 1, 3, 4, 16, 0);
    let (tr, va) = (data::load(&[tr]).unwrap(), data::load(&[va]).unwrap());
    let cfg = tiny_config(3, 4, 16);
    let (_, model0) = {
        let mut tc = recipe(1);
        tc.lr = 1e-9;
        tc.min_lr = 0.0;
        let r0 = d.path().join("r0");
        train(&cfg, &tc, &tr, None, &r0, false, None).unwrap();
        checkpoint::load(&r0, &candle_core::Device::Cpu).unwrap()
    };
    let layout = cfg.layout().unwrap();
    let before = bits_per_token(&model0, &layout, &va, 7, false).unwrap();
    assert!(
        (before - 4.0).abs() < 0.3,
        "untrained ≈ log2(16) bits: {before}"
    );
    let state = train(&cfg, &recipe(60), &tr, Some(&va), &run, false, None).unwrap();
    assert_eq!(state.step, 60);
    let after = state.history.last().unwrap().val_bits_per_token.unwrap();
    assert!(after < 1.5, "held-out bits per token {before} → {after}");
    // The run folder is a model folder, and eval.jsonl has one line per evaluation.
    let (_, model) = checkpoint::load(&run, &candle_core::Device::Cpu).unwrap();
    let again = bits_per_token(&model, &layout, &va, 5, false).unwrap();
    assert!((again - after).abs() < 1e-4, "{again} vs {after}");
    let log = std::fs::read_to_string(run.join(EVAL_LOG)).unwrap();
    assert_eq!(log.lines().count(), 15);
}

/// A run stopped at step 7 and resumed to 13 ends with exactly the weights, optimizer state
/// and history of an uninterrupted 13-step run.
#[test]
fn resumed_run_matches_uninterrupted_run_exactly() {
    let d = tempfile::tempdir().unwrap();
    let tr = d.path().join("tr");
    write_shards(&tr, 40, 2, 3, 4, 16, 6);
    let set = data::load(&[tr]).unwrap();
    let cfg = tiny_config(3, 4, 16);
    let tc = recipe(13);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    let sa = train(&cfg, &tc, &set, Some(&set), &a, false, None).unwrap();
    let sb1 = train(&cfg, &tc, &set, Some(&set), &b, false, Some(7)).unwrap();
    assert_eq!(sb1.step, 7);
    let sb = train(&cfg, &tc, &set, Some(&set), &b, true, None).unwrap();
    assert_eq!(sb.step, 13);
    // Everything but the measured speed.
    let untimed = |h: &[EvalPoint]| -> Vec<EvalPoint> {
        h.iter()
            .map(|p| EvalPoint {
                tokens_per_s: 0.0,
                ..p.clone()
            })
            .collect()
    };
    assert_eq!(untimed(&sa.history), untimed(&sb.history));
    assert_eq!(sa.tokens_seen, sb.tokens_seen);
    for f in ["model.safetensors", "optimizer.safetensors"] {
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f} differs"
        );
    }
    // A finished run resumes to nothing; a new run refuses the folder.
    let again = train(&cfg, &tc, &set, None, &b, true, None).unwrap();
    assert_eq!(again.step, 13);
    let e = train(&cfg, &tc, &set, None, &b, false, None).unwrap_err();
    assert!(
        e.to_string().contains("already holds a training run"),
        "{e}"
    );
    assert!(b.join(STATE_FILE).is_file());
}

#[test]
fn mismatched_sets_and_bad_settings_are_one_line_errors() {
    let d = tempfile::tempdir().unwrap();
    let tr = d.path().join("tr");
    write_shards(&tr, 16, 1, 3, 4, 16, 0);
    let set = data::load(std::slice::from_ref(&tr)).unwrap();
    let run = d.path().join("run");
    // A model for a different codebook.
    let e = train(
        &tiny_config(3, 4, 32),
        &recipe(2),
        &set,
        None,
        &run,
        false,
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("16 codes but the model 32"), "{e}");
    // A different grid.
    let e = train(
        &tiny_config(4, 4, 16),
        &recipe(2),
        &set,
        None,
        &run,
        false,
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("3x4 but the model's are 4x4"), "{e}");
    let mut tc = recipe(2);
    tc.class_dropout = 1.5;
    let e = train(&tiny_config(3, 4, 16), &tc, &set, None, &run, false, None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "class_dropout 1.5 must be a probability in [0, 1]"
    );
    let mut tc = recipe(2);
    tc.batch_size = 17;
    let e = train(&tiny_config(3, 4, 16), &tc, &set, None, &run, false, None).unwrap_err();
    assert!(e.to_string().contains("fewer than one batch of 17"), "{e}");
    let mut drop = tiny_config(3, 4, 16);
    drop.attn_pdrop = 0.1;
    let e = train(&drop, &recipe(2), &set, None, &run, false, None).unwrap_err();
    assert!(e.to_string().contains("dropout"), "{e}");
    assert!(!run.exists(), "a failed start writes nothing");
    let e = train(
        &tiny_config(3, 4, 16),
        &recipe(2),
        &set,
        None,
        &run,
        true,
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("no run to resume"), "{e}");
    let e = data::load(&[d.path().join("missing")]).unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
    assert_eq!(e.to_string().lines().count(), 1);
}
