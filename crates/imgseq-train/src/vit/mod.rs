//! Training of a ViT classifier (its run folder: [`imgseq_vit::run`]; evaluation:
//! [`imgseq_vit::eval`]).
//!
//! A run folder holds everything needed to use or resume it:
//! `config.json` + `model.safetensors` (HF layout), `training.json` (this [`TrainConfig`]),
//! `optimizer.safetensors` (AdamW moments) and `state.json` (epochs done, accuracy history).
//!
//! Two engines run the steps ([`Engine`]): the fused forward + backward of
//! [`imgseq_vit::fused`] (f32 on the CPU; the default: 3× the autograd engine's img/s on the
//! seed model, batch 128, 2 threads, AMD EPYC Zen 4) and candle's autograd through
//! [`ViTForImageClassification`] (the reference). Both start from the same initial weights,
//! use the same AdamW arithmetic and write the same run files, so a run started with one
//! resumes with the other.

pub mod job;
pub mod teacher;
pub mod teacher_job;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use imgseq_core::progress::bar;
use imgseq_core::run::RunDir;
use imgseq_core::{Error, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::path::Path;
use std::time::Instant;

use imgseq_core::optim::{warmup_cosine, AdamW};
use imgseq_vit::checkpoint::{CONFIG_FILE, WEIGHTS_FILE};
use imgseq_vit::config::ViTConfig;
use imgseq_vit::data::{make_batch, ImageSet, Normalize};
use imgseq_vit::eval::{argmax, evaluate_with};
use imgseq_vit::fused::{decays, ema_update, FlatAdamW, FusedViT, ParamLayout, Targets};
use imgseq_vit::model::ViTForImageClassification;

pub use imgseq_vit::eval::{evaluate, EvalReport, EVAL_BATCH};
// The model's initialisation and loss (`imgseq_vit::init`, `imgseq_vit::loss`): the recipe
// starts from the one and descends the other.
pub use imgseq_vit::init::{init_flat, init_weights};
pub use imgseq_vit::loss::{cross_entropy_smoothed, cross_entropy_soft};
pub use imgseq_vit::run::{
    check_start, clear_run, load_run, run_files, TrainConfig, TrainState, OPTIMIZER_FILE,
    RUN_FILES, STATE_FILE, TRAINING_FILE,
};

/// Prefix of the raw weights' names (`raw.<HF name>`) in `optimizer.safetensors`, where a
/// run with an EMA keeps them (its `model.safetensors` holds the EMA weights); shared with
/// the VQGAN trainer.
pub use imgseq_core::optim::RAW_PREFIX;

/// Which implementation runs the training steps. Both write the same run files, so a run
/// started with one can be resumed with the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Engine {
    /// [`FusedViT`]: the whole forward and backward by hand over preallocated buffers (f32,
    /// CPU); the default, being the faster of the two.
    #[default]
    Fused,
    /// candle autograd through [`ViTForImageClassification`]: the reference.
    Autograd,
}

