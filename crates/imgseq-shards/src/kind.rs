//! What a shard holds per sample ([`ShardKind`]) and how float arrays are stored
//! ([`FloatDtype`]); the names every shard module shares.

use imgseq_core::{Error, Result};

/// The member extension of a sample's latent in a tar shard.
pub const LATENT_MEMBER: &str = "latent.npy";

/// The member extension of a sample's features (a vision tower's embeddings) in a tar shard.
pub const FEATURES_MEMBER: &str = "features.npy";

/// How the float arrays of latent and feature shards are stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FloatDtype {
    /// IEEE half precision, `.npy` `<f2` (numpy's float16).
    #[default]
    F16,
    /// bfloat16 (float32's top 16 bits, rounded to nearest even): `.npy` `<u2` holding the
    /// bit patterns (numpy has no bfloat16; `torch.from_numpy(a.view("<i2")).view(torch.bfloat16)`).
    Bf16,
}

impl FloatDtype {
    /// `float16` | `f16` | `bfloat16` | `bf16` (the CLI's `--dtype`).
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "float16" | "f16" => Ok(Self::F16),
            "bfloat16" | "bf16" => Ok(Self::Bf16),
            other => Err(Error::setting("dtype", other, "is not float16 or bfloat16")),
        }
    }

    /// Its name in manifests: `float16`, `bfloat16`.
    pub fn name(self) -> &'static str {
        match self {
            Self::F16 => "float16",
            Self::Bf16 => "bfloat16",
        }
    }

    /// The `.npy` descr of its arrays.
    pub fn npy_descr(self) -> &'static str {
        match self {
            Self::F16 => "<f2",
            Self::Bf16 => "<u2",
        }
    }

    /// Little-endian bytes of `values` in this type (round to nearest even).
    pub fn le_bytes(self, values: &[f32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(values.len() * 2);
        for &v in values {
            out.extend_from_slice(&match self {
                Self::F16 => half::f16::from_f32(v).to_le_bytes(),
                Self::Bf16 => half::bf16::from_f32(v).to_le_bytes(),
            });
        }
        out
    }

    /// The values of little-endian `bytes` of this type, widened to f32 (exactly).
    pub fn widen(self, bytes: &[u8]) -> Vec<f32> {
        bytes
            .chunks_exact(2)
            .map(|c| match self {
                Self::F16 => half::f16::from_le_bytes([c[0], c[1]]).to_f32(),
                Self::Bf16 => half::bf16::from_le_bytes([c[0], c[1]]).to_f32(),
            })
            .collect()
    }

    /// The storage type a manifest names (`float16` where it names none).
    pub fn of_manifest(name: &str) -> Option<Self> {
        match name {
            "" | "float16" => Some(Self::F16),
            "bfloat16" => Some(Self::Bf16),
            _ => None,
        }
    }
}

/// What a shard holds per sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardKind {
    /// Codebook tokens of a codebook of `n_codes` entries.
    Tokens { n_codes: usize },
    /// A continuous-latent tokenizer's float arrays ([`crate::latents`]), stored as `dtype`.
    Latents { dtype: FloatDtype },
    /// A vision tower's (tokens, dim) embeddings ([`crate::latents`]: `KEY.features.npy`, a
    /// `features` column), stored as `dtype`.
    Features { dtype: FloatDtype },
}

impl ShardKind {
    /// The storage type of a float shard; `None` for tokens.
    pub fn dtype(self) -> Option<FloatDtype> {
        match self {
            Self::Tokens { .. } => None,
            Self::Latents { dtype } | Self::Features { dtype } => Some(dtype),
        }
    }

    /// The kind with its floats stored as `dtype` (tokens unchanged).
    pub fn with_dtype(self, dtype: FloatDtype) -> Self {
        match self {
            Self::Tokens { .. } => self,
            Self::Latents { .. } => Self::Latents { dtype },
            Self::Features { .. } => Self::Features { dtype },
        }
    }

    /// The tar member extension and Parquet column of a float shard's arrays.
    pub fn float_member(self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Tokens { .. } => None,
            Self::Latents { .. } => Some((LATENT_MEMBER, "latent")),
            Self::Features { .. } => Some((FEATURES_MEMBER, "features")),
        }
    }
}
