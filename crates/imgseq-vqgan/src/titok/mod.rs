//! TiTok, bytedance/1d-tokenizer's 1-D tokenizer (`modeling/titok.py`; released as
//! `yucornetto/tokenizer_titok_{l32,b64,s128}_imagenet` and the VQ8k `bl64`/`bl128`/`sl256`): a
//! picture in [0, 1] becomes one row of 32–256 codes, and back.
//!
//! Encoding ([`vit::Encoder`]): the ViT reads the patches after a class token and then
//! `num_latent_tokens` learnable latent tokens; the latent tokens' outputs, brought to
//! `token_size` by `conv_out`, are the latents (b, t, 1, N); each is quantized to the nearest
//! codebook entry — with `use_l2_norm` (the released L-32/B-64/S-128) latents and entries
//! l2-normalised first (`F.normalize`), by ‖z‖² + ‖e‖² − 2·z·e, ties to the lowest index.
//! Decoding: the entries (normalised with `use_l2_norm`) through the ViT decoder (mask tokens
//! on a grid of `crop_size / vit_dec_patch_size` a side); the legacy models (`is_legacy`, the
//! default, with `finetune_decoder`) predict logits over the MaskGIT-VQGAN's 1,024 codes, whose
//! softmax mixes its codebook entries into the [`crate::maskgit`] pixel decoder's input
//! (`pixel_quantize`, `pixel_decoder`); the others (`is_legacy: false`) predict the pixels
//! directly (a 1×1 conv to p²·3, unpatchified, a 3×3 `conv_out`). The output is not clamped
//! (upstream's demo clamps it to [0, 1] when it makes the picture).
//!
//! Files read: `TiTok.save_pretrained`'s folder (`config.json`, the training config as JSON,
//! with `model.vq_model.*` and `dataset.preprocessing.crop_size`, + `model.safetensors`, or an
//! older `pytorch_model.bin`), or a state dict file (`tokenizer_titok_l32.bin`) with that config
//! or upstream's YAML (`configs/infer/TiTok/titok_l32.yaml`) named. The VAE variants
//! (`quantize_mode: vae`) are continuous and are refused.

pub mod tokenizer;
pub mod vit;

use crate::maskgit::{model::Decoder as PixelDecoder, MaskGitConfig};
use crate::quantize::VectorQuantizer;
use crate::variant::{conv, opt};
use candle_core::{DType, Device, Result as CResult, Tensor};
use candle_nn::VarBuilder;
use imgseq_core::weights::AuditedWeights;
use imgseq_core::{Error, Result};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use tokenizer::TitokTokenizer;

/// The registry name.
pub const NAME: &str = "titok";
/// The name users read.
pub const LABEL: &str = "TiTok";
/// The weights files a `save_pretrained` folder holds, in the order looked for.
pub const FOLDER_WEIGHTS: [&str; 2] = ["model.safetensors", "pytorch_model.bin"];

/// The ViT sizes upstream names (`vit_enc_model_size`, `vit_dec_model_size`): width, layers,
/// heads. `tiny` is not released: it is the size `scripts/make_titok_fixtures.py` adds to
/// upstream's tables for the parity fixtures.
pub const MODEL_SIZES: [(&str, (usize, usize, usize)); 4] = [
    ("tiny", (32, 2, 2)),
    ("small", (512, 8, 8)),
    ("base", (768, 12, 12)),
    ("large", (1024, 24, 16)),
];

/// `config.model.vq_model` (and `config.dataset.preprocessing.crop_size`), field for field,
/// upstream's defaults for the fields it reads with `.get`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TitokConfig {
    pub codebook_size: usize,
    pub token_size: usize,
    pub use_l2_norm: bool,
    pub vit_enc_model_size: String,
    pub vit_dec_model_size: String,
    pub vit_enc_patch_size: usize,
    pub vit_dec_patch_size: usize,
    pub num_latent_tokens: usize,
    pub finetune_decoder: bool,
    pub quantize_mode: String,
    pub is_legacy: bool,
    pub crop_size: usize,
    /// The MaskGIT-VQGAN pixel decoder's sizes (read off its tensors), legacy models only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pixel_decoder: Option<MaskGitConfig>,
}

fn size_of(name: &str) -> Option<(usize, usize, usize)> {
    MODEL_SIZES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
}

