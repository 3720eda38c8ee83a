//! IBQ (TencentARC/SEED-Voken, `src/IBQ/models/ibqgan.py`): taming's encoder and decoder (the
//! same `model.py`, the same tensor names) with `IndexPropagationQuantize`, whose token is the
//! codebook entry of largest inner product with z (`argmax softmax(z·eᵀ)`, not the nearest by
//! distance; [`crate::family::Distance::InnerProduct`]), searched over up to 2^18 × 256 codes in
//! bounded memory by [`imgseq_kernels::ops::max_inner_product`].
//!
//! Files: their Lightning `.ckpt` (`state_dict` with `loss.*` training tensors and, when
//! trained with `use_ema`, `LitEma`'s copies `model_ema.<name without dots>` plus
//! `model_ema.decay` / `num_updates`) and their LightningCLI yaml (`model.class_path`
//! `...IBQ`, `model.init_args.{ddconfig, n_embed, embed_dim}`). Their evaluation runs the EMA
//! weights (`ema_scope`) whenever the model has them, and so does imgseq; [`select`] picks
//! either set.

use crate::config::{field, from_field, parse_dd, read_text, VqConfig};
use crate::family::{Distance, Family, Variant};
use candle_core::Tensor;
use imgseq_core::{Error, Result};
use imgseq_torch::lightning::{self, WeightSet, EMA_PREFIX};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// A yaml config file: IBQ's LightningCLI layout ([`ibq_config`]) or else taming's
/// `model.yaml` ([`VqConfig::from_taming_yaml_str`]).
pub fn yaml_config(path: &Path) -> Result<VqConfig> {
    yaml_config_str(&read_text(path)?, path)
}

/// [`yaml_config`] on the file's text (`path` only names it in messages).
pub fn yaml_config_str(text: &str, path: &Path) -> Result<VqConfig> {
    let ibq = serde_yaml::from_str::<serde_yaml::Value>(text)
        .ok()
        .and_then(|y| serde_json::to_value(&y).ok())
        .and_then(|v| v.get("model").and_then(init_args).cloned());
    match ibq {
        Some(args) => ibq_config(&args, path),
        None => VqConfig::from_taming_yaml_str(text, path),
    }
}

/// What the `family_config` fuzz target runs in this crate (and the corpus replay test): the
/// bytes as a diffusers `AutoencoderKL` `config.json`, a Janus `config.json` and an
/// Open-MAGVIT2/IBQ (or taming) yaml, each read and validated as the loaders do, then the
/// sizes a loader derives from a valid one. Must never panic.
#[doc(hidden)]
pub fn fuzz_family_file_bytes(data: &[u8]) {
    let p = Path::new("fuzz/config");
    let check = |c: Result<VqConfig>| {
        if let Ok(c) = c {
            let _ = (
                c.downsample_factor(),
                c.check_input_size(256),
                c.weight_count(),
            );
        }
    };
    if let Ok(v) = serde_json::from_slice::<Value>(data) {
        if let Ok(kl) = crate::kl::KlConfig::from_diffusers_json(&v, p) {
            let _ = (
                kl.downsample_factor(),
                kl.check_side("size", 256),
                kl.weight_count(),
                kl.channel_scaling(),
                kl.describe(),
            );
        }
        check(crate::janus::janus_config(&v, p));
    }
    if let Ok(text) = std::str::from_utf8(data) {
        check(yaml_config_str(text, p));
    }
}

/// The `init_args` of a LightningCLI `model:` section whose `class_path` names IBQ.
pub fn init_args(model: &Value) -> Option<&Value> {
    let class = model.get("class_path")?.as_str()?;
    if class.rsplit('.').next() != Some("IBQ") {
        return None;
    }
    model.get("init_args").filter(|a| a.is_object())
}

/// The [`VqConfig`] of IBQ's `model.init_args`. Refused: a `remap` of the indices.
pub fn ibq_config(args: &Value, path: &Path) -> Result<VqConfig> {
    let pre = "model.init_args.";
    if args.get("remap").is_some_and(|r| !r.is_null()) {
        return Err(Error::unsupported(
            path,
            "`model.init_args.remap` is set; imgseq reads IBQ models without an index remap",
        ));
    }
    if args
        .get("l2_normalize")
        .is_some_and(|v| v.as_bool() == Some(true))
    {
        return Err(Error::unsupported(
            path,
            "`model.init_args.l2_normalize` is true; imgseq reads IBQ models whose codes are \
             searched unnormalised (as every released IBQ tokenizer is)",
        ));
    }
    let beta = match args.get("beta") {
        Some(b) if !b.is_null() => from_field(args, "beta", pre, path)?,
        _ => 0.25,
    };
    let cfg = VqConfig {
        ddconfig: parse_dd(
            field(args, "ddconfig", pre, path)?,
            "model.init_args.ddconfig.",
            path,
        )?,
        embed_dim: from_field(args, "embed_dim", pre, path)?,
        n_embed: from_field(args, "n_embed", pre, path)?,
        beta,
        legacy: true,
        variant: Variant {
            family: Family::Ibq,
            distance: Distance::InnerProduct,
            ..Variant::default()
        },
    };
    cfg.validate(path)?;
    Ok(cfg)
}

