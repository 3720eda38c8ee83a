//! Janus / Janus-Pro's image tokenizer as transformers saves it (`JanusVQVAE`,
//! `models/janus/modeling_janus.py`): LlamaGen's VQ-16 network under taming's module names
//! (`encoder.down.i.block.j`, `mid.block_1`/`attn_1`/`block_2`, `quantize.embedding`), except
//! that the decoder's `up.k` is built from the lowest resolution up (`up.k` = taming's
//! `up.(L−1−k)`), with attention after every block of the lowest level as in LlamaGen.
//!
//! Files read: a `JanusVQVAE.save_pretrained` folder (`config.json` with `model_type`
//! `janus_vqgan` + `model.safetensors`) or a full Janus model's file whose VQ tensors sit under
//! [`FULL_PREFIX`] (its `config.json` holds them under `vq_config`; the model's other tensors
//! are left out before the audit).
//!
//! The quantizer: transformers' `forward` takes the argmin over the raw z and codebook while
//! its `get_codebook_entry` (the decode) l2-normalises the entry; the original Janus code
//! (LlamaGen's `VectorQuantizer` with `l2_norm`) normalises both. imgseq searches the
//! original's way; `"imgseq_search": "transformers"` in the config selects transformers'
//! ([`crate::variant::Distance::Unnormalised`]).

use crate::config::{DdConfig, VqConfig, MAX_LEVELS};
use crate::variant::{opt, Variant};
use candle_core::Tensor;
use imgseq_core::{Error, Result};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// Where a full Janus model (`JanusForConditionalGeneration`) keeps its `JanusVQVAE`.
pub const FULL_PREFIX: &str = "model.vqmodel.";

/// Whether a `config.json` is transformers' Janus (`model_type` `janus_vqgan`, or a full
/// `janus` model's with its `vq_config`).
pub fn is_janus_config(v: &Value) -> bool {
    matches!(
        v.get("model_type").and_then(Value::as_str),
        Some("janus_vqgan" | "janus")
    )
}

/// Whether tensor names are Janus's: the VQ of a full model ([`FULL_PREFIX`]), or a decoder
/// whose `up.0` upsamples (taming's `up.0` is the full-resolution level, which never does).
pub fn is_janus_keys(keys: &[&str]) -> bool {
    keys.iter()
        .any(|k| k.starts_with(FULL_PREFIX) || *k == "decoder.up.0.upsample.conv.weight")
}

/// The tensors of a full Janus model's VQ with [`FULL_PREFIX`] removed, when the names have
/// it; otherwise `map` as it is.
pub fn vq_part(map: HashMap<String, Tensor>) -> HashMap<String, Tensor> {
    if !map.keys().any(|k| k.starts_with(FULL_PREFIX)) {
        return map;
    }
    map.into_iter()
        .filter_map(|(k, t)| k.strip_prefix(FULL_PREFIX).map(|s| (s.to_string(), t)))
        .collect()
}

/// [`vq_part`] of tensors listed with more beside them (`weights convert`'s stored dtypes).
pub fn vq_part_of<T>(items: Vec<(String, Tensor, T)>) -> Vec<(String, Tensor, T)> {
    if !items.iter().any(|(k, _, _)| k.starts_with(FULL_PREFIX)) {
        return items;
    }
    items
        .into_iter()
        .filter_map(|(k, t, x)| k.strip_prefix(FULL_PREFIX).map(|s| (s.to_string(), t, x)))
        .collect()
}

