//! The adversarial half of taming's `VQLPIPSWithDiscriminator`
//! (`taming/modules/losses/vqperceptual.py`), with its names and constants:
//!
//! * generator: `g_loss = −mean(D(x̂))`, added as `λ·disc_factor·g_loss` where the adaptive
//!   weight `λ = clamp(‖∇_W nll‖ / (‖∇_W g_loss‖ + 1e-4), 0, 1e4)·disc_weight` (detached),
//!   `W` the decoder's last layer weight (`decoder.conv_out.weight`) and `nll` the
//!   reconstruction (+ perceptual) loss;
//! * discriminator: `disc_factor·hinge(D(x), D(x̂))` = `½(mean relu(1 − real) + mean relu(1 + fake))`
//!   (or `vanilla`: `½(mean softplus(−real) + mean softplus(fake))`), Adam β = (0.5, 0.9);
//! * `disc_factor` is 0 before step `disc_start` (taming's `adopt_weight`): until then neither
//!   the g-loss nor the discriminator is trained (and neither is computed here).
//!
//! State: the discriminator's weights and BatchNorm statistics (`loss.discriminator.*`, as
//! in a taming checkpoint) and its optimizer (`disc_optim.*`) travel in the run's
//! `optimizer.safetensors`, so a resumed run continues exactly.

use super::disc::{DiscConfig, DiscNorm, Discriminator, TAMING_PREFIX};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use candle_nn::VarMap;
use imgseq_core::data::augment::mix_seed;
use imgseq_core::optim::AdamW;
use imgseq_core::run::sorted_vars;
use imgseq_core::weights::set_vars;
use imgseq_core::{Error, Result};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// Prefix of the discriminator optimizer's tensors in `optimizer.safetensors`.
pub const DISC_OPTIM_PREFIX: &str = "disc_optim.";
/// taming's clamp of the adaptive weight and the ε of its denominator.
const LAMBDA_MAX: f64 = 1e4;
const LAMBDA_EPS: f64 = 1e-4;

/// The discriminator's loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiscLoss {
    #[default]
    Hinge,
    Vanilla,
}

/// The adversarial recipe (`training.json`'s `gan`); `disc_weight` 0 = no discriminator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GanConfig {
    /// taming's `disc_weight`: scales the adaptive weight λ (0: no adversarial loss).
    pub disc_weight: f64,
    /// First step (0-based) with the adversarial loss and discriminator updates.
    pub disc_start: usize,
    /// taming's `disc_factor`, multiplying both the g-loss and the d-loss once started.
    pub disc_factor: f64,
    pub disc_loss: DiscLoss,
    /// `NLayerDiscriminator`'s `n_layers`, `ndf` and norm (`use_actnorm`).
    pub disc_layers: usize,
    pub disc_ndf: usize,
    pub disc_norm: DiscNorm,
    /// The discriminator's Adam β (taming: (0.5, 0.9)); its learning rate is the
    /// generator's scheduled one.
    pub disc_beta1: f64,
    pub disc_beta2: f64,
    /// Start the discriminator from these weights (a taming checkpoint's
    /// `loss.discriminator.*` or a bare `NLayerDiscriminator` state dict's `main.*`;
    /// `.ckpt`/`.pth` or `.safetensors`) instead of taming's random initialisation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disc_init: Option<std::path::PathBuf>,
}

impl Default for GanConfig {
    fn default() -> Self {
        Self {
            disc_weight: 0.0,
            disc_start: 0,
            disc_factor: 1.0,
            disc_loss: DiscLoss::Hinge,
            disc_layers: 3,
            disc_ndf: 64,
            disc_norm: DiscNorm::Batch,
            disc_beta1: 0.5,
            disc_beta2: 0.9,
            disc_init: None,
        }
    }
}

impl GanConfig {
    /// Whether the run has a discriminator.
    pub fn enabled(&self) -> bool {
        self.disc_weight > 0.0
    }

    /// taming's `adopt_weight(disc_factor, step, disc_start)`.
    pub fn factor_at(&self, step: usize) -> f64 {
        if step < self.disc_start {
            0.0
        } else {
            self.disc_factor
        }
    }

