//! Training and evaluating a VQGAN on a folder of photos.
//!
//! Loss per step (x, x̂ in [-1, 1]):
//! `l1·mean|x̂ − x| + l2·mean(x̂ − x)² + sharp·mean|∇x̂ − ∇x| + codebook·q_loss`, where ∇ are the
//! horizontal and vertical pixel differences (an image-gradient L1 that keeps edges sharp) and
//! `q_loss` is taming's codebook + commitment loss (β = 0.25, legacy placement, see
//! [`crate::quantize`]). There is no perceptual (LPIPS) or adversarial (PatchGAN) term.
//!
//! The codebook is kept healthy by a k-means initialisation on encoder outputs of the first
//! crops and by dead-code restarts: every `restart_every` steps, each code unused for
//! `dead_after` steps is re-seeded from a random encoder output of the current batch (plus a
//! little noise), and its AdamW moments are reset.
//!
//! A run folder (`--out`) holds everything needed to use or resume it:
//! `model.safetensors` (taming names, loads with [`crate::load_model`]) + `config.json`
//! ([`VqConfig`]), `train.json` ([`TrainConfig`]), `optimizer.safetensors` (AdamW moments)
//! and `state.json` ([`TrainState`]: step, code usage, history). Every step draws its crops
//! from a generator seeded by (seed, step), so a resumed run continues exactly.

use crate::config::{DdConfig, VqConfig};
use crate::model::VqModel;
use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use image::RgbImage;
use imgseq_core::data::augment::mix_seed;
use imgseq_core::fsutil::{read_json, write_json};
use imgseq_core::image_io::{self, PixelRange};
use imgseq_core::optim::{warmup_cosine, AdamW};
use imgseq_core::weights::{load_tensors, save_tensors};
use imgseq_core::{metrics, Error, Result};
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const WEIGHTS_FILE: &str = "model.safetensors";
pub const CONFIG_FILE: &str = "config.json";
pub const TRAIN_FILE: &str = "train.json";
pub const OPTIM_FILE: &str = "optimizer.safetensors";
pub const STATE_FILE: &str = "state.json";
/// Name of the codebook variable (taming's state-dict name).
pub const CODEBOOK: &str = "quantize.embedding.weight";

/// Architectures `--config` knows by name.
pub const PRESETS: &[&str] = &["small", "f16_1024"];

/// A named architecture: `small` (the shipped default: taming layout, f16, 1024 codes of
/// 64 values, ch 32, `num_res_blocks` 0 — the encoder only has its strided convs before the
/// middle block, the decoder one ResnetBlock per level —, attention only in the middle
/// blocks; ~10 MB of f32 weights) or `f16_1024` (taming's `vqgan_imagenet_f16_1024`).
///
/// Why so small: training cost on a 2-core CPU is dominated by the full-resolution 3×3 convs;
/// `num_res_blocks` 1 → 0 halves them (7 → 3 per crop) and so doubles the steps a run gets.
pub fn preset(name: &str) -> Option<VqConfig> {
    match name {
        "small" => Some(VqConfig {
            ddconfig: DdConfig {
                ch: 32,
                ch_mult: vec![1, 1, 2, 2, 4],
                num_res_blocks: 0,
                attn_resolutions: vec![],
                z_channels: 64,
                double_z: false,
                resolution: 256,
                in_channels: 3,
                out_ch: 3,
                dropout: 0.0,
            },
            embed_dim: 64,
            n_embed: 1024,
            beta: 0.25,
            legacy: true,
        }),
        "f16_1024" => Some(VqConfig::vqgan_imagenet_f16_1024()),
        _ => None,
    }
}

/// Everything that defines a training run (saved as `train.json`).
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
    /// Record a history point (and a log line when stderr is not a terminal) every this many
    /// steps; 0 = every ~1% of the run.
    pub log_every: usize,
    pub seed: u64,
}

impl TrainConfig {
    /// The recipe of the shipped `small` model.
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
            hflip: true,
            shuffle_channels: true,
            extra_scales: vec![512, 640],
            kmeans_rows: 8192,
            kmeans_iters: 10,
            ae_warmup: 2000,
            dead_after: 200,
            restart_every: 25,
            checkpoint_every: 250,
            log_every: 0,
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
        read_json(path, TRAIN_FILE)
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        write_json(path, self)
    }

    /// Checks the numbers against the model (crop a multiple of the downsampling factor, ...).
    pub fn validate(&self, cfg: &VqConfig) -> Result<()> {
        let f = cfg.downsample_factor();
        if self.crop == 0 || !self.crop.is_multiple_of(f) {
            return Err(Error::invalid(format!(
                "--crop {} must be a positive multiple of the model's downsampling factor {f}",
                self.crop
            )));
        }
        if self.context_from > 0
            && (self.context_crop == 0
                || !self.context_crop.is_multiple_of(f)
                || self.context_batch_size == 0)
        {
            return Err(Error::invalid(format!(
                "--context-crop {} must be a positive multiple of the model's downsampling factor \
                 {f} and --context-batch-size positive",
                self.context_crop
            )));
        }
        if self.batch_size == 0 || self.steps == 0 {
            return Err(Error::invalid("--batch-size and --steps must be positive"));
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(Error::invalid(format!("--lr {} must be positive", self.lr)));
        }
        for (n, w) in [
            ("l1", self.l1),
            ("l2", self.l2),
            ("sharp", self.sharp),
            ("codebook", self.codebook),
        ] {
            if !(w >= 0.0 && w.is_finite()) {
                return Err(Error::invalid(format!("--{n} {w} must be ≥ 0")));
            }
        }
        Ok(())
    }
}

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

