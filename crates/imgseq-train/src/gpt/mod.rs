//! Training the GPT on token sequences, top to bottom.
//!
//! A run folder holds everything needed to use or resume it:
//! `config.json` + `model.safetensors` (HF GPT-2 layout: the folder is a model),
//! `training.json` ([`TrainConfig`]), `optimizer.safetensors` (AdamW moments and step),
//! `state.json` ([`TrainState`], written last: a complete checkpoint) and `eval.jsonl`
//! (one line per held-out evaluation).
//!
//! Everything random is a function of the seed and the step — the data order (a seeded
//! shuffle per epoch) and the class dropout (a generator per step) — so a resumed run computes
//! exactly the updates the uninterrupted run would have.

pub mod job;

use candle_core::{backprop::GradStore, DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use imgseq_core::data::augment::mix_seed;
use imgseq_core::fsutil::{read_json, write_bytes_atomic};
use imgseq_core::optim::{warmup_cosine, AdamW};
use imgseq_core::progress::bar;
use imgseq_core::run::{checkpoint_due, sorted_vars, RunDir};
use imgseq_core::{Error, Result};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

use imgseq_gpt::checkpoint::{self, CONFIG_FILE};
use imgseq_gpt::config::{GptConfig, SeqLayout};
use imgseq_gpt::data::{sequence, TokenSet};
use imgseq_gpt::model::Gpt2LMHeadModel;

pub use imgseq_core::run::{EVAL_LOG, OPTIMIZER_FILE, RUN_FILES, STATE_FILE, TRAINING_FILE};
pub use imgseq_gpt::init::init_weights;

/// Sequences per forward pass when evaluating.
pub const EVAL_BATCH: usize = 256;

/// Everything that defines a training run besides the model config (saved as `training.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// The token inputs (for the record, and what `--resume` reads when none are given).
    pub tokens: Vec<String>,
    pub val: Vec<String>,
    pub steps: usize,
    /// Sequences per step.
    pub batch_size: usize,
    /// Peak learning rate of AdamW, reached after `warmup_steps`, then cosine to `min_lr`.
    pub lr: f64,
    pub min_lr: f64,
    pub warmup_steps: usize,
    pub weight_decay: f64,
    /// Global gradient-norm clip (0: none).
    pub grad_clip: f64,
    /// Probability that a sample's class token is replaced by the unconditional one.
    pub class_dropout: f64,
    pub seed: u64,
    /// Held-out bits per token every this many steps (and at the end); 0: only at the end.
    pub eval_every: usize,
    /// A checkpoint every this many steps (and at the end).
    pub checkpoint_every: usize,
    /// The periodic evaluations score the first this many held-out sequences (0: all).
    #[serde(default)]
    pub val_limit: usize,
}

impl Default for TrainConfig {
    /// The recipe for a Fashion-MNIST-sized set (60k sequences of 64 tokens) on a small CPU.
    fn default() -> Self {
        Self {
            tokens: vec![],
            val: vec![],
            steps: 20_000,
            batch_size: 64,
            lr: 1e-3,
            min_lr: 5e-5,
            warmup_steps: 500,
            weight_decay: 0.1,
            grad_clip: 1.0,
            class_dropout: 0.1,
            seed: 0,
            eval_every: 1000,
            checkpoint_every: 500,
            val_limit: 2000,
        }
    }
}

impl TrainConfig {
    /// Checks every number of the recipe; a bad one is an error naming its setting.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("steps", self.steps),
            ("batch_size", self.batch_size),
            ("checkpoint_every", self.checkpoint_every),
        ] {
            if v == 0 {
                return Err(Error::setting(name, v, "must be positive"));
            }
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(Error::setting("lr", self.lr, "must be a positive number"));
        }
        for (name, v) in [
            ("min_lr", self.min_lr),
            ("weight_decay", self.weight_decay),
            ("grad_clip", self.grad_clip),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(Error::setting(name, v, "must be a number ≥ 0"));
            }
        }
        if !(0.0..=1.0).contains(&self.class_dropout) {
            return Err(Error::setting(
                "class_dropout",
                self.class_dropout,
                "must be a probability in [0, 1]",
            ));
        }
        Ok(())
    }

    pub fn load(path: &Path) -> Result<Self> {
        let tc: Self = read_json(path, TRAINING_FILE)?;
        tc.validate()
            .map_err(|e| Error::format(path, e.to_string()))?;
        Ok(tc)
    }
}

