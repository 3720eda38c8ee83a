//! The loss: cross-entropy with label smoothing against hard labels or soft targets, and its
//! gradient with respect to the logits.

use imgseq_core::{Error, Result};

/// What the loss compares the logits with.
#[derive(Debug, Clone, Copy)]
pub enum Targets<'a> {
    /// One class index per image.
    Labels(&'a [u32]),
    /// Class probabilities per image, (b, num_labels) row-major — e.g. a teacher's softmax.
    Probs(&'a [f32]),
}

impl<'a> Targets<'a> {
    /// Checks the targets of a batch of `b` images against a `k`-class model, and the label
    /// smoothing.
    pub(super) fn check(&self, b: usize, k: usize, label_smoothing: f64) -> Result<()> {
        match *self {
            Targets::Labels(y) => {
                if y.len() != b {
                    return Err(Error::bad_data(format!(
                        "{} labels for a batch of {b}",
                        y.len()
                    )));
                }
                if let Some(bad) = y.iter().find(|&&c| c as usize >= k) {
                    return Err(Error::bad_data(format!(
                        "label {bad} out of range for a {k}-class model"
                    )));
                }
            }
            Targets::Probs(t) => {
                if t.len() != b * k {
                    return Err(Error::bad_data(format!(
                        "{} target probabilities for a batch of {b} and {k} classes",
                        t.len()
                    )));
                }
                if t.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
                    return Err(Error::bad_data(
                        "target probabilities must be finite and ≥ 0",
                    ));
                }
            }
        }
        if !(0.0..1.0).contains(&label_smoothing) {
            return Err(Error::setting(
                "label_smoothing",
                label_smoothing,
                "must be in [0, 1)",
            ));
        }
        Ok(())
    }

    /// The targets of images `lo..lo + nb` of a `k`-class batch.
    pub(super) fn shard(&self, lo: usize, nb: usize, k: usize) -> ShardTargets<'a> {
        match *self {
            Targets::Labels(y) => ShardTargets::Labels(&y[lo..lo + nb]),
            Targets::Probs(t) => ShardTargets::Probs(&t[lo * k..][..nb * k]),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct LossCfg {
    pub eps: f32,
    /// Images in the whole batch (the loss is their mean).
    pub batch: usize,
}

pub(super) enum ShardTargets<'a> {
    Labels(&'a [u32]),
    Probs(&'a [f32]),
}

/// Σ over the shard's images of the smoothed cross-entropy; replaces the logits (nb, k) by
/// dL/dlogits of the batch mean: (p·Σt' − t') / batch.
pub(super) fn loss_and_grad(z: &mut [f32], k: usize, t: ShardTargets, cfg: LossCfg) -> f64 {
    let mut total = 0f64;
    let uniform = cfg.eps / k as f32;
    let inv_b = 1.0 / cfg.batch as f32;
    for (i, z) in z.chunks_exact_mut(k).enumerate() {
        let mx = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let se: f32 = z.iter().map(|v| (v - mx).exp()).sum();
        let lse = mx + se.ln();
        let target = |j: usize| -> f32 {
            let tj = match &t {
                ShardTargets::Labels(y) => {
                    if y[i] as usize == j {
                        1.0
                    } else {
                        0.0
                    }
                }
                ShardTargets::Probs(p) => p[i * k + j],
            };
            (1.0 - cfg.eps) * tj + uniform
        };
        let t_sum: f32 = (0..k).map(target).sum();
        let mut loss = 0f64;
        for (j, zj) in z.iter_mut().enumerate() {
            let tj = target(j);
            loss += (tj * (lse - *zj)) as f64;
            *zj = ((*zj - lse).exp() * t_sum - tj) * inv_b;
        }
        total += loss;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Uniform logits: the loss is ln K whatever the targets, and with labels the gradient of
    /// the logits is (1/K − t')/b — checked through the classifier bias gradient.
    #[test]
    fn loss_of_uniform_logits_is_ln_k() {
        let mut z = vec![0.0f32; 6];
        let l = loss_and_grad(
            &mut z,
            3,
            ShardTargets::Labels(&[2, 0]),
            LossCfg { eps: 0.3, batch: 4 },
        );
        assert!((l - 2.0 * 3f64.ln()).abs() < 1e-6, "{l}");
        let t2 = 0.7 + 0.1;
        assert!((z[2] - (1.0 / 3.0 - t2) / 4.0).abs() < 1e-7);
        assert!((z[0] - (1.0 / 3.0 - 0.1) / 4.0).abs() < 1e-7);
    }
}