/// The variables with their names, and whether weight decay applies to each.
fn named_vars(vars: &VarMap) -> Vec<(String, Var, bool)> {
    let data = vars.data().lock().expect("poisoned");
    let mut v: Vec<(String, Var, bool)> = data
        .iter()
        .map(|(k, var)| {
            let decay = decays(k, var.as_tensor().rank());
            (k.clone(), var.clone(), decay)
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn tensor_err(e: candle_core::Error) -> Error {
    Error::Candle(e)
}

/// [`evaluate`] with the fused engine's forward on flat `params`.
pub fn evaluate_fused(
    net: &mut FusedViT,
    params: &[f32],
    cfg: &ViTConfig,
    set: &ImageSet,
    norm: &Normalize,
    batch_size: usize,
) -> Result<EvalReport> {
    let k = cfg.num_labels();
    evaluate_with(k, set, norm, batch_size, false, |x| {
        let logits = net.logits(params, &x.flatten_all()?.to_vec1::<f32>()?)?;
        Ok(logits.chunks_exact(k).map(argmax).collect())
    })
}

/// The weights, optimizer and (optionally) EMA of a run on one engine.
struct Trainer {
    layout: ParamLayout,
    /// Raw weights in layout order: the fused engine's working copy, the autograd engine's
    /// mirror of its variables (refreshed by [`Trainer::sync`]).
    params: Vec<f32>,
    ema: Option<Vec<f32>>,
    backend: Backend,
}

enum Backend {
    Fused {
        net: Box<FusedViT>,
        grads: Vec<f32>,
        opt: FlatAdamW,
    },
    Autograd {
        model: ViTForImageClassification,
        opt: AdamW,
        /// The variables in layout order.
        vars: Vec<Var>,
    },
}

impl Trainer {
    fn new(cfg: &ViTConfig, tc: &TrainConfig, engine: Engine) -> Result<Self> {
        let layout = ParamLayout::new(cfg);
        let backend = match engine {
            Engine::Fused => Backend::Fused {
                net: Box::new(FusedViT::new(cfg)?),
                grads: vec![0.0; layout.len()],
                opt: FlatAdamW::new(&layout, tc.lr, tc.weight_decay),
            },
            Engine::Autograd => {
                let varmap = VarMap::new();
                let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
                let model = ViTForImageClassification::new(cfg, vb).map_err(tensor_err)?;
                let named = named_vars(&varmap);
                let vars = layout
                    .specs
                    .iter()
                    .map(|s| {
                        named
                            .iter()
                            .find(|(n, _, _)| *n == s.name)
                            .map(|(_, v, _)| v.clone())
                            .ok_or_else(|| {
                                Error::invalid(format!("the model has no variable `{}`", s.name))
                            })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let opt = AdamW::new(named, tc.lr, tc.weight_decay)?;
                Backend::Autograd { model, opt, vars }
            }
        };
        Ok(Self {
            params: vec![0.0; layout.len()],
            layout,
            ema: None,
            backend,
        })
    }

    /// Sets the raw weights (layout order).
    fn set_params(&mut self, flat: Vec<f32>) -> Result<()> {
        if let Backend::Autograd { vars, .. } = &self.backend {
            for (s, v) in self.layout.specs.iter().zip(vars) {
                v.set(&Tensor::from_slice(
                    &flat[s.range()],
                    s.shape.as_slice(),
                    &Device::Cpu,
                )?)?;
            }
        }
        self.params = flat;
        Ok(())
    }

    /// Brings `params` up to date with the autograd engine's variables.
    fn sync(&mut self) -> Result<()> {
        if let Backend::Autograd { vars, .. } = &self.backend {
            for (s, v) in self.layout.specs.iter().zip(vars) {
                let t = v.as_tensor().flatten_all()?.to_vec1::<f32>()?;
                self.params[s.range()].copy_from_slice(&t);
            }
        }
        Ok(())
    }

    /// One step on a batch: forward, backward, AdamW at `lr`, EMA. Returns the loss.
    /// `probs`: per-image target distributions (b, k) instead of the labels `y` (distillation).
    fn step(
        &mut self,
        x: &Tensor,
        y: &Tensor,
        probs: Option<&[f32]>,
        lr: f64,
        tc: &TrainConfig,
    ) -> Result<f64> {
        let loss = match &mut self.backend {
            Backend::Fused { net, grads, opt } => {
                let xv = x.flatten_all()?.to_vec1::<f32>()?;
                let yv = y.to_vec1::<u32>()?;
                let targets = match probs {
                    Some(p) => Targets::Probs(p),
                    None => Targets::Labels(&yv),
                };
                let loss =
                    net.forward_backward(&self.params, grads, &xv, targets, tc.label_smoothing)?;
                opt.lr = lr;
                opt.update(&mut self.params, grads)?;
                loss
            }
            Backend::Autograd { model, opt, .. } => {
                let logits = model.forward(x, false)?; // (b, k)
                let loss = match probs {
                    Some(p) => {
                        let t = Tensor::from_slice(p, logits.dims2()?, &Device::Cpu)?;
                        cross_entropy_soft(&logits, &t, tc.label_smoothing)?
                    }
                    None => cross_entropy_smoothed(&logits, y, tc.label_smoothing)?,
                };
                let grads = loss.backward()?;
                opt.lr = lr;
                opt.step(&grads)?;
                loss.to_scalar::<f32>()? as f64
            }
        };
        if self.ema.is_some() {
            self.sync()?;
            let ema = self.ema.as_mut().expect("checked");
            ema_update(ema, &self.params, tc.ema);
        }
        Ok(loss)
    }

    /// The weights that are evaluated and saved as the model: the EMA when there is one.
    fn model_weights(&self) -> &[f32] {
        self.ema.as_deref().unwrap_or(&self.params)
    }

    fn evaluate(
        &mut self,
        cfg: &ViTConfig,
        set: &ImageSet,
        norm: &Normalize,
    ) -> Result<EvalReport> {
        match &mut self.backend {
            Backend::Fused { net, .. } => {
                let w = self.ema.as_deref().unwrap_or(&self.params);
                evaluate_fused(net, w, cfg, set, norm, EVAL_BATCH)
            }
            Backend::Autograd { model, .. } => match &self.ema {
                None => evaluate(model, cfg, set, norm, EVAL_BATCH, false),
                Some(ema) => {
                    let vb = VarBuilder::from_tensors(
                        self.layout.to_tensors(ema)?,
                        DType::F32,
                        &Device::Cpu,
                    );
                    let m = ViTForImageClassification::new(cfg, vb).map_err(tensor_err)?;
                    evaluate(&m, cfg, set, norm, EVAL_BATCH, false)
                }
            },
        }
    }

    fn opt_state(&self) -> Result<std::collections::HashMap<String, Tensor>> {
        match &self.backend {
            Backend::Fused { opt, .. } => opt.state(),
            Backend::Autograd { opt, .. } => Ok(opt.state()?),
        }
    }

    fn load_opt_state(
        &mut self,
        st: &std::collections::HashMap<String, Tensor>,
    ) -> std::result::Result<(), String> {
        match &mut self.backend {
            Backend::Fused { opt, .. } => opt.load_state(st),
            Backend::Autograd { opt, .. } => opt.load_state(st),
        }
    }

    fn lr(&self) -> f64 {
        match &self.backend {
            Backend::Fused { opt, .. } => opt.lr,
            Backend::Autograd { opt, .. } => opt.lr,
        }
    }

    /// Restores the weights (and EMA) and the optimizer of the run in `out`.
    fn resume(&mut self, run: &RunDir, tc: &TrainConfig) -> Result<()> {
        let wpath = run.file(WEIGHTS_FILE);
        let saved = self
            .layout
            .from_tensors(&run.load_weights()?, "")
            .map_err(|e| Error::weights(&wpath, e.to_string()))?;
        let opt_path = run.file(OPTIMIZER_FILE);
        let st = run.load_optimizer()?;
        if tc.ema > 0.0 {
            let raw = self.layout.from_tensors(&st, RAW_PREFIX).map_err(|e| {
                Error::format(&opt_path, format!("{e} (the raw weights of an EMA run)"))
            })?;
            self.set_params(raw)?;
            self.ema = Some(saved);
        } else {
            self.set_params(saved)?;
        }
        self.load_opt_state(&st)
            .map_err(|m| Error::format(&opt_path, m))
    }

    /// Writes the run files (the state last).
    fn checkpoint(
        &mut self,
        run: &RunDir,
        cfg: &ViTConfig,
        tc: &TrainConfig,
        state: &TrainState,
    ) -> Result<()> {
        self.sync()?;
        run.create()?;
        run.write_training(tc)?;
        run.write_weights(&self.layout.to_tensors(self.model_weights())?)?;
        cfg.save(run.file(CONFIG_FILE))?;
        let mut st = self.opt_state()?;
        if self.ema.is_some() {
            for (k, t) in self.layout.to_tensors(&self.params)? {
                st.insert(format!("{RAW_PREFIX}{k}"), t);
            }
        }
        run.write_optimizer(&st)?;
        run.write_state(state)
    }
}

/// [`train_with`] on the default engine ([`Engine::Fused`]).
pub fn train(
    model_cfg: &ViTConfig,
    tc: &TrainConfig,
    train_set: &ImageSet,
    test_set: &ImageSet,
    out: &Path,
    resume: bool,
) -> Result<TrainState> {
    train_with(
        model_cfg,
        tc,
        train_set,
        test_set,
        out,
        resume,
        Engine::default(),
    )
}

/// Trains (or, with `resume`, continues the run in `out`) a classifier on `engine`; writes a
/// checkpoint after every epoch. Starting follows [`check_start`]: a new run refuses a folder
/// holding one, `resume` needs one. Nothing is written (not even the folder) before the first
/// checkpoint, so a run that fails early (bad data, divergence) leaves nothing behind.
/// Returns the final state.
pub fn train_with(
    model_cfg: &ViTConfig,
    tc: &TrainConfig,
    train_set: &ImageSet,
    test_set: &ImageSet,
    out: &Path,
    resume: bool,
    engine: Engine,
) -> Result<TrainState> {
    model_cfg.validate()?;
    tc.check_sets(train_set, test_set)?;
    let run = RunDir::new(out);
    run.check_start(resume)?;
    check_fits(model_cfg, train_set)?;
    let dev = Device::Cpu;
    let mut tr = Trainer::new(model_cfg, tc, engine)?;
    let mut state = start(&mut tr, model_cfg, tc, &run, resume)?;
    if state.epochs_done >= tc.epochs {
        eprintln!(
            "{}: already at epoch {} of {}",
            out.display(),
            state.epochs_done,
            tc.epochs
        );
        return Ok(state);
    }

    let k = model_cfg.num_labels();
    let teacher = (tc.soft_labels.as_ref())
        .map(|p| load_soft_labels(Path::new(p), train_set, k))
        .transpose()?;
    let steps_per_epoch = train_set.n / tc.batch_size;
    let total_steps = steps_per_epoch * tc.epochs;
    let warmup = (tc.warmup_epochs * steps_per_epoch as f64) as usize;
    for epoch in state.epochs_done..tc.epochs {
        // Per-epoch RNG derived from the seed: a resumed run sees the same data order.
        let mut rng = rand::rngs::StdRng::seed_from_u64(
            tc.seed.wrapping_mul(1_000_003).wrapping_add(epoch as u64),
        );
        let mut order: Vec<usize> = (0..train_set.n).collect();
        order.shuffle(&mut rng);
        let pb = bar(
            (steps_per_epoch * tc.batch_size) as u64,
            0,
            &format!("epoch {}/{}", epoch + 1, tc.epochs),
        );
        let t0 = Instant::now();
        let (mut loss_sum, mut loss_n) = (0.0, 0usize);
        let mut at = Progress {
            epoch,
            epochs: tc.epochs,
            step: 0,
            steps: steps_per_epoch,
            batch: tc.batch_size,
        };
        for s in 0..steps_per_epoch {
            let idx = &order[s * tc.batch_size..(s + 1) * tc.batch_size];
            let seed = imgseq_core::data::augment::mix_seed(&[tc.seed, epoch as u64, s as u64]);
            let (x, y) = make_batch(
                train_set,
                idx,
                &tc.normalize,
                Some((&tc.augment, seed)),
                &dev,
            )?;
            let lr = warmup_cosine(state.steps_done, warmup, total_steps, tc.lr, tc.min_lr);
            let probs = teacher
                .as_deref()
                .map(|t| distill_targets(t, train_set, idx, k, tc.distill));
            let l = tr.step(&x, &y, probs.as_deref(), lr, tc)?;
            state.steps_done += 1;
            if !l.is_finite() {
                return Err(Error::invalid(format!(
                    "training diverged: loss is {l} at step {}",
                    state.steps_done
                )));
            }
            loss_sum += l;
            loss_n += 1;
            pb.inc(tc.batch_size as u64);
            at.step = s;
            let loss = loss_sum / loss_n as f64;
            if let Some(msg) = progress_message(at, loss, tr.lr(), t0, pb.is_hidden()) {
                pb.set_message(msg);
            }
        }
        pb.finish_and_clear();
        let secs = t0.elapsed().as_secs_f64();
        let report = tr.evaluate(model_cfg, test_set, &tc.normalize)?;
        let loss = loss_sum / loss_n.max(1) as f64;
        end_epoch(&mut state, at, loss, report.accuracy, secs);
        // The checkpoint; the folder is made at the first one.
        tr.checkpoint(&run, model_cfg, tc, &state)?;
    }
    Ok(state)
}

/// Refuses a data set whose images are not the model's input size.
fn check_fits(model_cfg: &ViTConfig, train_set: &ImageSet) -> Result<()> {
    if (train_set.channels, train_set.height) != (model_cfg.num_channels, model_cfg.image_size) {
        return Err(Error::bad_data(format!(
            "the data is {}x{}x{} but the model expects {}x{}x{} (pad or resize the data first)",
            train_set.channels,
            train_set.height,
            train_set.width,
            model_cfg.num_channels,
            model_cfg.image_size,
            model_cfg.image_size
        )));
    }
    Ok(())
}

/// The run's state at its start: resumed from `out`, or fresh with seeded initial weights.
fn start(
    tr: &mut Trainer,
    model_cfg: &ViTConfig,
    tc: &TrainConfig,
    run: &RunDir,
    resume: bool,
) -> Result<TrainState> {
    if !resume {
        tr.set_params(init_flat(&tr.layout, model_cfg.initializer_range, tc.seed))?;
        if tc.ema > 0.0 {
            tr.ema = Some(tr.params.clone());
        }
        return Ok(TrainState::default());
    }
    let state: TrainState = run.read_state()?;
    tr.resume(run, tc)?;
    eprintln!(
        "resuming {} after epoch {} (step {})",
        run.path().display(),
        state.epochs_done,
        state.steps_done
    );
    Ok(state)
}

/// Where a step is in the run.
#[derive(Clone, Copy)]
struct Progress {
    epoch: usize,
    epochs: usize,
    /// Step within the epoch, of `steps`.
    step: usize,
    steps: usize,
    batch: usize,
}

/// The progress bar's message, every 10 steps; without a terminal (logs, CI: `hidden`) the
/// bar is hidden, so this also prints a line every ~10% of the epoch.
fn progress_message(at: Progress, loss: f64, lr: f64, t0: Instant, hidden: bool) -> Option<String> {
    let tenth = (at.step + 1).is_multiple_of((at.steps / 10).max(1));
    if !at.step.is_multiple_of(10) && !tenth {
        return None;
    }
    let ips = ((at.step + 1) * at.batch) as f64 / t0.elapsed().as_secs_f64();
    let msg = format!("loss {loss:.4} lr {lr:.2e} {ips:.0} img/s");
    if hidden && tenth {
        eprintln!(
            "epoch {}/{} step {}/{}: {msg}",
            at.epoch + 1,
            at.epochs,
            at.step + 1,
            at.steps
        );
    }
    Some(msg)
}

/// Records a finished epoch (its `secs`, mean training `loss`, test `accuracy`) in `state`
/// and prints its summary line.
fn end_epoch(state: &mut TrainState, at: Progress, loss: f64, accuracy: f64, secs: f64) {
    state.seconds += secs;
    state.epochs_done = at.epoch + 1;
    state.train_loss.push(loss);
    state.test_accuracy.push(accuracy);
    eprintln!(
        "epoch {:>3}/{}: train loss {:.4}, test accuracy {:.2}%, {:.0} img/s",
        at.epoch + 1,
        at.epochs,
        loss,
        100.0 * accuracy,
        (at.steps * at.batch) as f64 / secs
    );
}

/// Reads a teacher's `soft_labels.npy` and checks it fits the training set: (n, k) f32 rows
/// that are probability distributions.
pub fn load_soft_labels(path: &Path, train_set: &ImageSet, k: usize) -> Result<Vec<f32>> {
    let (shape, p) = imgseq_core::npy::read_npy_f32(path)?;
    if shape != [train_set.n, k] {
        return Err(Error::format(
            path,
            format!(
                "soft labels of shape {shape:?}, but the training set has {} images of {k} \
                 classes (make them with `vit teacher` on the same data)",
                train_set.n
            ),
        ));
    }
    if let Some(i) = p.chunks(k).position(|r| {
        r.iter().any(|v| !(0.0..=1.0).contains(v)) || (r.iter().sum::<f32>() - 1.0).abs() > 1e-3
    }) {
        return Err(Error::format(
            path,
            format!("row {i} is not a probability distribution"),
        ));
    }
    Ok(p)
}

/// The targets of the images `idx`: (1 − α)·one-hot(label) + α·teacher row, (b, k).
fn distill_targets(
    teacher: &[f32],
    set: &ImageSet,
    idx: &[usize],
    k: usize,
    alpha: f64,
) -> Vec<f32> {
    let a = alpha as f32;
    let mut t = Vec::with_capacity(idx.len() * k);
    for &i in idx {
        let label = set.labels[i] as usize;
        t.extend((0..k).map(|j| a * teacher[i * k + j] + if j == label { 1.0 - a } else { 0.0 }));
    }
    t
}