/// One held-out evaluation (a line of `eval.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalPoint {
    pub step: usize,
    /// Mean training loss (nats per token) since the previous point.
    pub train_loss: f64,
    /// Held-out bits per image token (None without a held-out set).
    pub val_bits_per_token: Option<f64>,
    pub lr: f64,
    pub tokens_per_s: f64,
}

/// Progress of a run (`state.json`, written last at every checkpoint).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    pub step: usize,
    /// Image tokens trained on so far, and the seconds it took (across resumes).
    pub tokens_seen: u64,
    pub seconds: f64,
    /// The generator state is a function of (seed, step): nothing else to restore.
    pub rng: String,
    pub history: Vec<EvalPoint>,
    /// Sum and count of the training losses since the last evaluation (so a resumed run
    /// reports the same means).
    #[serde(default)]
    pub pending_loss: (f64, usize),
}

/// [`RunDir::check_start`] for `out`.
pub fn check_start(out: &Path, resume: bool) -> Result<()> {
    RunDir::new(out).check_start(resume)
}

/// Removes the run files from `out` ([`RunDir::clear`]).
pub fn clear_run(out: &Path) -> Result<()> {
    RunDir::new(out).clear()
}

/// The model config and training config of the run in `dir`, or `None` when `dir` holds no
/// `training.json`.
pub fn load_run(dir: &Path) -> Result<Option<(GptConfig, TrainConfig)>> {
    let run = RunDir::new(dir);
    if !run.has_training() {
        return Ok(None);
    }
    let tc = TrainConfig::load(&run.training_path())?;
    let cfg = GptConfig::load(dir.join(CONFIG_FILE))?;
    Ok(Some((cfg, tc)))
}

/// The variables by name with whether weight decay applies (matrices only, as nanoGPT:
/// not biases, LayerNorms).
fn named_vars(vars: &VarMap) -> Vec<(String, Var, bool)> {
    let decays = |v: &Var| v.as_tensor().rank() >= 2;
    let named = sorted_vars(vars).into_iter();
    named.map(|(k, v)| (k, v.clone(), decays(&v))).collect()
}

/// Scales the gradients so that their global L2 norm is at most `max`; returns the norm
/// before clipping.
fn clip_grads(grads: &mut GradStore, vars: &[(String, Var, bool)], max: f64) -> Result<f64> {
    let mut sq = 0.0f64;
    for (_, v, _) in vars {
        if let Some(g) = grads.get(v.as_tensor()) {
            sq += g
                .sqr()?
                .sum_all()?
                .to_dtype(DType::F64)?
                .to_scalar::<f64>()?;
        }
    }
    let norm = sq.sqrt();
    if max > 0.0 && norm > max {
        let f = max / (norm + 1e-6);
        for (_, v, _) in vars {
            if let Some(g) = grads.remove(v.as_tensor()) {
                grads.insert(v.as_tensor(), (g * f)?);
            }
        }
    }
    Ok(norm)
}

/// The class token of image `i`: its label's token, or the unconditional one.
fn class_token(layout: &SeqLayout, label: Option<usize>) -> u32 {
    match label {
        Some(c) if c < layout.n_classes() => layout.class_token(c),
        _ => layout.uncond_token(),
    }
}