impl TitokConfig {
    /// The L-32 tokenizer's config (`configs/infer/TiTok/titok_l32.yaml`), with the released
    /// pixel decoder.
    pub fn titok_l32() -> Self {
        Self {
            codebook_size: 4096,
            token_size: 12,
            use_l2_norm: true,
            vit_enc_model_size: "large".into(),
            vit_dec_model_size: "large".into(),
            vit_enc_patch_size: 16,
            vit_dec_patch_size: 16,
            num_latent_tokens: 32,
            finetune_decoder: true,
            quantize_mode: "vq".into(),
            is_legacy: true,
            crop_size: 256,
            pixel_decoder: Some(MaskGitConfig::default()),
        }
    }

    /// The config of a training config (JSON or YAML, already parsed): `model.vq_model.*` and
    /// `dataset.preprocessing.crop_size`. Refused: the VAE variants, a legacy model without
    /// its pixel decoder (upstream's stage 1, whose decoder gives codes, not pictures), sizes
    /// upstream has no table entry for, sides no patch divides.
    pub fn from_value(v: &Value, path: &Path) -> Result<Self> {
        let vq = v
            .pointer("/model/vq_model")
            .filter(|x| x.is_object())
            .ok_or_else(|| Error::format(path, "no `model.vq_model`: not a TiTok config"))?;
        let req = |name: &str| -> Result<&Value> {
            vq.get(name)
                .filter(|x| !x.is_null())
                .ok_or_else(|| Error::format(path, format!("no `model.vq_model.{name}`")))
        };
        let crop = v
            .pointer("/dataset/preprocessing/crop_size")
            .ok_or_else(|| Error::format(path, "no `dataset.preprocessing.crop_size`"))?;
        let c = Self {
            codebook_size: conv(req("codebook_size")?, "codebook_size", path)?,
            token_size: conv(req("token_size")?, "token_size", path)?,
            use_l2_norm: opt(vq, "use_l2_norm", false, path)?,
            vit_enc_model_size: conv(req("vit_enc_model_size")?, "vit_enc_model_size", path)?,
            vit_dec_model_size: conv(req("vit_dec_model_size")?, "vit_dec_model_size", path)?,
            vit_enc_patch_size: conv(req("vit_enc_patch_size")?, "vit_enc_patch_size", path)?,
            vit_dec_patch_size: conv(req("vit_dec_patch_size")?, "vit_dec_patch_size", path)?,
            num_latent_tokens: conv(req("num_latent_tokens")?, "num_latent_tokens", path)?,
            finetune_decoder: opt(vq, "finetune_decoder", true, path)?,
            quantize_mode: opt(vq, "quantize_mode", "vq".to_string(), path)?,
            is_legacy: opt(vq, "is_legacy", true, path)?,
            crop_size: conv(crop, "crop_size", path)?,
            pixel_decoder: None,
        };
        c.validate(path)?;
        Ok(c)
    }

    fn validate(&self, path: &Path) -> Result<()> {
        let bad = |m: String| Err(Error::format(path, m));
        if self.quantize_mode != "vq" {
            return bad(format!(
                "`quantize_mode` is {:?}: a continuous TiTok, not a discrete tokenizer imgseq \
                 reads (only \"vq\")",
                self.quantize_mode
            ));
        }
        if self.is_legacy != self.finetune_decoder {
            return bad(if self.is_legacy {
                "`finetune_decoder` is false on a legacy model: its decoder gives MaskGIT-VQGAN \
                 codes (training's stage 1), not pictures"
                    .into()
            } else {
                "`finetune_decoder` is true on a model with `is_legacy: false`: upstream cannot \
                 decode it"
                    .into()
            });
        }
        for (field, name) in [
            ("vit_enc_model_size", &self.vit_enc_model_size),
            ("vit_dec_model_size", &self.vit_dec_model_size),
        ] {
            if size_of(name).is_none() {
                return bad(format!(
                    "`{field}` is {name:?}; upstream knows small, base and large"
                ));
            }
        }
        for (field, p) in [
            ("vit_enc_patch_size", self.vit_enc_patch_size),
            ("vit_dec_patch_size", self.vit_dec_patch_size),
        ] {
            if p == 0 || !self.crop_size.is_multiple_of(p) || self.crop_size > 8192 {
                return bad(format!(
                    "`{field}` {p} does not divide `crop_size` {} (at most 8192)",
                    self.crop_size
                ));
            }
        }
        let fields = [
            ("codebook_size", self.codebook_size, 1 << 24),
            ("token_size", self.token_size, 1 << 16),
            ("num_latent_tokens", self.num_latent_tokens, 1 << 16),
        ];
        for (name, v, max) in fields {
            if v == 0 || v > max {
                return bad(format!("`{name}` is {v}; must be 1 to {max}"));
            }
        }
        Ok(())
    }

