//! Emu3's image tokenizer as transformers has it (`Emu3VQVAE`, `models/emu3/modeling_emu3.py`;
//! the released weights: BAAI/Emu3-VisionTokenizer): a picture becomes a grid of codes 8× smaller
//! a side (32,768 codes of 4 dims), and back.
//!
//! The network ([`model`]): a 2-D encoder on taming's blocks with multi-head linear attention;
//! the image repeated to `temporal_downsample_factor` frames (4), which causal Conv3d layers
//! (kernel 4×3×3, stride 2 in time) and BatchNorm3d ResNet blocks bring to one latent frame;
//! a Conv3d `quant_conv` (3×1×1); the nearest codebook entry by ‖z‖² + ‖e‖² − 2 z·e; and for
//! decoding, `post_quant_conv`, the temporal blocks and upsampling convs over the latents and
//! the quantized latents together, and a MoVQ decoder whose every norm is conditioned on the
//! quantized latents (`Emu3VQVAESpatialNorm`). An image decodes to the clip's first frame.
//!
//! Files read: an `Emu3VQVAE.save_pretrained` folder (`config.json` with `model_type`
//! `emu3_vqgan` + `model.safetensors`), or a full Emu3 model's file whose VQ tensors sit under
//! `model.vqmodel.` (`Emu3ForConditionalGeneration` as transformers names it) or `vqmodel.`
//! (the released full checkpoints' names), with a `config.json` of `model_type` `emu3`, the VQ
//! under `vq_config`; the other tensors are left out before the audit. And BAAI's own layout,
//! as BAAI/Emu3-VisionTokenizer is published (`config.json` of `model_type` `Emu3VisionVQ`:
//! `ch`, `ch_mult`, `z_channels`, `double_z`; taming's names `down.i`, `mid`, `up.i`, attention
//! as 1×1 convs `q`/`k`/`v`/`proj_out` with its `norm` inside, one head), renamed on loading
//! ([`from_original_names`]) as transformers' conversion does.

pub mod model;
pub mod tokenizer;

use crate::config::{DdConfig, VqConfig};
use crate::variant::opt;
use candle_core::{DType, Device, Tensor};
use imgseq_core::weights::AuditedWeights;
use imgseq_core::{Error, Result};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use model::Emu3Model;
pub use tokenizer::Emu3Tokenizer;

/// The registry name.
pub const NAME: &str = "emu3";
/// The name users read.
pub const LABEL: &str = "Emu3 VQVAE";
/// Where a full model keeps its VQ: transformers' names, then the released files' names.
pub const FULL_PREFIXES: [&str; 2] = ["model.vqmodel.", "vqmodel."];

/// `Emu3VQVAEConfig`, field for field (transformers' defaults: the released
/// Emu3-VisionTokenizer).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Emu3Config {
    pub codebook_size: usize,
    pub embed_dim: usize,
    pub latent_channels: usize,
    pub double_latent: bool,
    pub in_channels: usize,
    pub out_channels: usize,
    pub temporal_downsample_factor: usize,
    pub base_channels: usize,
    pub channel_multiplier: Vec<usize>,
    pub num_res_blocks: usize,
    /// Level indices (not resolutions) with attention after every block.
    pub attn_resolutions: Vec<usize>,
    pub hidden_size: usize,
    pub num_attention_heads: usize,
    /// The same sizes in taming's terms, for the shared limits, input-size rule and memory
    /// estimate.
    #[serde(skip)]
    pub vq: VqConfig,
}

impl Default for Emu3Config {
    fn default() -> Self {
        Self::from_json(&serde_json::json!({}), Path::new("config.json"))
            .expect("the defaults are valid")
    }
}

/// `model_type` of BAAI's own `Emu3VisionVQConfig`.
pub const ORIGINAL_TYPE: &str = "Emu3VisionVQ";

/// Whether a `config.json` is Emu3's: transformers' (`emu3_vqgan`, or a full `emu3` model's)
/// or BAAI's own (`Emu3VisionVQ`).
pub fn is_emu3_config(v: &Value) -> bool {
    matches!(
        v.get("model_type").and_then(Value::as_str),
        Some("emu3_vqgan" | "emu3" | ORIGINAL_TYPE)
    )
}

