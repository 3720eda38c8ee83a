//! A small CNN teacher whose soft labels a ViT distils into its CLS head (DeiT-style soft
//! distillation, no extra token).
//!
//! ViTs lack a CNN's locality prior and learn slowly from 60,000 small images; a CNN of the
//! same data reaches a strong accuracy in a few epochs. Its class probabilities on the training
//! images (`soft_labels.npy`, (n, classes) f32, at a temperature) carry more than the one-hot
//! label — which shirts look like T-shirts — and `vit train --soft-labels` (with `--distill`) mixes them into the
//! loss.
//!
//! The network: three stages of 3×3 convolutions with GroupNorm + SiLU (two convs, 2×2 average
//! pool; two convs, pool; one conv), global average pool, linear head. Inputs are the ViT's own:
//! the same canvas, channels and normalisation, so the teacher sees what the student sees.

use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::{Linear, Module, VarBuilder, VarMap};
use imgseq_core::npy::write_npy_f32;
use imgseq_core::optim::{warmup_cosine, AdamW};
use imgseq_core::progress::bar;
use imgseq_core::run::{sorted_vars, RunDir, RunLayout};
use imgseq_core::{Error, Result};
use imgseq_kernels::ops::{conv2d, group_norm, Padding};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

use imgseq_vit::data::{make_batch, Augment, ImageSet, Normalize};
use imgseq_vit::eval::EvalReport;
use imgseq_vit::loss::cross_entropy_smoothed;

/// The soft-label file a teacher run writes: (n_train, classes) f32 probabilities.
pub const SOFT_LABELS_FILE: &str = "soft_labels.npy";
/// The teacher's weights (written after every epoch, and at the end).
pub const TEACHER_WEIGHTS_FILE: &str = "teacher.safetensors";
/// AdamW's moments, for `--resume`.
pub const TEACHER_OPTIMIZER_FILE: &str = "teacher_optimizer.safetensors";
/// Epochs done and the history so far: written last in each checkpoint, so its presence
/// means a complete checkpoint.
pub const TEACHER_STATE_FILE: &str = "teacher_state.json";
/// The recipe and figures of a finished run.
pub const TEACHER_REPORT_FILE: &str = "teacher.json";
/// Every file a teacher run writes.
pub const TEACHER_RUN_FILES: [&str; 5] = [
    TEACHER_WEIGHTS_FILE,
    TEACHER_OPTIMIZER_FILE,
    TEACHER_STATE_FILE,
    SOFT_LABELS_FILE,
    TEACHER_REPORT_FILE,
];

/// A teacher's run folder: its files are prefixed, so they sit beside a ViT run's.
pub const TEACHER_RUN: RunLayout = RunLayout {
    files: &TEACHER_RUN_FILES,
    state: TEACHER_STATE_FILE,
    optimizer: TEACHER_OPTIMIZER_FILE,
    weights: TEACHER_WEIGHTS_FILE,
};

/// Shapes and recipe of a teacher (saved as `teacher.json` with its figures).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TeacherConfig {
    pub channels: usize,
    /// Widths of the three stages.
    pub widths: [usize; 3],
    pub num_labels: usize,
    pub epochs: usize,
    pub batch_size: usize,
    pub lr: f64,
    pub weight_decay: f64,
    pub label_smoothing: f64,
    /// Temperature of the soft labels written: probabilities of `logits / temperature`.
    pub temperature: f64,
    pub seed: u64,
    pub augment: Augment,
    #[serde(flatten)]
    pub normalize: Normalize,
}

/// One 3×3 convolution (padding 1) followed by GroupNorm + SiLU.
struct ConvNormAct {
    w: Tensor,
    b: Tensor,
    gn_w: Tensor,
    gn_b: Tensor,
    groups: usize,
}

impl ConvNormAct {
    fn new(cin: usize, cout: usize, vb: VarBuilder) -> candle_core::Result<Self> {
        let fan_in = (cin * 9) as f64;
        let bound = (6.0 / fan_in).sqrt(); // He-uniform for SiLU
        let w = vb.get_with_hints(
            (cout, cin, 3, 3),
            "conv.weight",
            candle_nn::Init::Uniform {
                lo: -bound,
                up: bound,
            },
        )?;
        let b = vb.get_with_hints(cout, "conv.bias", candle_nn::Init::Const(0.0))?;
        let gn_w = vb.get_with_hints(cout, "norm.weight", candle_nn::Init::Const(1.0))?;
        let gn_b = vb.get_with_hints(cout, "norm.bias", candle_nn::Init::Const(0.0))?;
        Ok(Self {
            w,
            b,
            gn_w,
            gn_b,
            groups: (cout / 8).clamp(1, 8),
        })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = conv2d(x, &self.w, Some(&self.b), 1, Padding::same(1))?;
        group_norm(&y, self.groups, &self.gn_w, &self.gn_b, 1e-5, true)
    }
}

