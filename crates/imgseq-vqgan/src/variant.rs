//! The [`Variant`]: what a model does differently from taming's VQGAN (its [`Family`],
//! GroupNorm groups, codebook search, input crop and pixel range), stored inside the
//! [`crate::VqConfig`]. The families themselves are described in [`crate::family`].

use imgseq_core::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

/// Which code the weights were trained with (and so how they are named).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// taming-transformers (and imgseq's own training): `encoder.down.i.block.j...`.
    #[default]
    Taming,
    /// LlamaGen's VQ-8 / VQ-16: `encoder.conv_blocks.i.res.j...`.
    Llamagen,
    /// diffusers' `VQModel`: `encoder.down_blocks.i.resnets.j...`.
    Diffusers,
    /// Janus's VQ in transformers' layout (`JanusVQVAE`, [`crate::janus`]): taming's names
    /// with the decoder's `up.k` counted from the lowest resolution.
    Janus,
    /// IBQ (TencentARC/SEED-Voken, [`crate::ibq`]): taming's names, a Lightning `.ckpt`
    /// with EMA copies, a largest-inner-product codebook search.
    Ibq,
    /// Chameleon / Anole in transformers' layout (`ChameleonVQVAE`, [`crate::chameleon`]):
    /// taming's names, the encoder only.
    Chameleon,
}

impl Family {
    /// The registry name (manifests, descriptions): `taming`, `llamagen`, `diffusers`,
    /// `janus`, `ibq`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Taming => "taming",
            Family::Llamagen => "llamagen",
            Family::Diffusers => "diffusers",
            Family::Janus => "janus",
            Family::Ibq => "ibq",
            Family::Chameleon => "chameleon",
        }
    }

    /// The name users see (`weights inspect`, messages).
    pub fn label(self) -> &'static str {
        match self {
            Family::Taming => "taming VQGAN",
            Family::Llamagen => "LlamaGen VQ",
            Family::Diffusers => "diffusers VQModel",
            Family::Janus => "Janus VQ (transformers JanusVQVAE)",
            Family::Ibq => "IBQ (SEED-Voken)",
            Family::Chameleon => "Chameleon VQ (transformers ChameleonVQVAE)",
        }
    }
}

/// How a latent vector's nearest codebook entry is found (ties → lowest index either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Distance {
    /// argmin of ‖z‖² + ‖e‖² − 2·z·e (taming, LlamaGen).
    #[default]
    Expanded,
    /// argmin of `torch.cdist`: √max(‖z‖² + ‖e‖² − 2·z·e, 1e−30), so distances whose square
    /// roots round to the same float tie (diffusers).
    Cdist,
    /// [`Distance::Expanded`] over the raw z and codebook even with `l2_norm` (whose
    /// normalised entry the decoder still gets): transformers' `JanusVQVAE.forward`.
    Unnormalised,
    /// The largest inner product z·e (IBQ's `argmax softmax(z·eᵀ)`), not a distance.
    InnerProduct,
}

/// How an image file becomes the model's square input: the one rule of [`imgseq_core::input`].
pub use imgseq_core::input::Crop as Resize;

/// The pixel range the network reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Range {
    /// [−1, 1] (taming, LlamaGen, most diffusers models).
    #[default]
    MinusOneOne,
    /// [0, 1] (aMUSEd's VQ: its pipeline does not normalise).
    ZeroOne,
}

/// What a model does differently from taming's VQGAN. [`Variant::default`] is taming.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    pub family: Family,
    /// GroupNorm groups (diffusers' `norm_num_groups`; 32 elsewhere).
    pub norm_groups: usize,
    /// Whether the middle blocks have their attention (diffusers' `mid_block_add_attention`).
    pub mid_attn: bool,
    /// LlamaGen's `codebook_l2_norm`: z and the codebook are l2-normalised before the search,
    /// and the normalised entry is what the decoder gets.
    pub l2_norm: bool,
    pub distance: Distance,
    pub resize: Resize,
    pub range: Range,
}

impl Default for Variant {
    fn default() -> Self {
        Self {
            family: Family::Taming,
            norm_groups: 32,
            mid_attn: true,
            l2_norm: false,
            distance: Distance::Expanded,
            resize: Resize::ShorterSide,
            range: Range::MinusOneOne,
        }
    }
}

/// Most GroupNorm groups.
pub const MAX_GROUPS: usize = 4096;

impl Variant {
    /// taming's (every option at its default): not written into `config.json`.
    pub fn is_taming(&self) -> bool {
        *self == Self::default()
    }

    /// LlamaGen's VQ models.
    pub fn llamagen(l2_norm: bool) -> Self {
        Self {
            family: Family::Llamagen,
            l2_norm,
            resize: Resize::AdmCenterCrop,
            ..Self::default()
        }
    }

    /// Janus's VQ: LlamaGen's l2-normalised codes (the original's search, or with
    /// `transformers_search` the raw argmin of transformers' `JanusVQVAE`), its processor's
    /// pad-to-square input.
    pub fn janus(transformers_search: bool) -> Self {
        Self {
            family: Family::Janus,
            l2_norm: true,
            distance: match transformers_search {
                true => Distance::Unnormalised,
                false => Distance::Expanded,
            },
            resize: Resize::PadToSquare,
            ..Self::default()
        }
    }

    /// diffusers' `VQModel`.
    pub fn diffusers(norm_groups: usize, mid_attn: bool, range: Range) -> Self {
        Self {
            family: Family::Diffusers,
            norm_groups,
            mid_attn,
            distance: Distance::Cdist,
            range,
            ..Self::default()
        }
    }

    /// Our JSON form (`"variant": {...}` in `config.json`): every field optional (taming's
    /// value), unknown fields refused.
    pub(crate) fn from_json(v: &Value, path: &Path) -> Result<Self> {
        let Value::Object(m) = v else {
            return Err(Error::format(path, "field `variant` must be an object"));
        };
        let mut out = Self::default();
        for (k, x) in m {
            let name = format!("variant.{k}");
            match k.as_str() {
                "family" => out.family = conv(x, &name, path)?,
                "norm_groups" => out.norm_groups = conv(x, &name, path)?,
                "mid_attn" => out.mid_attn = conv(x, &name, path)?,
                "l2_norm" => out.l2_norm = conv(x, &name, path)?,
                "distance" => out.distance = conv(x, &name, path)?,
                "resize" => out.resize = conv(x, &name, path)?,
                "range" => out.range = conv(x, &name, path)?,
                _ => {
                    return Err(Error::format(
                        path,
                        format!("unknown field `{name}` (known: family, norm_groups, mid_attn, l2_norm, distance, resize, range)"),
                    ))
                }
            }
        }
        Ok(out)
    }
}

pub(crate) fn conv<T: serde::de::DeserializeOwned>(
    v: &Value,
    name: &str,
    path: &Path,
) -> Result<T> {
    T::deserialize(v.clone())
        .map_err(|e| Error::format(path, format!("field `{name}` has a wrong value {v} ({e})")))
}

/// `name`'s value in a config, or `default` when absent or null.
pub(crate) fn opt<T: serde::de::DeserializeOwned>(
    v: &Value,
    name: &str,
    default: T,
    path: &Path,
) -> Result<T> {
    match v.get(name) {
        Some(x) if !x.is_null() => conv(x, name, path),
        _ => Ok(default),
    }
}