/// Whether a `config.json` is BAAI's own layout.
fn is_original(v: &Value) -> bool {
    v.get("model_type").and_then(Value::as_str) == Some(ORIGINAL_TYPE)
}

/// Whether the file at `path` is an Emu3 `config.json`.
pub fn is_emu3_config_file(path: &Path) -> bool {
    path.is_file() && crate::load::read_config(path).is_ok_and(|v| is_emu3_config(&v))
}

pub use crate::load::config_beside;

impl Emu3Config {
    /// The config of an `Emu3VQVAEConfig` (or a full model's `vq_config`), transformers'
    /// defaults for absent fields. Refused: `double_latent` (transformers' `quant_conv` could
    /// not read its encoder), an `embed_dim` other than `latent_channels` (its decoder runs
    /// both through the same temporal blocks), attention at a level whose width is not
    /// `hidden_size`, widths GroupNorm's 32 groups do not divide, a temporal factor that is
    /// no power of two.
    pub fn from_json(v: &Value, path: &Path) -> Result<Self> {
        let v = match v.get("model_type").and_then(Value::as_str) {
            Some("emu3") => v
                .get("vq_config")
                .filter(|x| x.is_object())
                .ok_or_else(|| Error::format(path, "an `emu3` config without a `vq_config`"))?,
            Some(ORIGINAL_TYPE) => return Self::from_original_json(v, path),
            _ => v,
        };
        let in_channels = opt(v, "in_channels", 3, path)?;
        let c = Self {
            codebook_size: opt(v, "codebook_size", 32768, path)?,
            embed_dim: opt(v, "embed_dim", 4, path)?,
            latent_channels: opt(v, "latent_channels", 4, path)?,
            double_latent: opt(v, "double_latent", false, path)?,
            in_channels,
            out_channels: opt(v, "out_channels", 3, path)?,
            temporal_downsample_factor: opt(v, "temporal_downsample_factor", 4, path)?,
            base_channels: opt(v, "base_channels", 256, path)?,
            channel_multiplier: opt(v, "channel_multiplier", vec![1, 2, 2, 4], path)?,
            num_res_blocks: opt(v, "num_res_blocks", 2, path)?,
            attn_resolutions: opt(v, "attn_resolutions", vec![3], path)?,
            hidden_size: opt(v, "hidden_size", 1024, path)?,
            num_attention_heads: opt(v, "num_attention_heads", 1, path)?,
            vq: VqConfig::vqgan_imagenet_f16_1024(),
        };
        c.finish(path)
    }

    /// The config of BAAI's `Emu3VisionVQConfig` (its defaults: the same model), in
    /// transformers' terms: `ch` → `base_channels`, `ch_mult` → `channel_multiplier`,
    /// `z_channels` → `latent_channels`, `double_z` → `double_latent`; one attention head as
    /// wide as the last level.
    fn from_original_json(v: &Value, path: &Path) -> Result<Self> {
        let base_channels = opt(v, "ch", 256, path)?;
        let channel_multiplier: Vec<usize> = opt(v, "ch_mult", vec![1, 2, 2, 4], path)?;
        let last = channel_multiplier.last().copied().unwrap_or(0);
        let c = Self {
            codebook_size: opt(v, "codebook_size", 32768, path)?,
            embed_dim: opt(v, "embed_dim", 4, path)?,
            latent_channels: opt(v, "z_channels", 4, path)?,
            double_latent: opt(v, "double_z", false, path)?,
            in_channels: opt(v, "in_channels", 3, path)?,
            out_channels: opt(v, "out_channels", 3, path)?,
            temporal_downsample_factor: opt(v, "temporal_downsample_factor", 4, path)?,
            base_channels,
            hidden_size: base_channels.saturating_mul(last),
            channel_multiplier,
            num_res_blocks: opt(v, "num_res_blocks", 2, path)?,
            attn_resolutions: opt(v, "attn_resolutions", vec![3], path)?,
            num_attention_heads: 1,
            vq: VqConfig::vqgan_imagenet_f16_1024(),
        };
        c.finish(path)
    }

