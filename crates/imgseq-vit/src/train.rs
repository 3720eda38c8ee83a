//! Training and evaluation of a ViT classifier.
//!
//! A run folder holds everything needed to use or resume it:
//! `config.json` + `model.safetensors` (HF layout), `training.json` (this [`TrainConfig`]),
//! `optimizer.safetensors` (AdamW moments) and `state.json` (epochs done, accuracy history).
//!
//! Two engines run the steps ([`Engine`]): the fused forward + backward of [`crate::fused`]
//! (f32 on the CPU; the default: 3× the autograd engine's img/s on the seed model, batch 128,
//! 2 threads, AMD EPYC Zen 4) and candle's autograd through [`ViTForImageClassification`]
//! (the reference). Both start from the same initial weights, use the same AdamW arithmetic
//! and write the same run files, so a run started with one resumes with the other.

use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::{VarBuilder, VarMap};
use imgseq_core::progress::bar;
use imgseq_core::{Error, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_distr_free::normal;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

use crate::checkpoint::{load_tensors, save_tensors, CONFIG_FILE, WEIGHTS_FILE};
use crate::config::ViTConfig;
use crate::data::{make_batch, Augment, ImageSet, Normalize};
use crate::fused::{decays, ema_update, FlatAdamW, FusedViT, ParamLayout, Targets};
use crate::model::ViTForImageClassification;
use imgseq_core::fsutil::{read_json, write_json};
use imgseq_core::optim::{warmup_cosine, AdamW};

/// The run file that holds the [`TrainConfig`].
pub const TRAINING_FILE: &str = "training.json";

/// Images per forward pass when evaluating.
pub const EVAL_BATCH: usize = 500;

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
/// `training.json` (nothing to resume).
pub fn load_run(dir: &Path) -> Result<Option<(ViTConfig, TrainConfig)>> {
    let tc_path = dir.join(TRAINING_FILE);
    if !tc_path.exists() {
        return Ok(None);
    }
    let tc = TrainConfig::load(&tc_path)?;
    let cfg = ViTConfig::load(dir.join(CONFIG_FILE))?;
    Ok(Some((cfg, tc)))
}

/// The files of a run folder.
pub const RUN_FILES: [&str; 5] = [
    CONFIG_FILE,
    WEIGHTS_FILE,
    TRAINING_FILE,
    OPTIMIZER_FILE,
    STATE_FILE,
];
/// The run file with the AdamW moments (and, with an EMA, the raw weights: [`RAW_PREFIX`]).
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
/// The run file with the progress ([`TrainState`]); written last at every checkpoint.
pub const STATE_FILE: &str = "state.json";

/// The run files present in `dir`.
pub fn run_files(dir: &Path) -> Vec<&'static str> {
    imgseq_core::fsutil::present_files(dir, &RUN_FILES)
}

/// [`imgseq_core::fsutil::check_run_start`] for this run folder's files.
pub fn check_start(out: &Path, resume: bool) -> Result<()> {
    imgseq_core::fsutil::check_run_start(out, &RUN_FILES, STATE_FILE, resume)
}

/// Removes the run files from `out` (only those: other files and the folder stay).
pub fn clear_run(out: &Path) -> Result<()> {
    imgseq_core::fsutil::clear_run(out, &RUN_FILES)
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

/// Accuracy, per-class accuracy and the confusion matrix (rows: true, columns: predicted).
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub accuracy: f64,
    pub per_class: Vec<f64>,
    pub confusion: Vec<Vec<usize>>,
    pub n: usize,
}

impl EvalReport {
    /// Accuracy and per-class accuracy (NaN for a class with no images) from a confusion
    /// matrix `[true][predicted]`.
    pub fn from_confusion(confusion: Vec<Vec<usize>>) -> Self {
        let k = confusion.len();
        let n: usize = confusion.iter().flatten().sum();
        let correct: usize = (0..k).map(|i| confusion[i][i]).sum();
        let per_class = (0..k)
            .map(|i| {
                let tot: usize = confusion[i].iter().sum();
                if tot == 0 {
                    f64::NAN
                } else {
                    confusion[i][i] as f64 / tot as f64
                }
            })
            .collect();
        Self {
            accuracy: correct as f64 / n.max(1) as f64,
            per_class,
            confusion,
            n,
        }
    }
}

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

