//! The trainer skeleton every training loop shares: a run folder with one list of file names,
//! how a run starts, checkpoints and resumes, and the seeded initialisation of its weights.
//!
//! A run folder holds `model.safetensors` + `config.json` (the folder is a model),
//! `training.json` (the recipe), `optimizer.safetensors` (AdamW moments and step; with a
//! weight average, the raw weights under [`RAW_PREFIX`](crate::optim::RAW_PREFIX)),
//! `state.json` (progress, written last: its presence marks a complete checkpoint), and,
//! depending on the model, `eval.jsonl` and `snapshots/`. Runs whose recipe file is the older
//! `train.json` still resume: it is read when `training.json` is absent, and the next
//! checkpoint writes `training.json` in its place.

use crate::fsutil::{check_run_start, clear_run, present_files, read_json, write_json};
use crate::optim::AdamW;
use crate::weights::{load_tensors, save_tensors, set_vars};
use crate::{Error, Result};
use candle_core::{Device, Tensor, Var};
use candle_nn::VarMap;
use rand::Rng;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The model's weights (the folder loads as a model).
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// The model's config.
pub const CONFIG_FILE: &str = "config.json";
/// The recipe of the run.
pub const TRAINING_FILE: &str = "training.json";
/// The recipe's older name, read when [`TRAINING_FILE`] is absent.
pub const LEGACY_TRAINING_FILE: &str = "train.json";
/// AdamW moments and step.
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
/// Progress; written last at every checkpoint.
pub const STATE_FILE: &str = "state.json";
/// Held-out evaluations, one JSON object a line.
pub const EVAL_LOG: &str = "eval.jsonl";
/// Copies of the checkpoints of chosen steps.
pub const SNAPSHOT_DIR: &str = "snapshots";

/// The files of a run folder: the one list a new run checks and an overwrite removes.
pub const RUN_FILES: [&str; 7] = [
    WEIGHTS_FILE,
    CONFIG_FILE,
    TRAINING_FILE,
    LEGACY_TRAINING_FILE,
    OPTIMIZER_FILE,
    STATE_FILE,
    EVAL_LOG,
];

/// The names of one kind of run's files: the list a new run checks and an overwrite removes,
/// and the progress file whose presence marks a complete checkpoint.
#[derive(Debug, PartialEq, Eq)]
pub struct RunLayout {
    pub files: &'static [&'static str],
    pub state: &'static str,
    pub optimizer: &'static str,
    pub weights: &'static str,
}

/// The run folder of a model (ViT, VQGAN, GPT): [`RUN_FILES`].
pub const MODEL_RUN: RunLayout = RunLayout {
    files: &RUN_FILES,
    state: STATE_FILE,
    optimizer: OPTIMIZER_FILE,
    weights: WEIGHTS_FILE,
};

/// A training run's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    dir: PathBuf,
    layout: &'static RunLayout,
}

