//! `manifest.json`: what a token shard set is — the tokenizer that made it, every finished
//! shard with its sample count and SHA-256, and totals. A job of a job array writes
//! `manifest-I-of-N.json`; [`merge`] checks the `N` parts against each other and joins them.

use crate::kind::{FloatDtype, ShardKind};
use imgseq_core::fsutil::{read_json, write_json};
use imgseq_core::tokenizer::{Description, LatentSpec, OutputKind, Preprocessing, WeightsRef};
use imgseq_core::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The name of shard `s`.
pub fn shard_name(s: usize) -> String {
    format!("shard-{s:06}.tar")
}

/// The record written beside shard `s` (`shard-000012.json`).
pub fn record_name(s: usize) -> String {
    format!("shard-{s:06}.json")
}

/// The skipped samples of shard `s` (`shard-000012.errors.jsonl`).
pub fn errors_name(s: usize) -> String {
    format!("shard-{s:06}.errors.jsonl")
}

/// The manifest a job of a job array writes.
pub fn job_manifest_name(job: usize, jobs: usize) -> String {
    format!("manifest-{job:04}-of-{jobs:04}.json")
}

pub const MANIFEST: &str = "manifest.json";
pub const FORMAT: &str = "imgseq-tokens/1";
/// The format of a latent shard set ([`crate::latents`]).
pub const LATENT_FORMAT: &str = "imgseq-latents/1";
/// The format of a feature shard set: a vision tower's (tokens, dim) embeddings per sample
/// ([`crate::latents`]).
pub const FEATURE_FORMAT: &str = "imgseq-features/1";

/// How the features of a feature shard set were chosen and are stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureInfo {
    /// `float16` or `bfloat16`.
    pub dtype: String,
    /// Every sample's array shape (tokens, dim).
    pub shape: Vec<usize>,
    /// Which of the model's outputs (`last_hidden_state`, `hidden_states[-2]`,
    /// `pooler_output`), as its description names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Whether the tokens in front of the patches (class token, registers) were dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patches_only: Option<bool>,
}

impl FeatureInfo {
    /// What an embeddings model's description says of its outputs (the layer choice as its
    /// config records it), stored as float16.
    pub fn from_description(d: &Description) -> Self {
        Self {
            dtype: "float16".into(),
            shape: d.output.shape.clone(),
            output: d
                .config
                .get("output")
                .and_then(Value::as_str)
                .map(str::to_string),
            patches_only: d.config.get("patches_only").and_then(Value::as_bool),
        }
    }
}

/// How the latents of a latent shard set were made and are stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatentInfo {
    /// The released configuration named (`sd`, `sdxl`, `sd3`, `flux`), if one was.
    pub preset: Option<String>,
    /// latent = (mean − shift_factor) · scaling_factor, as the diffusion pipelines feed their
    /// transformer; decode with z / scaling_factor + shift_factor.
    pub scaling_factor: f64,
    pub shift_factor: f64,
    /// Patch side p of (N, p²·C) patch tokens in DiT/FLUX order; `None`: the (C, h, w) map.
    pub patch: Option<usize>,
    /// `float16`.
    pub dtype: String,
    /// Every sample's array shape.
    pub shape: Vec<usize>,
    /// `mean` (the posterior's mean) or `sample SEED`.
    pub draw: String,
}

impl LatentInfo {
    /// A latent tokenizer's account of its values (`d`: its description, for the shape and
    /// the draw), stored as float16.
    pub fn from_spec(l: &LatentSpec, d: &Description) -> Self {
        Self {
            preset: l.preset.clone(),
            scaling_factor: l.scaling_factor,
            shift_factor: l.shift_factor,
            patch: l.patch,
            dtype: "float16".into(),
            shape: d.output.shape.clone(),
            draw: d.draw.clone().unwrap_or_else(|| "mean".into()),
        }
    }
}

/// The tokenizer and preprocessing that made the tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenizerInfo {
    /// Architecture family (`taming`).
    pub family: String,
    pub weights: String,
    pub weights_sha256: String,
    /// The model config (our `config.json` form).
    pub config: Value,
    pub n_codes: usize,
    /// Input side in pixels and the token grid (h, w) it gives.
    pub size: u32,
    pub grid: [usize; 2],
    pub crop: String,
    pub upscale: bool,
    pub precision: String,
    /// Set for a latent shard set (format [`LATENT_FORMAT`]; `n_codes` is 0 there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latent: Option<LatentInfo>,
    /// Set for a feature shard set (format [`FEATURE_FORMAT`]; `n_codes` is 0 and `grid` is
    /// (tokens, dim) there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<FeatureInfo>,
    /// Multi-scale codes (VAR): each scale's side, smallest first; a sample's `grid` is then
    /// (1, Σ side²), the scales one after another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scales: Option<Vec<usize>>,
}