    /// The encoder's (width, layers, heads).
    pub fn encoder_size(&self) -> (usize, usize, usize) {
        size_of(&self.vit_enc_model_size).unwrap_or((0, 0, 1))
    }

    /// The decoder's (width, layers, heads).
    pub fn decoder_size(&self) -> (usize, usize, usize) {
        size_of(&self.vit_dec_model_size).unwrap_or((0, 0, 1))
    }

    /// The decoder's grid side (`crop_size / vit_dec_patch_size`).
    pub fn decoder_grid(&self) -> usize {
        self.crop_size / self.vit_dec_patch_size
    }
}

/// Whether a parsed config is TiTok's (`model.vq_model.vit_enc_model_size`).
pub fn is_titok_config(v: &Value) -> bool {
    v.pointer("/model/vq_model/vit_enc_model_size").is_some()
}

pub use crate::load::{config_beside, read_config};

/// Whether the file at `path` is a TiTok config.
pub fn is_titok_config_file(path: &Path) -> bool {
    path.is_file() && read_config(path).is_ok_and(|v| is_titok_config(&v))
}

/// The weights file of a source: the file, or a folder's first of [`FOLDER_WEIGHTS`].
pub fn resolve_weights(source: &Path) -> Result<PathBuf> {
    if !source.is_dir() {
        return Ok(source.to_path_buf());
    }
    FOLDER_WEIGHTS
        .iter()
        .map(|n| source.join(n))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Error::format(
                source,
                format!("a folder without {}", FOLDER_WEIGHTS.join(" or ")),
            )
        })
}

/// The MaskGIT-VQGAN part of a legacy TiTok: its codebook (codes, d) and decoder.
#[derive(Debug, Clone)]
pub struct PixelPart {
    pub codebook: Tensor,
    pub decoder: PixelDecoder,
}

/// A TiTok VQ tokenizer.
#[derive(Debug, Clone)]
pub struct TitokModel {
    pub encoder: vit::Encoder,
    pub decoder: vit::Decoder,
    pub latent_tokens: Tensor, // (N, W)
    pub quantize: VectorQuantizer,
    pub pixel: Option<PixelPart>,
    cfg: TitokConfig,
}

impl TitokModel {
    /// The model `cfg` describes (its `pixel_decoder` set for a legacy model).
    pub fn new(cfg: &TitokConfig, vb: VarBuilder) -> CResult<Self> {
        let (w, _, _) = cfg.encoder_size();
        let pixel = match (&cfg.pixel_decoder, cfg.is_legacy) {
            (Some(p), true) => Some(PixelPart {
                codebook: vb
                    .pp("pixel_quantize.embedding")
                    .get((p.num_embeddings, p.embedding_dim), "weight")?,
                decoder: PixelDecoder::new(p, vb.pp("pixel_decoder"))?,
            }),
            (None, true) => candle_core::bail!("a legacy TiTok needs its pixel decoder's sizes"),
            _ => None,
        };
        let codes = pixel.as_ref().map_or(0, |p| p.codebook.dim(0).unwrap_or(0));
        let e = vb
            .pp("quantize.embedding")
            .get((cfg.codebook_size, cfg.token_size), "weight")?;
        Ok(Self {
            encoder: vit::Encoder::new(cfg, vb.pp("encoder"))?,
            decoder: vit::Decoder::new(cfg, codes, vb.pp("decoder"))?,
            latent_tokens: vb.get((cfg.num_latent_tokens, w), "latent_tokens")?,
            quantize: VectorQuantizer::from_codebook(e, 0.25, false)
                .with_search(cfg.use_l2_norm, crate::family::Distance::Expanded),
            pixel,
            cfg: cfg.clone(),
        })
    }

    pub fn config(&self) -> &TitokConfig {
        &self.cfg
    }