impl RunDir {
    /// A model's run folder ([`MODEL_RUN`]).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self::with_layout(dir, &MODEL_RUN)
    }

    /// A run folder whose files are named by `layout` (e.g. the ViT's CNN teacher, whose
    /// files sit beside a ViT run's in the same folder).
    pub fn with_layout(dir: impl Into<PathBuf>, layout: &'static RunLayout) -> Self {
        Self {
            dir: dir.into(),
            layout,
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The path of the run file `name`.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The recipe file to read: `training.json`, or `train.json` when only that one exists.
    pub fn training_path(&self) -> PathBuf {
        let new = self.file(TRAINING_FILE);
        let old = self.file(LEGACY_TRAINING_FILE);
        if !new.exists() && old.exists() {
            old
        } else {
            new
        }
    }

    /// Whether the folder holds a recipe (under either name).
    pub fn has_training(&self) -> bool {
        self.training_path().exists()
    }

    /// Reads the recipe ([`training_path`](Self::training_path)).
    pub fn read_training<T: DeserializeOwned>(&self) -> Result<T> {
        let path = self.training_path();
        let what = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(TRAINING_FILE);
        read_json(&path, what)
    }

    /// Writes the recipe as `training.json` (atomically), then removes an older `train.json`.
    pub fn write_training<T: Serialize>(&self, tc: &T) -> Result<()> {
        write_json(self.file(TRAINING_FILE), tc)?;
        let old = self.file(LEGACY_TRAINING_FILE);
        if old.exists() {
            std::fs::remove_file(&old).map_err(|e| Error::io(&old, e))?;
        }
        Ok(())
    }

    /// Whether the folder holds a complete checkpoint to resume.
    pub fn has_checkpoint(&self) -> bool {
        self.file(self.layout.state).is_file()
    }

    /// The run files present.
    pub fn present(&self) -> Vec<&'static str> {
        present_files(&self.dir, self.layout.files)
    }

    /// [`check_run_start`] for the run files: resuming needs a complete checkpoint, a new run
    /// a folder without run files.
    pub fn check_start(&self, resume: bool) -> Result<()> {
        check_run_start(&self.dir, self.layout.files, self.layout.state, resume)
    }

    /// Removes the run files and the snapshots (only those: other files and the folder stay).
    pub fn clear(&self) -> Result<()> {
        let snaps = self.file(SNAPSHOT_DIR);
        if snaps.is_dir() {
            std::fs::remove_dir_all(&snaps).map_err(|e| Error::io(&snaps, e))?;
        }
        clear_run(&self.dir, self.layout.files)
    }

    /// Creates the folder (at the first checkpoint: a run that fails before leaves nothing).
    pub fn create(&self) -> Result<()> {
        std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))
    }

    pub fn read_state<T: DeserializeOwned>(&self) -> Result<T> {
        read_json(self.file(self.layout.state), self.layout.state)
    }

    /// Writes the progress file (atomically): call it last, it marks the checkpoint complete.
    pub fn write_state<T: Serialize>(&self, state: &T) -> Result<()> {
        write_json(self.file(self.layout.state), state)
    }

    /// Writes the optimizer file from named tensors (atomically, in name order).
    pub fn write_optimizer<'a, K: AsRef<str>>(
        &self,
        tensors: impl IntoIterator<Item = (K, &'a Tensor)>,
    ) -> Result<()> {
        save_tensors(self.file(self.layout.optimizer), tensors)
    }

    /// Loads the optimizer file into `opt`, checks that its step is the state's `step`, and
    /// returns the file's tensors (which may hold more than the optimizer's own).
    pub fn read_optimizer(&self, opt: &mut AdamW, step: usize) -> Result<HashMap<String, Tensor>> {
        let path = self.file(self.layout.optimizer);
        let st = load_tensors(&path, &Device::Cpu)?;
        opt.load_state(&st).map_err(|m| Error::format(&path, m))?;
        if opt.step != step {
            return Err(Error::format(
                &path,
                format!(
                    "optimizer step {} differs from state.json step {step}",
                    opt.step
                ),
            ));
        }
        Ok(st)
    }

    /// The tensors of the run's weights file.
    pub fn load_weights(&self) -> Result<HashMap<String, Tensor>> {
        load_tensors(self.file(self.layout.weights), &Device::Cpu)
    }

    /// Writes the run's weights file from named tensors (atomically, in name order).
    pub fn write_weights<'a, K: AsRef<str>>(
        &self,
        tensors: impl IntoIterator<Item = (K, &'a Tensor)>,
    ) -> Result<()> {
        save_tensors(self.file(self.layout.weights), tensors)
    }

    /// The tensors of the run's optimizer file (for optimizers other than [`AdamW`]; see
    /// [`read_optimizer`](Self::read_optimizer)).
    pub fn load_optimizer(&self) -> Result<HashMap<String, Tensor>> {
        load_tensors(self.file(self.layout.optimizer), &Device::Cpu)
    }

    /// Sets `vars` from the weights file: every one must be there with its shape.
    pub fn read_weights<'a>(
        &self,
        vars: impl IntoIterator<Item = (&'a str, &'a Var)>,
    ) -> Result<()> {
        let path = self.file(self.layout.weights);
        let saved = load_tensors(&path, &Device::Cpu)?;
        set_vars(&path, &saved, vars)
    }

    /// Copies the run files `files` of the checkpoint just written to
    /// `snapshots/step-NNNNN/`, whole or not at all (written beside it, then renamed). A
    /// snapshot already there is kept: a resumed run that passes the same step again
    /// re-trained it from the same checkpoint.
    pub fn snapshot(&self, step: usize, files: &[&str]) -> Result<()> {
        let dir = self.file(SNAPSHOT_DIR);
        let dst = dir.join(format!("step-{step:05}"));
        if dst.is_dir() {
            return Ok(());
        }
        let tmp = dir.join(format!(".step-{step:05}.part"));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
        }
        std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
        for f in files {
            let (from, to) = (self.file(f), tmp.join(f));
            std::fs::copy(&from, &to).map_err(|e| Error::io(&from, e))?;
        }
        std::fs::rename(&tmp, &dst).map_err(|e| Error::io(&dst, e))
    }

    /// Whether a run at `step` of `steps` has nothing left to do (then says so on stderr).
    pub fn finished(&self, step: usize, steps: usize) -> bool {
        if step < steps {
            return false;
        }
        eprintln!("{}: already at step {step} of {steps}", self.dir.display());
        true
    }

    /// Says on stderr that the run resumes at `step` of `steps`.
    pub fn announce_resume(&self, step: usize, steps: usize) {
        eprintln!("resuming {} at step {step} of {steps}", self.dir.display());
    }
}

/// Whether a checkpoint is due after `step` steps: every `every` steps (0: only at `last`),
/// and at `last`.
pub fn checkpoint_due(step: usize, every: usize, last: usize) -> bool {
    step == last || (every > 0 && step.is_multiple_of(every))
}