    /// The taming-terms twin, then the checks.
    fn finish(mut self, path: &Path) -> Result<Self> {
        let c = &self;
        let vq = VqConfig {
            ddconfig: DdConfig {
                ch: c.base_channels,
                ch_mult: c.channel_multiplier.clone(),
                num_res_blocks: c.num_res_blocks,
                attn_resolutions: vec![],
                z_channels: c.latent_channels,
                double_z: false,
                resolution: 512,
                in_channels: c.in_channels,
                out_ch: c.out_channels,
                dropout: 0.0,
            },
            embed_dim: c.embed_dim,
            n_embed: c.codebook_size,
            ..VqConfig::vqgan_imagenet_f16_1024()
        };
        self.vq = vq;
        self.validate(path)?;
        Ok(self)
    }

    fn validate(&self, path: &Path) -> Result<()> {
        self.vq.validate(path)?;
        let bad = |m: String| Err(Error::format(path, m));
        if self.double_latent {
            return bad("`double_latent` is true; Emu3's VQ has single latents".into());
        }
        if self.embed_dim != self.latent_channels {
            return bad(format!(
                "`embed_dim` {} differs from `latent_channels` {}; Emu3's decoder runs both \
                 through the same temporal blocks",
                self.embed_dim, self.latent_channels
            ));
        }
        let t = self.temporal_downsample_factor;
        if t == 0 || !t.is_power_of_two() || t > 64 {
            return bad(format!(
                "`temporal_downsample_factor` is {t}; a power of two up to 64"
            ));
        }
        let levels = self.channel_multiplier.len();
        let width = |i: usize| self.base_channels * self.channel_multiplier[i];
        if let Some(i) = (0..levels).find(|&i| !width(i).is_multiple_of(32)) {
            return bad(format!(
                "level {i} has {} channels, not a multiple of GroupNorm's 32 groups",
                width(i)
            ));
        }
        if !self.base_channels.is_multiple_of(32) {
            return bad(format!(
                "`base_channels` {} is not a multiple of GroupNorm's 32 groups",
                self.base_channels
            ));
        }
        let attn_levels = self
            .attn_resolutions
            .iter()
            .filter(|&&i| i < levels)
            .copied()
            .chain([levels - 1]);
        for i in attn_levels {
            if width(i) != self.hidden_size {
                return bad(format!(
                    "attention at level {i} (and the middle's at level {}) works on {} channels, \
                     but `hidden_size` is {}",
                    levels - 1,
                    width(i),
                    self.hidden_size
                ));
            }
        }
        let heads = self.num_attention_heads;
        if heads == 0 || !self.hidden_size.is_multiple_of(heads) {
            return bad(format!(
                "`hidden_size` {} is not a multiple of `num_attention_heads` {heads}",
                self.hidden_size
            ));
        }
        Ok(())
    }

    /// Channels out of the encoder's 2-D part.
    pub fn encoder_out_channels(&self) -> usize {
        self.latent_channels
    }

    /// Temporal down- (and up-) sampling convs: log2 of the temporal factor.
    pub fn temporal_blocks(&self) -> usize {
        self.temporal_downsample_factor.trailing_zeros() as usize
    }

    /// Pixels per code a side (`2^(levels − 1)`: 8 for the released model).
    pub fn downsample_factor(&self) -> usize {
        self.vq.downsample_factor()
    }
}

/// The VQ tensors of a full Emu3 model with its prefix ([`FULL_PREFIXES`]) removed, when the
/// names have one; otherwise `map` as it is. `num_batches_tracked` (BatchNorm's training
/// counter) is left out either way.
pub fn vq_part(map: HashMap<String, Tensor>) -> HashMap<String, Tensor> {
    let prefix = FULL_PREFIXES
        .iter()
        .find(|p| map.keys().any(|k| k.starts_with(*p)));
    map.into_iter()
        .filter(|(k, _)| !k.ends_with(".num_batches_tracked"))
        .filter_map(|(k, t)| match prefix {
            Some(p) => k.strip_prefix(p).map(|s| (s.to_string(), t)),
            None => Some((k, t)),
        })
        .collect()
}

