//! A ViT training run's folder: its settings ([`TrainConfig`], `training.json`), its files and
//! its progress ([`TrainState`]). Read by training, evaluation and inference alike.

use imgseq_core::fsutil::{read_json, write_json};
use imgseq_core::run::RunDir;
pub use imgseq_core::run::{OPTIMIZER_FILE, RUN_FILES, STATE_FILE, TRAINING_FILE};
use imgseq_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::checkpoint::CONFIG_FILE;
use crate::config::ViTConfig;
use crate::data::{Augment, ImageSet, Normalize};

/// Everything that defines a training run (saved as `training.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Where the data came from (for the record): e.g. "fashion-mnist".
    pub dataset: String,
    /// Size of the dataset images before centre padding to the model's `image_size`
    /// (28 for Fashion-MNIST in a 32×32 model); user images are letterboxed to this size.
    #[serde(default)]
    pub input_size: Option<usize>,
    pub epochs: usize,
    pub batch_size: usize,
    /// Peak learning rate of AdamW.
    pub lr: f64,
    pub min_lr: f64,
    pub weight_decay: f64,
    pub warmup_epochs: f64,
    pub label_smoothing: f64,
    pub seed: u64,
    /// Decay of the exponential moving average of the weights, updated after every step
    /// (0 = off). With it the EMA weights are what each epoch evaluates and what
    /// `model.safetensors` holds; the raw weights go to `optimizer.safetensors` for resuming.
    #[serde(default)]
    pub ema: f64,
    /// A teacher's class probabilities for the training images (`vit teacher`'s
    /// `soft_labels.npy`, (n_train, classes) f32, in the training set's order), or `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft_labels: Option<String>,
    /// Weight α of the teacher in each image's target: (1 − α)·one-hot(label) + α·teacher's
    /// probabilities (DeiT's soft distillation into the CLS head; cross-entropy is linear in
    /// the target, so this is the mix of the two losses). Used with `soft_labels`.
    #[serde(default)]
    pub distill: f64,
    pub augment: Augment,
    #[serde(flatten)]
    pub normalize: Normalize,
}

impl TrainConfig {
    /// The recipe of the shipped Fashion-MNIST default.
    pub fn fashion_mnist_default(normalize: Normalize) -> Self {
        Self {
            dataset: "fashion-mnist".into(),
            input_size: Some(28),
            epochs: 30,
            batch_size: 128,
            lr: 2e-3,
            min_lr: 1e-5,
            weight_decay: 0.05,
            warmup_epochs: 2.0,
            label_smoothing: 0.1,
            seed: 0,
            ema: 0.0,
            soft_labels: None,
            distill: 0.5,
            augment: Augment::default(),
            normalize,
        }
    }

    /// Reads and validates ([`validate`](Self::validate)) a `training.json`; a bad value is
    /// an error naming the file.
    pub fn load(path: &Path) -> Result<Self> {
        let tc: Self = read_json(path, TRAINING_FILE)?;
        tc.validate()
            .map_err(|e| Error::format(path, e.to_string()))?;
        Ok(tc)
    }