    pub fn validate(&self) -> Result<()> {
        for (n, w) in [
            ("disc_weight", self.disc_weight),
            ("disc_factor", self.disc_factor),
        ] {
            if !(w >= 0.0 && w.is_finite()) {
                return Err(Error::setting(n, w, "must be ≥ 0"));
            }
        }
        if self.enabled() {
            if !(1..=8).contains(&self.disc_layers) {
                return Err(Error::setting(
                    "disc_layers",
                    self.disc_layers,
                    "must be 1 to 8",
                ));
            }
            if !(1..=512).contains(&self.disc_ndf) {
                return Err(Error::setting(
                    "disc_ndf",
                    self.disc_ndf,
                    "must be 1 to 512",
                ));
            }
        }
        for (n, b) in [
            ("disc_beta1", self.disc_beta1),
            ("disc_beta2", self.disc_beta2),
        ] {
            if !(0.0..1.0).contains(&b) {
                return Err(Error::setting(n, b, "must be in [0, 1)"));
            }
        }
        Ok(())
    }
}

/// `−mean(logits_fake)`.
pub fn generator_loss(logits_fake: &Tensor) -> Result<Tensor> {
    Ok(logits_fake.mean_all()?.neg()?)
}

/// log(1 + eˣ), computed stably as relu(x) + log(1 + e^−|x|).
fn softplus(x: &Tensor) -> Result<Tensor> {
    let tail = (x.abs()?.neg()?.exp()? + 1.0)?.log()?;
    Ok((x.relu()? + tail)?)
}

/// taming's `hinge_d_loss` / `vanilla_d_loss` (without `disc_factor`).
pub fn discriminator_loss(kind: DiscLoss, real: &Tensor, fake: &Tensor) -> Result<Tensor> {
    let (r, f) = match kind {
        DiscLoss::Hinge => (
            real.affine(-1.0, 1.0)?.relu()?.mean_all()?,
            (fake + 1.0)?.relu()?.mean_all()?,
        ),
        DiscLoss::Vanilla => (
            softplus(&real.neg()?)?.mean_all()?,
            softplus(fake)?.mean_all()?,
        ),
    };
    Ok(((r + f)? * 0.5)?)
}

/// ‖g‖₂ of the gradient of `var` in `grads` (0 when it has none).
pub fn grad_norm(grads: &GradStore, var: &Var) -> Result<f64> {
    match grads.get(var.as_tensor()) {
        Some(g) => Ok((g.sqr()?.sum_all()?.to_scalar::<f32>()? as f64).sqrt()),
        None => Ok(0.0),
    }
}

/// taming's `calculate_adaptive_weight` from the two gradient norms at the last layer.
pub fn adaptive_weight(nll_grad_norm: f64, g_grad_norm: f64, disc_weight: f64) -> f64 {
    (nll_grad_norm / (g_grad_norm + LAMBDA_EPS)).clamp(0.0, LAMBDA_MAX) * disc_weight
}

/// The gradients of `nll_and_rest + λ·factor·g_loss` for `vars`: `nll_and_rest` (the
/// reconstruction, perceptual and codebook terms; only `nll` reaches `last_layer`, the
/// codebook terms end before the decoder) and `g_loss` are differentiated separately, λ is
/// taken from their gradients at `last_layer`, and the sum is formed per variable.
/// Returns the gradients and λ.
pub fn generator_grads(
    nll_and_rest: &Tensor,
    g_loss: &Tensor,
    last_layer: &Var,
    vars: &[(String, Var)],
    disc_weight: f64,
    factor: f64,
) -> Result<(GradStore, f64)> {
    let mut grads = nll_and_rest.backward()?;
    let g_grads = g_loss.backward()?;
    let lambda = adaptive_weight(
        grad_norm(&grads, last_layer)?,
        grad_norm(&g_grads, last_layer)?,
        disc_weight,
    );
    let coef = lambda * factor;
    for (_, v) in vars {
        let Some(gb) = g_grads.get(v.as_tensor()) else {
            continue;
        };
        let sum = match grads.get(v.as_tensor()) {
            Some(ga) => (ga + (gb * coef)?)?,
            None => (gb * coef)?,
        };
        grads.insert(v.as_tensor(), sum);
    }
    Ok((grads, lambda))
}

/// One discriminator update's figures.
pub struct DiscStep {
    /// `disc_factor ·` the d-loss.
    pub d_loss: f64,
    pub logits_real: f64,
    pub logits_fake: f64,
}

/// The discriminator, its variables and its Adam.
pub struct Gan {
    pub disc: Discriminator,
    pub named: Vec<(String, Var)>,
    opt: AdamW,
    pub cfg: GanConfig,
}