/// BAAI's own weight names as transformers' (what transformers' conversion of
/// BAAI/Emu3-VisionTokenizer does): `encoder.down.` → `encoder.down_block.down.`,
/// `decoder.up.` → `decoder.up_block.up.`, `mid.` → `middle_block.`; an attention block's
/// `attn.j.norm` → `attn_norms.j` (the middle's `attn_1.norm` → `attn_norm`) and its 1×1 convs
/// `q`, `k`, `v`, `proj_out` → the linear `q_proj`, `k_proj`, `v_proj`, `out_proj`
/// ((c, c, 1, 1) → (c, c)). Every other name is the same in both.
pub fn from_original_names(map: HashMap<String, Tensor>) -> Result<HashMap<String, Tensor>> {
    let mut out = HashMap::with_capacity(map.len());
    for (k, mut t) in map {
        let mut s: Vec<String> = k.split('.').map(str::to_string).collect();
        match (s[0].as_str(), s.get(1).map(String::as_str)) {
            ("encoder", Some("down")) => s.insert(1, "down_block".into()),
            ("decoder", Some("up")) => s.insert(1, "up_block".into()),
            ("encoder" | "decoder", Some("mid")) => s[1] = "middle_block".into(),
            _ => {}
        }
        if let Some(a) = s.iter().position(|x| x == "attn" || x == "attn_1") {
            // `attn.j.WHAT` in a level, `attn_1.WHAT` in the middle.
            let at = if s[a] == "attn" { a + 2 } else { a + 1 };
            let linear = match s.get(at).map(String::as_str) {
                Some("q") => Some("q_proj"),
                Some("k") => Some("k_proj"),
                Some("v") => Some("v_proj"),
                Some("proj_out") => Some("out_proj"),
                _ => None,
            };
            if let Some(name) = linear {
                s[at] = name.into();
                if t.rank() == 4 {
                    t = t.squeeze(3)?.squeeze(2)?;
                }
            } else if s.get(at).map(String::as_str) == Some("norm") {
                s.remove(at);
                s[a] = if at == a + 2 {
                    "attn_norms"
                } else {
                    "attn_norm"
                }
                .into();
            }
        }
        out.insert(s.join("."), t);
    }
    Ok(out)
}

/// An Emu3 model as loaded, with the files it came from.
pub struct Loaded {
    pub model: Emu3Model,
    pub weights: PathBuf,
    pub config: PathBuf,
}