/// The images of step `step`: positions step·b.. of the concatenated per-epoch orders
/// (each a seeded shuffle of the whole set; the last partial batch of an epoch is dropped).
fn batch_indices(n: usize, batch: usize, seed: u64, step: usize) -> Vec<usize> {
    let per_epoch = (n / batch).max(1);
    let (epoch, k) = (step / per_epoch, step % per_epoch);
    let mut rng = rand::rngs::StdRng::seed_from_u64(mix_seed(&[seed, 0xe90c, epoch as u64]));
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rng);
    (0..batch).map(|j| order[(k * batch + j) % n]).collect()
}

/// Input and target tensors (b, n) of the images `idx`, with the class tokens replaced by the
/// unconditional one with probability `dropout` (drawn from `rng`).
pub fn make_batch(
    set: &TokenSet,
    layout: &SeqLayout,
    idx: &[usize],
    dropout: f64,
    rng: &mut impl Rng,
    dev: &Device,
) -> Result<(Tensor, Tensor)> {
    let n = set.n_tokens();
    let (mut input, mut targets) = (
        Vec::with_capacity(idx.len() * n),
        Vec::with_capacity(idx.len() * n),
    );
    for &i in idx {
        let drop = dropout > 0.0 && rng.random::<f64>() < dropout;
        let cls = if drop {
            layout.uncond_token()
        } else {
            class_token(layout, set.labels[i])
        };
        sequence(set, i, cls, &mut input, &mut targets);
    }
    Ok((
        Tensor::from_vec(input, (idx.len(), n), dev)?,
        Tensor::from_vec(targets, (idx.len(), n), dev)?,
    ))
}

/// Checks that `set` fits the model: same grid, codes inside the codebook.
pub fn check_set(set: &TokenSet, layout: &SeqLayout, what: &str) -> Result<()> {
    if (set.h, set.w) != (layout.h, layout.w) {
        return Err(Error::invalid(format!(
            "{what}: token grids are {}x{} but the model's are {}x{}",
            set.h, set.w, layout.h, layout.w
        )));
    }
    if let Some(n) = set.n_codes {
        if n != layout.n_codes {
            return Err(Error::invalid(format!(
                "{what}: the tokenizer has {n} codes but the model {} (a different VQ)",
                layout.n_codes
            )));
        }
    }
    if set.max_code() > layout.n_codes {
        return Err(Error::invalid(format!(
            "{what}: token {} is outside the model's {}-entry codebook",
            set.max_code() - 1,
            layout.n_codes
        )));
    }
    Ok(())
}