fn terr(e: candle_core::Error) -> Error {
    Error::Candle(e)
}

/// The image files of `data`: a folder (all images below it, sorted) or a `.txt` list.
pub fn data_paths(data: &Path) -> Result<Vec<PathBuf>> {
    if data.is_dir() {
        return imgseq_core::data::folder::list_images(data);
    }
    let text = std::fs::read_to_string(data).map_err(|e| Error::io(data, e))?;
    let base = data.parent().unwrap_or(Path::new("."));
    let paths: Vec<PathBuf> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let p = PathBuf::from(l);
            if p.is_absolute() {
                p
            } else {
                base.join(p)
            }
        })
        .collect();
    if paths.is_empty() {
        return Err(Error::format(data, "the image list is empty"));
    }
    Ok(paths)
}

/// Loads every image as RGB with its shorter side resized to `max(resize, crop)` (aspect
/// kept), in parallel. A broken file is an error naming it.
pub fn load_training_images(
    paths: &[PathBuf],
    resize: usize,
    crop: usize,
) -> Result<Vec<RgbImage>> {
    let side = resize.max(crop) as f64;
    paths
        .par_iter()
        .map(|p| {
            let img = image_io::load_rgb(p)?;
            let (w, h) = img.dimensions();
            let s = side / w.min(h) as f64;
            let (nw, nh) = (
                ((w as f64 * s).round() as u32).max(side as u32),
                ((h as f64 * s).round() as u32).max(side as u32),
            );
            if (nw, nh) == (w, h) {
                Ok(img)
            } else {
                image_io::resize_exact(&img, nw, nh)
            }
        })
        .collect()
}