/// The initial value of parameter `name` (`n` values): mostly HF's rule — LayerNorm weights
/// 1, biases 0, everything else ~ N(0, std²) truncated at 2σ — drawn from `rng`.
fn init_values(name: &str, n: usize, std: f64, rng: &mut rand::rngs::StdRng) -> Vec<f32> {
    if name.contains("layernorm") && name.ends_with("weight") {
        vec![1.0; n]
    } else if name.ends_with("bias") {
        vec![0.0; n]
    } else {
        (0..n)
            .map(|_| (normal(rng).clamp(-2.0, 2.0) * std) as f32)
            .collect()
    }
}

/// Mostly-HF initialisation: weights ~ N(0, 0.02) (truncated at 2σ), biases 0, norms 1/0,
/// CLS token and positions ~ N(0, 0.02), drawn from a seeded RNG so runs are reproducible.
/// Parameters are drawn in name order ([`init_flat`] gives the same values).
pub fn init_weights(vars: &VarMap, std: f64, seed: u64) -> Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let data = vars.data().lock().expect("poisoned");
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    for name in names {
        let var = &data[name];
        let shape = var.as_tensor().shape().clone();
        let vals = init_values(name, shape.elem_count(), std, &mut rng);
        var.set(&Tensor::from_vec(vals, shape, var.as_tensor().device())?)?;
    }
    Ok(())
}

