//! The two token shard formats behind one writer and one reader: WebDataset `.tar`
//! ([`crate::wds`]) and Parquet ([`crate::parquet_out`]). A shard's format is told by its name.

use crate::latents::LatentParquetWriter;
use crate::parquet_out;
use crate::wds::{self, Finished, TokenSample};
use imgseq_core::{Error, Result};
use serde_json::Value;
use std::path::Path;

/// How token shards are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ShardFormat {
    /// WebDataset `.tar`: `KEY.tokens.npy` + `KEY.json` per sample.
    #[default]
    Wds,
    /// Parquet: one row per image (key, tokens, height, width, source, metadata).
    Parquet,
}

impl ShardFormat {
    /// `wds` or `parquet` (the CLI's `--format`).
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "wds" => Ok(Self::Wds),
            "parquet" => Ok(Self::Parquet),
            other => Err(Error::setting("format", other, "is not wds or parquet")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Wds => "wds",
            Self::Parquet => "parquet",
        }
    }

    /// The shard file extension.
    pub fn ext(self) -> &'static str {
        match self {
            Self::Wds => "tar",
            Self::Parquet => "parquet",
        }
    }

    /// The name of shard `s` (`shard-000012.tar`, `shard-000012.parquet`).
    pub fn shard_name(self, s: usize) -> String {
        format!("shard-{s:06}.{}", self.ext())
    }

    /// The format of a shard file, by its extension (`.parquet`; anything else is a tar).
    pub fn of_path(p: &Path) -> Self {
        if p.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("parquet"))
        {
            Self::Parquet
        } else {
            Self::Wds
        }
    }
}

pub use crate::kind::{FloatDtype, ShardKind};

/// One sample's payload.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// An (h, w) token grid, raster order.
    Tokens {
        h: usize,
        w: usize,
        tokens: Vec<i64>,
    },
    /// A float array of `shape` (C order): a latent or a tower's features, stored as the
    /// shard's [`FloatDtype`].
    Latent { shape: Vec<usize>, values: Vec<f32> },
}

/// Writes one shard of either format and either kind; nothing is visible at its path until
/// [`TokenShardWriter::finish`].
pub enum TokenShardWriter {
    Wds {
        w: Box<wds::ShardWriter>,
        kind: ShardKind,
    },
    Parquet(Box<parquet_out::ShardWriter>),
    LatentParquet(Box<LatentParquetWriter>),
}

impl TokenShardWriter {
    /// A shard at `path` for the tokens of a codebook of `n_codes` entries.
    pub fn create(path: impl AsRef<Path>, format: ShardFormat, n_codes: usize) -> Result<Self> {
        Self::create_kind(path, format, ShardKind::Tokens { n_codes })
    }

    /// A shard at `path` holding `kind` payloads.
    pub fn create_kind(
        path: impl AsRef<Path>,
        format: ShardFormat,
        kind: ShardKind,
    ) -> Result<Self> {
        Ok(match (format, kind) {
            (ShardFormat::Wds, _) => Self::Wds {
                w: Box::new(wds::ShardWriter::create(path)?),
                kind,
            },
            (ShardFormat::Parquet, ShardKind::Tokens { n_codes }) => {
                Self::Parquet(Box::new(parquet_out::ShardWriter::create(path, n_codes)?))
            }
            (ShardFormat::Parquet, k) => {
                Self::LatentParquet(Box::new(LatentParquetWriter::create_kind(path, k)?))
            }
        })
    }

    /// Appends a sample: its (h, w) token grid (raster order) and JSON record.
    pub fn append(
        &mut self,
        key: &str,
        h: usize,
        w: usize,
        tokens: &[i64],
        json: &Value,
    ) -> Result<()> {
        match self {
            Self::Wds {
                w: wr,
                kind: ShardKind::Tokens { n_codes },
            } => wr.append(key, &wds::tokens_npy(h, w, tokens, *n_codes), json),
            Self::Parquet(wr) => wr.append(key, h, w, tokens, json),
            _ => Err(Error::invalid(format!(
                "{key}: a latent shard holds no tokens"
            ))),
        }
    }