/// Loads an Emu3 VQVAE: `source` a `save_pretrained` folder or a weights file (a full model's
/// too), its config `config` or the `config.json` beside it.
pub fn load(source: &Path, config: Option<&Path>, device: &Device) -> Result<Loaded> {
    let weights = crate::load::resolve_weights(source)?;
    let config = config.map_or_else(|| config_beside(source), Path::to_path_buf);
    let v = crate::load::read_config(&config)?;
    if !is_emu3_config(&v) {
        return Err(Error::format(
            &config,
            "not an Emu3 config (`model_type` `emu3_vqgan` or `emu3`)",
        ));
    }
    let cfg = Emu3Config::from_json(&v, &config)?;
    let mut map = vq_part(crate::load::read_all_tensors(&weights, device)?);
    if is_original(&v) {
        map = from_original_names(map)?;
    }
    let w = AuditedWeights::new(&weights, map);
    let model = Emu3Model::new(&cfg, w.var_builder(DType::F32, device))
        .map_err(|e| imgseq_core::weights::model_error(&weights, e))?;
    w.finish(&[])?;
    Ok(Loaded {
        model,
        weights,
        config,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_released_vision_tokenizer() {
        let c = Emu3Config::default();
        assert_eq!(
            (c.codebook_size, c.embed_dim, c.latent_channels),
            (32768, 4, 4)
        );
        assert_eq!(
            (c.base_channels, c.channel_multiplier.clone()),
            (256, vec![1, 2, 2, 4])
        );
        assert_eq!((c.num_res_blocks, c.attn_resolutions.clone()), (2, vec![3]));
        assert_eq!((c.hidden_size, c.num_attention_heads), (1024, 1));
        assert_eq!((c.downsample_factor(), c.temporal_blocks()), (8, 2));
        let p = Path::new("config.json");
        let e = Emu3Config::from_json(&serde_json::json!({"model_type": "emu3"}), p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("vq_config"), "{e}");
        let full = serde_json::json!({"model_type": "emu3", "vq_config": {"codebook_size": 8}});
        assert_eq!(Emu3Config::from_json(&full, p).unwrap().codebook_size, 8);
    }

    #[test]
    fn configs_transformers_could_not_run_are_refused_naming_the_field() {
        let p = Path::new("config.json");
        for (v, word) in [
            (serde_json::json!({"embed_dim": 8}), "latent_channels"),
            (serde_json::json!({"double_latent": true}), "double_latent"),
            (serde_json::json!({"hidden_size": 512}), "hidden_size"),
            (
                serde_json::json!({"num_attention_heads": 3}),
                "num_attention_heads",
            ),
            (
                serde_json::json!({"temporal_downsample_factor": 3}),
                "temporal",
            ),
            (
                serde_json::json!({"base_channels": 48, "hidden_size": 192}),
                "32",
            ),
        ] {
            let e = Emu3Config::from_json(&v, p).unwrap_err().to_string();
            assert!(e.contains(word), "{v}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    #[test]
    fn baai_config_and_names_read_as_transformers() {
        let p = Path::new("config.json");
        let v = serde_json::json!({"model_type": "Emu3VisionVQ", "ch": 32, "ch_mult": [1, 2],
            "z_channels": 8, "embed_dim": 8, "attn_resolutions": [1]});
        let c = Emu3Config::from_json(&v, p).unwrap();
        assert_eq!(
            (c.base_channels, c.channel_multiplier.clone()),
            (32, vec![1, 2])
        );
        assert_eq!(
            (c.latent_channels, c.hidden_size, c.num_attention_heads),
            (8, 64, 1)
        );
        let released = serde_json::json!({"model_type": "Emu3VisionVQ"});
        assert_eq!(
            Emu3Config::from_json(&released, p).unwrap(),
            Emu3Config::default()
        );
        let dev = Device::Cpu;
        let w = Tensor::zeros((2, 2, 1, 1), DType::F32, &dev).unwrap();
        let names = [
            (
                "encoder.down.1.attn.0.norm.weight",
                "encoder.down_block.down.1.attn_norms.0.weight",
            ),
            (
                "encoder.down.1.attn.0.q.weight",
                "encoder.down_block.down.1.attn.0.q_proj.weight",
            ),
            (
                "encoder.mid.attn_1.proj_out.bias",
                "encoder.middle_block.attn_1.out_proj.bias",
            ),
            (
                "decoder.mid.attn_1.norm.conv_y.weight",
                "decoder.middle_block.attn_norm.conv_y.weight",
            ),
            (
                "decoder.up.1.attn.1.norm.norm_layer.bias",
                "decoder.up_block.up.1.attn_norms.1.norm_layer.bias",
            ),
            (
                "decoder.up.0.upsample.conv.weight",
                "decoder.up_block.up.0.upsample.conv.weight",
            ),
            (
                "decoder.time_conv.0.conv.conv.weight",
                "decoder.time_conv.0.conv.conv.weight",
            ),
            ("quantize.embedding.weight", "quantize.embedding.weight"),
        ];
        let map = names
            .iter()
            .map(|(k, _)| (k.to_string(), w.clone()))
            .collect();
        let got = from_original_names(map).unwrap();
        for (from, to) in names {
            assert!(got.contains_key(to), "{from} → {to}: {:?}", got.keys());
        }
        assert_eq!(
            got["encoder.down_block.down.1.attn.0.q_proj.weight"].dims(),
            &[2, 2]
        );
    }

    #[test]
    fn full_model_tensors_lose_their_prefix_and_the_rest() {
        let t = Tensor::zeros(1, DType::F32, &Device::Cpu).unwrap();
        for prefix in FULL_PREFIXES {
            let map: HashMap<String, Tensor> = [
                format!("{prefix}quantize.embedding.weight"),
                format!("{prefix}encoder.time_res_stack.0.norm1.num_batches_tracked"),
                "model.text_model.embed_tokens.weight".to_string(),
                "lm_head.weight".to_string(),
            ]
            .into_iter()
            .map(|k| (k, t.clone()))
            .collect();
            let got: Vec<String> = vq_part(map).into_keys().collect();
            assert_eq!(
                got,
                vec!["quantize.embedding.weight".to_string()],
                "{prefix}"
            );
        }
    }
}
