//! A run folder: everything needed to use or resume a training run.
//!
//! `model.safetensors` (taming names, loads with [`crate::load_model`]; with an EMA, the
//! averaged weights) + `config.json` ([`VqConfig`]), `train.json` ([`TrainConfig`]),
//! `optimizer.safetensors` (AdamW moments; with an EMA also the raw weights as `raw.<name>`)
//! and `state.json` ([`TrainState`]: step, code usage, history), written in that order:
//! `state.json` last marks a complete checkpoint.

use super::config::TrainConfig;
use super::ema::Ema;
use crate::config::VqConfig;
use candle_core::{Device, Tensor, Var};
use candle_nn::VarMap;
use imgseq_core::fsutil::{read_json, write_bytes_atomic, write_json};
use imgseq_core::optim::{AdamW, RAW_PREFIX};
use imgseq_core::weights::{load_tensors, save_tensors, set_vars};
use imgseq_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const WEIGHTS_FILE: &str = "model.safetensors";
pub const CONFIG_FILE: &str = "config.json";
pub const TRAIN_FILE: &str = "train.json";
pub const OPTIM_FILE: &str = "optimizer.safetensors";
pub const STATE_FILE: &str = "state.json";

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
    /// before session 12, whose time axis `scripts/vq_curve.py` rebuilds from `img_per_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
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
    out.join(STATE_FILE).is_file()
}

/// The files of a run folder.
pub const RUN_FILES: [&str; 5] = [
    WEIGHTS_FILE,
    CONFIG_FILE,
    TRAIN_FILE,
    OPTIM_FILE,
    STATE_FILE,
];

/// The run files present in `out`.
pub fn run_files(out: &Path) -> Vec<&'static str> {
    imgseq_core::fsutil::present_files(out, &RUN_FILES)
}

/// [`imgseq_core::fsutil::check_run_start`] for this run folder's files.
pub fn check_start(out: &Path, resume: bool) -> Result<()> {
    imgseq_core::fsutil::check_run_start(out, &RUN_FILES, STATE_FILE, resume)
}

/// Removes the run files and the snapshots from `out` (only those: other files and the
/// folder stay).
pub fn clear_run(out: &Path) -> Result<()> {
    let snaps = out.join(SNAPSHOT_DIR);
    if snaps.is_dir() {
        std::fs::remove_dir_all(&snaps).map_err(|e| Error::io(&snaps, e))?;
    }
    imgseq_core::fsutil::clear_run(out, &RUN_FILES)
}

/// The folder of a run's model snapshots (`TrainConfig::snapshot_every`).
pub const SNAPSHOT_DIR: &str = "snapshots";

/// Copies the checkpoint just written in `out` (weights, config, state) to
/// `out/snapshots/step-NNNNN/`, whole or not at all (written beside it, then renamed).
/// A snapshot already there is kept: a resumed run that passes the same step again
/// re-trained it from the same checkpoint.
pub fn snapshot(out: &Path, step: usize) -> Result<()> {
    let dir = out.join(SNAPSHOT_DIR);
    let dst = dir.join(format!("step-{step:05}"));
    if dst.is_dir() {
        return Ok(());
    }
    let tmp = dir.join(format!(".step-{step:05}.part"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    for f in [WEIGHTS_FILE, CONFIG_FILE, STATE_FILE] {
        let (from, to) = (out.join(f), tmp.join(f));
        std::fs::copy(&from, &to).map_err(|e| Error::io(&from, e))?;
    }
    std::fs::rename(&tmp, &dst).map_err(|e| Error::io(&dst, e))
}

/// The model's variables sorted by name (the order they are saved and initialised in).
pub fn sorted_vars(vars: &VarMap) -> Vec<(String, Var)> {
    let data = vars.data().lock().expect("poisoned");
    let mut v: Vec<(String, Var)> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Writes the run folder's five files, `state.json` last (creating the folder at the first
/// checkpoint). With an `ema`, the model file holds the average and the optimizer file the
/// raw weights too.
pub fn save(
    out: &Path,
    cfg: &VqConfig,
    tc: &TrainConfig,
    vars: &VarMap,
    opt: &AdamW,
    ema: Option<&Ema>,
    state: &TrainState,
) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let named = sorted_vars(vars);
    let raw: Vec<(String, Tensor)> = named
        .iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
        .collect();
    let model = match ema {
        Some(e) => e.tensors(&named)?,
        None => raw.clone(),
    };
    save_tensors(out.join(WEIGHTS_FILE), model.iter().map(|(k, v)| (k, v)))?;
    write_bytes_atomic(out.join(CONFIG_FILE), cfg.to_json_string().as_bytes())?;
    tc.save(&out.join(TRAIN_FILE))?;
    let mut st: Vec<(String, Tensor)> = opt.state()?.into_iter().collect();
    if ema.is_some() {
        st.extend(
            raw.into_iter()
                .map(|(k, v)| (format!("{RAW_PREFIX}{k}"), v)),
        );
    }
    st.sort_by(|a, b| a.0.cmp(&b.0));
    save_tensors(out.join(OPTIM_FILE), st.iter().map(|(k, v)| (k, v)))?;
    write_json(out.join(STATE_FILE), state)
}

/// Loads the checkpoint in `out` into the model's variables (`named`, every one must be in
/// the file with its shape) and the optimizer, and returns its state and, when `ema_decay`
/// is positive, the weights' average. The codebook size and the optimizer's step are checked against
/// `state.json`. The variables get the raw weights: from the optimizer file when the run had
/// an average (`raw.<name>`), else from the model file — and an average asked for by a run
/// that had none starts at those weights now (`ema_since`); one given up on continues from
/// the raw weights.
pub fn restore(
    out: &Path,
    n_embed: usize,
    named: &[(String, Var)],
    opt: &mut AdamW,
    ema_decay: f64,
) -> Result<(TrainState, Option<Ema>)> {
    let state_path = out.join(STATE_FILE);
    let mut state: TrainState = read_json(&state_path, STATE_FILE)?;
    if state.last_used.len() != n_embed {
        return Err(Error::format(
            &state_path,
            format!(
                "`last_used` has {} entries, the model has {} codes",
                state.last_used.len(),
                n_embed
            ),
        ));
    }
    let wpath = out.join(WEIGHTS_FILE);
    let saved = load_tensors(&wpath, &Device::Cpu)?;
    set_vars(&wpath, &saved, named.iter().map(|(n, v)| (n.as_str(), v)))?;
    let opath = out.join(OPTIM_FILE);
    let st = load_tensors(&opath, &Device::Cpu)?;
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
            set_vars(&opath, &st, raw.iter().map(|(n, v)| (n.as_str(), *v)))?;
            ema
        }
        (false, true) => {
            state.ema_since = Some(state.step);
            Some(Ema::start(ema_decay, named)?)
        }
        (false, false) => None,
    };
    opt.load_state(&st).map_err(|m| Error::format(&opath, m))?;
    if opt.step != state.step {
        return Err(Error::format(
            &opath,
            format!(
                "optimizer step {} differs from state.json step {}",
                opt.step, state.step
            ),
        ));
    }
    Ok((state, ema))
}