/// The manifest's account of the resize and crop `p` names (`pad`: small images centred on a
/// zero canvas instead, as the job's `--pad` does).
pub fn crop_text(pad: bool, p: &Preprocessing) -> String {
    format!(
        "{}{}{}; {}{}",
        if imgseq_core::pillow::exif_transpose() {
            "turned upright by EXIF orientation; "
        } else {
            ""
        },
        if pad {
            "images no larger than size centred on a zero size x size canvas; others: "
        } else {
            ""
        },
        p.crop.describe(),
        if p.channels == 1 {
            "ITU-R 601 luma; "
        } else {
            ""
        },
        p.range.describe()
    )
}

impl TokenizerInfo {
    /// What a tokenizer's [`Description`] says, as a shard manifest records it (the loader's
    /// weights source and hash; `upscale` and `pad`: the job's own options): a discrete
    /// tokenizer's token grid, a latent tokenizer's latents, an embeddings model's (tokens,
    /// dim) features.
    pub fn from_description(d: &Description, upscale: bool, pad: bool) -> Result<Self> {
        let (mut latent, mut features) = (None, None);
        let (n_codes, grid) = match (d.output.codebook_size, &d.output.shape[..], &d.latent) {
            (Some(n), &[h, w], _) => (n, [h, w]),
            (None, _, Some(l)) => {
                latent = Some(LatentInfo::from_spec(l, d));
                (0, l.grid)
            }
            (None, &[tokens, dim], None) if d.output.kind == OutputKind::Embeddings => {
                features = Some(FeatureInfo::from_description(d));
                (0, [tokens, dim])
            }
            _ => {
                return Err(Error::invalid(format!(
                    "shards hold a grid of codebook tokens, a latent tokenizer's latents or \
                     (tokens, dim) embeddings; a {} gives {:?} of shape {:?}",
                    d.label, d.output.kind, d.output.shape
                )))
            }
        };
        let w_ref = d.weights.clone().unwrap_or_else(|| WeightsRef {
            source: String::new(),
            sha256: String::new(),
        });
        Ok(Self {
            family: d.family.clone(),
            weights: w_ref.source,
            weights_sha256: w_ref.sha256,
            config: d.config.clone(),
            n_codes,
            size: d.input.size,
            grid,
            crop: crop_text(pad, &d.input),
            upscale,
            precision: d.precision.clone(),
            latent,
            features,
            scales: d.output.scales.clone(),
        })
    }
}

/// One finished shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRecord {
    pub index: usize,
    pub name: String,
    /// Samples written, and samples of its range skipped (listed in its errors file).
    pub samples: usize,
    pub errors: usize,
    /// Source-index range it covers.
    pub first: usize,
    pub end: usize,
    pub bytes: u64,
    pub sha256: String,
}

/// A job of a job array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub index: usize,
    pub count: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub tokenizer: TokenizerInfo,
    /// The sources as given, and how many samples their index has.
    pub inputs: Vec<String>,
    pub input_samples: usize,
    pub shard_size: usize,
    /// Shards of the whole set (all jobs).
    pub num_shards: usize,
    /// Set in a job's part; absent in a whole (or merged) manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<Job>,
    pub shards: Vec<ShardRecord>,
    pub samples: usize,
    pub errors: usize,
}

/// Largest codebook a manifest may name: tokens are stored as 32-bit integers.
pub const MAX_CODES: usize = 1 << 31;

/// Whether `name` is a plain file name in the folder (no folder part, not `.` or `..`): names
/// read from a manifest or a shard record never point outside the folder.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

impl ShardRecord {
    /// Checks the shard file in `dir` against this record: its size and SHA-256 (a shard
    /// edited, truncated or swapped since it was written is refused).
    pub fn verify(&self, dir: &Path) -> Result<()> {
        let p = dir.join(&self.name);
        let (_, len) = imgseq_core::fsutil::open_regular_file(&p)?;
        if len != self.bytes {
            return Err(Error::format(
                &p,
                format!(
                    "{len} bytes, the manifest says {} (the shard changed since it was written)",
                    self.bytes
                ),
            ));
        }
        let sha = crate::wds::sha256_file(&p)?;
        if sha != self.sha256 {
            return Err(Error::format(
                &p,
                "its SHA-256 differs from the manifest's (the shard changed since it was \
                 written)",
            ));
        }
        Ok(())
    }
}

