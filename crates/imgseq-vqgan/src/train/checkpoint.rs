//! A run folder: everything needed to use or resume a training run.
//!
//! `model.safetensors` (taming names, loads with [`crate::load_model`]) + `config.json`
//! ([`VqConfig`]), `train.json` ([`TrainConfig`]), `optimizer.safetensors` (AdamW moments)
//! and `state.json` ([`TrainState`]: step, code usage, history), written in that order:
//! `state.json` last marks a complete checkpoint.

use super::config::TrainConfig;
use crate::config::VqConfig;
use candle_core::{Device, Tensor, Var};
use candle_nn::VarMap;
use imgseq_core::fsutil::{read_json, write_bytes_atomic, write_json};
use imgseq_core::optim::AdamW;
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
/// checkpoint).
pub fn save(
    out: &Path,
    cfg: &VqConfig,
    tc: &TrainConfig,
    vars: &VarMap,
    opt: &AdamW,
    state: &TrainState,
) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let tensors: Vec<(String, Tensor)> = sorted_vars(vars)
        .into_iter()
        .map(|(k, v)| (k, v.as_tensor().clone()))
        .collect();
    save_tensors(out.join(WEIGHTS_FILE), tensors.iter().map(|(k, v)| (k, v)))?;
    write_bytes_atomic(out.join(CONFIG_FILE), cfg.to_json_string().as_bytes())?;
    tc.save(&out.join(TRAIN_FILE))?;
    let mut st: Vec<(String, Tensor)> = opt.state()?.into_iter().collect();
    st.sort_by(|a, b| a.0.cmp(&b.0));
    save_tensors(out.join(OPTIM_FILE), st.iter().map(|(k, v)| (k, v)))?;
    write_json(out.join(STATE_FILE), state)
}

/// Loads the checkpoint in `out` into the model's variables (`named`, every one must be in
/// the file with its shape) and the optimizer, and returns its state. The codebook size and
/// the optimizer's step are checked against `state.json`.
pub fn restore(
    out: &Path,
    n_embed: usize,
    named: &[(String, Var)],
    opt: &mut AdamW,
) -> Result<TrainState> {
    let state_path = out.join(STATE_FILE);
    let state: TrainState = read_json(&state_path, STATE_FILE)?;
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
    opt.load_state(&load_tensors(&opath, &Device::Cpu)?)
        .map_err(|m| Error::format(&opath, m))?;
    if opt.step != state.step {
        return Err(Error::format(
            &opath,
            format!(
                "optimizer step {} differs from state.json step {}",
                opt.step, state.step
            ),
        ));
    }
    Ok(state)
}
