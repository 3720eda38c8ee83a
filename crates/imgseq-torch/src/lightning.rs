//! PyTorch Lightning checkpoints with `LitEma` copies of the weights (`model_ema.<name without
//! dots>`, plus `model_ema.decay` / `num_updates`): which copy runs. One rule for every family
//! trained with Lightning's EMA — IBQ and Open-MAGVIT2 — so that `--raw` means one thing.

use candle_core::Tensor;
use imgseq_core::{Error, Result};
use std::path::Path;

/// The prefix of `LitEma`'s tensors.
pub const EMA_PREFIX: &str = "model_ema.";

/// Which copy of a Lightning checkpoint's weights runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightSet {
    /// What the family's own inference runs: the EMA copies when its rule says so (IBQ: when
    /// the checkpoint has them; Open-MAGVIT2: when the config sets `use_ema`), else the raw.
    #[default]
    Default,
    /// The EMA copies; an error when the checkpoint lacks them.
    Ema,
    /// The raw training weights.
    Raw,
}

impl WeightSet {
    /// Whether the EMA copies run, `default_ema` being the family's rule for [`Self::Default`].
    pub fn ema(self, default_ema: bool) -> bool {
        match self {
            WeightSet::Default => default_ema,
            WeightSet::Ema => true,
            WeightSet::Raw => false,
        }
    }
}

/// The EMA copy's name of a raw parameter name (LitEma drops the dots).
pub fn ema_name(raw: &str) -> String {
    format!("{EMA_PREFIX}{}", raw.replace('.', ""))
}

/// The tensors a model runs, `LitEma`'s own tensors dropped: with `ema`, every tensor that
/// `replaced` names becomes its EMA copy, which must exist with the same shape; without, the
/// raw training weights.
pub fn select<T>(
    items: Vec<(String, Tensor, T)>,
    path: &Path,
    ema: bool,
    replaced: impl Fn(&str) -> bool,
) -> Result<Vec<(String, Tensor, T)>> {
    let (emas, mut rest): (Vec<_>, Vec<_>) = items
        .into_iter()
        .partition(|(k, _, _)| k.starts_with(EMA_PREFIX));
    if !ema {
        return Ok(rest);
    }
    let copies: std::collections::HashMap<String, Tensor> =
        emas.into_iter().map(|(k, t, _)| (k, t)).collect();
    for (k, t, _) in rest.iter_mut() {
        if !replaced(k) {
            continue;
        }
        let e = ema_name(k);
        let Some(c) = copies.get(&e) else {
            return Err(Error::weights(
                path,
                format!("no EMA copy `{e}` of tensor `{k}`; pass --raw for the raw weights"),
            ));
        };
        if c.dims() != t.dims() {
            return Err(Error::weights(
                path,
                format!(
                    "EMA copy `{e}` has shape {:?}, `{k}` {:?}",
                    c.dims(),
                    t.dims()
                ),
            ));
        }
        *t = c.clone();
    }
    Ok(rest)
}