/// Mean negative log-likelihood of `set`'s image tokens in bits per token, each sequence
/// conditioned on its own class (unlabelled ones on the unconditional token).
pub fn bits_per_token(
    model: &Gpt2LMHeadModel,
    layout: &SeqLayout,
    set: &TokenSet,
    batch: usize,
    progress: bool,
) -> Result<f64> {
    check_set(set, layout, "evaluation set")?;
    let dev = Device::Cpu;
    let pb = progress.then(|| bar(set.len() as u64, 0, "eval"));
    let idx: Vec<usize> = (0..set.len()).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let mut nats = 0.0f64;
    for chunk in idx.chunks(batch.max(1)) {
        let (x, y) = make_batch(set, layout, chunk, 0.0, &mut rng, &dev)?;
        let loss = model.loss(&x, &y, layout.n_codes)?.to_scalar::<f32>()? as f64;
        nats += loss * chunk.len() as f64;
        if let Some(pb) = &pb {
            pb.inc(chunk.len() as u64);
        }
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    Ok(nats / set.len() as f64 / std::f64::consts::LN_2)
}

/// Writes a checkpoint: model folder files, training config, optimizer, then `state.json`
/// last (each file atomically), and `eval.jsonl` from the history.
fn save_checkpoint(
    run: &RunDir,
    cfg: &GptConfig,
    tc: &TrainConfig,
    vars: &VarMap,
    opt: &AdamW,
    state: &TrainState,
) -> Result<()> {
    run.create()?;
    checkpoint::save(run.path(), cfg, &checkpoint::var_tensors(vars))?;
    run.write_training(tc)?;
    run.write_optimizer(&opt.state()?)?;
    write_eval_log(run, &state.history)?;
    run.write_state(state)
}

fn write_eval_log(run: &RunDir, history: &[EvalPoint]) -> Result<()> {
    let mut s = String::new();
    for p in history {
        s.push_str(&serde_json::to_string(p).map_err(|e| Error::invalid(e.to_string()))?);
        s.push('\n');
    }
    write_bytes_atomic(run.file(EVAL_LOG), s.as_bytes())
}

/// Checks the model, the recipe and the sets before anything is read or written.
fn check_inputs(
    cfg: &GptConfig,
    tc: &TrainConfig,
    train_set: &TokenSet,
    val_set: Option<&TokenSet>,
    run: &RunDir,
    resume: bool,
) -> Result<SeqLayout> {
    cfg.validate()?;
    tc.validate()?;
    // Weights, gradients and two moments, and a batch's activations kept for the backward.
    cfg.check_memory(4)?;
    let (t, e, i) = (
        cfg.n_positions as u128,
        cfg.n_embd as u128,
        cfg.n_inner() as u128,
    );
    let per_row = t
        * (cfg.n_layer as u128 * (16 * e + 4 * i + cfg.n_head as u128 * t)
            + cfg.vocab_size as u128);
    imgseq_core::budget::check_memory(tc.batch_size as u128 * per_row * 8)
        .map_err(|m| Error::setting("batch_size", tc.batch_size, m))?;
    if cfg.resid_pdrop > 0.0 || cfg.embd_pdrop > 0.0 || cfg.attn_pdrop > 0.0 {
        return Err(Error::invalid(
            "dropout (resid/embd/attn_pdrop > 0) is not implemented in training; set them to 0",
        ));
    }
    run.check_start(resume)?;
    let layout = cfg.layout()?;
    check_set(train_set, &layout, "training set")?;
    if let Some(v) = val_set {
        check_set(v, &layout, "held-out set")?;
    }
    if train_set.len() < tc.batch_size {
        return Err(Error::invalid(format!(
            "the training set has {} sequences, fewer than one batch of {}",
            train_set.len(),
            tc.batch_size
        )));
    }
    Ok(layout)
}

/// The training losses and tokens since the last evaluation.
struct Window {
    loss_sum: f64,
    loss_n: usize,
    t_mark: Instant,
    tokens: u64,
}

impl Window {
    fn mean(&self) -> f64 {
        self.loss_sum / self.loss_n.max(1) as f64
    }

    /// The evaluation point at `step` (scoring `val_set`), then a fresh window.
    fn close(
        &mut self,
        step: usize,
        lr: f64,
        model: &Gpt2LMHeadModel,
        layout: &SeqLayout,
        val_set: Option<&TokenSet>,
    ) -> Result<EvalPoint> {
        let val = match val_set {
            Some(v) => Some(bits_per_token(model, layout, v, EVAL_BATCH, false)?),
            None => None,
        };
        let secs = self.t_mark.elapsed().as_secs_f64();
        let point = EvalPoint {
            step,
            train_loss: self.mean(),
            val_bits_per_token: val,
            lr,
            tokens_per_s: self.tokens as f64 / secs.max(1e-9),
        };
        *self = Window {
            loss_sum: 0.0,
            loss_n: 0,
            t_mark: Instant::now(),
            tokens: 0,
        };
        Ok(point)
    }
}

/// The log line of an evaluation point.
fn eval_line(point: &EvalPoint, steps: usize) -> String {
    format!(
        "step {}/{}: train loss {:.4} nats ({:.3} bits/token){}, {:.0} tok/s",
        point.step,
        steps,
        point.train_loss,
        point.train_loss / std::f64::consts::LN_2,
        match point.val_bits_per_token {
            Some(b) => format!(", held-out {b:.4} bits/token"),
            None => String::new(),
        },
        point.tokens_per_s
    )
}

/// The variables by name, with whether weight decay applies to each.
type NamedVars = Vec<(String, Var, bool)>;

/// The model as trainable variables (sorted, with whether weight decay applies) and AdamW.
fn build(cfg: &GptConfig, tc: &TrainConfig) -> Result<(VarMap, Gpt2LMHeadModel, NamedVars, AdamW)> {
    let vars = VarMap::new();
    let vb = VarBuilder::from_varmap(&vars, DType::F32, &Device::Cpu);
    let model = Gpt2LMHeadModel::new(cfg, vb)?;
    let named = named_vars(&vars);
    let mut opt = AdamW::new(named.clone(), tc.lr, tc.weight_decay)?;
    opt.beta2 = 0.95;
    Ok((vars, model, named, opt))
}

/// The state of the run in `run`, its weights into `named` and its moments into `opt`.
fn restore(run: &RunDir, named: &[(String, Var, bool)], opt: &mut AdamW) -> Result<TrainState> {
    let state: TrainState = run.read_state()?;
    run.read_weights(named.iter().map(|(n, v, _)| (n.as_str(), v)))?;
    run.read_optimizer(opt, state.step)?;
    Ok(state)
}

/// Trains (or, with `resume`, continues the run in `out`) the model `cfg` on `train_set`,
/// scoring `val_set` every `eval_every` steps. A new run refuses a folder holding one;
/// nothing is written before the first checkpoint. `stop_at`: stop after that step with a
/// checkpoint, as if interrupted there (the schedule stays that of `tc.steps`). Returns the
/// final state.
pub fn train(
    cfg: &GptConfig,
    tc: &TrainConfig,
    train_set: &TokenSet,
    val_set: Option<&TokenSet>,
    out: &Path,
    resume: bool,
    stop_at: Option<usize>,
) -> Result<TrainState> {
    let run = RunDir::new(out);
    let layout = check_inputs(cfg, tc, train_set, val_set, &run, resume)?;
    let val_part = match val_set {
        Some(v) if tc.val_limit > 0 && v.len() > tc.val_limit => Some(v.first(tc.val_limit)),
        _ => None,
    };
    let val_set = val_part.as_ref().or(val_set);
    let (vars, model, named, mut opt) = build(cfg, tc)?;
    let mut state = if resume {
        let state = restore(&run, &named, &mut opt)?;
        run.announce_resume(state.step, tc.steps);
        state
    } else {
        init_weights(&vars, cfg, tc.seed)?;
        TrainState {
            rng: format!("StdRng from (seed {}, step)", tc.seed),
            ..Default::default()
        }
    };
    if run.finished(state.step, tc.steps) {
        return Ok(state);
    }
    let tokens_per_step = (tc.batch_size * layout.n_tokens()) as u64;
    announce(&named, train_set, &layout, tc);

    let pb = bar(tc.steps as u64, state.step as u64, "train");
    let (t_run, start_step, secs_before) = (Instant::now(), state.step, state.seconds);
    let (loss_sum, loss_n) = state.pending_loss;
    let mut win = Window {
        loss_sum,
        loss_n,
        t_mark: Instant::now(),
        tokens: 0,
    };
    let end = stop_at.unwrap_or(tc.steps).min(tc.steps);
    while state.step < end {
        let step = state.step;
        let batch = Batch {
            set: train_set,
            layout: &layout,
            tc,
        };
        let l = train_step(&model, &named, &mut opt, &batch, step)?;
        state.step += 1;
        state.tokens_seen += tokens_per_step;
        win.tokens += tokens_per_step;
        win.loss_sum += l;
        win.loss_n += 1;
        pb.inc(1);
        let done_run = (state.step - start_step) as u64 * tokens_per_step;
        let tps = done_run as f64 / t_run.elapsed().as_secs_f64().max(1e-9);
        if let Some(msg) = progress_message(&state, tc, &win, opt.lr, tps) {
            pb.set_message(msg);
        }
        // Without a terminal (logs) the bar is hidden: a line every ~1% of the run.
        if pb.is_hidden() && state.step.is_multiple_of((tc.steps / 100).max(10)) {
            let left = (end - state.step) as f64 * tokens_per_step as f64 / tps.max(1e-9);
            eprintln!(
                "step {}/{}: loss {:.4} lr {:.2e} {:.0} tok/s, ETA {:.0} min",
                state.step,
                tc.steps,
                win.mean(),
                opt.lr,
                tps,
                left / 60.0
            );
        }
        let last = state.step == tc.steps;
        if last || (tc.eval_every > 0 && state.step.is_multiple_of(tc.eval_every)) {
            let point = win.close(state.step, opt.lr, &model, &layout, val_set)?;
            let line = eval_line(&point, tc.steps);
            pb.suspend(|| eprintln!("{line}"));
            state.history.push(point);
        }
        if state.step == end || checkpoint_due(state.step, tc.checkpoint_every, tc.steps) {
            state.seconds = secs_before + t_run.elapsed().as_secs_f64();
            state.pending_loss = (win.loss_sum, win.loss_n);
            save_checkpoint(&run, cfg, tc, &vars, &opt, &state)?;
        }
    }
    pb.finish_and_clear();
    Ok(state)
}

/// The training set, its layout and the recipe: what a step draws its batch from.
struct Batch<'a> {
    set: &'a TokenSet,
    layout: &'a SeqLayout,
    tc: &'a TrainConfig,
}

