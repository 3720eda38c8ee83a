//! `training.json`: everything that defines a training run, and the recipe of the shipped model.

use super::gan::GanConfig;
use super::loss::LossWeights;
use imgseq_core::fsutil::{read_json, write_json};
use imgseq_core::{Error, Result};
use imgseq_vqgan::config::VqConfig;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

fn positive(name: &'static str, v: usize) -> Result<()> {
    if v == 0 {
        return Err(Error::setting(name, v, "must be positive"));
    }
    Ok(())
}

/// Everything that defines a training run (saved as `training.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Image folder, or a text file with one image path per line (relative paths are taken
    /// from the file's folder).
    pub data: PathBuf,
    /// Side of the square random crops.
    pub crop: usize,
    /// Images are cached with their shorter side resized to `max(resize, crop)`; crops are
    /// taken from that (384 = the size the model is evaluated at).
    pub resize: usize,
    pub batch_size: usize,
    /// Second stage: from step `context_from` on (0: never), crops of side `context_crop` in
    /// batches of `context_batch_size`. Small crops are cheap but the middle-block attention
    /// and the GroupNorms then only ever see 6×6 latents; a model trained on 96² crops alone
    /// rebuilt the 384² training images at 14 dB while its 96² crops were at 21 dB. (384² crops
    /// in batches of 1 — exactly the evaluation geometry — overfit the 16 photos: 22 dB on
    /// them, held-out down from 19.3 to 18.8 dB.)
    #[serde(default)]
    pub context_from: usize,
    #[serde(default)]
    pub context_crop: usize,
    #[serde(default)]
    pub context_batch_size: usize,
    /// Total optimiser steps.
    pub steps: usize,
    /// Peak learning rate (Adam, β = (`beta1`, `beta2`), taming: (0.5, 0.9)).
    pub lr: f64,
    /// Learning rate at the end of the cosine decay.
    pub min_lr: f64,
    pub warmup: usize,
    pub beta1: f64,
    pub beta2: f64,
    pub weight_decay: f64,
    /// Weight of mean |x̂ − x|.
    pub l1: f64,
    /// Weight of mean (x̂ − x)².
    pub l2: f64,
    /// Weight of the image-gradient L1 (sharpening) term.
    pub sharp: f64,
    /// Weight of taming's codebook + commitment loss.
    pub codebook: f64,
    /// Weight of the LPIPS perceptual term (taming: 1.0); it is used only when `lpips_vgg`
    /// and `lpips_heads` name its weights ([`super::lpips`]), else the run says so and goes
    /// on without it.
    #[serde(default)]
    pub perceptual: f64,
    /// VGG16 weights (torchvision's `features.N.*`) and LPIPS heads (`linK.model.1.weight`)
    /// for the perceptual term: `.pth` or `.safetensors`, may be the same file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lpips_vgg: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lpips_heads: Option<PathBuf>,
    /// The adversarial loss (taming's PatchGAN, [`super::gan`]); off while
    /// `gan.disc_weight` is 0.
    #[serde(default)]
    pub gan: GanConfig,
    /// Random horizontal flips.
    pub hflip: bool,
    /// Random order of the colour channels per crop (6 colourings of each crop; with 16
    /// training photos the model otherwise learns their palettes, not colour).
    #[serde(default)]
    pub shuffle_channels: bool,
    /// More copies of every training image, shorter side resized to each of these sizes
    /// (scale augmentation: zoomed-in views of the same photos).
    #[serde(default)]
    pub extra_scales: Vec<usize>,
    /// Encoder outputs collected for the k-means codebook initialisation (0: keep taming's
    /// uniform(−1/n, 1/n) init).
    pub kmeans_rows: usize,
    /// Steps trained as a plain autoencoder (the quantizer bypassed) before the codebook is
    /// initialised by k-means of the *trained* encoder's outputs; 0: k-means at step 0.
    #[serde(default)]
    pub ae_warmup: usize,
    pub kmeans_iters: usize,
    /// A code unused for this many steps is dead (0: no restarts).
    pub dead_after: usize,
    /// Dead codes are looked for every this many steps.
    pub restart_every: usize,
    /// Write a checkpoint every this many steps (and at the end).
    pub checkpoint_every: usize,
    /// Also keep a copy of the model every this many steps in `snapshots/step-NNNNN/`
    /// (weights, config, state): the points of the held-out PSNR-against-CPU-hours curve
    /// (`scripts/vq_curve.py`); 0 = none.
    #[serde(default)]
    pub snapshot_every: usize,
    /// Decay of an exponential moving average of the weights, updated after every step
    /// (0 = none; 0.999 averages over ~1,000 steps). With one, the average is the run's model
    /// (`model.safetensors`, the snapshots) and the raw weights go on training
    /// (`optimizer.safetensors`, `raw.<name>`); re-seeded codes enter the average unaveraged
    /// ([`super::ema`]). Given on a resume of a run without one, it starts there.
    #[serde(default)]
    pub ema: f64,
    /// Train the decoder side only (`post_quant_conv` and `decoder.*`): the encoder,
    /// `quant_conv` and the codebook stay as they are, so the tokens of every image stay
    /// exactly the same and only their pictures change (fine-tuning a trained model's
    /// decoder, e.g. with the adversarial loss). Needs a trained model: a resumed run.
    #[serde(default)]
    pub freeze_encoder: bool,
    /// A new run that starts from a trained model's weights (its folder or its
    /// `.safetensors`) instead of random ones: no autoencoder warm-up, no k-means codebook
    /// initialisation, a fresh optimizer. Recorded for provenance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_from: Option<PathBuf>,
    /// Record a history point (and a log line when stderr is not a terminal) every this many
    /// steps; 0 = every ~1% of the run.
    pub log_every: usize,
    pub seed: u64,
}

