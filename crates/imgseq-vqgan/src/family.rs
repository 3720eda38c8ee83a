//! Tokenizer families: taming's VQGAN and its two close relatives, LlamaGen's VQ models
//! (FoundationVision/LlamaGen, `tokenizer/tokenizer_image/vq_model.py`) and diffusers'
//! `VQModel` (`models/autoencoders/vq_model.py`, `vae.py`).
//!
//! All three are the same network — conv_in, levels of ResnetBlocks (with attention at
//! some), a middle ResnetBlock–attention–ResnetBlock, GroupNorm–swish–conv_out; 1×1
//! `quant_conv` to the code size, a nearest-entry codebook, 1×1 `post_quant_conv` and the
//! mirror-image decoder — so one [`crate::VqModel`] runs them all. What differs is recorded
//! in a [`Variant`] (all taming's by default) inside the [`VqConfig`]:
//!
//! | | taming | LlamaGen VQ | diffusers VQModel |
//! |---|---|---|---|
//! | weight names | `encoder.down.i.block.j` | `encoder.conv_blocks.i.res.j`, decoder `conv_blocks.k` = `up.(L−1−k)` | `encoder.down_blocks.i.resnets.j`, decoder `up_blocks.k` = `up.(L−1−k)` |
//! | attention | at `attn_resolutions` | last level and middle | middle only (`mid_block_add_attention`) |
//! | codes | nearest by ‖z‖²+‖e‖²−2z·e | z and codebook l2-normalised first (and at decode) | `torch.cdist` argmin |
//! | GroupNorm | 32 groups | 32 groups | `norm_num_groups` |
//! | input | [−1, 1] | [−1, 1], ADM centre crop | [−1, 1] ([0, 1] for aMUSEd) |
//!
//! This module re-exports the [`Variant`] (defined in [`crate::variant`]), reads the two
//! families' `config.json` files, tells a file's family ([`detect`]) and describes a
//! LlamaGen model from its tensor shapes alone (its `.pt` has no config). The weight-name maps are in [`crate::rename`].

use crate::config::{DdConfig, VqConfig, MAX_CHANNELS, MAX_LEVELS};
use crate::variant::opt;
pub use crate::variant::{Distance, Family, Range, Resize, Variant, MAX_GROUPS};
use imgseq_core::{Error, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The family a `config.json` is written for: diffusers (`_class_name` or
/// `down_block_types`), LlamaGen (`codebook_size` or `encoder_ch_mult`), else ours/taming.
pub fn family_of_config(v: &Value) -> Family {
    if crate::chameleon::is_chameleon_config(v) {
        Family::Chameleon
    } else if crate::janus::is_janus_config(v) {
        Family::Janus
    } else if v.get("_class_name").is_some() || v.get("down_block_types").is_some() {
        Family::Diffusers
    } else if v.get("codebook_size").is_some() || v.get("encoder_ch_mult").is_some() {
        Family::Llamagen
    } else {
        Family::Taming
    }
}

/// The family of a state dict, by its key names.
pub fn family_of_keys<'a>(keys: impl IntoIterator<Item = &'a str>) -> Option<Family> {
    let keys: Vec<&str> = keys.into_iter().collect();
    if crate::janus::is_janus_keys(&keys) {
        return Some(Family::Janus);
    }
    for k in keys {
        if k.starts_with("encoder.conv_blocks.") || k.starts_with("decoder.conv_blocks.") {
            return Some(Family::Llamagen);
        }
        if k.starts_with("encoder.down_blocks.") || k.starts_with("decoder.up_blocks.") {
            return Some(Family::Diffusers);
        }
        if k.starts_with("encoder.down.") || k.starts_with("decoder.up.") {
            return Some(Family::Taming);
        }
    }
    None
}

/// A model shape every family's config must give; checked by [`VqConfig::validate`] later.
fn base(
    ch: usize,
    ch_mult: Vec<usize>,
    num_res_blocks: usize,
    attn_resolutions: Vec<usize>,
    z_channels: usize,
    in_out: (usize, usize),
) -> DdConfig {
    let resolution = llamagen_resolution(ch_mult.len());
    DdConfig {
        ch,
        ch_mult,
        num_res_blocks,
        attn_resolutions,
        z_channels,
        double_z: false,
        resolution,
        in_channels: in_out.0,
        out_ch: in_out.1,
        dropout: 0.0,
    }
}

/// LlamaGen puts attention after every ResnetBlock of the last (lowest-resolution) level:
/// with our resolution-counting rule (`resolution` halved per level) that is the nominal
/// resolution of [`llamagen_resolution`] divided by 2^(levels−1).
fn llamagen_attn(levels: usize) -> Vec<usize> {
    let shift = levels.saturating_sub(1).min(MAX_LEVELS);
    vec![llamagen_resolution(levels) >> shift]
}

/// 256 (LlamaGen's training size), or more for a model so deep that 256 would halve to 0
/// before its last level (so that only the last level has the attention resolution).
fn llamagen_resolution(levels: usize) -> usize {
    256usize.max(1 << levels.saturating_sub(1).min(MAX_LEVELS))
}

/// The shape facts of a LlamaGen model that only its weights hold: `ch` (hard-coded 128 in
/// `Encoder`), `num_res_blocks` (2), and, for a `.pt` without config, everything else.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamagenShape {
    pub ch: usize,
    pub ch_mult: Vec<usize>,
    pub num_res_blocks: usize,
    pub z_channels: usize,
    pub codebook_size: usize,
    pub codebook_embed_dim: usize,
}