/// One optimisation step (index `step`) on its seeded batch; returns the loss.
fn train_step(
    model: &Gpt2LMHeadModel,
    named: &[(String, Var, bool)],
    opt: &mut AdamW,
    b: &Batch,
    step: usize,
) -> Result<f64> {
    let (tc, layout) = (b.tc, b.layout);
    let idx = batch_indices(b.set.len(), tc.batch_size, tc.seed, step);
    let mut rng = rand::rngs::StdRng::seed_from_u64(mix_seed(&[tc.seed, 0xc1a55, step as u64]));
    let dev = Device::Cpu;
    let (x, y) = make_batch(b.set, layout, &idx, tc.class_dropout, &mut rng, &dev)?;
    let loss = model.loss(&x, &y, layout.n_codes)?;
    let mut grads = loss.backward()?;
    clip_grads(&mut grads, named, tc.grad_clip)?;
    opt.lr = warmup_cosine(step, tc.warmup_steps, tc.steps, tc.lr, tc.min_lr);
    opt.step(&grads)?;
    let l = loss.to_scalar::<f32>()? as f64;
    if !l.is_finite() {
        return Err(Error::invalid(format!(
            "training diverged: loss is {l} at step {}",
            step + 1
        )));
    }
    Ok(l)
}

/// Says what is trained on what.
fn announce(named: &[(String, Var, bool)], set: &TokenSet, layout: &SeqLayout, tc: &TrainConfig) {
    let params: usize = named
        .iter()
        .map(|(_, v, _)| v.as_tensor().elem_count())
        .sum();
    eprintln!(
        "training {:.2} M parameters on {} sequences of {} tokens, {} steps of {} sequences",
        params as f64 / 1e6,
        set.len(),
        layout.n_tokens(),
        tc.steps,
        tc.batch_size
    );
}

/// The progress bar's message every 10 steps and at the end.
fn progress_message(
    state: &TrainState,
    tc: &TrainConfig,
    win: &Window,
    lr: f64,
    tps: f64,
) -> Option<String> {
    if !(state.step.is_multiple_of(10) || state.step == tc.steps) {
        return None;
    }
    let mean = win.loss_sum / win.loss_n as f64;
    Some(format!(
        "loss {:.4} ({:.3} bits) lr {:.2e} {:.0} tok/s",
        mean,
        mean / std::f64::consts::LN_2,
        lr,
        tps
    ))
}
