//! The training loss (x, x̂ in [-1, 1]):
//!
//! `l1·mean|x̂ − x| + l2·mean(x̂ − x)² + sharp·mean|∇x̂ − ∇x| + codebook·q_loss`
//!
//! where ∇ are the horizontal and vertical pixel differences (an image-gradient L1 that keeps
//! edges sharp) and `q_loss` is taming's codebook + commitment loss (β = 0.25, legacy
//! placement, see [`crate::quantize`]). There is no perceptual (LPIPS) or adversarial
//! (PatchGAN) term: taming switches its discriminator on after ~250k steps, and an adversarial
//! term lowers PSNR.

use candle_core::{DType, Tensor};
use imgseq_core::Result;

/// The weight of each term (0 leaves a term out).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossWeights {
    pub l1: f64,
    pub l2: f64,
    pub sharp: f64,
    pub codebook: f64,
}

/// A step's loss and the figure reported beside it.
pub struct Loss {
    /// The weighted sum, a scalar to call `backward` on.
    pub total: Tensor,
    /// mean (x̂ − x)², for the running PSNR.
    pub mse: f64,
}

/// # Shapes
/// x, recon: (b, 3, s, s) in [-1, 1]; q_loss: () or `None` when the quantizer was bypassed
pub fn loss(x: &Tensor, recon: &Tensor, q_loss: Option<&Tensor>, w: LossWeights) -> Result<Loss> {
    let mut total = match q_loss {
        Some(q) => (q * w.codebook)?,
        None => Tensor::zeros((), DType::F32, x.device())?,
    };
    let diff = (recon - x)?;
    let l2 = diff.sqr()?.mean_all()?;
    if w.l1 > 0.0 {
        total = (total + (diff.abs()?.mean_all()? * w.l1)?)?;
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
    Ok(Loss {
        total,
        mse: l2.to_scalar::<f32>()? as f64,
    })
}

/// PSNR (dB) of a mean squared error on [-1, 1] pixels (data range 2).
pub fn psnr_of_mse(mse: f64) -> f64 {
    10.0 * (4.0 / mse.max(1e-12)).log10()
}