impl LlamagenShape {
    /// Reads the shape from tensor shapes (`name → dims`); every number comes from a tensor
    /// named in the message when it is missing or malformed.
    pub fn from_shapes(shapes: &BTreeMap<String, Vec<usize>>, path: &Path) -> Result<Self> {
        let dims = |name: &str, rank: usize| -> Result<&Vec<usize>> {
            match shapes.get(name) {
                Some(d) if d.len() == rank => Ok(d),
                Some(d) => Err(Error::format(
                    path,
                    format!("tensor `{name}` has shape {d:?}; expected {rank} dimensions"),
                )),
                None => Err(Error::format(
                    path,
                    format!("missing tensor `{name}` (a LlamaGen VQ model has it)"),
                )),
            }
        };
        let ch = dims("encoder.conv_in.weight", 4)?[0];
        let mut ch_mult = Vec::new();
        while shapes.contains_key(&format!(
            "encoder.conv_blocks.{}.res.0.conv1.weight",
            ch_mult.len()
        )) {
            if ch_mult.len() >= MAX_LEVELS {
                return Err(Error::format(
                    path,
                    format!("more than {MAX_LEVELS} levels of `encoder.conv_blocks`"),
                ));
            }
            let c = dims(
                &format!("encoder.conv_blocks.{}.res.0.conv1.weight", ch_mult.len()),
                4,
            )?[0];
            if ch == 0 || c % ch != 0 {
                return Err(Error::format(
                    path,
                    format!(
                        "level {} has {c} channels, not a multiple of `encoder.conv_in`'s {ch}",
                        ch_mult.len()
                    ),
                ));
            }
            ch_mult.push(c / ch);
        }
        if ch_mult.is_empty() {
            return Err(Error::format(
                path,
                "missing tensor `encoder.conv_blocks.0.res.0.conv1.weight` (a LlamaGen VQ model has it)",
            ));
        }
        let mut num_res_blocks = 0;
        while shapes.contains_key(&format!(
            "encoder.conv_blocks.0.res.{num_res_blocks}.conv1.weight"
        )) {
            num_res_blocks += 1;
            if num_res_blocks > 64 {
                break;
            }
        }
        let e = dims("quantize.embedding.weight", 2)?;
        Ok(Self {
            ch,
            ch_mult,
            num_res_blocks,
            z_channels: dims("encoder.conv_out.weight", 4)?[0],
            codebook_size: e[0],
            codebook_embed_dim: e[1],
        })
    }
}