impl Manifest {
    /// Reads and checks the manifest of a token shard set: its format, a codebook of at most
    /// [`MAX_CODES`] entries, a positive grid whose tokens fit memory, and plain shard names.
    pub fn read(path: &Path) -> Result<Self> {
        let m = Self::read_any(path)?;
        if m.format == LATENT_FORMAT {
            return Err(Error::format(
                path,
                "holds latent shards (float arrays of a VAE), not codebook tokens",
            ));
        }
        if m.format == FEATURE_FORMAT {
            return Err(Error::format(
                path,
                "holds feature shards (a vision tower's embeddings), not codebook tokens",
            ));
        }
        Ok(m)
    }

    /// Reads and checks the manifest of a feature shard set ([`FEATURE_FORMAT`]).
    pub fn read_features(path: &Path) -> Result<Self> {
        let m = Self::read_any(path)?;
        if m.format != FEATURE_FORMAT {
            return Err(Error::format(
                path,
                format!("format {:?}: not a feature shard set", m.format),
            ));
        }
        Ok(m)
    }

    /// What the set's shards hold per sample, with a float set's storage type.
    pub fn kind(&self) -> ShardKind {
        let dtype = |name: &str| FloatDtype::of_manifest(name).unwrap_or_default();
        match (&self.tokenizer.latent, &self.tokenizer.features) {
            (Some(l), _) => ShardKind::Latents {
                dtype: dtype(&l.dtype),
            },
            (None, Some(f)) => ShardKind::Features {
                dtype: dtype(&f.dtype),
            },
            (None, None) => ShardKind::Tokens {
                n_codes: self.tokenizer.n_codes,
            },
        }
    }

    /// Reads and checks the manifest of a latent shard set ([`LATENT_FORMAT`]).
    pub fn read_latents(path: &Path) -> Result<Self> {
        let m = Self::read_any(path)?;
        if m.format != LATENT_FORMAT {
            return Err(Error::format(
                path,
                format!("format {:?}: not a latent shard set", m.format),
            ));
        }
        Ok(m)
    }

    /// Whether the set holds latents.
    pub fn is_latent(&self) -> bool {
        self.format == LATENT_FORMAT
    }

    /// Whether the set holds float arrays (latents or features), not tokens.
    pub fn is_float(&self) -> bool {
        self.format == LATENT_FORMAT || self.format == FEATURE_FORMAT
    }

    /// [`Manifest::read`] for either kind of set (tokens or latents).
    pub fn read_any(path: &Path) -> Result<Self> {
        let m: Manifest = read_json(path, "manifest")?;
        let t = &m.tokenizer;
        let float = match (m.format.as_str(), &t.latent, &t.features) {
            (FORMAT, None, None) => None,
            (LATENT_FORMAT, Some(l), None) => Some((&l.shape, &l.dtype)),
            (FEATURE_FORMAT, None, Some(f)) => Some((&f.shape, &f.dtype)),
            (f, _, _) => {
                return Err(Error::format(
                    path,
                    format!("format {f:?}, expected {FORMAT:?} (or {LATENT_FORMAT:?} with its latent settings, {FEATURE_FORMAT:?} with its feature settings)"),
                ))
            }
        };
        if let Some((shape, dtype)) = float {
            let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            if shape.is_empty() || n.is_none_or(|n| n == 0 || n > crate::latents::MAX_LATENT_VALUES)
            {
                return Err(Error::format(
                    path,
                    format!(
                        "an array of shape {shape:?} (non-empty, at most {} values)",
                        crate::latents::MAX_LATENT_VALUES
                    ),
                ));
            }
            if FloatDtype::of_manifest(dtype).is_none() {
                return Err(Error::format(
                    path,
                    format!("dtype {dtype:?}, expected \"float16\" or \"bfloat16\""),
                ));
            }
        }
        // A float set has no codebook.
        if !m.is_float() && (t.n_codes == 0 || t.n_codes > MAX_CODES) {
            return Err(Error::format(
                path,
                format!("n_codes {} is not between 1 and {MAX_CODES}", t.n_codes),
            ));
        }
        let [h, w] = t.grid;
        if h == 0
            || w == 0
            || h.checked_mul(w)
                .is_none_or(|n| n > crate::shard::MAX_GRID_TOKENS)
        {
            return Err(Error::format(
                path,
                format!(
                    "a {h}x{w} token grid (at most {} tokens, none empty)",
                    crate::shard::MAX_GRID_TOKENS
                ),
            ));
        }
        if let Some(s) = m.shards.iter().find(|s| !is_plain_name(&s.name)) {
            return Err(Error::format(
                path,
                format!(
                    "shard {} is named {:?}, not a file of the folder",
                    s.index, s.name
                ),
            ));
        }
        if let Some(j) = m
            .job
            .filter(|j| j.count == 0 || j.count > crate::plan::MAX_JOBS)
        {
            return Err(Error::format(
                path,
                format!(
                    "a job array of {} jobs (1 to {})",
                    j.count,
                    crate::plan::MAX_JOBS
                ),
            ));
        }
        Ok(m)
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        write_json(path, self)
    }