    /// Appends a sample of either kind; it must be of the shard's kind.
    pub fn append_payload(&mut self, key: &str, p: &Payload, json: &Value) -> Result<()> {
        match (self, p) {
            (s, Payload::Tokens { h, w, tokens }) => s.append(key, *h, *w, tokens, json),
            (Self::Wds { w, kind }, Payload::Latent { shape, values }) => {
                let (Some((member, _)), Some(dtype)) = (kind.float_member(), kind.dtype()) else {
                    return Err(Error::invalid(format!(
                        "{key}: a token shard holds no latents or features"
                    )));
                };
                crate::latents::check_shape(key, shape, values.len()).map_err(Error::invalid)?;
                w.append_as(key, member, &wds::float_npy(shape, values, dtype), json)
            }
            (Self::LatentParquet(w), Payload::Latent { shape, values }) => {
                w.append(key, shape, values, json)
            }
            _ => Err(Error::invalid(format!(
                "{key}: a token shard holds no latents or features"
            ))),
        }
    }

    /// Closes, fsyncs and renames the shard into place.
    pub fn finish(self) -> Result<Finished> {
        match self {
            Self::Wds { w, .. } => w.finish(),
            Self::Parquet(w) => w.finish(),
            Self::LatentParquet(w) => w.finish(),
        }
    }
}

/// Every sample of a float16 latent shard of either format, in order.
pub fn read_latent_shard(path: &Path) -> Result<Vec<crate::latents::LatentSample>> {
    read_float_shard(
        path,
        ShardKind::Latents {
            dtype: FloatDtype::F16,
        },
    )
}

/// Every sample of a latent or feature shard (`kind`: which, and its storage type) of either
/// format, in order, widened to f32.
pub fn read_float_shard(path: &Path, kind: ShardKind) -> Result<Vec<crate::latents::LatentSample>> {
    match ShardFormat::of_path(path) {
        ShardFormat::Parquet => crate::latents::read_parquet_kind(path, kind),
        ShardFormat::Wds => crate::latents::read_tar_kind(path, kind),
    }
}

/// Samples in a finished shard of `kind` (the records a killed run lost are rebuilt from it).
pub fn count_samples(path: &Path, kind: ShardKind) -> Result<usize> {
    Ok(match kind {
        ShardKind::Tokens { .. } => read_shard(path)?.len(),
        ShardKind::Latents { .. } | ShardKind::Features { .. } => {
            read_float_shard(path, kind)?.len()
        }
    })
}

/// Most tokens of one sample's grid (a 2048×2048 grid).
pub const MAX_GRID_TOKENS: usize = 1 << 22;

/// Every sample of a token shard of either format, in order; each a non-empty grid of at most
/// [`MAX_GRID_TOKENS`] tokens holding h·w of them.
pub fn read_shard(path: &Path) -> Result<Vec<TokenSample>> {
    let mut out = Vec::new();
    for_each_sample(path, |s| {
        out.push(s);
        Ok(())
    })?;
    Ok(out)
}

/// [`read_shard`] one sample at a time: a `.tar` shard is read member by member (memory holds
/// one sample, whatever the shard's size); a Parquet shard is read whole, then handed over.
pub fn for_each_sample(path: &Path, mut f: impl FnMut(TokenSample) -> Result<()>) -> Result<()> {
    let mut checked = |s: TokenSample| {
        let n =
            s.h.checked_mul(s.w)
                .filter(|&n| n > 0 && n <= MAX_GRID_TOKENS);
        if n != Some(s.tokens.len()) {
            return Err(Error::format(
                path,
                format!(
                    "{} has a {}x{} token grid holding {} tokens (grids are non-empty, at most \
                     {MAX_GRID_TOKENS} tokens)",
                    s.key,
                    s.h,
                    s.w,
                    s.tokens.len()
                ),
            ));
        }
        f(s)
    };
    match ShardFormat::of_path(path) {
        ShardFormat::Parquet => parquet_out::read_shard(path)?
            .into_iter()
            .try_for_each(&mut checked),
        ShardFormat::Wds => wds::for_each_in_tar(path, checked),
    }
}