/// The [`VqConfig`] of a LlamaGen model: the shape from its weights, the options from its
/// `config.json` (`ModelArgs`, as `PyTorchModelHubMixin` writes it) when there is one, else
/// `ModelArgs`' defaults (l2-normalised codes). A config that disagrees with the weights is
/// an error naming the field.
pub fn llamagen_config(
    shape: &LlamagenShape,
    config: Option<(&Value, &Path)>,
    weights: &Path,
) -> Result<VqConfig> {
    let mut l2 = true;
    let mut beta = 0.25;
    if let Some((v, path)) = config {
        if !v.is_object() {
            return Err(Error::format(path, "not a JSON object"));
        }
        l2 = opt(v, "codebook_l2_norm", true, path)?;
        beta = opt(v, "commit_loss_beta", 0.25, path)?;
        let check = |name: &str, want: &dyn Fn(&Value) -> bool, have: String| -> Result<()> {
            match v.get(name) {
                Some(x) if !x.is_null() && !want(x) => Err(Error::format(
                    path,
                    format!(
                        "field `{name}` is {x} but the weights {} have {have}",
                        weights.display()
                    ),
                )),
                _ => Ok(()),
            }
        };
        let num = |n: usize| move |x: &Value| x.as_u64() == Some(n as u64);
        check(
            "codebook_size",
            &num(shape.codebook_size),
            shape.codebook_size.to_string(),
        )?;
        check(
            "codebook_embed_dim",
            &num(shape.codebook_embed_dim),
            shape.codebook_embed_dim.to_string(),
        )?;
        check(
            "z_channels",
            &num(shape.z_channels),
            shape.z_channels.to_string(),
        )?;
        let mult = |x: &Value| {
            serde_json::from_value::<Vec<usize>>(x.clone())
                .ok()
                .as_ref()
                == Some(&shape.ch_mult)
        };
        let have = format!("{:?}", shape.ch_mult);
        check("encoder_ch_mult", &mult, have.clone())?;
        check("decoder_ch_mult", &mult, have)?;
        let _: bool = opt(v, "codebook_show_usage", true, path)?;
        let _: f64 = opt(v, "entropy_loss_ratio", 0.0, path)?;
        let _: f64 = opt(v, "dropout_p", 0.0, path)?;
    }
    let levels = shape.ch_mult.len();
    Ok(VqConfig {
        ddconfig: base(
            shape.ch,
            shape.ch_mult.clone(),
            shape.num_res_blocks,
            llamagen_attn(levels),
            shape.z_channels,
            (3, 3),
        ),
        embed_dim: shape.codebook_embed_dim,
        n_embed: shape.codebook_size,
        beta,
        legacy: false,
        variant: Variant::llamagen(l2),
    })
}

/// The `_class_name`s of diffusers pipelines whose VQ model reads and writes [0, 1] pixels
/// (their `VaeImageProcessor` is built with `do_normalize=False`).
const ZERO_ONE_PIPELINES: [&str; 3] = [
    "AmusedPipeline",
    "AmusedImg2ImgPipeline",
    "AmusedInpaintPipeline",
];

/// The pixel range of a diffusers VQ model in folder `dir`: [0, 1] when the pipeline's
/// `model_index.json` one folder up names an aMUSEd pipeline, else [−1, 1].
pub fn diffusers_range(dir: &Path) -> Range {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let Some(parent) = dir.parent() else {
        return Range::MinusOneOne;
    };
    let idx = parent.join("model_index.json");
    let Ok(bytes) = imgseq_core::weights::read_regular_file(&idx, 1 << 20, "a model index") else {
        return Range::MinusOneOne;
    };
    let Ok(v) = serde_json::from_slice::<Value>(&bytes) else {
        return Range::MinusOneOne;
    };
    match v.get("_class_name").and_then(Value::as_str) {
        Some(c) if ZERO_ONE_PIPELINES.contains(&c) => Range::ZeroOne,
        _ => Range::MinusOneOne,
    }
}

/// The [`VqConfig`] of a diffusers `VQModel` `config.json` (`range` from
/// [`diffusers_range`]). Only what imgseq runs is accepted: `DownEncoderBlock2D` /
/// `UpDecoderBlock2D` blocks, `silu`, GroupNorm (`norm_type: group`; MoVQ's `spatial` is
/// refused), block widths that are multiples of the first.
pub fn diffusers_config(v: &Value, path: &Path, range: Range) -> Result<VqConfig> {
    check_diffusers_class(v, path)?;
    let channels = diffusers_channels(v, path)?;
    check_diffusers_blocks(v, path, channels.len())?;
    check_diffusers_act_norm(v, path)?;
    let (ch, ch_mult) = diffusers_ch_mult(&channels, path)?;
    let latent: usize = opt(v, "latent_channels", 3, path)?;
    let embed: Option<usize> = opt(v, "vq_embed_dim", None, path)?;
    let groups: usize = opt(v, "norm_num_groups", 32, path)?;
    let mid_attn: bool = opt(v, "mid_block_add_attention", true, path)?;
    let _: bool = opt(v, "lookup_from_codebook", false, path)?;
    let _: bool = opt(v, "force_upcast", false, path)?;
    let _: f64 = opt(v, "scaling_factor", 0.18215, path)?;
    let _: usize = opt(v, "sample_size", 32, path)?;
    let cfg = VqConfig {
        ddconfig: base(
            ch,
            ch_mult,
            opt(v, "layers_per_block", 1, path)?,
            vec![],
            latent,
            (
                opt(v, "in_channels", 3, path)?,
                opt(v, "out_channels", 3, path)?,
            ),
        ),
        embed_dim: embed.unwrap_or(latent),
        n_embed: opt(v, "num_vq_embeddings", 256, path)?,
        beta: 0.25,
        legacy: true,
        variant: Variant::diffusers(groups, mid_attn, range),
    };
    Ok(cfg)
}