impl Gan {
    /// A discriminator for `in_channels`-channel images with taming's initialisation drawn
    /// from `seed`.
    pub fn new(cfg: &GanConfig, in_channels: usize, seed: u64) -> Result<Self> {
        cfg.validate()?;
        let vars = VarMap::new();
        let dc = DiscConfig {
            in_channels,
            ndf: cfg.disc_ndf,
            n_layers: cfg.disc_layers,
            norm: cfg.disc_norm,
        };
        let disc = Discriminator::new(&dc, &vars)?;
        disc.init(&mut StdRng::seed_from_u64(mix_seed(&[seed, 0xd15c])))?;
        let named = sorted_vars(&vars);
        let list = named.iter().map(|(n, v)| (n.clone(), v.clone(), false));
        let mut opt = AdamW::new(list.collect(), 1e-4, 0.0)?;
        (opt.beta1, opt.beta2) = (cfg.disc_beta1, cfg.disc_beta2);
        Ok(Self {
            disc,
            named,
            opt,
            cfg: cfg.clone(),
        })
    }

    /// `−mean(D(x̂))` with the discriminator in training mode, and the mean logit.
    pub fn g_loss(&self, recon: &Tensor) -> Result<(Tensor, f64)> {
        let logits = self.disc.forward(recon, true)?;
        let mean = logits.mean_all()?.to_scalar::<f32>()? as f64;
        Ok((generator_loss(&logits)?, mean))
    }

    /// One discriminator update on real `x` and the (detached) reconstruction at learning
    /// rate `lr` with taming's `disc_factor` `factor`.
    pub fn d_step(&mut self, x: &Tensor, recon: &Tensor, factor: f64, lr: f64) -> Result<DiscStep> {
        let real = self.disc.forward(&x.detach(), true)?;
        let fake = self.disc.forward(&recon.detach(), true)?;
        let d = (discriminator_loss(self.cfg.disc_loss, &real, &fake)? * factor)?;
        let grads = d.backward()?;
        self.opt.lr = lr;
        self.opt.step(&grads)?;
        Ok(DiscStep {
            d_loss: d.to_scalar::<f32>()? as f64,
            logits_real: real.mean_all()?.to_scalar::<f32>()? as f64,
            logits_fake: fake.mean_all()?.to_scalar::<f32>()? as f64,
        })
    }

    /// Weights, buffers (`loss.discriminator.*`) and optimizer state (`disc_optim.*`) for
    /// the run's optimizer file.
    pub fn state(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out: Vec<(String, Tensor)> = self
            .named
            .iter()
            .map(|(n, v)| (format!("{TAMING_PREFIX}{n}"), v.as_tensor().clone()))
            .collect();
        for (n, t) in self.disc.buffers()? {
            out.push((format!("{TAMING_PREFIX}{n}"), t));
        }
        for (n, t) in self.opt.state()? {
            out.push((format!("{DISC_OPTIM_PREFIX}{n}"), t));
        }
        Ok(out)
    }

    /// Whether `saved` (an optimizer file's tensors) holds a discriminator.
    pub fn in_file(saved: &HashMap<String, Tensor>) -> bool {
        saved.keys().any(|k| k.starts_with(TAMING_PREFIX))
    }

    /// Restores what [`Gan::state`] wrote (`path` for messages).
    pub fn restore(&mut self, path: &Path, saved: &HashMap<String, Tensor>) -> Result<()> {
        self.load_weights(path, saved, TAMING_PREFIX)?;
        let opt: HashMap<String, Tensor> = saved
            .iter()
            .filter_map(|(k, t)| {
                k.strip_prefix(DISC_OPTIM_PREFIX)
                    .map(|s| (s.to_string(), t.clone()))
            })
            .collect();
        self.opt
            .load_state(&opt)
            .map_err(|m| Error::format(path, format!("discriminator optimizer: {m}")))
    }

    /// Loads `path` (see [`GanConfig::disc_init`]): `loss.discriminator.*` names when the file
    /// has them, else `main.*`.
    pub fn load_file(&self, path: &Path) -> Result<()> {
        let saved = super::lpips::read_tensors(path)?;
        let prefix = if Self::in_file(&saved) {
            TAMING_PREFIX
        } else {
            ""
        };
        self.load_weights(path, &saved, prefix)
    }