impl TrainConfig {
    /// The shipped `small` model's recipe, cleaned up (`weights/vqgan/README.md` has it as
    /// it was steered): 96² crops in batches of 8, the first 2,000 steps as a plain
    /// autoencoder (then a k-means codebook of its encoder's outputs), 256² crops in batches
    /// of 2 from step 4,101, augmentation (channel order, 512/640 px copies) from step 1,
    /// 7,000 steps. Run from scratch on the 37 photos it was at 15.6 dB held-out at step 2,500.
    pub fn default_for(data: impl Into<PathBuf>) -> Self {
        Self {
            data: data.into(),
            crop: 96,
            resize: 384,
            batch_size: 8,
            context_from: 4100,
            context_crop: 256,
            context_batch_size: 2,
            steps: 7000,
            lr: 1e-3,
            min_lr: 1e-4,
            warmup: 100,
            beta1: 0.9,
            beta2: 0.99,
            weight_decay: 0.0,
            l1: 1.0,
            l2: 1.0,
            sharp: 1.0,
            codebook: 1.0,
            perceptual: 1.0,
            lpips_vgg: None,
            lpips_heads: None,
            gan: GanConfig::default(),
            hflip: true,
            shuffle_channels: true,
            extra_scales: vec![512, 640],
            kmeans_rows: 8192,
            kmeans_iters: 10,
            ae_warmup: 2000,
            dead_after: 200,
            restart_every: 25,
            checkpoint_every: 250,
            snapshot_every: 0,
            ema: 0.0,
            freeze_encoder: false,
            init_from: None,
            log_every: 0,
            seed: 0,
        }
    }

    /// The recipe of the shipped Fashion-MNIST tokenizer (`fmnist_f4`), used for IDX data:
    /// whole 32×32 canvases (the 28×28 images centred, as the ViT sees them) in batches of 32,
    /// random flips, no colour shuffling or extra scales, 200 autoencoder steps before the
    /// k-means codebook init, ~35 minutes on 2 cores.
    pub fn fmnist_for(data: impl Into<PathBuf>) -> Self {
        Self {
            data: data.into(),
            crop: 32,
            resize: 32,
            batch_size: 32,
            context_from: 0,
            context_crop: 0,
            context_batch_size: 0,
            steps: 2000,
            lr: 1e-3,
            min_lr: 1e-4,
            warmup: 100,
            beta1: 0.9,
            beta2: 0.99,
            weight_decay: 0.0,
            l1: 1.0,
            l2: 1.0,
            sharp: 1.0,
            codebook: 1.0,
            perceptual: 0.0,
            lpips_vgg: None,
            lpips_heads: None,
            gan: GanConfig::default(),
            hflip: true,
            shuffle_channels: false,
            extra_scales: vec![],
            kmeans_rows: 8192,
            kmeans_iters: 10,
            ae_warmup: 200,
            dead_after: 100,
            restart_every: 25,
            checkpoint_every: 100,
            snapshot_every: 0,
            ema: 0.0,
            freeze_encoder: false,
            init_from: None,
            log_every: 20,
            seed: 0,
        }
    }

    /// (crop side, batch size) of the step with 0-based index `step`.
    pub fn crop_at(&self, step: usize) -> (usize, usize) {
        if self.context_from > 0 && step >= self.context_from {
            (self.context_crop, self.context_batch_size)
        } else {
            (self.crop, self.batch_size)
        }
    }