/// A batch of random `crop`×`crop` crops (random image, random offset, optional horizontal
/// flip) drawn from a generator seeded with `seed`, in [-1, 1].
///
/// # Shapes
/// → (batch, 3, crop, crop)
pub fn random_crops(
    images: &[RgbImage],
    crop: usize,
    batch: usize,
    hflip: bool,
    shuffle_channels: bool,
    seed: u64,
) -> Result<Tensor> {
    if images.is_empty() {
        return Err(Error::invalid("no training images"));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let plane = crop * crop;
    let mut out = vec![0f32; batch * 3 * plane];
    for b in 0..batch {
        let img = &images[rng.random_range(0..images.len())];
        let (w, h) = (img.width() as usize, img.height() as usize);
        if w < crop || h < crop {
            return Err(Error::invalid(format!(
                "a training image is {w}x{h}, smaller than the crop {crop}"
            )));
        }
        let ox = rng.random_range(0..=w - crop);
        let oy = rng.random_range(0..=h - crop);
        let flip = hflip && rng.random::<bool>();
        // One of the 6 orders of (r, g, b): new colours from the same shapes.
        const PERMS: [[usize; 3]; 6] = [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ];
        let perm = if shuffle_channels {
            PERMS[rng.random_range(0..6)]
        } else {
            PERMS[0]
        };
        let raw = img.as_raw();
        let dst = &mut out[b * 3 * plane..(b + 1) * 3 * plane];
        for y in 0..crop {
            let row = (oy + y) * w;
            for x in 0..crop {
                let sx = if flip { crop - 1 - x } else { x };
                let px = &raw[(row + ox + sx) * 3..(row + ox + sx) * 3 + 3];
                for c in 0..3 {
                    dst[perm[c] * plane + y * crop + x] = PixelRange::MinusOneOne.to_f32(px[c]);
                }
            }
        }
    }
    Ok(Tensor::from_vec(out, (batch, 3, crop, crop), &Device::Cpu)?)
}

/// Encoder outputs as rows, in raster order per image.
///
/// # Shapes
/// z: (b, d, h, w) → (b·h·w · d values, d)
fn latent_rows(z: &Tensor) -> Result<(Vec<f32>, usize)> {
    let (b, d, h, w) = z.dims4()?;
    let rows = z
        .detach()
        .permute((0, 2, 3, 1))?
        .reshape((b * h * w, d))?
        .flatten_all()?
        .to_vec1::<f32>()?;
    Ok((rows, d))
}

/// k-means (Lloyd) of `rows` (n × d, row-major) into `k` centroids, started from `k` random
/// distinct rows (rows are repeated with a little noise when n < k); empty clusters take a
/// random row. Returns k × d values.
pub fn kmeans(
    rows: &[f32],
    d: usize,
    k: usize,
    iters: usize,
    rng: &mut impl Rng,
) -> Result<Vec<f32>> {
    let n = rows.len().checked_div(d).unwrap_or(0);
    if n == 0 || k == 0 {
        return Err(Error::invalid("k-means: no rows or no clusters"));
    }
    let std = {
        let m = rows.iter().map(|&x| x as f64).sum::<f64>() / rows.len() as f64;
        (rows.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / rows.len() as f64).sqrt()
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(rng);
    let mut cent = vec![0f32; k * d];
    for j in 0..k {
        let r = order[j % n];
        for t in 0..d {
            let noise = if j >= n {
                (rng.random::<f32>() - 0.5) * 0.02 * std as f32
            } else {
                0.0
            };
            cent[j * d + t] = rows[r * d + t] + noise;
        }
    }
    let zt = Tensor::from_slice(rows, (n, d), &Device::Cpu)?;
    for _ in 0..iters {
        let ct = Tensor::from_slice(&cent, (k, d), &Device::Cpu)?;
        let assign = imgseq_kernels::ops::nearest_codebook(&zt, &ct)?.to_vec1::<u32>()?;
        let mut sum = vec![0f64; k * d];
        let mut cnt = vec![0usize; k];
        for (i, &a) in assign.iter().enumerate() {
            let a = a as usize;
            cnt[a] += 1;
            for t in 0..d {
                sum[a * d + t] += rows[i * d + t] as f64;
            }
        }
        for j in 0..k {
            if cnt[j] > 0 {
                for t in 0..d {
                    cent[j * d + t] = (sum[j * d + t] / cnt[j] as f64) as f32;
                }
            } else {
                let r = rng.random_range(0..n);
                cent[j * d..(j + 1) * d].copy_from_slice(&rows[r * d..(r + 1) * d]);
            }
        }
    }
    Ok(cent)
}

/// Re-seeds every code unused for at least `dead_after` steps (by `last_used`, the last step
/// each code was used) from a random row of `rows` (n × d, the current encoder outputs) plus
/// noise of 1% of their spread, marks it used at `step`, and returns the re-seeded codes.
///
/// # Shapes
/// codebook: (n_embed, d); rows: n × d values
pub fn restart_dead_codes(
    codebook: &Var,
    last_used: &mut [usize],
    step: usize,
    dead_after: usize,
    rows: &[f32],
    rng: &mut impl Rng,
) -> Result<Vec<usize>> {
    let (k, d) = codebook.as_tensor().dims2()?;
    if last_used.len() != k {
        return Err(Error::invalid(format!(
            "dead-code restart: {} usage entries for {k} codes",
            last_used.len()
        )));
    }
    let n = rows.len().checked_div(d).unwrap_or(0);
    let dead: Vec<usize> = (0..k)
        .filter(|&j| step.saturating_sub(last_used[j]) >= dead_after)
        .collect();
    if dead.is_empty() || n == 0 {
        return Ok(Vec::new());
    }
    let m = rows.iter().map(|&x| x as f64).sum::<f64>() / rows.len() as f64;
    let std = (rows.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / rows.len() as f64).sqrt()
        as f32;
    let mut cb = codebook.as_tensor().flatten_all()?.to_vec1::<f32>()?;
    for &j in &dead {
        let r = rng.random_range(0..n);
        for t in 0..d {
            cb[j * d + t] = rows[r * d + t] + (rng.random::<f32>() - 0.5) * 0.02 * std;
        }
        last_used[j] = step;
    }
    codebook.set(&Tensor::from_vec(cb, (k, d), codebook.device())?)?;
    Ok(dead)
}

/// PyTorch-like initialisation from a seeded generator: conv kernels
/// U(−1/√fan_in, 1/√fan_in) (torch's default `kaiming_uniform_(a=√5)`), biases 0, GroupNorm
/// weight 1 / bias 0, codebook U(−1/n_embed, 1/n_embed) (taming).
fn init_weights(vars: &VarMap, seed: u64) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(mix_seed(&[seed, 0x1417]));
    let data = vars.data().lock().expect("poisoned");
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    for name in names {
        let var = &data[name];
        let shape = var.as_tensor().shape().clone();
        let dims = shape.dims().to_vec();
        let n = shape.elem_count();
        let vals: Vec<f32> = if name == CODEBOOK {
            let b = 1.0 / dims[0] as f32;
            (0..n).map(|_| rng.random_range(-b..=b)).collect()
        } else if dims.len() == 4 {
            let b = 1.0 / ((dims[1] * dims[2] * dims[3]) as f32).sqrt();
            (0..n).map(|_| rng.random_range(-b..=b)).collect()
        } else if name.ends_with(".weight") {
            vec![1.0; n] // GroupNorm scale
        } else {
            vec![0.0; n]
        };
        var.set(&Tensor::from_vec(vals, shape, var.as_tensor().device())?)?;
    }
    Ok(())
}

fn sorted_vars(vars: &VarMap) -> Vec<(String, Var)> {
    let data = vars.data().lock().expect("poisoned");
    let mut v: Vec<(String, Var)> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn save_checkpoint(
    out: &Path,
    cfg: &VqConfig,
    tc: &TrainConfig,
    vars: &VarMap,
    opt: &AdamW,
    state: &TrainState,
) -> Result<()> {
    let tensors: Vec<(String, Tensor)> = sorted_vars(vars)
        .into_iter()
        .map(|(k, v)| (k, v.as_tensor().clone()))
        .collect();
    save_tensors(out.join(WEIGHTS_FILE), tensors.iter().map(|(k, v)| (k, v)))?;
    imgseq_core::fsutil::write_bytes_atomic(
        out.join(CONFIG_FILE),
        cfg.to_json_string().as_bytes(),
    )?;
    tc.save(&out.join(TRAIN_FILE))?;
    let mut st: Vec<(String, Tensor)> = opt.state()?.into_iter().collect();
    st.sort_by(|a, b| a.0.cmp(&b.0));
    save_tensors(out.join(OPTIM_FILE), st.iter().map(|(k, v)| (k, v)))?;
    // state.json last: it marks a complete checkpoint.
    write_json(out.join(STATE_FILE), state)
}

fn bar(len: u64, pos: u64, prefix: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} (ETA {eta})")
            .expect("template")
            .progress_chars("=> "),
    );
    pb.set_prefix(prefix.to_string());
    pb.set_position(pos);
    pb
}