    /// Sets the discriminator's weights and buffers from `saved` under `prefix` (`""` for a
    /// bare `NLayerDiscriminator` state dict, `loss.discriminator.` for a taming checkpoint).
    pub fn load_weights(
        &self,
        path: &Path,
        saved: &HashMap<String, Tensor>,
        prefix: &str,
    ) -> Result<()> {
        let keys: Vec<(String, &Var)> = self
            .named
            .iter()
            .map(|(n, v)| (format!("{prefix}{n}"), v))
            .collect();
        let f32s: HashMap<String, Tensor> = keys
            .iter()
            .filter_map(|(k, _)| saved.get(k).map(|t| (k, t)))
            .map(|(k, t)| Ok((k.clone(), t.to_dtype(candle_core::DType::F32)?)))
            .collect::<Result<_>>()?;
        set_vars(path, &f32s, keys.iter().map(|(k, v)| (k.as_str(), *v)))?;
        self.disc.load_buffers(path, saved, prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn t(v: &[f32]) -> Tensor {
        Tensor::from_slice(v, v.len(), &Device::Cpu).unwrap()
    }

    fn scalar(x: &Tensor) -> f32 {
        x.to_scalar::<f32>().unwrap()
    }

    #[test]
    fn hinge_and_vanilla_losses_follow_their_formulas() {
        let (real, fake) = (t(&[2.0, 0.5, -1.0]), t(&[-2.0, 0.0, 3.0]));
        // hinge: real relu(1 − r) = [0, 0.5, 2] → 2.5/3; fake relu(1 + f) = [0, 1, 4] → 5/3.
        let h = scalar(&discriminator_loss(DiscLoss::Hinge, &real, &fake).unwrap());
        assert!((h - 0.5 * (2.5 / 3.0 + 5.0 / 3.0)).abs() < 1e-6);
        let sp = |x: f32| (1.0 + x.exp()).ln();
        let want =
            0.5 * ((sp(-2.0) + sp(-0.5) + sp(1.0)) / 3.0 + (sp(-2.0) + sp(0.0) + sp(3.0)) / 3.0);
        let v = scalar(&discriminator_loss(DiscLoss::Vanilla, &real, &fake).unwrap());
        assert!((v - want).abs() < 1e-6, "{v} vs {want}");
        // Stable for large logits.
        let big =
            scalar(&discriminator_loss(DiscLoss::Vanilla, &t(&[-200.0]), &t(&[200.0])).unwrap());
        assert!((big - 200.0).abs() < 1e-3);
        assert_eq!(scalar(&generator_loss(&fake).unwrap()), -1.0 / 3.0);
    }

    #[test]
    fn adaptive_weight_is_clamped_and_scaled() {
        assert!((adaptive_weight(2.0, 1.0, 0.5) - 0.5 * 2.0 / 1.0001).abs() < 1e-12);
        assert_eq!(adaptive_weight(1.0, 0.0, 1.0), LAMBDA_MAX);
        assert_eq!(adaptive_weight(0.0, 3.0, 1.0), 0.0);
    }

    #[test]
    fn disc_init_loads_a_taming_checkpoints_discriminator() {
        let cfg = GanConfig {
            disc_weight: 0.8,
            disc_layers: 2,
            disc_ndf: 4,
            ..Default::default()
        };
        let (a, b) = (Gan::new(&cfg, 3, 1).unwrap(), Gan::new(&cfg, 3, 2).unwrap());
        let x = Tensor::randn(0f32, 1.0, (2, 3, 32, 32), &Device::Cpu).unwrap();
        a.disc.forward(&x, true).unwrap(); // running statistics away from their start
                                           // As a taming checkpoint names them (`loss.discriminator.*`), beside other tensors.
        let mut st: Vec<(String, Tensor)> = a.state().unwrap();
        st.push((
            "encoder.conv_in.weight".into(),
            Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap(),
        ));
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("last.safetensors");
        imgseq_core::weights::save_tensors(&path, st.iter().map(|(k, v)| (k, v))).unwrap();
        b.load_file(&path).unwrap();
        let (ta, tb) = (a.state().unwrap(), b.state().unwrap());
        for ((ka, va), (kb, vb)) in ta.iter().zip(&tb) {
            if ka.starts_with(TAMING_PREFIX) {
                assert_eq!(ka, kb);
                let diff = (va.to_dtype(DType::F32).unwrap() - vb.to_dtype(DType::F32).unwrap())
                    .unwrap()
                    .abs()
                    .unwrap()
                    .max_all()
                    .unwrap()
                    .to_scalar::<f32>()
                    .unwrap();
                assert_eq!(diff, 0.0, "{ka}");
            }
        }
        // A file without the discriminator is refused, naming the tensor.
        let bad = d.path().join("bad.safetensors");
        imgseq_core::weights::save_tensors(&bad, st[..1].iter().map(|(k, v)| (k, v))).unwrap();
        let e = b.load_file(&bad).unwrap_err().to_string();
        assert!(e.contains("missing tensor"), "{e}");
    }

    #[test]
    fn disc_factor_is_zero_before_disc_start() {
        let g = GanConfig {
            disc_weight: 0.8,
            disc_start: 10,
            ..Default::default()
        };
        assert_eq!(g.factor_at(9), 0.0);
        assert_eq!(g.factor_at(10), 1.0);
    }
}