/// A JSON object whose `_class_name` (when present) is `VQModel`.
fn check_diffusers_class(v: &Value, path: &Path) -> Result<()> {
    if !v.is_object() {
        return Err(Error::format(path, "not a JSON object"));
    }
    if let Some(c) = v.get("_class_name") {
        if c.as_str() != Some("VQModel") {
            return Err(Error::format(
                path,
                format!("`_class_name` is {c}; imgseq reads diffusers `VQModel` configs"),
            ));
        }
    }
    Ok(())
}

/// `block_out_channels`: 1 to [`MAX_LEVELS`] levels.
fn diffusers_channels(v: &Value, path: &Path) -> Result<Vec<usize>> {
    let channels: Vec<usize> = opt(v, "block_out_channels", vec![64], path)?;
    let levels = channels.len();
    if levels == 0 || levels > MAX_LEVELS {
        return Err(Error::format(
            path,
            format!("`block_out_channels` has {levels} entries; 1 to {MAX_LEVELS} levels"),
        ));
    }
    Ok(channels)
}

/// `down_block_types` / `up_block_types`: one plain block per level.
fn check_diffusers_blocks(v: &Value, path: &Path, levels: usize) -> Result<()> {
    let down: Vec<String> = opt(
        v,
        "down_block_types",
        vec!["DownEncoderBlock2D".into()],
        path,
    )?;
    let up: Vec<String> = opt(v, "up_block_types", vec!["UpDecoderBlock2D".into()], path)?;
    for (name, types, want) in [
        ("down_block_types", &down, "DownEncoderBlock2D"),
        ("up_block_types", &up, "UpDecoderBlock2D"),
    ] {
        if types.len() != levels {
            return Err(Error::format(
                path,
                format!(
                    "`{name}` has {} entries but `block_out_channels` {levels}",
                    types.len()
                ),
            ));
        }
        if let Some(t) = types.iter().find(|t| *t != want) {
            return Err(Error::format(
                path,
                format!("`{name}` has {t:?}; imgseq runs only {want} blocks"),
            ));
        }
    }
    Ok(())
}

/// `act_fn` silu and `norm_type` group.
fn check_diffusers_act_norm(v: &Value, path: &Path) -> Result<()> {
    let act: String = opt(v, "act_fn", "silu".into(), path)?;
    if act != "silu" {
        return Err(Error::format(
            path,
            format!("`act_fn` is {act:?}; imgseq runs only \"silu\""),
        ));
    }
    let norm: String = opt(v, "norm_type", "group".into(), path)?;
    if norm != "group" {
        return Err(Error::format(
            path,
            format!(
                "`norm_type` is {norm:?}; imgseq runs only \"group\" (not MoVQ's spatial norm)"
            ),
        ));
    }
    Ok(())
}

/// taming's `ch` and `ch_mult` from `block_out_channels` (multiples of the first).
fn diffusers_ch_mult(channels: &[usize], path: &Path) -> Result<(usize, Vec<usize>)> {
    let levels = channels.len();
    let ch = channels[0];
    if ch == 0 || ch > MAX_CHANNELS {
        return Err(Error::format(
            path,
            format!("`block_out_channels[0]` is {ch}; must be 1 to {MAX_CHANNELS}"),
        ));
    }
    let mut ch_mult = Vec::with_capacity(levels);
    for (i, &c) in channels.iter().enumerate() {
        if c % ch != 0 {
            return Err(Error::format(
                path,
                format!("`block_out_channels[{i}]` ({c}) is not a multiple of `block_out_channels[0]` ({ch}); imgseq needs that"),
            ));
        }
        ch_mult.push(c / ch);
    }
    Ok((ch, ch_mult))
}