/// Number of distinct codes and the perplexity of `counts`.
fn usage_of(counts: &[u64]) -> (usize, f64) {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return (0, 0.0);
    }
    let used = counts.iter().filter(|&&c| c > 0).count();
    let h: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / total as f64;
            -p * p.ln()
        })
        .sum();
    (used, h.exp())
}

/// The losses of one training step on `x`.
struct StepOut {
    loss: Tensor,
    mse: f64,
    indices: Vec<u32>,
    z_rows: Vec<f32>,
}

/// # Shapes
/// x: (b, 3, s, s) in [-1, 1]
/// `quantize: false` bypasses the codebook (autoencoder warm-up): no codebook loss, no indices.
fn forward_loss(model: &VqModel, tc: &TrainConfig, x: &Tensor, quantize: bool) -> Result<StepOut> {
    let z = model.encode_latents(x)?; // (b, d, s/f, s/f)
    let (xr, mut loss, indices) = if quantize {
        let q = model.quantizer().quantize(&z)?;
        let xr = model.decode(&q.quantized)?; // (b, 3, s, s)
        let idx = q.indices.flatten_all()?.to_vec1::<u32>()?;
        (xr, (q.loss * tc.codebook)?, idx)
    } else {
        (
            model.decode(&z)?,
            Tensor::zeros((), DType::F32, x.device())?,
            Vec::new(),
        )
    };
    let diff = (xr - x)?;
    let l2 = diff.sqr()?.mean_all()?;
    if tc.l1 > 0.0 {
        loss = (loss + (diff.abs()?.mean_all()? * tc.l1)?)?;
    }
    if tc.l2 > 0.0 {
        loss = (loss + (&l2 * tc.l2)?)?;
    }
    if tc.sharp > 0.0 {
        // ∇x̂ − ∇x = ∇(x̂ − x): finite differences of the residual along w and h.
        let (_, _, h, w) = diff.dims4()?;
        let gx = (diff.narrow(3, 1, w - 1)? - diff.narrow(3, 0, w - 1)?)?;
        let gy = (diff.narrow(2, 1, h - 1)? - diff.narrow(2, 0, h - 1)?)?;
        let g = ((gx.abs()?.mean_all()? + gy.abs()?.mean_all()?)? * 0.5)?;
        loss = (loss + (g * tc.sharp)?)?;
    }
    let (z_rows, _) = latent_rows(&z)?;
    Ok(StepOut {
        loss,
        mse: l2.to_scalar::<f32>()? as f64,
        indices,
        z_rows,
    })
}

