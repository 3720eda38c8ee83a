//! A run folder ([`RunDir`]): everything needed to use or resume a training run.
//!
//! `model.safetensors` (taming names, loads with [`imgseq_vqgan::load_model`]; with an EMA,
//! the averaged weights) + `config.json` ([`VqConfig`]), `training.json` ([`TrainConfig`]; runs
//! written as `train.json` still resume), `optimizer.safetensors` (AdamW moments; with an EMA
//! also the raw weights as `raw.<name>`) and `state.json` ([`TrainState`]: step, code usage,
//! history), written in that order: `state.json` last marks a complete checkpoint.

use super::config::TrainConfig;
use super::ema::Ema;
use super::gan::Gan;
use super::loss::LossTerms;
use candle_core::{Tensor, Var};
use candle_nn::VarMap;
use imgseq_core::fsutil::write_bytes_atomic;
use imgseq_core::optim::{AdamW, RAW_PREFIX};
use imgseq_core::run::RunDir;
pub use imgseq_core::run::{
    sorted_vars, CONFIG_FILE, OPTIMIZER_FILE as OPTIM_FILE, RUN_FILES, SNAPSHOT_DIR, STATE_FILE,
    TRAINING_FILE, WEIGHTS_FILE,
};
use imgseq_core::weights::{save_tensors, set_vars};
use imgseq_core::{Error, Result};
use imgseq_vqgan::config::VqConfig;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One point of the training history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogPoint {
    pub step: usize,
    /// Mean total loss over the steps since the previous point.
    pub loss: f64,
    /// Mean batch PSNR (dB, on [-1, 1] pixels, data range 2) since the previous point.
    pub psnr: f64,
    /// Distinct codes used since the previous point, and their perplexity.
    pub codes_used: usize,
    pub perplexity: f64,
    /// Codes re-seeded since the previous point.
    pub restarted: usize,
    pub img_per_s: f64,
    pub lr: f64,
    /// Training seconds of the run (across resumes) at this point; absent in runs logged
    /// by versions before 2026-11-29, whose time axis `scripts/vq_curve.py` rebuilds from `img_per_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Every loss term's mean since the previous point (absent in runs logged before
    /// 2026-12-03).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terms: Option<LossTerms>,
}

/// Progress of a run (saved as `state.json` at every checkpoint).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    pub step: usize,
    /// Training seconds so far (across resumes).
    pub seconds: f64,
    /// For every code, the last step at which some position used it.
    pub last_used: Vec<usize>,
    pub restarts_total: usize,
    pub history: Vec<LogPoint>,
    /// The step the weights' moving average (`TrainConfig::ema`) started at, if there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ema_since: Option<usize>,
}

/// Whether `out` holds a complete checkpoint to resume.
pub fn has_checkpoint(out: &Path) -> bool {
    RunDir::new(out).has_checkpoint()
}

/// The run files present in `out`.
pub fn run_files(out: &Path) -> Vec<&'static str> {
    RunDir::new(out).present()
}

/// [`RunDir::check_start`] for `out`.
pub fn check_start(out: &Path, resume: bool) -> Result<()> {
    RunDir::new(out).check_start(resume)
}

/// Removes the run files and the snapshots from `out` (only those: other files and the
/// folder stay).
pub fn clear_run(out: &Path) -> Result<()> {
    RunDir::new(out).clear()
}

/// Copies the checkpoint just written in `out` (weights, config, state) to
/// `out/snapshots/step-NNNNN/` ([`RunDir::snapshot`]).
pub fn snapshot(out: &Path, step: usize) -> Result<()> {
    RunDir::new(out).snapshot(step, &[WEIGHTS_FILE, CONFIG_FILE, STATE_FILE])
}

/// Writes the run folder's five files, `state.json` last (creating the folder at the first
/// checkpoint). With an `ema`, the model file holds the average and the optimizer file the
/// raw weights too; with a `gan`, the optimizer file holds its state as well.
#[allow(clippy::too_many_arguments)]
pub fn save(
    out: &Path,
    cfg: &VqConfig,
    tc: &TrainConfig,
    vars: &VarMap,
    opt: &AdamW,
    ema: Option<&Ema>,
    gan: Option<&Gan>,
    state: &TrainState,
) -> Result<()> {
    let run = RunDir::new(out);
    run.create()?;
    let named = sorted_vars(vars);
    let raw: Vec<(String, Tensor)> = named
        .iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
        .collect();
    let model = match ema {
        Some(e) => e.tensors(&named)?,
        None => raw.clone(),
    };
    save_tensors(run.file(WEIGHTS_FILE), model.iter().map(|(k, v)| (k, v)))?;
    write_bytes_atomic(run.file(CONFIG_FILE), cfg.to_json_string().as_bytes())?;
    run.write_training(tc)?;
    let mut st: Vec<(String, Tensor)> = opt.state()?.into_iter().collect();
    if ema.is_some() {
        st.extend(
            raw.into_iter()
                .map(|(k, v)| (format!("{RAW_PREFIX}{k}"), v)),
        );
    }
    if let Some(g) = gan {
        st.extend(g.state()?);
    }
    run.write_optimizer(st.iter().map(|(k, v)| (k, v)))?;
    run.write_state(state)
}

/// Loads the checkpoint in `out` into the model's variables (`named`, every one must be in
/// the file with its shape) and the optimizer, and returns its state and, when `ema_decay`
/// is positive, the weights' average. The codebook size and the optimizer's step are checked against
/// `state.json`. The variables get the raw weights: from the optimizer file when the run had
/// an average (`raw.<name>`), else from the model file — and an average asked for by a run
/// that had none starts at those weights now (`ema_since`); one given up on continues from
/// the raw weights. A `gan` is restored from the optimizer file when it holds one; one added
/// on resume keeps its fresh weights (and the run says so).
pub fn restore(
    out: &Path,
    n_embed: usize,
    named: &[(String, Var)],
    opt: &mut AdamW,
    ema_decay: f64,
    gan: Option<&mut Gan>,
) -> Result<(TrainState, Option<Ema>)> {
    let run = RunDir::new(out);
    let mut state: TrainState = run.read_state()?;
    if state.last_used.len() != n_embed {
        return Err(Error::format(
            run.file(STATE_FILE),
            format!(
                "`last_used` has {} entries, the model has {} codes",
                state.last_used.len(),
                n_embed
            ),
        ));
    }
    run.read_weights(named.iter().map(|(n, v)| (n.as_str(), v)))?;
    let st = run.read_optimizer(opt, state.step)?;
    if let Some(g) = gan {
        if Gan::in_file(&st) {
            g.restore(&run.file(OPTIM_FILE), &st)?;
        } else {
            eprintln!(
                "the run had no discriminator: it starts now, at step {}",
                state.step
            );
        }
    }
    let had_ema = st.keys().any(|k| k.starts_with(RAW_PREFIX));
    let ema = match (had_ema, ema_decay > 0.0) {
        (true, want) => {
            let ema = if want {
                Some(Ema::start(ema_decay, named)?)
            } else {
                state.ema_since = None;
                None
            };
            let raw: Vec<(String, &Var)> = named
                .iter()
                .map(|(n, v)| (format!("{RAW_PREFIX}{n}"), v))
                .collect();
            let opath = run.file(OPTIM_FILE);
            set_vars(&opath, &st, raw.iter().map(|(n, v)| (n.as_str(), *v)))?;
            ema
        }
        (false, true) => {
            state.ema_since = Some(state.step);
            Some(Ema::start(ema_decay, named)?)
        }
        (false, false) => None,
    };
    Ok((state, ema))
}