/// The teacher network.
pub struct TeacherCnn {
    blocks: Vec<ConvNormAct>,
    head: Linear,
}

impl TeacherCnn {
    /// Names: `blocks.{i}.conv.*`, `blocks.{i}.norm.*`, `head.*`.
    pub fn new(cfg: &TeacherConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let [w1, w2, w3] = cfg.widths;
        let dims = [(cfg.channels, w1), (w1, w1), (w1, w2), (w2, w2), (w2, w3)];
        let blocks = dims
            .iter()
            .enumerate()
            .map(|(i, &(ci, co))| ConvNormAct::new(ci, co, vb.pp(format!("blocks.{i}"))))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let head = candle_nn::linear(w3, cfg.num_labels, vb.pp("head"))?;
        Ok(Self { blocks, head })
    }

    /// # Shapes
    /// x: (b, c, h, w) → logits (b, classes)
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let mut h = x.clone();
        for (i, blk) in self.blocks.iter().enumerate() {
            h = blk.forward(&h)?; // (b, w, h, w)
            if i == 1 || i == 3 {
                h = h.avg_pool2d(2)?; // halves the side
            }
        }
        let pooled = h.mean(D::Minus1)?.mean(D::Minus1)?; // (b, w3)
        self.head.forward(&pooled)
    }
}

fn tensor_err(e: candle_core::Error) -> Error {
    Error::Candle(e)
}

/// Accuracy and confusion of `model` on `set`.
pub fn evaluate_teacher(
    model: &TeacherCnn,
    set: &ImageSet,
    norm: &Normalize,
    num_labels: usize,
) -> Result<EvalReport> {
    let mut confusion = vec![vec![0usize; num_labels]; num_labels];
    let idx: Vec<usize> = (0..set.n).collect();
    for chunk in idx.chunks(500) {
        let (x, _) = make_batch(set, chunk, norm, None, &Device::Cpu)?;
        let pred = model
            .forward(&x)
            .and_then(|l| l.argmax(D::Minus1))
            .and_then(|p| p.to_vec1::<u32>())
            .map_err(tensor_err)?;
        for (&i, p) in chunk.iter().zip(pred) {
            confusion[set.labels[i] as usize][p as usize] += 1;
        }
    }
    Ok(EvalReport::from_confusion(confusion))
}

/// Class probabilities of `logits / temperature` for every image of `set`, in order.
///
/// # Shapes
/// → (set.n · classes) f32, row-major
pub fn soft_labels(
    model: &TeacherCnn,
    set: &ImageSet,
    norm: &Normalize,
    temperature: f64,
) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    let idx: Vec<usize> = (0..set.n).collect();
    for chunk in idx.chunks(500) {
        let (x, _) = make_batch(set, chunk, norm, None, &Device::Cpu)?;
        let p = model
            .forward(&x)
            .and_then(|l| l / temperature)
            .and_then(|l| candle_nn::ops::softmax(&l, D::Minus1))
            .and_then(|p| p.flatten_all()?.to_vec1::<f32>())
            .map_err(tensor_err)?;
        out.extend(p);
    }
    Ok(out)
}

/// What a teacher run reports (and writes as `teacher.json`).
#[derive(Debug, Clone, Serialize)]
pub struct TeacherReport {
    pub config: TeacherConfig,
    pub parameters: usize,
    /// Test accuracy after each epoch.
    pub test_accuracy: Vec<f64>,
    pub train_loss: Vec<f64>,
    /// Accuracy of the soft labels' argmax on the training images (unaugmented).
    pub train_accuracy: f64,
    pub seconds: f64,
}

/// A teacher run's checkpoint state (`teacher_state.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TeacherState {
    pub config: TeacherConfig,
    pub epochs_done: usize,
    pub test_accuracy: Vec<f64>,
    pub train_loss: Vec<f64>,
    /// Training seconds so far, across resumes.
    pub seconds: f64,
}