/// The weights an IBQ model of `cfg` runs: `which` copy ([`WeightSet::Default`]: the EMA
/// copies when the file has them, as their evaluation does); any other family's tensors as
/// they are.
pub fn model_weights(
    cfg: &VqConfig,
    path: &Path,
    map: HashMap<String, Tensor>,
    which: WeightSet,
) -> Result<HashMap<String, Tensor>> {
    let items = map.into_iter().map(|(k, t)| (k, t, ())).collect();
    Ok(model_weights_of(cfg, path, items, which)?
        .into_iter()
        .map(|(k, t, _)| (k, t))
        .collect())
}

/// [`model_weights`] of tensors listed with more beside them (`weights convert`).
pub fn model_weights_of<T>(
    cfg: &VqConfig,
    path: &Path,
    items: Vec<(String, Tensor, T)>,
    which: WeightSet,
) -> Result<Vec<(String, Tensor, T)>> {
    if cfg.variant.family != Family::Ibq {
        if which != WeightSet::Default {
            return Err(Error::invalid(format!(
                "{}: --raw applies to Lightning checkpoints with EMA copies (IBQ, Open-MAGVIT2)",
                path.display()
            )));
        }
        return Ok(items);
    }
    let has = items.iter().any(|(k, _, _)| k.starts_with(EMA_PREFIX));
    let ema = which.ema(has);
    if ema && !has {
        return Err(Error::weights(
            path,
            "has no EMA weights (model_ema.*); pass --raw for the raw weights",
        ));
    }
    select(items, path, ema)
}

/// The model's tensors without `LitEma`'s buffers: with `ema`, every model tensor (all but
/// `loss.*`) replaced by its copy `model_ema.<name without dots>` ([`lightning::select`]).
pub fn select<T>(
    items: Vec<(String, Tensor, T)>,
    path: &Path,
    ema: bool,
) -> Result<Vec<(String, Tensor, T)>> {
    lightning::select(items, path, ema, |k| !k.starts_with("loss."))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn t(v: f32) -> Tensor {
        Tensor::full(v, 2, &Device::Cpu).unwrap()
    }

    fn first(items: &[(String, Tensor, ())], k: &str) -> f32 {
        let (_, t, _) = items.iter().find(|(n, _, _)| n == k).unwrap();
        t.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap()[0]
    }

    #[test]
    fn ema_copies_replace_the_model_tensors_and_are_dropped() {
        let items = vec![
            ("encoder.conv_in.weight".to_string(), t(1.0), ()),
            ("loss.discriminator.w".to_string(), t(2.0), ()),
            ("model_ema.encoderconv_inweight".to_string(), t(3.0), ()),
            ("model_ema.lossdiscriminatorw".to_string(), t(4.0), ()),
            ("model_ema.decay".to_string(), t(0.999), ()),
        ];
        let p = Path::new("last.ckpt");
        let ema = select(items.clone(), p, true).unwrap();
        assert_eq!(ema.len(), 2);
        assert_eq!(first(&ema, "encoder.conv_in.weight"), 3.0);
        let raw = select(items.clone(), p, false).unwrap();
        assert_eq!(first(&raw, "encoder.conv_in.weight"), 1.0);
        let missing = vec![
            ("decoder.conv_out.bias".to_string(), t(1.0), ()),
            ("model_ema.decay".to_string(), t(0.999), ()),
        ];
        let e = select(missing, p, true).unwrap_err().to_string();
        assert!(
            e.contains("no EMA copy `model_ema.decoderconv_outbias`"),
            "{e}"
        );
    }

    #[test]
    fn only_an_ibq_class_path_is_read_as_ibq() {
        let m = serde_json::json!({"class_path": "src.IBQ.models.ibqgan.IBQ", "init_args": {}});
        assert!(init_args(&m).is_some());
        let m = serde_json::json!({"class_path": "src.Open_MAGVIT2.models.lfqgan.VQModel",
            "init_args": {}});
        assert!(init_args(&m).is_none());
        let p = Path::new("ibq.yaml");
        let e = ibq_config(&serde_json::json!({"remap": "used.npy"}), p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("remap"), "{e}");
    }
}