/// The variables of a `VarMap` sorted by name: the order they are initialised and saved in.
pub fn sorted_vars(vars: &VarMap) -> Vec<(String, Var)> {
    let data = vars.data().lock().expect("poisoned");
    let mut v: Vec<(String, Var)> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// How one variable starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// Every element this value.
    Fill(f32),
    /// Uniform on [−b, b].
    Uniform(f32),
    /// Normal with mean 0 and this standard deviation ([`normal`]).
    Normal(f64),
}

/// Sets every variable of `vars`, in name order, as `rule(name, dims)` says, drawing from
/// `rng` (so the weights are a function of the generator's seed).
pub fn init_vars<R: Rng>(
    vars: &VarMap,
    rng: &mut R,
    rule: impl Fn(&str, &[usize]) -> Init,
) -> Result<()> {
    for (name, var) in sorted_vars(vars) {
        let shape = var.as_tensor().shape().clone();
        let n = shape.elem_count();
        let vals: Vec<f32> = match rule(&name, shape.dims()) {
            Init::Fill(x) => vec![x; n],
            Init::Uniform(b) => (0..n).map(|_| rng.random_range(-b..=b)).collect(),
            Init::Normal(std) => (0..n).map(|_| (normal(rng) * std) as f32).collect(),
        };
        var.set(&Tensor::from_vec(vals, shape, var.as_tensor().device())?)?;
    }
    Ok(())
}

/// A standard normal draw (Box–Muller), so seeded draws depend only on `rand`'s uniform
/// stream.
pub fn normal(rng: &mut impl Rng) -> f64 {
    let u1: f64 = rng.random::<f64>().max(1e-300);
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::DType;
    use candle_nn::VarBuilder;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn an_old_train_json_run_is_read_and_its_next_checkpoint_renames_it() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::new(dir.path());
        std::fs::write(run.file(LEGACY_TRAINING_FILE), "{\"steps\": 3}").unwrap();
        assert!(run.has_training());
        assert_eq!(run.training_path(), run.file(LEGACY_TRAINING_FILE));
        let tc: serde_json::Value = run.read_training().unwrap();
        assert_eq!(tc["steps"], 3);
        // An old run folder counts as a run: a new run refuses it, --overwrite clears it.
        assert!(run.check_start(false).is_err());
        run.write_training(&tc).unwrap();
        assert!(run.file(TRAINING_FILE).is_file());
        assert!(!run.file(LEGACY_TRAINING_FILE).exists());
        assert_eq!(run.training_path(), run.file(TRAINING_FILE));
        run.clear().unwrap();
        assert!(run.present().is_empty());
    }

    #[test]
    fn a_bad_recipe_names_its_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::new(dir.path());
        std::fs::write(run.file(LEGACY_TRAINING_FILE), "{").unwrap();
        let e = run.read_training::<serde_json::Value>().unwrap_err();
        assert!(e.to_string().contains("not a valid train.json"), "{e}");
    }

    #[test]
    fn resume_needs_state_json_and_a_new_run_an_empty_folder() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::new(dir.path().join("run"));
        assert!(run.check_start(false).is_ok());
        assert!(run.check_start(true).is_err());
        run.create().unwrap();
        run.write_state(&serde_json::json!({"step": 1})).unwrap();
        assert!(run.has_checkpoint());
        assert!(run.check_start(true).is_ok());
        assert!(run.check_start(false).is_err());
    }

    #[test]
    fn checkpoints_fall_on_multiples_and_the_last_step() {
        let due: Vec<usize> = (1..=10).filter(|&s| checkpoint_due(s, 4, 10)).collect();
        assert_eq!(due, [4, 8, 10]);
        assert!(checkpoint_due(7, 0, 7) && !checkpoint_due(3, 0, 7));
    }

    #[test]
    fn the_normal_sampler_is_seeded_and_standard() {
        let draw = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..20_000).map(|_| normal(&mut rng)).collect::<Vec<_>>()
        };
        let (a, b) = (draw(5), draw(5));
        assert_eq!(a, b);
        let mean = a.iter().sum::<f64>() / a.len() as f64;
        let var = a.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / a.len() as f64;
        assert!(
            mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
    }

    #[test]
    fn init_follows_the_rule_in_name_order() {
        let vars = VarMap::new();
        let vb = VarBuilder::from_varmap(&vars, DType::F32, &Device::Cpu);
        vb.get((2, 3), "b.weight").unwrap();
        vb.get(4, "a.bias").unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        init_vars(&vars, &mut rng, |name, dims| {
            if name.ends_with("bias") {
                Init::Fill(0.5)
            } else {
                Init::Uniform(1.0 / dims[1] as f32)
            }
        })
        .unwrap();
        let named = sorted_vars(&vars);
        assert_eq!(named[0].0, "a.bias");
        let bias = named[0].1.as_tensor().to_vec1::<f32>().unwrap();
        assert_eq!(bias, [0.5; 4]);
        let w = named[1].1.as_tensor().flatten_all().unwrap();
        let w = w.to_vec1::<f32>().unwrap();
        assert!(w.iter().all(|x| x.abs() <= 1.0 / 3.0));
    }
}