/// Trains a teacher on `train_set`, scores it on `test_set` after every epoch, and writes
/// `out/teacher.safetensors`, `out/soft_labels.npy` (the training images' probabilities, in
/// dataset order) and `out/teacher.json`. A checkpoint (weights, `teacher_optimizer.safetensors`,
/// `teacher_state.json`) is written after every epoch; `resume` continues an interrupted run
/// in `out`, which must have been started with the same `cfg` (same flags, same data): the
/// result is the uninterrupted run's. A new run refuses a folder holding one.
pub fn train_teacher(
    cfg: &TeacherConfig,
    train_set: &ImageSet,
    test_set: &ImageSet,
    out: &Path,
    progress: bool,
    resume: bool,
) -> Result<TeacherReport> {
    run_teacher(cfg, train_set, test_set, out, progress, resume, None)
}

/// [`train_teacher`], stopping after `stop_after` epochs in all when given (as an
/// interruption would, after that epoch's checkpoint): for tests of resuming.
fn run_teacher(
    cfg: &TeacherConfig,
    train_set: &ImageSet,
    test_set: &ImageSet,
    out: &Path,
    progress: bool,
    resume: bool,
    stop_after: Option<usize>,
) -> Result<TeacherReport> {
    check_inputs(cfg, train_set, test_set)?;
    let run = RunDir::with_layout(out, &TEACHER_RUN);
    run.check_start(resume)?;
    let dev = Device::Cpu;
    let vars = VarMap::new();
    let vb = VarBuilder::from_varmap(&vars, DType::F32, &dev);
    let model = TeacherCnn::new(cfg, vb).map_err(tensor_err)?;
    // Weight decay on matrices and kernels, not on biases and norms.
    let named: Vec<(String, Var, bool)> = sorted_vars(&vars)
        .into_iter()
        .map(|(k, var)| {
            let decays = var.as_tensor().rank() >= 2;
            (k, var, decays)
        })
        .collect();
    let parameters = named.iter().map(|v| v.1.as_tensor().elem_count()).sum();
    seeded_init(&named, cfg.seed)?;
    let mut opt = AdamW::new(named.clone(), cfg.lr, cfg.weight_decay)?;
    let total = cfg.epochs * train_set.n.div_ceil(cfg.batch_size);
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let mut state = TeacherState {
        config: cfg.clone(),
        epochs_done: 0,
        test_accuracy: vec![],
        train_loss: vec![],
        seconds: 0.0,
    };
    if resume {
        state = restore(out, cfg, &named, &mut opt)?;
        // The data order of the epochs done, drawn again: the next epoch's is the
        // uninterrupted run's.
        for _ in 0..state.epochs_done {
            let mut order: Vec<usize> = (0..train_set.n).collect();
            order.shuffle(&mut rng);
        }
    }
    // Said only once the run folder has been accepted (a refused folder is a one-line error).
    if progress {
        announce(cfg, train_set, test_set, out, resume, state.epochs_done);
    }
    let weights = || -> std::collections::HashMap<String, Tensor> {
        named
            .iter()
            .map(|(k, v, _)| (k.clone(), v.as_tensor().clone()))
            .collect()
    };
    let t0 = Instant::now();
    let seconds_before = state.seconds;
    for epoch in state.epochs_done..cfg.epochs {
        if stop_after.is_some_and(|n| epoch >= n) {
            return Err(Error::invalid(format!(
                "teacher: stopped after epoch {epoch} (test hook)"
            )));
        }
        let mut order: Vec<usize> = (0..train_set.n).collect();
        order.shuffle(&mut rng);
        let ctx = EpochCtx {
            cfg,
            model: &model,
            train_set,
            dev: &dev,
            progress,
        };
        let loss_sum = train_epoch(&ctx, &mut opt, &order, epoch, total)?;
        let acc = evaluate_teacher(&model, test_set, &cfg.normalize, cfg.num_labels)?.accuracy;
        state.train_loss.push(loss_sum / train_set.n as f64);
        state.test_accuracy.push(acc);
        state.epochs_done = epoch + 1;
        state.seconds = seconds_before + t0.elapsed().as_secs_f64();
        eprintln!(
            "teacher epoch {:>3}/{}: train loss {:.4}, test accuracy {:.2}%, {:.0} s",
            epoch + 1,
            cfg.epochs,
            loss_sum / train_set.n as f64,
            100.0 * acc,
            state.seconds
        );
        // Checkpoint, the state last.
        run.create()?;
        run.write_weights(&weights())?;
        run.write_optimizer(&opt.state()?)?;
        run.write_state(&state)?;
    }
    finish(cfg, &model, train_set, out, &state, parameters)
}

