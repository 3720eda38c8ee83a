//! The training loss (x, x̂ in [-1, 1]):
//!
//! `nll = l1·mean|x̂ − x| + l2·mean(x̂ − x)² + sharp·mean|∇x̂ − ∇x| + perceptual·mean LPIPS(x, x̂)`
//! and `total = nll + codebook·q_loss` (+ the adversarial term of [`super::gan`], whose
//! adaptive weight is taken from `nll`'s gradient)
//!
//! where ∇ are the horizontal and vertical pixel differences (an image-gradient L1 that keeps
//! edges sharp), LPIPS is [`super::lpips`] (only when its weights were given) and `q_loss` is
//! taming's codebook + commitment loss (β = 0.25, legacy placement, see
//! [`imgseq_vqgan::quantize`]). taming's own recipe is `l1` 1, `l2` 0, `sharp` 0, `perceptual` 1.

use super::lpips::Lpips;
use candle_core::{DType, Tensor};
use imgseq_core::Result;
use serde::{Deserialize, Serialize};

/// The weight of each term (0 leaves a term out).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossWeights {
    pub l1: f64,
    pub l2: f64,
    pub sharp: f64,
    pub codebook: f64,
    pub perceptual: f64,
}

/// The mean of every loss term over a window of steps, unweighted (what the training report
/// prints and `state.json`'s history keeps).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LossTerms {
    /// mean |x̂ − x|.
    pub rec: f64,
    /// mean LPIPS(x, x̂) (0 without the perceptual term).
    pub p: f64,
    /// taming's codebook + commitment loss (0 while the quantizer is bypassed).
    pub codebook: f64,
    /// The generator's adversarial loss −mean D(x̂) (0 before `disc_start`).
    pub g: f64,
    /// `disc_factor ·` the discriminator's loss.
    pub d: f64,
    /// The adaptive weight λ (× `disc_weight`).
    pub lambda: f64,
    /// Mean discriminator logits on real and rebuilt images.
    pub logits_real: f64,
    pub logits_fake: f64,
}

impl LossTerms {
    /// Elementwise `self + k·o`.
    pub fn add_scaled(&mut self, o: &LossTerms, k: f64) {
        self.rec += k * o.rec;
        self.p += k * o.p;
        self.codebook += k * o.codebook;
        self.g += k * o.g;
        self.d += k * o.d;
        self.lambda += k * o.lambda;
        self.logits_real += k * o.logits_real;
        self.logits_fake += k * o.logits_fake;
    }
}

/// A step's loss and the figure reported beside it.
pub struct Loss {
    /// The weighted sum, a scalar to call `backward` on.
    pub total: Tensor,
    /// mean (x̂ − x)², for the running PSNR.
    pub mse: f64,
    /// The unweighted terms (rec, p, codebook; the adversarial ones are filled in later).
    pub terms: LossTerms,
}

/// # Shapes
/// x, recon: (b, 3, s, s) in [-1, 1]; q_loss: () or `None` when the quantizer was bypassed;
/// `lpips`: the perceptual network when its weights were given (used when `w.perceptual` > 0)
pub fn loss(
    x: &Tensor,
    recon: &Tensor,
    q_loss: Option<&Tensor>,
    w: LossWeights,
    lpips: Option<&Lpips>,
) -> Result<Loss> {
    let mut terms = LossTerms::default();
    let mut total = match q_loss {
        Some(q) => {
            terms.codebook = q.to_scalar::<f32>()? as f64;
            (q * w.codebook)?
        }
        None => Tensor::zeros((), DType::F32, x.device())?,
    };
    let diff = (recon - x)?;
    let l2 = diff.sqr()?.mean_all()?;
    let l1 = diff.abs()?.mean_all()?;
    terms.rec = l1.to_scalar::<f32>()? as f64;
    if w.l1 > 0.0 {
        total = (total + (l1 * w.l1)?)?;
    }
    if w.l2 > 0.0 {
        total = (total + (&l2 * w.l2)?)?;
    }
    if w.sharp > 0.0 {
        // ∇x̂ − ∇x = ∇(x̂ − x): finite differences of the residual along w and h.
        let (_, _, h, wd) = diff.dims4()?;
        let gx = (diff.narrow(3, 1, wd - 1)? - diff.narrow(3, 0, wd - 1)?)?;
        let gy = (diff.narrow(2, 1, h - 1)? - diff.narrow(2, 0, h - 1)?)?;
        let g = ((gx.abs()?.mean_all()? + gy.abs()?.mean_all()?)? * 0.5)?;
        total = (total + (g * w.sharp)?)?;
    }
    if let (Some(net), true) = (lpips, w.perceptual > 0.0) {
        let p = net.forward(x, recon)?.mean_all()?;
        terms.p = p.to_scalar::<f32>()? as f64;
        total = (total + (p * w.perceptual)?)?;
    }
    Ok(Loss {
        total,
        mse: l2.to_scalar::<f32>()? as f64,
        terms,
    })
}

/// PSNR (dB) of a mean squared error on [-1, 1] pixels (data range 2).
pub fn psnr_of_mse(mse: f64) -> f64 {
    10.0 * (4.0 / mse.max(1e-12)).log10()
}