    /// Checks every number of the recipe; a bad one is an error naming its setting
    /// (`batch_size 0 must be positive`). The one owner of these rules: a new run's options
    /// and a resumed `training.json` both go through it.
    pub fn validate(&self) -> Result<()> {
        let positive = |name: &'static str, v: usize| {
            if v == 0 {
                return Err(Error::setting(name, v, "must be positive"));
            }
            Ok(())
        };
        positive("epochs", self.epochs)?;
        positive("batch_size", self.batch_size)?;
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(Error::setting("lr", self.lr, "must be a positive number"));
        }
        for (name, v) in [
            ("min_lr", self.min_lr),
            ("weight_decay", self.weight_decay),
            ("warmup_epochs", self.warmup_epochs),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(Error::setting(name, v, "must be a number ≥ 0"));
            }
        }
        if !(0.0..1.0).contains(&self.label_smoothing) {
            return Err(Error::setting(
                "label_smoothing",
                self.label_smoothing,
                "must be in [0, 1)",
            ));
        }
        if !(0.0..=1.0).contains(&self.distill) {
            return Err(Error::setting("distill", self.distill, "must be in [0, 1]"));
        }
        if !(0.0..1.0).contains(&self.ema) {
            return Err(Error::setting(
                "ema",
                self.ema,
                "must be in [0, 1) (0 = off)",
            ));
        }
        if !(0.0..=1.0).contains(&self.augment.erase_prob) {
            return Err(Error::setting(
                "erase_prob",
                self.augment.erase_prob,
                "must be a probability in [0, 1]",
            ));
        }
        if let Some(s) = self.input_size {
            positive("input_size", s)?;
        }
        let n = &self.normalize;
        if n.image_mean.len() != n.image_std.len()
            || n.image_mean.iter().any(|m| !m.is_finite())
            || n.image_std.iter().any(|s| !(*s > 0.0 && s.is_finite()))
        {
            return Err(Error::invalid(format!(
                "image_mean {:?} / image_std {:?}: one finite mean and one positive std per \
                 channel are needed",
                n.image_mean, n.image_std
            )));
        }
        Ok(())
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        write_json(path, self)
    }

    /// Side of the image content before centre padding to the model's `image_size`: the
    /// recorded `input_size`, else the whole canvas.
    pub fn content_size(&self, cfg: &ViTConfig) -> usize {
        self.input_size.unwrap_or(cfg.image_size)
    }

    /// [`check_train_set`](Self::check_train_set), and the test set (every epoch is scored
    /// on it) must not be empty.
    pub fn check_sets(&self, train_set: &ImageSet, test_set: &ImageSet) -> Result<()> {
        self.check_train_set(train_set)?;
        if test_set.n == 0 {
            return Err(Error::invalid(
                "the test set has no images (every epoch is scored on it)",
            ));
        }
        Ok(())
    }

    /// Checks the recipe ([`validate`](Self::validate)) and that `train_set` fills at least
    /// one batch.
    pub fn check_train_set(&self, train_set: &ImageSet) -> Result<()> {
        self.validate()?;
        if train_set.n < self.batch_size {
            return Err(Error::invalid(format!(
                "the training set has {} images, fewer than one batch of {}",
                train_set.n, self.batch_size
            )));
        }
        Ok(())
    }
}

/// The shipped default's recipe ([`TrainConfig::fashion_mnist_default`]) with HF's default
/// normalisation for one channel ([`Normalize::hf_default`]); a new run replaces `normalize`
/// with its data's statistics.
impl Default for TrainConfig {
    fn default() -> Self {
        Self::fashion_mnist_default(Normalize::hf_default(1))
    }
}

/// The model config and training config of the run in `dir`, or `None` when `dir` holds no
/// `training.json` (nothing to resume; an older run's `train.json` is read too).
pub fn load_run(dir: &Path) -> Result<Option<(ViTConfig, TrainConfig)>> {
    let run = RunDir::new(dir);
    if !run.has_training() {
        return Ok(None);
    }
    let tc = TrainConfig::load(&run.training_path())?;
    let cfg = ViTConfig::load(dir.join(CONFIG_FILE))?;
    Ok(Some((cfg, tc)))
}

/// The run files present in `dir` ([`RunDir::present`]).
pub fn run_files(dir: &Path) -> Vec<&'static str> {
    RunDir::new(dir).present()
}

/// [`RunDir::check_start`]: resuming needs a complete checkpoint, a new run a folder without
/// run files.
pub fn check_start(out: &Path, resume: bool) -> Result<()> {
    RunDir::new(out).check_start(resume)
}

/// Removes the run files from `out` (only those: other files and the folder stay).
pub fn clear_run(out: &Path) -> Result<()> {
    RunDir::new(out).clear()
}

/// Progress of a run (saved as `state.json` after every epoch).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TrainState {
    pub epochs_done: usize,
    pub steps_done: usize,
    /// Test accuracy after each epoch.
    pub test_accuracy: Vec<f64>,
    pub train_loss: Vec<f64>,
    /// Training seconds spent so far (across resumes).
    pub seconds: f64,
}