/// Sets the codebook to a k-means of `tc.kmeans_rows` encoder outputs on random crops (no-op
/// when `kmeans_rows` is 0: taming's uniform init stays).
fn init_codebook(
    model: &VqModel,
    cfg: &VqConfig,
    tc: &TrainConfig,
    images: &[RgbImage],
    codebook_var: &Var,
) -> Result<()> {
    if tc.kmeans_rows == 0 {
        return Ok(());
    }
    let t0 = Instant::now();
    let f = cfg.downsample_factor();
    let per_batch = tc.batch_size * (tc.crop / f) * (tc.crop / f);
    let batches = tc.kmeans_rows.div_ceil(per_batch).clamp(1, 256);
    let mut rows = Vec::new();
    let mut d = cfg.embed_dim;
    for i in 0..batches {
        let x = random_crops(
            images,
            tc.crop,
            tc.batch_size,
            tc.hflip,
            tc.shuffle_channels,
            mix_seed(&[tc.seed, 0x6b6d, i as u64]),
        )?;
        let z = model.encode_latents(&x)?;
        let (r, dd) = latent_rows(&z)?;
        d = dd;
        rows.extend(r);
    }
    let mut rng = StdRng::seed_from_u64(mix_seed(&[tc.seed, 0x6b6d]));
    let cent = kmeans(&rows, d, cfg.n_embed, tc.kmeans_iters, &mut rng)?;
    codebook_var.set(&Tensor::from_vec(cent, (cfg.n_embed, d), &Device::Cpu)?)?;
    eprintln!(
        "codebook: k-means of {} encoder outputs into {} codes ({} iterations, {:.1} s)",
        rows.len() / d,
        cfg.n_embed,
        tc.kmeans_iters,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Trains (or, with `resume` and a checkpoint in `out`, continues) a VQGAN. Writes a
/// checkpoint every `checkpoint_every` steps and at the end; returns the final state.
/// `progress`: draw a progress bar (hidden anyway when stderr is not a terminal; then a line
/// is printed every ~10% of the run).
pub fn train(
    cfg: &VqConfig,
    tc: &TrainConfig,
    out: &Path,
    resume: bool,
    progress: bool,
) -> Result<TrainState> {
    cfg.validate(Path::new("<config>"))?;
    tc.validate(cfg)?;
    let dev = Device::Cpu;
    let paths = data_paths(&tc.data)?;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;

    let vars = VarMap::new();
    let vb = VarBuilder::from_varmap(&vars, DType::F32, &dev);
    let model = VqModel::new(cfg, vb).map_err(terr)?;
    let named = sorted_vars(&vars);
    let codebook_var = named
        .iter()
        .find(|(n, _)| n == CODEBOOK)
        .map(|(_, v)| v.clone())
        .ok_or_else(|| Error::invalid("the model has no codebook variable"))?;
    let opt_vars = named
        .iter()
        .map(|(n, v)| {
            (
                n.clone(),
                v.clone(),
                v.as_tensor().rank() >= 2 && n != CODEBOOK,
            )
        })
        .collect();
    let mut opt = AdamW::new(opt_vars, tc.lr, tc.weight_decay)?;
    opt.beta1 = tc.beta1;
    opt.beta2 = tc.beta2;

    let state_path = out.join(STATE_FILE);
    let resuming = resume && state_path.is_file();
    let mut state = TrainState {
        last_used: vec![0; cfg.n_embed],
        ..Default::default()
    };
    if resuming {
        state = read_json(&state_path, STATE_FILE)?;
        if state.last_used.len() != cfg.n_embed {
            return Err(Error::format(
                &state_path,
                format!(
                    "`last_used` has {} entries, the model has {} codes",
                    state.last_used.len(),
                    cfg.n_embed
                ),
            ));
        }
        let wpath = out.join(WEIGHTS_FILE);
        let saved = load_tensors(&wpath, &Device::Cpu)?;
        for (name, var) in &named {
            let t = saved
                .get(name)
                .ok_or_else(|| Error::weights(&wpath, format!("missing tensor `{name}`")))?;
            if t.dims() != var.as_tensor().dims() {
                return Err(Error::weights(
                    &wpath,
                    format!(
                        "`{name}` has shape {:?}, the model needs {:?}",
                        t.dims(),
                        var.as_tensor().dims()
                    ),
                ));
            }
            var.set(&t.to_dtype(DType::F32)?)?;
        }
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
    } else {
        init_weights(&vars, tc.seed)?;
    }

    if state.step >= tc.steps {
        eprintln!(
            "{}: already at step {} of {}",
            out.display(),
            state.step,
            tc.steps
        );
        return Ok(state);
    }
    let t_load = Instant::now();
    let mut images = load_training_images(&paths, tc.resize, tc.max_crop())?;
    for &side in &tc.extra_scales {
        images.extend(load_training_images(&paths, side, tc.max_crop())?);
    }
    let stage2 = if tc.context_from > 0 {
        format!(
            "; from step {}: crops {}x{}, batch {}",
            tc.context_from + 1,
            tc.context_crop,
            tc.context_crop,
            tc.context_batch_size
        )
    } else {
        String::new()
    };
    eprintln!(
        "{} training images from {} ({} scale(s), {:.1} s to load); crops {}x{}, batch {}{stage2}",
        paths.len(),
        tc.data.display(),
        1 + tc.extra_scales.len(),
        t_load.elapsed().as_secs_f64(),
        tc.crop,
        tc.crop,
        tc.batch_size
    );

    if resuming {
        eprintln!(
            "resuming {} at step {} of {}",
            out.display(),
            state.step,
            tc.steps
        );
    } else if tc.ae_warmup > 0 {
        eprintln!(
            "steps 1-{}: autoencoder warm-up (quantizer bypassed), then k-means codebook init",
            tc.ae_warmup
        );
    } else {
        init_codebook(&model, cfg, tc, &images, &codebook_var)?;
    }
    tc.save(&out.join(TRAIN_FILE))?;

    let log_every = if tc.log_every > 0 {
        tc.log_every
    } else {
        (tc.steps / 100).max(1)
    };
    let tenth = (tc.steps / 10).max(1);
    let pb = if progress {
        bar(tc.steps as u64, state.step as u64, "vq train")
    } else {
        ProgressBar::hidden()
    };
    let t_run = Instant::now();
    let start_step = state.step;
    let secs_base = state.seconds;
    let mut counts = vec![0u64; cfg.n_embed];
    let (mut loss_sum, mut psnr_sum, mut n_acc, mut restarted) = (0.0, 0.0, 0usize, 0usize);
    let (mut imgs_done, mut imgs_win) = (0usize, 0usize);
    let mut t_win = Instant::now();
    while state.step < tc.steps {
        let step = state.step;
        let (crop, batch) = tc.crop_at(step);
        let x = random_crops(
            &images,
            crop,
            batch,
            tc.hflip,
            tc.shuffle_channels,
            mix_seed(&[tc.seed, step as u64]),
        )?;
        imgs_done += batch;
        imgs_win += batch;
        if tc.ae_warmup > 0 && step == tc.ae_warmup {
            // End of the autoencoder warm-up: codes from what the trained encoder emits.
            init_codebook(&model, cfg, tc, &images, &codebook_var)?;
            opt.reset_rows(CODEBOOK, &(0..cfg.n_embed).collect::<Vec<_>>());
            state.last_used.fill(step);
        }
        let quantize = step >= tc.ae_warmup;
        let so = forward_loss(&model, tc, &x, quantize)?;
        let l = so.loss.to_scalar::<f32>()? as f64;
        if !l.is_finite() {
            return Err(Error::invalid(format!(
                "training diverged: loss is {l} at step {}",
                step + 1
            )));
        }
        let grads = so.loss.backward()?;
        opt.lr = warmup_cosine(step, tc.warmup, tc.steps, tc.lr, tc.min_lr);
        opt.step(&grads)?;
        drop(grads);
        state.step += 1;
        for &i in &so.indices {
            counts[i as usize] += 1;
            state.last_used[i as usize] = state.step;
        }
        if quantize
            && tc.dead_after > 0
            && tc.restart_every > 0
            && state.step.is_multiple_of(tc.restart_every)
        {
            let mut rng = StdRng::seed_from_u64(mix_seed(&[tc.seed, state.step as u64, 0xdead]));
            let dead = restart_dead_codes(
                &codebook_var,
                &mut state.last_used,
                state.step,
                tc.dead_after,
                &so.z_rows,
                &mut rng,
            )?;
            opt.reset_rows(CODEBOOK, &dead);
            restarted += dead.len();
            state.restarts_total += dead.len();
        }
        loss_sum += l;
        psnr_sum += 10.0 * (4.0 / so.mse.max(1e-12)).log10();
        n_acc += 1;
        pb.set_position(state.step as u64);
        let ips = imgs_done as f64 / t_run.elapsed().as_secs_f64().max(1e-9);
        let (used, ppl) = usage_of(&counts);
        pb.set_message(format!(
            "loss {:.4} PSNR {:.2} codes {used}/{} ppl {ppl:.0} {ips:.1} img/s",
            loss_sum / n_acc as f64,
            psnr_sum / n_acc as f64,
            cfg.n_embed
        ));
        let tenth_done = state.step.is_multiple_of(tenth) || state.step == tc.steps;
        // A history point every `log_every` steps and at every tenth of the run. When stderr
        // is not a terminal (no bar), a log line for each tenth, or for each point when
        // `log_every` was chosen.
        if state.step.is_multiple_of(log_every) || tenth_done {
            let p = LogPoint {
                step: state.step,
                loss: loss_sum / n_acc as f64,
                psnr: psnr_sum / n_acc as f64,
                codes_used: used,
                perplexity: ppl,
                restarted,
                img_per_s: imgs_win as f64 / t_win.elapsed().as_secs_f64().max(1e-9),
                lr: opt.lr,
            };
            if pb.is_hidden() && (tenth_done || tc.log_every > 0) {
                let steps_per_s =
                    (state.step - start_step) as f64 / t_run.elapsed().as_secs_f64().max(1e-9);
                let left = (tc.steps - state.step) as f64 / steps_per_s.max(1e-9);
                eprintln!(
                    "step {}/{}: loss {:.4} PSNR {:.2} dB, codes used {}/{} (perplexity {:.0}), {} restarted, {:.1} img/s, ETA {:.0} min",
                    p.step, tc.steps, p.loss, p.psnr, p.codes_used, cfg.n_embed, p.perplexity, state.restarts_total, ips, left / 60.0
                );
            }
            state.history.push(p);
            counts.fill(0);
            (loss_sum, psnr_sum, n_acc, restarted, imgs_win) = (0.0, 0.0, 0, 0, 0);
            t_win = Instant::now();
        }
        if state.step.is_multiple_of(tc.checkpoint_every.max(1)) || state.step == tc.steps {
            state.seconds = secs_base + t_run.elapsed().as_secs_f64();
            save_checkpoint(out, cfg, tc, &vars, &opt, &state)?;
        }
    }
    pb.finish_and_clear();
    Ok(state)
}

/// Reconstruction quality of a model over a set of images.
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub images: usize,
    pub size: u32,
    /// Mean PSNR (dB) and SSIM over the images, on the 8-bit pictures scaled to [0, 1].
    pub psnr: f64,
    pub ssim: f64,
    /// Distinct codes used across the whole set, of `n_embed`, and their perplexity.
    pub codes_used: usize,
    pub n_embed: usize,
    pub usage_percent: f64,
    pub perplexity: f64,
    pub tokens_per_image: usize,
    pub per_image: Vec<ImageScore>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ImageScore {
    pub path: PathBuf,
    pub psnr: f64,
    pub ssim: f64,
}

/// Encodes and decodes every image (shorter side resized to `size`, centre crop, as
/// `imgseq vq roundtrip`) in batches of `batch` and reports mean PSNR / SSIM and codebook
/// usage over the set.
pub fn evaluate(
    model: &VqModel,
    paths: &[PathBuf],
    size: u32,
    upscale: bool,
    batch: usize,
    progress: bool,
) -> Result<EvalReport> {
    if paths.is_empty() {
        return Err(Error::invalid("eval: no images"));
    }
    let f = model.config().downsample_factor() as u32;
    if size == 0 || !size.is_multiple_of(f) {
        return Err(Error::invalid(format!(
            "--size {size} must be a positive multiple of the model's downsampling factor {f}"
        )));
    }
    // Headers first: a bad file fails before any compute.
    for p in paths {
        let (w, h) = image_io::image_dimensions(p)?;
        image_io::check_min_size(p, w, h, size, upscale)?;
    }
    let pb = if progress && paths.len() > 1 {
        bar(paths.len() as u64, 0, "vq eval")
    } else {
        ProgressBar::hidden()
    };
    let dev = Device::Cpu;
    let mut all_idx: Vec<u32> = Vec::new();
    let mut per_image = Vec::with_capacity(paths.len());
    let mut tokens_per_image = 0;
    for chunk in paths.chunks(batch.max(1)) {
        let imgs = chunk
            .iter()
            .map(|p| image_io::load_rgb_square(p, size, upscale))
            .collect::<Result<Vec<_>>>()?;
        let ts = imgs
            .iter()
            .map(|i| image_io::to_tensor_chw(i, PixelRange::MinusOneOne, &dev))
            .collect::<Result<Vec<_>>>()?;
        let x = Tensor::stack(&ts, 0)?; // (n, 3, size, size)
        let q = model.encode(&x)?;
        let rec = model.decode(&q.quantized)?;
        let idx = q.indices.flatten_all()?.to_vec1::<u32>()?;
        tokens_per_image = idx.len() / chunk.len();
        all_idx.extend(idx);
        for (i, (p, img)) in chunk.iter().zip(&imgs).enumerate() {
            let r = image_io::from_tensor_chw(&rec.get(i)?, PixelRange::MinusOneOne)?;
            let a = image_io::to_tensor_chw(img, PixelRange::ZeroOne, &dev)?;
            let b = image_io::to_tensor_chw(&r, PixelRange::ZeroOne, &dev)?;
            per_image.push(ImageScore {
                path: p.clone(),
                psnr: metrics::psnr_tensor(&a, &b, 1.0)?,
                ssim: metrics::ssim(&a, &b)?,
            });
        }
        pb.inc(chunk.len() as u64);
    }
    pb.finish_and_clear();
    let n_embed = model.config().n_embed;
    let (used, perplexity) = metrics::codebook_usage(&all_idx, n_embed)?;
    let n = per_image.len() as f64;
    // Identical images give an infinite PSNR; cap it at 100 dB so the mean stays finite.
    let psnr = per_image.iter().map(|s| s.psnr.min(100.0)).sum::<f64>() / n;
    let ssim = per_image.iter().map(|s| s.ssim).sum::<f64>() / n;
    Ok(EvalReport {
        images: per_image.len(),
        size,
        psnr,
        ssim,
        codes_used: used,
        n_embed,
        usage_percent: 100.0 * used as f64 / n_embed as f64,
        perplexity,
        tokens_per_image,
        per_image,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_codes_are_reseeded_from_encoder_outputs() {
        let dev = Device::Cpu;
        // 4 codes of size 2; codes 1 and 3 were last used long ago.
        let cb =
            Var::from_vec(vec![0f32, 0., 100., 100., 1., 1., -100., 50.], (4, 2), &dev).unwrap();
        let mut last = vec![90usize, 5, 95, 0];
        let rows = vec![3f32, 4., 3., 4., 3., 4.]; // three identical encoder outputs
        let mut rng = StdRng::seed_from_u64(1);
        let dead = restart_dead_codes(&cb, &mut last, 100, 50, &rows, &mut rng).unwrap();
        assert_eq!(dead, vec![1, 3]);
        assert_eq!(last, vec![90, 100, 95, 100]);
        let v = cb
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(&v[0..2], &[0., 0.]);
        assert_eq!(&v[4..6], &[1., 1.]);
        // The new codes are the encoder output plus noise of 1% of the spread (σ = 0.5).
        for (a, b) in v[2..4].iter().chain(&v[6..8]).zip([3., 4., 3., 4.]) {
            assert!((a - b).abs() <= 0.005 && a != &b, "{v:?}");
        }
        // Nothing dead: nothing changes.
        let again = restart_dead_codes(&cb, &mut last, 101, 50, &rows, &mut rng).unwrap();
        assert!(again.is_empty());
    }

    #[test]
    fn kmeans_finds_separated_clusters() {
        let mut rows = Vec::new();
        for i in 0..50 {
            let e = (i % 5) as f32 * 0.01;
            rows.extend([0.0 + e, 0.0]);
            rows.extend([10.0 + e, 10.0]);
        }
        let mut rng = StdRng::seed_from_u64(3);
        let c = kmeans(&rows, 2, 2, 10, &mut rng).unwrap();
        let mut xs = [c[0], c[2]];
        xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
        assert!(
            (xs[0] - 0.02).abs() < 1e-3 && (xs[1] - 10.02).abs() < 1e-3,
            "{c:?}"
        );
        // More clusters than rows still gives k centroids.
        let c = kmeans(&rows[..4], 2, 5, 3, &mut rng).unwrap();
        assert_eq!(c.len(), 10);
    }

    #[test]
    fn data_lists_resolve_relative_paths() {
        let d = tempfile::tempdir().unwrap();
        let list = d.path().join("l.txt");
        std::fs::write(&list, "# comment\n\na/x.png\n/abs/y.jpg\n").unwrap();
        let p = data_paths(&list).unwrap();
        assert_eq!(
            p,
            vec![d.path().join("a/x.png"), PathBuf::from("/abs/y.jpg")]
        );
        std::fs::write(&list, "# nothing\n").unwrap();
        let e = data_paths(&list).unwrap_err().to_string();
        assert!(e.contains("l.txt") && e.contains("empty"), "{e}");
        let e = data_paths(&d.path().join("missing.txt"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.txt"), "{e}");
    }

    #[test]
    fn presets() {
        let s = preset("small").unwrap();
        s.validate(Path::new("small")).unwrap();
        assert_eq!((s.downsample_factor(), s.n_embed), (16, 1024));
        assert_eq!(
            preset("f16_1024").unwrap(),
            VqConfig::vqgan_imagenet_f16_1024()
        );
        assert!(preset("big").is_none());
    }

    #[test]
    fn shuffled_channels_are_a_permutation_of_the_crop() {
        let img = RgbImage::from_fn(40, 30, |x, y| {
            image::Rgb([(x * 6) as u8, (y * 8) as u8, ((x + y) * 3) as u8])
        });
        let planes = |t: &Tensor| -> Vec<Vec<f32>> {
            (0..3)
                .map(|c| {
                    t.get(0)
                        .unwrap()
                        .get(c)
                        .unwrap()
                        .flatten_all()
                        .unwrap()
                        .to_vec1()
                        .unwrap()
                })
                .collect()
        };
        let mut moved = 0;
        for seed in 0..12 {
            let one = std::slice::from_ref(&img);
            let plain = planes(&random_crops(one, 16, 1, true, false, seed).unwrap());
            let shuf = planes(&random_crops(one, 16, 1, true, true, seed).unwrap());
            let mut a = plain.clone();
            let mut b = shuf.clone();
            a.sort_by(|x, y| x.partial_cmp(y).unwrap());
            b.sort_by(|x, y| x.partial_cmp(y).unwrap());
            assert_eq!(a, b, "seed {seed}: not the same planes");
            moved += usize::from(plain != shuf);
        }
        assert!(moved >= 6, "only {moved} of 12 crops were recoloured");
    }

    #[test]
    fn crops_are_deterministic_and_in_range() {
        let img = RgbImage::from_fn(40, 30, |x, y| image::Rgb([x as u8 * 6, y as u8 * 8, 0]));
        let a = random_crops(std::slice::from_ref(&img), 16, 3, true, true, 7).unwrap();
        let b = random_crops(std::slice::from_ref(&img), 16, 3, true, true, 7).unwrap();
        assert_eq!(a.dims(), &[3, 3, 16, 16]);
        let (va, vb) = (
            a.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            b.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        );
        assert_eq!(va, vb);
        assert!(va.iter().all(|v| (-1.0..=1.0).contains(v)));
        assert!(random_crops(std::slice::from_ref(&img), 32, 1, false, false, 0).is_err());
    }
}