    /// The latents before the quantizer.
    ///
    /// # Shapes
    /// x: (b, 3, S, S) in [0, 1] → (b, token_size, 1, N)
    pub fn encode_latents(&self, x: &Tensor) -> CResult<Tensor> {
        self.encoder.forward(x, &self.latent_tokens)
    }

    /// `encode(x)[1]["min_encoding_indices"]`: the nearest entry of every latent token.
    ///
    /// # Shapes
    /// x: (b, 3, S, S) → (b, 1, N) u32
    pub fn encode(&self, x: &Tensor) -> CResult<Tensor> {
        Ok(self.quantize.quantize(&self.encode_latents(x)?)?.indices)
    }

    /// `decode_tokens`: the picture of the tokens (not clamped).
    ///
    /// # Shapes
    /// tokens: (b, 1, N) → (b, 3, S, S)
    pub fn decode_tokens(&self, tokens: &Tensor) -> CResult<Tensor> {
        let z = self.quantize.lookup(tokens)?; // (b, t, 1, N)
        let y = self.decoder.forward(&z)?;
        match &self.pixel {
            Some(p) => p.decoder.forward(&vit::soft_codes(&y, &p.codebook)?),
            None => Ok(y),
        }
    }
}

/// A TiTok model as loaded, with the files it came from.
pub struct Loaded {
    pub model: TitokModel,
    pub weights: PathBuf,
    pub config: PathBuf,
}

/// Loads a TiTok: `source` a `save_pretrained` folder or a weights file, its config `config` or
/// the `config.json` beside it. Audited: every tensor is used.
pub fn load(source: &Path, config: Option<&Path>, device: &Device) -> Result<Loaded> {
    let weights = resolve_weights(source)?;
    let config = config.map_or_else(|| config_beside(source), Path::to_path_buf);
    let v = read_config(&config)?;
    let mut cfg = TitokConfig::from_value(&v, &config)?;
    let map = crate::load::read_all_tensors(&weights, device)?;
    if cfg.is_legacy {
        let shapes: BTreeMap<String, Vec<usize>> = map
            .iter()
            .map(|(k, t)| (k.clone(), t.dims().to_vec()))
            .collect();
        cfg.pixel_decoder = Some(MaskGitConfig::from_shapes(
            &shapes,
            "pixel_decoder",
            "pixel_quantize.embedding.weight",
            None,
            &weights,
        )?);
    }
    let w = AuditedWeights::new(&weights, map);
    let model = TitokModel::new(&cfg, w.var_builder(DType::F32, device))
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

    fn l32() -> Value {
        serde_json::json!({
            "model": {"vq_model": {"codebook_size": 4096, "token_size": 12, "use_l2_norm": true,
                "commitment_cost": 0.25, "vit_enc_model_size": "large",
                "vit_dec_model_size": "large", "vit_enc_patch_size": 16,
                "vit_dec_patch_size": 16, "num_latent_tokens": 32, "finetune_decoder": true}},
            "dataset": {"preprocessing": {"crop_size": 256}}
        })
    }

    #[test]
    fn the_released_l32_config_reads_as_upstreams_yaml() {
        let mut c = TitokConfig::from_value(&l32(), Path::new("config.json")).unwrap();
        c.pixel_decoder = Some(MaskGitConfig::default());
        assert_eq!(c, TitokConfig::titok_l32());
        assert_eq!(c.encoder_size(), (1024, 24, 16));
        assert_eq!(c.decoder_grid(), 16);
    }

    #[test]
    fn configs_upstream_could_not_decode_are_refused_naming_the_field() {
        let p = Path::new("config.json");
        for (field, value, word) in [
            ("quantize_mode", serde_json::json!("vae"), "quantize_mode"),
            (
                "finetune_decoder",
                serde_json::json!(false),
                "finetune_decoder",
            ),
            (
                "vit_enc_model_size",
                serde_json::json!("huge"),
                "vit_enc_model_size",
            ),
            (
                "vit_dec_patch_size",
                serde_json::json!(7),
                "vit_dec_patch_size",
            ),
            (
                "num_latent_tokens",
                serde_json::json!(0),
                "num_latent_tokens",
            ),
        ] {
            let mut v = l32();
            v["model"]["vq_model"][field] = value;
            let e = TitokConfig::from_value(&v, p).unwrap_err().to_string();
            assert!(e.contains(word), "{field}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        let e = TitokConfig::from_value(&serde_json::json!({"model": {}}), p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("vq_model"), "{e}");
    }
}
