//! MaskGIT's VQGAN as bytedance/1d-tokenizer ships it (`maskgit-vqgan-imagenet-f16-256.bin` on
//! the Hub's fun-research/TiTok: open-muse's conversion of MaskGIT's JAX weights), the pixel
//! decoder TiTok's VQ tokenizers decode through: a picture in [0, 1] becomes a grid of codes 16×
//! smaller a side (1,024 codes of 256 dims), and back, clamped to [0, 1].
//!
//! The file is a plain state dict (`encoder.*`, `decoder.*`, `quantize.embedding.weight`, what
//! `PretrainedTokenizer` of `modeling/titok.py` loads strictly), with no config: upstream
//! hard-codes it (`hidden_channels` 128, `channel_mult` [1, 1, 2, 2, 4], `num_res_blocks` 2,
//! `z_channels` 256). imgseq reads the sizes off the tensors' shapes
//! ([`MaskGitConfig::from_shapes`]), so smaller models of the same code read too.

pub mod model;
pub mod tokenizer;

use crate::config::{DdConfig, VqConfig};
use candle_core::{DType, Device};
use imgseq_core::weights::AuditedWeights;
use imgseq_core::{Error, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

pub use model::MaskGitModel;
pub use tokenizer::MaskGitTokenizer;

/// The registry name.
pub const NAME: &str = "maskgit-vqgan";
/// The name users read.
pub const LABEL: &str = "MaskGIT-VQGAN";

/// The `OmegaConf` config upstream builds its encoder and decoder with, field for field, plus
/// the quantizer's `num_embeddings` and `embedding_dim`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MaskGitConfig {
    pub channel_mult: Vec<usize>,
    pub num_resolutions: usize,
    pub dropout: f64,
    pub hidden_channels: usize,
    pub num_channels: usize,
    pub num_res_blocks: usize,
    pub resolution: usize,
    pub z_channels: usize,
    pub num_embeddings: usize,
    pub embedding_dim: usize,
}