/// The [`VqConfig`] of a `JanusVQVAEConfig` (`config.json` of `model_type` `janus_vqgan`, or a
/// full model's `vq_config`), with `JanusVQVAEConfig`'s defaults for absent fields. Refused:
/// `double_latent` (not in Janus's VQ), more than [`MAX_LEVELS`] levels. The optional
/// `imgseq_search` (`"l2"`, the default, or `"transformers"`) picks the quantizer's search.
pub fn janus_config(v: &Value, path: &Path) -> Result<VqConfig> {
    let v = match v.get("model_type").and_then(Value::as_str) {
        Some("janus") => v
            .get("vq_config")
            .filter(|x| x.is_object())
            .ok_or_else(|| {
                Error::format(path, "a full Janus config without a `vq_config` object")
            })?,
        _ => v,
    };
    if opt(v, "double_latent", false, path)? {
        return Err(Error::format(
            path,
            "`double_latent` is true; Janus's VQ (and imgseq) has a single latent",
        ));
    }
    let ch_mult: Vec<usize> = opt(v, "channel_multiplier", vec![1, 1, 2, 2, 4], path)?;
    if ch_mult.is_empty() || ch_mult.len() > MAX_LEVELS {
        return Err(Error::format(
            path,
            format!(
                "`channel_multiplier` has {} entries; 1 to {MAX_LEVELS} levels",
                ch_mult.len()
            ),
        ));
    }
    let search: String = opt(v, "imgseq_search", "l2".to_string(), path)?;
    let transformers_search = match search.as_str() {
        "l2" => false,
        "transformers" => true,
        s => {
            return Err(Error::format(
                path,
                format!(
                    "`imgseq_search` is {s:?}; \"l2\" (the original Janus) or \"transformers\""
                ),
            ))
        }
    };
    let levels = ch_mult.len();
    // LlamaGen's attention rule: every block of the last level (our resolution counting).
    let resolution = 256usize.max(1 << (levels - 1));
    let _: f64 = opt(v, "dropout", 0.0, path)?;
    let _: usize = opt(v, "num_patches", 32, path)?;
    let cfg = VqConfig {
        ddconfig: DdConfig {
            ch: opt(v, "base_channels", 128, path)?,
            ch_mult,
            num_res_blocks: opt(v, "num_res_blocks", 2, path)?,
            attn_resolutions: vec![resolution >> (levels - 1)],
            z_channels: opt(v, "latent_channels", 256, path)?,
            double_z: false,
            resolution,
            in_channels: opt(v, "in_channels", 3, path)?,
            out_ch: opt(v, "out_channels", 3, path)?,
            dropout: 0.0,
        },
        embed_dim: opt(v, "embed_dim", 8, path)?,
        n_embed: opt(v, "num_embeddings", 16384, path)?,
        beta: 0.25,
        legacy: true,
        variant: Variant::janus(transformers_search),
    };
    cfg.validate(path)?;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn config_defaults_full_model_and_refusals() {
        let p = Path::new("janus/config.json");
        let c = janus_config(&json!({"model_type": "janus_vqgan"}), p).unwrap();
        assert_eq!(
            (c.ddconfig.ch, c.ddconfig.ch_mult.clone()),
            (128, vec![1, 1, 2, 2, 4])
        );
        assert_eq!(
            (c.n_embed, c.embed_dim, c.ddconfig.z_channels),
            (16384, 8, 256)
        );
        assert_eq!(c.downsample_factor(), 16);
        assert!(c.variant.l2_norm);
        assert_eq!(c.variant.distance, crate::variant::Distance::Expanded);
        let full = json!({"model_type": "janus", "vq_config": {"num_embeddings": 64,
            "imgseq_search": "transformers"}});
        let c = janus_config(&full, p).unwrap();
        assert_eq!(c.n_embed, 64);
        assert_eq!(c.variant.distance, crate::variant::Distance::Unnormalised);
        for (v, want) in [
            (json!({"model_type": "janus"}), "vq_config"),
            (json!({"double_latent": true}), "double_latent"),
            (json!({"imgseq_search": "cosine"}), "imgseq_search"),
            (json!({"channel_multiplier": []}), "channel_multiplier"),
        ] {
            let e = janus_config(&v, p).unwrap_err().to_string();
            assert!(
                e.starts_with("janus/config.json: ") && e.contains(want),
                "{e}"
            );
        }
    }

    #[test]
    fn full_model_keeps_only_its_vq_tensors() {
        let t = Tensor::zeros(1, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
        let mut m = HashMap::new();
        m.insert(
            "model.vqmodel.quantize.embedding.weight".to_string(),
            t.clone(),
        );
        m.insert(
            "model.language_model.embed_tokens.weight".to_string(),
            t.clone(),
        );
        let got = vq_part(m);
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            vec!["quantize.embedding.weight"]
        );
        assert!(is_janus_keys(&["model.vqmodel.encoder.conv_in.weight"]));
        assert!(is_janus_keys(&["decoder.up.0.upsample.conv.weight"]));
        assert!(!is_janus_keys(&["decoder.up.1.upsample.conv.weight"]));
    }
}
