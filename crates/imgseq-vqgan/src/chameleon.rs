//! Chameleon / Anole's image tokenizer as transformers has it (`ChameleonVQVAE`,
//! `models/chameleon/modeling_chameleon.py`): taming's encoder under taming's names,
//! `quant_conv`, a nearest-entry codebook (‖z‖² + ‖e‖² − 2 z·e) and `post_quant_conv` — **no
//! decoder**: transformers only turns images into tokens for the language model. Such a model
//! encodes; decoding needs Chameleon's original `vqgan.ckpt` + `vqgan.yaml` (taming's layout,
//! read as taming).
//!
//! Files read: a `ChameleonVQVAE.save_pretrained` folder (`config.json` with `model_type`
//! `chameleon_vqgan` + `model.safetensors`), or a full model's file whose VQ tensors sit under
//! `model.vqmodel.` (`config.json` of `model_type` `chameleon`, the VQ under `vq_config`; the
//! other tensors are left out before the audit, as for Janus).

use crate::config::{DdConfig, VqConfig};

use crate::variant::{opt, Family, Variant};
use imgseq_core::{Error, Result};
use serde_json::Value;
use std::path::Path;

/// Whether a `config.json` is transformers' Chameleon (`chameleon_vqgan`, or a full
/// `chameleon` model's with its `vq_config`).
pub fn is_chameleon_config(v: &Value) -> bool {
    matches!(
        v.get("model_type").and_then(Value::as_str),
        Some("chameleon_vqgan" | "chameleon")
    )
}

/// The [`VqConfig`] of a `ChameleonVQVAEConfig` (or a full model's `vq_config`), with its
/// defaults for absent fields. Refused: `double_latent`.
pub fn chameleon_config(v: &Value, path: &Path) -> Result<VqConfig> {
    let v = match v.get("model_type").and_then(Value::as_str) {
        Some("chameleon") => v
            .get("vq_config")
            .ok_or_else(|| Error::format(path, "a `chameleon` config.json without `vq_config`"))?,
        _ => v,
    };
    if opt(v, "double_latent", false, path)? {
        return Err(Error::unsupported(
            path,
            "`double_latent` is true; Chameleon's VQ has single latents",
        ));
    }
    let vanilla = opt(v, "attn_type", "vanilla".to_string(), path)? == "vanilla";
    let in_channels = opt(v, "in_channels", 3, path)?;
    let attn: Option<Vec<usize>> = opt(v, "attn_resolutions", None, path)?;
    let cfg = VqConfig {
        ddconfig: DdConfig {
            ch: opt(v, "base_channels", 128, path)?,
            ch_mult: opt(v, "channel_multiplier", vec![1, 1, 2, 2, 4], path)?,
            num_res_blocks: opt(v, "num_res_blocks", 2, path)?,
            attn_resolutions: if vanilla {
                attn.unwrap_or_default()
            } else {
                vec![]
            },
            z_channels: opt(v, "latent_channels", 256, path)?,
            double_z: false,
            resolution: opt(v, "resolution", 512, path)?,
            in_channels,
            out_ch: in_channels,
            dropout: 0.0,
        },
        embed_dim: opt(v, "embed_dim", 256, path)?,
        n_embed: opt(v, "num_embeddings", 8192, path)?,
        beta: 0.25,
        legacy: true,
        variant: Variant {
            family: Family::Chameleon,
            mid_attn: vanilla,
            ..Variant::default()
        },
    };
    cfg.validate(path)?;
    Ok(cfg)
}

/// What decoding a Chameleon model without its decoder says.
pub const NO_DECODER: &str = "this Chameleon VQ has no decoder (transformers' ChameleonVQVAE \
     keeps the encoder only); decode with Chameleon's original vqgan.ckpt and vqgan.yaml";

/// [`NO_DECODER`] as the model's error.
pub fn no_decoder() -> candle_core::Error {
    candle_core::Error::Msg(NO_DECODER.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_released_chameleon_vq() {
        let c = chameleon_config(
            &serde_json::json!({"model_type": "chameleon_vqgan"}),
            Path::new("config.json"),
        )
        .unwrap();
        assert_eq!(
            (c.n_embed, c.embed_dim, c.downsample_factor()),
            (8192, 256, 16)
        );
        assert!(c.ddconfig.attn_resolutions.is_empty() && c.variant.mid_attn);
        let e = chameleon_config(
            &serde_json::json!({"model_type": "chameleon"}),
            Path::new("config.json"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("vq_config"), "{e}");
    }
}
