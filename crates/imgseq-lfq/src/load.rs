//! Loading an Open-MAGVIT2 model from its Lightning `.ckpt` (read by `imgseq-torch`: the
//! pickle is interpreted, never executed) and, when given, its yaml config.
//!
//! Their checkpoint's `state_dict` holds the raw weights (`encoder.*`, `decoder.*`), the
//! training loss (`loss.*`: discriminator, LPIPS; dropped, as are `quantize.*` buffers) and,
//! when trained with `use_ema`, LitEma's copies: `model_ema.<name without dots>`
//! (`model_ema.encoderconv_inweight`), plus `model_ema.decay` / `num_updates`. Their inference (`reconstruct.py`'s `ema_scope`, the
//! AR stage's `init_from_ckpt`) runs the EMA copies when `use_ema` is set, so that is the
//! default here; [`WeightSet::Raw`] takes the raw ones. Every `encoder.*` / `decoder.*`
//! tensor must be used and every one the network needs must be present (no `strict=False`).

use crate::config::LfqConfig;
use crate::model::LfqModel;
use candle_core::{DType, Device, Tensor};
use imgseq_core::weights::{model_error, AuditedWeights};
use imgseq_core::{Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub use imgseq_torch::lightning::{ema_name, WeightSet, EMA_PREFIX};

/// A tensor present only in Open-MAGVIT2 checkpoints (the decoder's adaptive norm).
const MARKERS: [&str; 2] = [
    "decoder.adaptive.0.gamma.weight",
    "model_ema.decoderadaptive0gammaweight",
];

/// Whether tensor names are an Open-MAGVIT2 model's.
pub fn names_are_lfq<'a>(mut names: impl Iterator<Item = &'a str>) -> bool {
    names.any(|n| MARKERS.contains(&n))
}

/// Whether `path` is a PyTorch checkpoint of an Open-MAGVIT2 model (only its pickle is read;
/// any failure is `false`).
pub fn is_lfq_checkpoint(path: &Path) -> bool {
    if !path.is_file() {
        return false;
    }
    let Ok(c) = imgseq_torch::Checkpoint::open(path) else {
        return false;
    };
    c.tensor_infos()
        .map(|t| names_are_lfq(t.iter().map(|(n, _, _)| n.as_str())))
        .unwrap_or(false)
}

/// Codes of the model in `path` (2^bits, the bits read off `encoder.conv_out`'s shape; no
/// tensor data is read).
pub fn codebook_size(path: &Path) -> Result<usize> {
    let infos = imgseq_torch::Checkpoint::open(path)?.tensor_infos()?;
    let shape = infos
        .iter()
        .find(|(n, _, _)| n == "encoder.conv_out.weight")
        .map(|(_, _, s)| s.clone())
        .ok_or_else(|| Error::weights(path, "missing tensor `encoder.conv_out.weight`"))?;
    match shape.first() {
        Some(&z) if (1..=crate::config::MAX_BITS).contains(&z) => Ok(1 << z),
        _ => Err(Error::weights(
            path,
            format!(
                "encoder.conv_out.weight has shape {shape:?}: not 1 to {} latent channels",
                crate::config::MAX_BITS
            ),
        )),
    }
}

/// `x.yaml` beside `x.ckpt`, if it exists.
pub fn default_config_path(ckpt: &Path) -> Option<PathBuf> {
    let p = ckpt.with_extension("yaml");
    p.is_file().then_some(p)
}

fn is_net(name: &str) -> bool {
    name.starts_with("encoder.") || name.starts_with("decoder.")
}

/// The network's tensors from a checkpoint's: the EMA copies of the `encoder.*` / `decoder.*`
/// tensors with `ema` ([`imgseq_torch::lightning::select`]), else the raw ones; the loss's and
/// LitEma's tensors dropped, and LFQ's `quantize.*` buffers too (LFQ has no parameters: a
/// buffer such as `mask` or `codebook`, non-persistent in their code but saved by some
/// versions, is derived from the bit count).
fn choose(path: &Path, all: HashMap<String, Tensor>, ema: bool) -> Result<HashMap<String, Tensor>> {
    let items = all.into_iter().map(|(k, t)| (k, t, ())).collect();
    Ok(imgseq_torch::lightning::select(items, path, ema, is_net)?
        .into_iter()
        .filter(|(k, _, _)| !["loss.", "quantize."].iter().any(|p| k.starts_with(p)))
        .map(|(k, t, _)| (k, t))
        .collect())
}

/// Reads every tensor of the checkpoint's state dict (floats as f32).
fn read_tensors(path: &Path) -> Result<HashMap<String, Tensor>> {
    let sd = imgseq_torch::read_state_dict(path, &Device::Cpu)?;
    sd.into_iter()
        .map(|(k, t)| Ok((k, t.tensor.to_dtype(DType::F32)?)))
        .collect()
}

/// Loads the model of `ckpt` with the yaml `config` (or the settings its weights imply),
/// running `which` copy of the weights.
pub fn load_model(ckpt: &Path, config: Option<&Path>, which: WeightSet) -> Result<LfqModel> {
    let all = read_tensors(ckpt)?;
    let shapes: BTreeMap<String, Vec<usize>> = all
        .iter()
        .map(|(k, t)| (k.clone(), t.dims().to_vec()))
        .collect();
    if !names_are_lfq(shapes.keys().map(String::as_str)) {
        return Err(Error::weights(
            ckpt,
            format!(
                "not an Open-MAGVIT2 checkpoint (no `{}` tensor)",
                MARKERS[0]
            ),
        ));
    }
    let cfg = match config {
        Some(c) => LfqConfig::from_yaml(c)?,
        None => LfqConfig::infer(ckpt, &shapes)?,
    };
    let has_ema = shapes.keys().any(|k| k.starts_with("model_ema.encoder"));
    let ema = which.ema(cfg.use_ema);
    if ema && !has_ema {
        return Err(Error::weights(
            ckpt,
            "has no EMA weights (model_ema.*) though the config sets use_ema; pass --raw for the raw weights",
        ));
    }
    let net = choose(ckpt, all, ema)?;
    let weights = AuditedWeights::new(ckpt, net);
    let vb = weights.var_builder(DType::F32, &Device::Cpu);
    let model = LfqModel::new(cfg, vb, ema).map_err(|e| model_error(ckpt, e))?;
    weights.finish(&[])?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codebook_size_is_read_off_the_latent_channels() {
        let d =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lfq");
        assert_eq!(codebook_size(&d.join("tiny.ckpt")).unwrap(), 1 << 18);
    }

    #[test]
    fn ema_names_drop_the_dots() {
        assert_eq!(
            ema_name("decoder.up.1.upsample.conv1.weight"),
            "model_ema.decoderup1upsampleconv1weight"
        );
    }
}