impl Default for MaskGitConfig {
    /// The released model (upstream's hard-coded config).
    fn default() -> Self {
        Self {
            channel_mult: vec![1, 1, 2, 2, 4],
            num_resolutions: 5,
            dropout: 0.0,
            hidden_channels: 128,
            num_channels: 3,
            num_res_blocks: 2,
            resolution: 256,
            z_channels: 256,
            num_embeddings: 1024,
            embedding_dim: 256,
        }
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl MaskGitConfig {
    /// The config of the tensors `shapes` names: an encoder (`{prefix}encoder.*`, when
    /// `encoder` is true) and the decoder `{prefix}{decoder}.*`, with the codebook `codebook`.
    /// The widths come from the decoder's levels (`hidden_channels` their greatest common
    /// divisor, `channel_mult` each over it); an encoder must agree with them.
    pub fn from_shapes(
        shapes: &BTreeMap<String, Vec<usize>>,
        decoder: &str,
        codebook: &str,
        encoder: Option<&str>,
        path: &Path,
    ) -> Result<Self> {
        let get = |k: &str| {
            shapes
                .get(k)
                .filter(|s| s.len() >= 2)
                .ok_or_else(|| Error::format(path, format!("no tensor `{k}`: not a {LABEL}")))
        };
        let has = |k: String| shapes.contains_key(&k);
        let levels = (0..)
            .take_while(|i| has(format!("{decoder}.up.{i}.block.0.conv1.weight")))
            .count();
        if levels == 0 || levels > crate::config::MAX_LEVELS {
            return Err(Error::format(
                path,
                format!("{levels} decoder levels (`{decoder}.up.N`): not a {LABEL} imgseq reads"),
            ));
        }
        let widths = (0..levels)
            .map(|i| get(&format!("{decoder}.up.{i}.block.0.conv1.weight")).map(|s| s[0]))
            .collect::<Result<Vec<_>>>()?;
        // The encoder's conv_in gives `hidden_channels`; a decoder alone, the widths' gcd.
        let hidden = match encoder {
            Some(e) => get(&format!("{e}.conv_in.weight"))?[0],
            None => widths.iter().fold(0, |g, &w| gcd(g, w)),
        };
        if let Some(w) = widths.iter().find(|&&w| hidden == 0 || w % hidden != 0) {
            return Err(Error::format(
                path,
                format!("a level of {w} channels is no multiple of conv_in's {hidden}"),
            ));
        }
        let num_res_blocks = (0..)
            .take_while(|j| has(format!("{decoder}.up.0.block.{j}.conv1.weight")))
            .count();
        let conv_in = get(&format!("{decoder}.conv_in.weight"))?;
        let conv_out = get(&format!("{decoder}.conv_out.weight"))?;
        let code = get(codebook)?;
        let c = Self {
            channel_mult: widths.iter().map(|w| w / hidden.max(1)).collect(),
            num_resolutions: levels,
            dropout: 0.0,
            hidden_channels: hidden,
            num_channels: conv_out[0],
            num_res_blocks,
            resolution: 16 << (levels - 1),
            z_channels: conv_in[1],
            num_embeddings: code[0],
            embedding_dim: code[1],
        };
        if let Some(e) = encoder {
            let conv_in = get(&format!("{e}.conv_in.weight"))?;
            let enc_levels = (0..)
                .take_while(|i| has(format!("{e}.down.{i}.block.0.conv1.weight")))
                .count();
            let enc_widths = (0..enc_levels)
                .map(|i| get(&format!("{e}.down.{i}.block.0.conv1.weight")).map(|s| s[0]))
                .collect::<Result<Vec<_>>>()?;
            let z = get(&format!("{e}.conv_out.weight"))?[0];
            if enc_widths != widths || conv_in[0] != hidden || conv_in[1] != c.num_channels {
                return Err(Error::format(
                    path,
                    format!(
                        "the encoder's levels ({enc_widths:?} channels after conv_in's {}) and \
                         the decoder's ({widths:?}) differ; upstream builds both from one config",
                        conv_in[0]
                    ),
                ));
            }
            if z != c.z_channels {
                return Err(Error::format(
                    path,
                    format!(
                        "the encoder gives {z} channels, the decoder reads {}",
                        c.z_channels
                    ),
                ));
            }
        }
        if c.embedding_dim != c.z_channels {
            return Err(Error::format(
                path,
                format!(
                    "the codebook's entries have {} dims, the latents {}",
                    c.embedding_dim, c.z_channels
                ),
            ));
        }
        c.vq().validate(path)?;
        Ok(c)
    }

    /// Channels of the last (smallest) level.
    pub fn last_width(&self) -> usize {
        self.hidden_channels * self.channel_mult.last().copied().unwrap_or(1)
    }

    /// Pixels per code a side: 2^(levels − 1) (16 released).
    pub fn downsample_factor(&self) -> usize {
        1 << (self.channel_mult.len().max(1) - 1)
    }

    /// The same sizes in taming's terms, for the shared limits, input-size rule and memory
    /// estimate.
    pub fn vq(&self) -> VqConfig {
        VqConfig {
            ddconfig: DdConfig {
                ch: self.hidden_channels,
                ch_mult: self.channel_mult.clone(),
                num_res_blocks: self.num_res_blocks,
                attn_resolutions: vec![],
                z_channels: self.z_channels,
                double_z: false,
                resolution: self.resolution,
                in_channels: self.num_channels,
                out_ch: self.num_channels,
                dropout: 0.0,
            },
            embed_dim: self.embedding_dim,
            n_embed: self.num_embeddings,
            ..VqConfig::vqgan_imagenet_f16_1024()
        }
    }
}

/// Whether tensor names are a MaskGIT-VQGAN's: its decoder's `upsample_conv` and encoder, and no
/// taming `quant_conv`.
pub fn is_maskgit_keys<'a>(mut names: impl Iterator<Item = &'a str>) -> bool {
    let (mut up, mut enc, mut quant_conv) = (false, false, false);
    for n in names.by_ref() {
        up |= n.starts_with("decoder.up.") && n.ends_with(".upsample_conv.weight");
        enc |= n == "encoder.conv_in.weight";
        quant_conv |= n.starts_with("quant_conv.");
    }
    up && enc && !quant_conv
}

/// Whether the file at `path` is a MaskGIT-VQGAN state dict.
pub fn is_maskgit_file(path: &Path) -> bool {
    path.is_file()
        && crate::load::inspect(path)
            .is_ok_and(|s| is_maskgit_keys(s.tensors.iter().map(|t| t.name.as_str())))
}

/// Loads a MaskGIT-VQGAN state dict (audited: every tensor used).
pub fn load(path: &Path, device: &Device) -> Result<MaskGitModel> {
    let map = crate::load::read_all_tensors(path, device)?;
    let shapes = map
        .iter()
        .map(|(k, t)| (k.clone(), t.dims().to_vec()))
        .collect();
    let cfg = MaskGitConfig::from_shapes(
        &shapes,
        "decoder",
        "quantize.embedding.weight",
        Some("encoder"),
        path,
    )?;
    let w = AuditedWeights::new(path, map);
    let model = MaskGitModel::new(&cfg, w.var_builder(DType::F32, device))
        .map_err(|e| imgseq_core::weights::model_error(path, e))?;
    w.finish(&[])?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn released_shapes(prefix: &str) -> BTreeMap<String, Vec<usize>> {
        let mut s = BTreeMap::new();
        for (i, w) in [128, 128, 256, 256, 512].into_iter().enumerate() {
            for j in 0..2 {
                s.insert(
                    format!("{prefix}up.{i}.block.{j}.conv1.weight"),
                    vec![w, w, 3, 3],
                );
            }
        }
        s.insert(format!("{prefix}conv_in.weight"), vec![512, 256, 3, 3]);
        s.insert(format!("{prefix}conv_out.weight"), vec![3, 128, 3, 3]);
        s.insert("pixel_quantize.embedding.weight".into(), vec![1024, 256]);
        s
    }

    #[test]
    fn released_decoder_shapes_read_as_upstreams_hard_coded_config() {
        let s = released_shapes("pixel_decoder.");
        let c = MaskGitConfig::from_shapes(
            &s,
            "pixel_decoder",
            "pixel_quantize.embedding.weight",
            None,
            Path::new("m"),
        )
        .unwrap();
        assert_eq!(c, MaskGitConfig::default());
        assert_eq!(c.downsample_factor(), 16);
    }

    #[test]
    fn maskgit_names_are_told_from_taming_and_titok_names() {
        let maskgit = [
            "encoder.conv_in.weight",
            "decoder.up.1.upsample_conv.weight",
            "quantize.embedding.weight",
        ];
        assert!(is_maskgit_keys(maskgit.into_iter()));
        // taming: `upsample.conv` and a quant_conv.
        let taming = [
            "encoder.conv_in.weight",
            "decoder.up.1.upsample.conv.weight",
            "quant_conv.weight",
        ];
        assert!(!is_maskgit_keys(taming.into_iter()));
        // TiTok holds the pixel decoder under its own prefix and no MaskGIT encoder.
        let titok = [
            "encoder.patch_embed.weight",
            "pixel_decoder.up.1.upsample_conv.weight",
        ];
        assert!(!is_maskgit_keys(titok.into_iter()));
    }

    #[test]
    fn a_codebook_of_another_width_is_refused_naming_both() {
        let mut s = released_shapes("pixel_decoder.");
        s.insert("pixel_quantize.embedding.weight".into(), vec![1024, 8]);
        let e = MaskGitConfig::from_shapes(
            &s,
            "pixel_decoder",
            "pixel_quantize.embedding.weight",
            None,
            Path::new("m"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("8 dims") && e.contains("256"), "{e}");
    }
}