/// [`init_weights`] for a flat parameter array laid out by `layout`: the same values.
pub fn init_flat(layout: &ParamLayout, std: f64, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut flat = vec![0f32; layout.len()];
    let mut specs: Vec<_> = layout.specs.iter().collect();
    specs.sort_by(|a, b| a.name.cmp(&b.name));
    for s in specs {
        flat[s.range()].copy_from_slice(&init_values(&s.name, s.len(), std, &mut rng));
    }
    flat
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

/// Cross-entropy with label smoothing ε: (1−ε)·NLL + ε·mean over classes of −log p.
pub fn cross_entropy_smoothed(
    logits: &Tensor,
    labels: &Tensor,
    eps: f64,
) -> candle_core::Result<Tensor> {
    let logp = candle_nn::ops::log_softmax(logits, D::Minus1)?; // (b, k)
    let nll = logp.gather(&labels.unsqueeze(1)?, 1)?.neg()?.mean_all()?;
    if eps == 0.0 {
        return Ok(nll);
    }
    let smooth = logp.mean(D::Minus1)?.neg()?.mean_all()?;
    (nll * (1.0 - eps))? + (smooth * eps)?
}

/// Cross-entropy against soft targets `probs` (b, k) with label smoothing ε, as PyTorch's
/// `cross_entropy(logits, probs, label_smoothing=ε)`: mean over images of −Σ_k t'_k log p_k
/// with t' = (1 − ε)·t + ε/k.
pub fn cross_entropy_soft(
    logits: &Tensor,
    probs: &Tensor,
    eps: f64,
) -> candle_core::Result<Tensor> {
    let k = logits.dim(D::Minus1)?;
    let logp = candle_nn::ops::log_softmax(logits, D::Minus1)?; // (b, k)
    let t = ((probs * (1.0 - eps))? + eps / k as f64)?;
    (t * logp)?.sum(D::Minus1)?.neg()?.mean_all()
}

fn tensor_err(e: candle_core::Error) -> Error {
    Error::Candle(e)
}

/// Adds the predictions `pred` of the images `chunk` of `set` to `confusion` (true class ×
/// predicted class), refusing a label the model has no class for.
pub(crate) fn tally(
    confusion: &mut [Vec<usize>],
    set: &ImageSet,
    chunk: &[usize],
    pred: &[u32],
) -> Result<()> {
    let k = confusion.len();
    for (&i, &p) in chunk.iter().zip(pred) {
        let t = set.labels[i] as usize;
        if t >= k {
            return Err(Error::invalid(format!(
                "label {t} out of range for a {k}-class model"
            )));
        }
        confusion[t][p as usize] += 1;
    }
    Ok(())
}

/// The confusion matrix of `predict` (a batch (b, c, h, w) → one class per image) over `set`.
pub(crate) fn evaluate_with(
    k: usize,
    set: &ImageSet,
    norm: &Normalize,
    batch_size: usize,
    progress: bool,
    mut predict: impl FnMut(&Tensor) -> Result<Vec<u32>>,
) -> Result<EvalReport> {
    if set.n == 0 {
        return Err(Error::invalid("the evaluation set has no images"));
    }
    if batch_size == 0 {
        return Err(Error::setting("batch_size", batch_size, "must be positive"));
    }
    let mut confusion = vec![vec![0usize; k]; k];
    let dev = Device::Cpu;
    let pb = progress.then(|| bar(set.n as u64, 0, "eval"));
    let idx: Vec<usize> = (0..set.n).collect();
    for chunk in idx.chunks(batch_size) {
        let (x, _) = make_batch(set, chunk, norm, None, &dev)?;
        tally(&mut confusion, set, chunk, &predict(&x)?)?;
        if let Some(pb) = &pb {
            pb.inc(chunk.len() as u64);
        }
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    Ok(EvalReport::from_confusion(confusion))
}

/// Classifies every image of `set` and reports accuracy, per-class accuracy and confusion.
pub fn evaluate(
    model: &ViTForImageClassification,
    cfg: &ViTConfig,
    set: &ImageSet,
    norm: &Normalize,
    batch_size: usize,
    progress: bool,
) -> Result<EvalReport> {
    evaluate_with(cfg.num_labels(), set, norm, batch_size, progress, |x| {
        Ok(model
            .forward(x, false)?
            .argmax(D::Minus1)?
            .to_vec1::<u32>()?)
    })
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

/// Index of the first largest value.
fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
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
    fn resume(&mut self, out: &Path, tc: &TrainConfig) -> Result<()> {
        let dev = Device::Cpu;
        let wpath = out.join(WEIGHTS_FILE);
        let saved = self
            .layout
            .from_tensors(&load_tensors(&wpath, &dev)?, "")
            .map_err(|e| Error::weights(&wpath, e.to_string()))?;
        let opt_path = out.join(OPTIMIZER_FILE);
        let st = load_tensors(&opt_path, &dev)?;
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
        out: &Path,
        cfg: &ViTConfig,
        tc: &TrainConfig,
        state: &TrainState,
    ) -> Result<()> {
        self.sync()?;
        std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
        tc.save(&out.join(TRAINING_FILE))?;
        save_tensors(
            out.join(WEIGHTS_FILE),
            &self.layout.to_tensors(self.model_weights())?,
        )?;
        cfg.save(out.join(CONFIG_FILE))?;
        let mut st = self.opt_state()?;
        if self.ema.is_some() {
            for (k, t) in self.layout.to_tensors(&self.params)? {
                st.insert(format!("{RAW_PREFIX}{k}"), t);
            }
        }
        save_tensors(out.join(OPTIMIZER_FILE), &st)?;
        write_json(out.join(STATE_FILE), state)
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
    check_start(out, resume)?;
    if (train_set.channels, train_set.height) != (model_cfg.num_channels, model_cfg.image_size) {
        return Err(Error::invalid(format!(
            "the data is {}x{}x{} but the model expects {}x{}x{} (pad or resize the data first)",
            train_set.channels,
            train_set.height,
            train_set.width,
            model_cfg.num_channels,
            model_cfg.image_size,
            model_cfg.image_size
        )));
    }
    let dev = Device::Cpu;
    let mut tr = Trainer::new(model_cfg, tc, engine)?;
    let state_path = out.join(STATE_FILE);
    let mut state = TrainState::default();
    if resume {
        state = read_json(&state_path, "state.json")?;
        tr.resume(out, tc)?;
        eprintln!(
            "resuming {} after epoch {} (step {})",
            out.display(),
            state.epochs_done,
            state.steps_done
        );
    } else {
        tr.set_params(init_flat(&tr.layout, model_cfg.initializer_range, tc.seed))?;
        if tc.ema > 0.0 {
            tr.ema = Some(tr.params.clone());
        }
    }
    if state.epochs_done >= tc.epochs {
        eprintln!(
            "{}: already at epoch {} of {}",
            out.display(),
            state.epochs_done,
            tc.epochs
        );
        return Ok(state);
    }

    let teacher = match &tc.soft_labels {
        Some(p) => Some(load_soft_labels(
            Path::new(p),
            train_set,
            model_cfg.num_labels(),
        )?),
        None => None,
    };
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
                .map(|t| distill_targets(t, train_set, idx, model_cfg.num_labels(), tc.distill));
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
            let tenth = (s + 1) % (steps_per_epoch / 10).max(1) == 0;
            if s % 10 == 0 || tenth {
                let ips = ((s + 1) * tc.batch_size) as f64 / t0.elapsed().as_secs_f64();
                let msg = format!(
                    "loss {:.4} lr {:.2e} {:.0} img/s",
                    loss_sum / loss_n as f64,
                    tr.lr(),
                    ips
                );
                // Without a terminal (logs, CI) the bar is hidden: print a line every ~10%.
                if pb.is_hidden() && tenth {
                    eprintln!(
                        "epoch {}/{} step {}/{}: {msg}",
                        epoch + 1,
                        tc.epochs,
                        s + 1,
                        steps_per_epoch
                    );
                }
                pb.set_message(msg);
            }
        }
        pb.finish_and_clear();
        let secs = t0.elapsed().as_secs_f64();
        state.seconds += secs;
        let report = tr.evaluate(model_cfg, test_set, &tc.normalize)?;
        state.epochs_done = epoch + 1;
        state.train_loss.push(loss_sum / loss_n.max(1) as f64);
        state.test_accuracy.push(report.accuracy);
        eprintln!(
            "epoch {:>3}/{}: train loss {:.4}, test accuracy {:.2}%, {:.0} img/s",
            epoch + 1,
            tc.epochs,
            loss_sum / loss_n.max(1) as f64,
            100.0 * report.accuracy,
            (steps_per_epoch * tc.batch_size) as f64 / secs
        );
        // The checkpoint; the folder is made at the first one.
        tr.checkpoint(out, model_cfg, tc, &state)?;
    }
    Ok(state)
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

/// Standard normal sampling without an extra dependency (Box–Muller).
mod rand_distr_free {
    use rand::Rng;
    pub fn normal(rng: &mut impl Rng) -> f64 {
        let u1: f64 = rng.random::<f64>().max(1e-300);
        let u2: f64 = rng.random();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_counts_true_by_predicted_and_refuses_a_label_the_model_lacks() {
        let set =
            ImageSet::new(vec![0u8; 3], vec![0, 1, 2], (1, 1, 1), vec!["a".into(); 3]).unwrap();
        let mut confusion = vec![vec![0usize; 3]; 3];
        tally(&mut confusion, &set, &[0, 1, 2], &[0, 2, 2]).unwrap();
        assert_eq!(confusion, vec![vec![1, 0, 0], vec![0, 0, 1], vec![0, 0, 1]]);
        let mut two = vec![vec![0usize; 2]; 2];
        let e = tally(&mut two, &set, &[2], &[0]).unwrap_err().to_string();
        assert!(
            e.contains("label 2 out of range for a 2-class model"),
            "{e}"
        );
    }
}