    /// The largest crop the run takes (images are cached at least this large).
    pub fn max_crop(&self) -> usize {
        if self.context_from > 0 && self.context_from < self.steps {
            self.crop.max(self.context_crop)
        } else {
            self.crop
        }
    }

    pub fn load(path: &Path) -> Result<Self> {
        let what = path.file_name().and_then(|n| n.to_str());
        read_json(path, what.unwrap_or(imgseq_core::run::TRAINING_FILE))
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        write_json(path, self)
    }

    /// Checks the numbers against the model: every setting is named as its field is. The one
    /// owner of these rules: a new run's options and a resumed `training.json` both go through it.
    pub fn validate(&self, cfg: &VqConfig) -> Result<()> {
        cfg.check_side("crop", self.crop)?;
        if self.context_from > 0 {
            cfg.check_side("context_crop", self.context_crop)?;
            positive("context_batch_size", self.context_batch_size)?;
        }
        positive("batch_size", self.batch_size)?;
        positive("steps", self.steps)?;
        positive("resize", self.resize)?;
        if self.kmeans_rows > 0 {
            positive("kmeans_iters", self.kmeans_iters)?;
        }
        if let Some(&s) = self.extra_scales.iter().find(|&&s| s == 0) {
            return Err(Error::setting("extra_scales", s, "must be positive sizes"));
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(Error::setting("lr", self.lr, "must be positive"));
        }
        if !(self.min_lr >= 0.0 && self.min_lr.is_finite()) {
            return Err(Error::setting("min_lr", self.min_lr, "must be ≥ 0"));
        }
        if !(self.weight_decay >= 0.0 && self.weight_decay.is_finite()) {
            return Err(Error::setting(
                "weight_decay",
                self.weight_decay,
                "must be ≥ 0",
            ));
        }
        if !(0.0..1.0).contains(&self.ema) {
            return Err(Error::setting(
                "ema",
                self.ema,
                "must be in [0, 1) (0 = off)",
            ));
        }
        for (n, b) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&b) {
                return Err(Error::setting(n, b, "must be in [0, 1)"));
            }
        }
        self.check_memory(cfg)?;
        for (n, w) in [
            ("l1", self.l1),
            ("l2", self.l2),
            ("sharp", self.sharp),
            ("codebook", self.codebook),
            ("perceptual", self.perceptual),
        ] {
            if !(w >= 0.0 && w.is_finite()) {
                return Err(Error::setting(n, w, "must be ≥ 0"));
            }
        }
        if self.lpips_vgg.is_some() != self.lpips_heads.is_some() {
            return Err(Error::setting(
                "lpips_heads",
                format!("{:?}", self.lpips_heads),
                "the perceptual term needs both lpips_vgg and lpips_heads",
            ));
        }
        self.gan.validate()
    }

    /// Refuses crops and batches whose training steps would need more memory than
    /// [`imgseq_core::budget::memory_limit`]: a step keeps every layer's activations for
    /// the backward pass, estimated as the forward's peak ([`VqConfig::forward_bytes`]) times
    /// two per convolution of the deepest level stack.
    fn check_memory(&self, cfg: &VqConfig) -> Result<()> {
        use imgseq_core::budget::check_memory;
        let d = &cfg.ddconfig;
        let layers = (d.ch_mult.len() * (2 + 2 * d.num_res_blocks)) as u128;
        let bytes = |b: usize, s: usize| cfg.forward_bytes(b, s, s).saturating_mul(layers);
        let mut stages = vec![("crop", self.crop, "batch_size", self.batch_size)];
        if self.context_from > 0 && self.context_from < self.steps {
            stages.push((
                "context_crop",
                self.context_crop,
                "context_batch_size",
                self.context_batch_size,
            ));
        }
        for (crop_name, crop, batch_name, batch) in stages {
            if let Err(msg) = check_memory(bytes(batch, crop)) {
                return Err(if batch > 1 && check_memory(bytes(1, crop)).is_ok() {
                    Error::setting(batch_name, batch, format!("with {crop_name} {crop} {msg}"))
                } else {
                    Error::setting(crop_name, crop, msg)
                });
            }
        }
        Ok(())
    }

    /// Whether the variable `name` is trained: everything, or with `freeze_encoder` the
    /// decoder side only (the one owner of that split).
    pub fn trains(&self, name: &str) -> bool {
        !self.freeze_encoder || name.starts_with("decoder.") || name.starts_with("post_quant_conv.")
    }

    /// The loss terms' weights.
    pub fn loss_weights(&self) -> LossWeights {
        LossWeights {
            l1: self.l1,
            l2: self.l2,
            sharp: self.sharp,
            codebook: self.codebook,
            perceptual: self.perceptual,
        }
    }
}
