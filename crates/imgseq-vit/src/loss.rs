//! The classifier's loss on candle tensors: cross-entropy with label smoothing against hard
//! labels or soft targets. The autograd engine trains with it, and it is the reference that
//! [`crate::fused`]'s hand-written loss and gradients are tested against.

use candle_core::{Tensor, D};

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