/// Reads a `config.json` of any family; `weights_shapes` gives LlamaGen's shape (needed for
/// its config, which lacks `ch` and `num_res_blocks`), `dir` the folder (diffusers' range).
pub fn config_from_json_value(
    v: &Value,
    path: &Path,
    llamagen_shapes: Option<(&BTreeMap<String, Vec<usize>>, &Path)>,
) -> Result<VqConfig> {
    let cfg = match family_of_config(v) {
        Family::Taming | Family::Ibq => return VqConfig::from_json_str(&v.to_string(), path),
        Family::Janus => crate::janus::janus_config(v, path)?,
        Family::Chameleon => crate::chameleon::chameleon_config(v, path)?,
        Family::Diffusers => {
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            diffusers_config(v, path, diffusers_range(dir))?
        }
        Family::Llamagen => {
            let Some((shapes, wpath)) = llamagen_shapes else {
                // Without weights: `ModelArgs`' defaults for what the file cannot say.
                let mult: Vec<usize> = opt(v, "encoder_ch_mult", vec![1, 1, 2, 2, 4], path)?;
                let shape = LlamagenShape {
                    ch: 128,
                    ch_mult: mult,
                    num_res_blocks: 2,
                    z_channels: opt(v, "z_channels", 256, path)?,
                    codebook_size: opt(v, "codebook_size", 16384, path)?,
                    codebook_embed_dim: opt(v, "codebook_embed_dim", 8, path)?,
                };
                let cfg = llamagen_config(&shape, Some((v, path)), path)?;
                cfg.validate(path)?;
                return Ok(cfg);
            };
            llamagen_config(
                &LlamagenShape::from_shapes(shapes, wpath)?,
                Some((v, path)),
                wpath,
            )?
        }
    };
    cfg.validate(path)?;
    Ok(cfg)
}

/// What the `vq_family_config` fuzz target runs (and the corpus replay test): the bytes as
/// a LlamaGen `config.json` (alone, and with the shapes of a small model) and as a diffusers
/// one, each validated. Must never panic.
#[doc(hidden)]
pub fn fuzz_family_config_bytes(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let p = Path::new("fuzz/config.json");
    let check = |c: Result<VqConfig>| {
        if let Ok(c) = c {
            let _ = (
                c.downsample_factor(),
                c.check_input_size(256),
                c.weight_count(),
            );
        }
    };
    check(config_from_json_value(&v, p, None));
    let mut shapes = BTreeMap::new();
    shapes.insert("encoder.conv_in.weight".to_string(), vec![32, 3, 3, 3]);
    shapes.insert(
        "encoder.conv_blocks.0.res.0.conv1.weight".to_string(),
        vec![32, 32, 3, 3],
    );
    shapes.insert("encoder.conv_out.weight".to_string(), vec![8, 32, 3, 3]);
    shapes.insert("quantize.embedding.weight".to_string(), vec![16, 4]);
    check(config_from_json_value(&v, p, Some((&shapes, p))));
    check(diffusers_config(&v, p, Range::ZeroOne).and_then(|c| c.validate(p).map(|_| c)));
    check(Variant::from_json(&v, p).map(|_| VqConfig::vqgan_imagenet_f16_1024()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_json_defaults_and_unknown_fields() {
        let p = Path::new("c.json");
        let v: Value = serde_json::json!({"family": "llamagen", "l2_norm": true});
        let got = Variant::from_json(&v, p).unwrap();
        assert_eq!(got.family, Family::Llamagen);
        assert!(got.l2_norm && got.norm_groups == 32 && got.mid_attn);
        let e = Variant::from_json(&serde_json::json!({"l2": true}), p)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("c.json: unknown field `variant.l2`"), "{e}");
        let e = Variant::from_json(&serde_json::json!({"distance": "manhattan"}), p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`variant.distance`"), "{e}");
    }

    #[test]
    fn diffusers_config_refuses_what_imgseq_does_not_run() {
        let p = Path::new("vqvae/config.json");
        let ok = serde_json::json!({"_class_name": "VQModel", "block_out_channels": [32, 64],
            "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"],
            "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"],
            "latent_channels": 4, "num_vq_embeddings": 16, "norm_num_groups": 8,
            "layers_per_block": 1});
        let c = diffusers_config(&ok, p, Range::MinusOneOne).unwrap();
        assert_eq!(
            (c.ddconfig.ch, c.ddconfig.ch_mult.clone()),
            (32, vec![1, 2])
        );
        assert_eq!((c.embed_dim, c.n_embed, c.variant.norm_groups), (4, 16, 8));
        for (k, bad, want) in [
            ("norm_type", serde_json::json!("spatial"), "norm_type"),
            ("act_fn", serde_json::json!("gelu"), "act_fn"),
            (
                "block_out_channels",
                serde_json::json!([32, 48]),
                "block_out_channels[1]",
            ),
            (
                "down_block_types",
                serde_json::json!(["AttnDownEncoderBlock2D", "DownEncoderBlock2D"]),
                "down_block_types",
            ),
        ] {
            let mut v = ok.clone();
            v[k] = bad;
            let e = diffusers_config(&v, p, Range::MinusOneOne)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("vqvae/config.json: ") && e.contains(want),
                "{e}"
            );
        }
    }
}