/// Refuses empty sets and non-positive epochs, batch size or temperature.
fn check_inputs(cfg: &TeacherConfig, train_set: &ImageSet, test_set: &ImageSet) -> Result<()> {
    if train_set.n == 0 || test_set.n == 0 {
        return Err(Error::invalid("the teacher needs training and test images"));
    }
    if cfg.epochs == 0 || cfg.batch_size == 0 || cfg.temperature <= 0.0 {
        return Err(Error::invalid(
            "teacher: epochs, batch size and temperature must be positive",
        ));
    }
    Ok(())
}

/// Says what the run is about to do (once the run folder has been accepted).
fn announce(
    cfg: &TeacherConfig,
    train_set: &ImageSet,
    test_set: &ImageSet,
    out: &Path,
    resume: bool,
    epochs_done: usize,
) {
    if resume {
        eprintln!(
            "resuming the teacher in {} after epoch {}/{}",
            out.display(),
            epochs_done,
            cfg.epochs
        );
    } else {
        eprintln!(
            "training a CNN teacher (widths {:?}) on {} images ({} test), {} epochs, into {}",
            cfg.widths,
            train_set.n,
            test_set.n,
            cfg.epochs,
            out.display()
        );
    }
}

/// What every step of an epoch reads.
struct EpochCtx<'a> {
    cfg: &'a TeacherConfig,
    model: &'a TeacherCnn,
    train_set: &'a ImageSet,
    dev: &'a Device,
    progress: bool,
}