    /// Totals from the shard records.
    pub fn recount(&mut self) {
        self.shards.sort_by_key(|s| s.index);
        self.samples = self.shards.iter().map(|s| s.samples).sum();
        self.errors = self.shards.iter().map(|s| s.errors).sum();
    }

    /// The paths of the shard files, in order.
    pub fn shard_paths(&self, dir: &Path) -> Vec<PathBuf> {
        self.shards.iter().map(|s| dir.join(&s.name)).collect()
    }
}

/// Joins the `N` job manifests in `dir` into `manifest.json`: they must agree on tokenizer,
/// inputs and shard size, and together hold every shard exactly once, with each shard file
/// present and of the recorded size.
pub fn merge(dir: &Path) -> Result<Manifest> {
    let mut parts: Vec<(PathBuf, Manifest)> = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut names: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("manifest-") && n.ends_with(".json"))
        })
        .collect();
    names.sort();
    for p in names {
        let m = Manifest::read_any(&p)?;
        parts.push((p, m));
    }
    let Some((first_path, first)) = parts.first().cloned() else {
        return Err(Error::format(
            dir,
            "no job manifests (manifest-I-of-N.json) to merge",
        ));
    };
    let count = first.job.map_or(1, |j| j.count);
    let mut seen_jobs = vec![false; count];
    let mut out = first.clone();
    out.job = None;
    out.shards.clear();
    for (p, m) in &parts {
        let same = m.format == first.format
            && m.tokenizer == first.tokenizer
            && m.inputs == first.inputs
            && m.input_samples == first.input_samples
            && m.shard_size == first.shard_size
            && m.num_shards == first.num_shards;
        if !same {
            return Err(Error::format(
                p,
                format!(
                    "does not match {} (tokenizer, inputs or shard size differ)",
                    first_path.display()
                ),
            ));
        }
        let Some(j) = m.job.filter(|j| j.count == count && j.index < count) else {
            return Err(Error::format(
                p,
                format!("not a part of a {count}-job array"),
            ));
        };
        if std::mem::replace(&mut seen_jobs[j.index], true) {
            return Err(Error::format(p, format!("job {} appears twice", j.index)));
        }
        out.shards.extend(m.shards.iter().cloned());
    }
    if let Some(missing) = seen_jobs.iter().position(|s| !s) {
        return Err(Error::format(
            dir,
            format!("job {missing} of {count} has no manifest yet (still running or not started)"),
        ));
    }
    out.recount();
    // Checked against the shards the parts list, never against the count they claim (a part
    // claiming 10^12 shards must not make a list of them).
    if let Some((i, s)) = out.shards.iter().enumerate().find(|(i, s)| s.index != *i) {
        return Err(Error::format(
            dir,
            format!(
                "the job manifests do not hold shard {i} exactly once (shard {} is in its place)",
                s.index
            ),
        ));
    }
    if out.shards.len() != out.num_shards {
        return Err(Error::format(
            dir,
            format!(
                "the job manifests hold {} shards, expected {}",
                out.shards.len(),
                out.num_shards
            ),
        ));
    }
    for s in &out.shards {
        let p = dir.join(&s.name);
        let len = std::fs::metadata(&p).map_err(|e| Error::io(&p, e))?.len();
        if len != s.bytes {
            return Err(Error::format(
                &p,
                format!("{len} bytes, the manifest says {}", s.bytes),
            ));
        }
    }
    out.write(&dir.join(MANIFEST))?;
    Ok(out)
}