/// One epoch over `order`: returns the summed (per-image) training loss.
fn train_epoch(
    ctx: &EpochCtx,
    opt: &mut AdamW,
    order: &[usize],
    epoch: usize,
    total: usize,
) -> Result<f64> {
    let (cfg, train_set) = (ctx.cfg, ctx.train_set);
    let steps_per_epoch = train_set.n.div_ceil(cfg.batch_size);
    let pb = ctx.progress.then(|| bar(train_set.n as u64, 0, "teacher"));
    let mut loss_sum = 0.0;
    for (s, chunk) in order.chunks(cfg.batch_size).enumerate() {
        let step = epoch * steps_per_epoch + s;
        opt.lr = warmup_cosine(step, steps_per_epoch, total, cfg.lr, cfg.lr * 1e-2);
        let seed = cfg.seed ^ (step as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let (x, y) = make_batch(
            train_set,
            chunk,
            &cfg.normalize,
            Some((&cfg.augment, seed)),
            ctx.dev,
        )?;
        let loss = ctx
            .model
            .forward(&x)
            .and_then(|l| cross_entropy_smoothed(&l, &y, cfg.label_smoothing))
            .map_err(tensor_err)?;
        let grads = loss.backward().map_err(tensor_err)?;
        opt.step(&grads)?;
        let l = loss.to_scalar::<f32>().map_err(tensor_err)? as f64;
        if !l.is_finite() {
            return Err(Error::invalid(format!(
                "teacher: the loss diverged at step {step} (lower --lr)"
            )));
        }
        loss_sum += l * chunk.len() as f64;
        if let Some(pb) = &pb {
            pb.inc(chunk.len() as u64);
            pb.set_message(format!("epoch {}/{} loss {l:.4}", epoch + 1, cfg.epochs));
        }
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    Ok(loss_sum)
}

/// The trained teacher's soft labels for the training set and the run's report, written to
/// `out`.
fn finish(
    cfg: &TeacherConfig,
    model: &TeacherCnn,
    train_set: &ImageSet,
    out: &Path,
    state: &TeacherState,
    parameters: usize,
) -> Result<TeacherReport> {
    let probs = soft_labels(model, train_set, &cfg.normalize, cfg.temperature)?;
    let k = cfg.num_labels;
    let correct = probs
        .chunks(k)
        .zip(&train_set.labels)
        .filter(|(p, &y)| {
            let arg = p
                .iter()
                .enumerate()
                .fold(0, |best, (i, v)| if *v > p[best] { i } else { best });
            arg == y as usize
        })
        .count();
    let report = TeacherReport {
        config: cfg.clone(),
        parameters,
        test_accuracy: state.test_accuracy.clone(),
        train_loss: state.train_loss.clone(),
        train_accuracy: correct as f64 / train_set.n as f64,
        seconds: state.seconds,
    };
    write_npy_f32(out.join(SOFT_LABELS_FILE), &[train_set.n, k], &probs)?;
    imgseq_core::fsutil::write_json(out.join(TEACHER_REPORT_FILE), &report)?;
    Ok(report)
}

/// Draws the initial weights from `seed` (candle's own initialisers use an unseeded thread
/// RNG, which made two runs of one recipe differ): conv weights He-uniform ±√(6/fan_in) (for
/// SiLU), the head's weight and bias ±1/√fan_in (torch's `nn.Linear` default); biases of the
/// convs 0 and the norms' 1 / 0 as built. Variables in name order.
fn seeded_init(named: &[(String, Var, bool)], seed: u64) -> Result<()> {
    use rand::Rng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x7ea_c4e5);
    for (name, var, _) in named {
        let dims = var.as_tensor().dims().to_vec();
        let bound = match (dims.as_slice(), name.as_str()) {
            ([_, ci, kh, kw], _) => (6.0 / (ci * kh * kw) as f64).sqrt(),
            ([_, fan_in], "head.weight") => 1.0 / (*fan_in as f64).sqrt(),
            (_, "head.bias") => {
                let w = named.iter().find(|n| n.0 == "head.weight");
                let fan_in = w.map_or(1, |w| w.1.as_tensor().dims()[1]);
                1.0 / (fan_in as f64).sqrt()
            }
            _ => continue,
        } as f32;
        let n = var.as_tensor().elem_count();
        let v: Vec<f32> = (0..n).map(|_| rng.random_range(-bound..bound)).collect();
        let t = Tensor::from_vec(v, dims, &Device::Cpu).map_err(tensor_err)?;
        var.set(&t).map_err(tensor_err)?;
    }
    Ok(())
}

/// Loads the checkpoint in `out` into the model's variables and `opt`, after checking that
/// it was made with `cfg`; every tensor must be there with its shape, and no other.
fn restore(
    out: &Path,
    cfg: &TeacherConfig,
    named: &[(String, Var, bool)],
    opt: &mut AdamW,
) -> Result<TeacherState> {
    let run = RunDir::with_layout(out, &TEACHER_RUN);
    let spath = run.file(TEACHER_STATE_FILE);
    let state: TeacherState = run.read_state()?;
    let (saved, now) = (
        serde_json::to_value(&state.config).expect("plain data"),
        serde_json::to_value(cfg).expect("plain data"),
    );
    if saved != now {
        let diff = now
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, v)| saved.get(k.as_str()) != Some(v))
            .map(|(k, v)| {
                format!(
                    "{k}: saved {}, now {v}",
                    saved.get(k.as_str()).unwrap_or(&serde_json::Value::Null)
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        return Err(Error::format(
            &spath,
            format!("the run was started with another recipe or data ({diff}): resume with the same flags"),
        ));
    }
    if state.epochs_done > cfg.epochs
        || state.test_accuracy.len() != state.epochs_done
        || state.train_loss.len() != state.epochs_done
    {
        return Err(Error::format(&spath, "inconsistent epoch counts"));
    }
    let wpath = run.file(TEACHER_WEIGHTS_FILE);
    let w = run.load_weights()?;
    if let Some(extra) = w.keys().find(|k| !named.iter().any(|n| &n.0 == *k)) {
        return Err(Error::weights(
            &wpath,
            format!("unexpected tensor `{extra}`"),
        ));
    }
    imgseq_core::weights::set_vars(&wpath, &w, named.iter().map(|(n, v, _)| (n.as_str(), v)))?;
    // A finished run (a shipped teacher keeps no optimizer state) only recomputes its soft
    // labels: the optimizer is needed when epochs remain.
    if state.epochs_done < cfg.epochs {
        let opath = run.file(TEACHER_OPTIMIZER_FILE);
        let st = run.load_optimizer()?;
        opt.load_state(&st).map_err(|m| Error::format(&opath, m))?;
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy(n: usize, seed: u64) -> ImageSet {
        // Class 0: bright top half; class 1: bright bottom half (noisy).
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut images = Vec::new();
        let mut labels = Vec::new();
        for i in 0..n {
            let y = (i % 2) as u16;
            for r in 0..32 {
                for _ in 0..32 {
                    let bright = (r < 16) == (y == 0);
                    let base: u8 = if bright { 200 } else { 30 };
                    images.push(base.saturating_add(rand::Rng::random_range(&mut rng, 0..40)));
                }
            }
            labels.push(y);
        }
        ImageSet::new(
            images,
            labels,
            (1, 32, 32),
            vec!["top".into(), "bottom".into()],
        )
        .unwrap()
    }

    fn toy_cfg() -> TeacherConfig {
        TeacherConfig {
            channels: 1,
            widths: [4, 8, 8],
            num_labels: 2,
            epochs: 8,
            batch_size: 16,
            lr: 3e-3,
            weight_decay: 0.0,
            label_smoothing: 0.0,
            temperature: 2.0,
            seed: 0,
            augment: Augment {
                shift: 0,
                hflip: false,
                erase_prob: 0.0,
            },
            normalize: Normalize {
                image_mean: vec![0.5],
                image_std: vec![0.3],
            },
        }
    }

    #[test]
    fn teacher_learns_a_separable_toy_set_and_writes_soft_labels() {
        let cfg = toy_cfg();
        let dir = tempfile::tempdir().unwrap();
        let r = train_teacher(&cfg, &toy(64, 1), &toy(32, 2), dir.path(), false, false).unwrap();
        assert!(
            r.test_accuracy.last().unwrap() > &0.95,
            "{:?}",
            r.test_accuracy
        );
        let (shape, p) = imgseq_core::npy::read_npy_f32(dir.path().join(SOFT_LABELS_FILE)).unwrap();
        assert_eq!(shape, vec![64, 2]);
        for row in p.chunks(2) {
            assert!((row[0] + row[1] - 1.0).abs() < 1e-5);
        }
        assert!(r.train_accuracy > 0.95);
    }

    #[test]
    fn an_interrupted_teacher_run_resumed_gives_the_uninterrupted_runs_soft_labels() {
        let (cfg, tr, te) = (toy_cfg(), toy(64, 1), toy(32, 2));
        let whole = tempfile::tempdir().unwrap();
        let a = train_teacher(&cfg, &tr, &te, whole.path(), false, false).unwrap();
        let cut = tempfile::tempdir().unwrap();
        let err = run_teacher(&cfg, &tr, &te, cut.path(), false, false, Some(3)).unwrap_err();
        assert!(err.to_string().contains("stopped after epoch 3"), "{err}");
        assert!(!cut.path().join(SOFT_LABELS_FILE).exists());
        // A new run refuses the folder; a resume with another recipe names the difference.
        let e = train_teacher(&cfg, &tr, &te, cut.path(), false, false).unwrap_err();
        assert!(
            e.to_string().contains("already holds a training run"),
            "{e}"
        );
        let mut other = cfg.clone();
        other.lr = 1e-3;
        let e = train_teacher(&other, &tr, &te, cut.path(), false, true).unwrap_err();
        assert!(e.to_string().contains("lr: saved 0.003, now 0.001"), "{e}");
        let b = train_teacher(&cfg, &tr, &te, cut.path(), false, true).unwrap();
        assert_eq!(a.test_accuracy, b.test_accuracy);
        assert_eq!(a.train_loss, b.train_loss);
        let read = |d: &Path| imgseq_core::npy::read_npy_f32(d.join(SOFT_LABELS_FILE)).unwrap();
        assert_eq!(read(whole.path()), read(cut.path()));
        // No run to resume in an empty folder.
        let empty = tempfile::tempdir().unwrap();
        let e = train_teacher(&cfg, &tr, &te, empty.path(), false, true).unwrap_err();
        assert!(e.to_string().contains("no run to resume"), "{e}");
    }

    #[test]
    fn a_finished_teacher_without_optimizer_state_regenerates_its_soft_labels() {
        // Shipped teachers keep weights and state, not the optimizer: `--resume` on them
        // recomputes the soft labels, byte-identical to the run's own.
        let (mut cfg, tr, te) = (toy_cfg(), toy(32, 1), toy(16, 2));
        cfg.epochs = 2;
        let dir = tempfile::tempdir().unwrap();
        train_teacher(&cfg, &tr, &te, dir.path(), false, false).unwrap();
        let labels = std::fs::read(dir.path().join(SOFT_LABELS_FILE)).unwrap();
        std::fs::remove_file(dir.path().join(TEACHER_OPTIMIZER_FILE)).unwrap();
        std::fs::remove_file(dir.path().join(SOFT_LABELS_FILE)).unwrap();
        train_teacher(&cfg, &tr, &te, dir.path(), false, true).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join(SOFT_LABELS_FILE)).unwrap(),
            labels
        );
    }
}
