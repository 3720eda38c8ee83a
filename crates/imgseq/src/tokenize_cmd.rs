//! `imgseq vq tokenize | merge-manifests | detokenize | stats`: whole datasets as token shards.

use crate::vq_model_args::{save_picture, ModelArgs, Preprocess};
use anyhow::{bail, Result};
use clap::Args;
use image::{Rgb, RgbImage};
use imgseq_core::fsutil::Outputs;
use imgseq_core::image_io;
use imgseq_core::tokenizer::Tokenizer;
use imgseq_shards::job::{self, Options};
use imgseq_shards::manifest::{self, TokenizerInfo, MANIFEST};
use imgseq_shards::shard::FloatDtype;
use imgseq_shards::{ShardFormat, SourceOptions};
use std::path::{Path, PathBuf};

/// The dataset job's flags, shared by `vq tokenize` and `vae tokenize`.
#[derive(Args)]
pub struct JobArgs {
    /// Images per forward pass (batches are formed across files and shards).
    #[arg(long, default_value_t = 8)]
    batch_size: usize,
    /// Samples per output shard.
    #[arg(long, default_value_t = 10_000)]
    shard_size: usize,
    /// Centre small images on a zero --size canvas instead of resizing (default for IDX).
    #[arg(long)]
    pad: bool,
    /// Shard format: WebDataset tars or Parquet (docs/formats.md).
    #[arg(long, default_value = "wds", value_parser = ["wds", "parquet"])]
    format: String,
    /// How latent and feature shards store their floats: float16, or bfloat16 (float32's
    /// range, 8 significant bits; docs/formats.md). Token shards take no --dtype.
    #[arg(long, default_value = "float16", value_parser = ["float16", "bfloat16"])]
    dtype: String,
    /// The image column of Parquet sources (default: found by itself).
    #[arg(long, value_name = "NAME")]
    image_column: Option<String>,
    /// Job arrays: the number of processes that share the work (Slurm/Kubernetes array size).
    #[arg(long, default_value_t = 1)]
    num_shards: usize,
    /// Job arrays: this process's index, 0 ≤ I < --num-shards (e.g. $SLURM_ARRAY_TASK_ID).
    #[arg(long, default_value_t = 0)]
    shard_index: usize,
    /// Output folder (created; an interrupted run in it is resumed).
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
}

impl JobArgs {
    /// Whether small images are padded: `--pad`, or an IDX source among `sources`.
    pub fn pad(&self, sources: &[PathBuf]) -> bool {
        self.pad
            || sources
                .iter()
                .any(|s| imgseq_core::data::idx::is_idx_images_name(s))
    }

    /// The job's options (`--batch-size` checked).
    pub fn options(&self, upscale: bool, pad: bool) -> Result<Options> {
        if self.batch_size == 0 {
            bail!("--batch-size 0 must be positive");
        }
        Ok(Options {
            upscale,
            pad,
            batch: self.batch_size,
            shard_size: self.shard_size,
            num_jobs: self.num_shards,
            job_index: self.shard_index,
            progress: true,
            format: ShardFormat::parse(&self.format)?,
            sources: SourceOptions {
                image_column: self.image_column.clone(),
            },
            dtype: FloatDtype::parse(&self.dtype)?,
        })
    }
}

/// Prints what a run did; a run that read no image at all fails.
pub fn report(r: &job::Report, each: &str) -> Result<()> {
    println!(
        "shards: {} ({} written now, {} already finished)",
        r.shards, r.written, r.skipped
    );
    println!(
        "samples: {} tokenized, {} skipped (see errors.jsonl); {each}",
        r.samples, r.errors
    );
    println!(
        "encoded {} images at {:.1} images/s",
        r.encoded, r.images_per_s
    );
    println!("wrote {}", r.manifest.display());
    if r.samples == 0 && r.shards > 0 {
        bail!("no image could be read: every sample was skipped (see errors.jsonl)");
    }
    Ok(())
}

#[derive(Args)]
pub struct TokenizeArgs {
    /// Image folders, .txt lists, WebDataset .tar, Parquet or IDX files (docs/tokenize-a-dataset.md).
    #[arg(required = true)]
    sources: Vec<PathBuf>,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    pre: Preprocess,
    #[command(flatten)]
    job: JobArgs,
}

/// `tokenize` with any tokenizer the loader opens: its description (family, config, crop,
/// precision, weights hash; a VAE's latent block; a tower's layer choice) is the manifest's
/// account of the tokens — token shards, latent shards of a VAE (as `vae tokenize` writes
/// them), or feature shards of an embeddings model.
pub fn tokenize(a: &TokenizeArgs) -> Result<()> {
    let t = a.model.open(a.pre.size, &mut Outputs::default())?;
    let o = a.job.options(a.pre.upscale, a.job.pad(&a.sources))?;
    // The forward pass of a batch, estimated before any image is read.
    t.check_batch(o.batch)?;
    let info = TokenizerInfo::from_description(&t.describe_with_weights()?, a.pre.upscale, o.pad)?;
    let r = job::tokenize(&t, &info, &a.sources, &a.job.output, &o)?;
    let each = match (&info.latent, &info.features) {
        (Some(l), _) => format!("{} {:?} each", a.job.dtype, l.shape),
        (None, Some(f)) => format!("{} {:?} features each", a.job.dtype, f.shape),
        (None, None) => format!("{}x{} tokens each", info.grid[0], info.grid[1]),
    };
    report(&r, &each)
}

/// Checks and joins the manifests of a job array's jobs into OUT/manifest.json.
pub fn merge(dir: &Path) -> Result<()> {
    let m = manifest::merge(dir)?;
    println!(
        "merged {} shards: {} samples, {} skipped; wrote {}",
        m.shards.len(),
        m.samples,
        m.errors,
        dir.join(MANIFEST).display()
    );
    Ok(())
}

#[derive(Args)]
pub struct DetokenizeArgs {
    /// A token shard folder (with manifest.json).
    dir: PathBuf,
    #[command(flatten)]
    model: ModelArgs,
    /// Decode at most this many samples.
    #[arg(long)]
    limit: Option<usize>,
    /// Images per forward pass.
    #[arg(long, default_value_t = 4)]
    batch_size: usize,
    /// Read shards whose size or SHA-256 differs from the manifest's.
    #[arg(long)]
    no_verify: bool,
    /// Output folder: KEY.png per sample.
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
}

/// The PNG name of a sample's key (`a/b` → `a__b.png`), made unique among `taken` by `_2`,
/// `_3`, ... (keys `a/b` and `a__b`, or a shard holding a key twice).
fn png_name(key: &str, taken: &mut std::collections::HashSet<String>) -> String {
    let base = key.replace('/', "__");
    let mut name = format!("{base}.png");
    let mut n = 2;
    while !taken.insert(name.clone()) {
        name = format!("{base}_{n}.png");
        n += 1;
    }
    name
}

/// Decodes a shard folder into KEY.png files: every PNG through one [`Outputs`] (never over an
/// input; all removed, with the folder if made, when the command fails), names unique.
pub fn detokenize(a: &DetokenizeArgs) -> Result<()> {
    let m = job::read::read_manifest(&a.dir)?;
    if a.batch_size == 0 {
        bail!("--batch-size 0 must be positive");
    }
    let t = a.model.open(None, &mut Outputs::default())?;
    let gray = t.input().channels == 1;
    let limit = a.limit.unwrap_or(usize::MAX);
    let mut inputs: Vec<PathBuf> = vec![a.dir.join(MANIFEST)];
    inputs.extend(m.shard_paths(&a.dir));
    let mut outs = Outputs::new(inputs);
    outs.create_dir_all(&a.output)?;
    let mut taken = std::collections::HashSet::new();
    let decoded = job::detokenize(&t, &a.dir, limit, a.batch_size, !a.no_verify, |key, img| {
        let out = a.output.join(png_name(key, &mut taken));
        outs.write(&out, |p| save_picture(p, img, gray))
    })?;
    let wrote = outs.written().len();
    outs.finish();
    println!(
        "decoded {decoded} samples, wrote {wrote} images to {}",
        a.output.display()
    );
    Ok(())
}

#[derive(Args)]
pub struct StatsArgs {
    /// A token shard folder (with manifest.json).
    dir: PathBuf,
    /// Write the code-frequency plot (codes sorted by frequency, log scale) to this PNG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Read shards whose size or SHA-256 differs from the manifest's.
    #[arg(long)]
    no_verify: bool,
}

pub fn stats(a: &StatsArgs) -> Result<()> {
    // The plot may not replace the folder's own files (checked before the minutes of reading).
    let mut outs = Outputs::default();
    if let Some(p) = &a.plot {
        let m = job::read::read_manifest(&a.dir)?;
        outs.add_input(a.dir.join(MANIFEST));
        for s in m.shard_paths(&a.dir) {
            outs.add_input(s);
        }
        if let Ok(rd) = std::fs::read_dir(&a.dir) {
            for e in rd.flatten() {
                outs.add_input(e.path());
            }
        }
        outs.check(p)?;
    }
    let (m, job::CodeStats { samples, counts }) = job::stats(&a.dir, !a.no_verify)?;
    let n = counts.len();
    let (used, ppl) = imgseq_core::codes::usage_from_counts(&counts);
    let total: u64 = counts.iter().sum();
    println!(
        "samples: {samples} in {} shards; tokens: {total}",
        m.shards.len()
    );
    println!(
        "codebook usage: {used} of {n} codes ({:.1}%), perplexity {ppl:.1} (max {n})",
        100.0 * used as f64 / n as f64
    );
    let mut sorted = counts.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let top: u64 = sorted.iter().take(n.div_ceil(10)).sum();
    println!(
        "the most frequent 10% of codes carry {:.1}% of the tokens",
        100.0 * top as f64 / total.max(1) as f64
    );
    if let Some(p) = &a.plot {
        outs.write(p, |p| image_io::save_png(p, &frequency_plot(&sorted)))?;
        println!("wrote {}", p.display());
    }
    outs.finish();
    Ok(())
}

/// Bars of the sorted code counts on a log scale: a flat profile is a healthy codebook.
fn frequency_plot(sorted: &[u64]) -> RgbImage {
    let (w, h, pad) = (800u32, 300u32, 20u32);
    let mut img = RgbImage::from_pixel(w, h, Rgb([255, 255, 255]));
    let max = (sorted.first().copied().unwrap_or(1).max(1) as f64).ln_1p();
    let n = sorted.len().max(1);
    for x in 0..(w - 2 * pad) {
        let i = x as usize * n / (w - 2 * pad) as usize;
        let v = (sorted.get(i).copied().unwrap_or(0) as f64).ln_1p() / max;
        let bar = (v * (h - 2 * pad) as f64).round() as u32;
        for y in 0..bar {
            img.put_pixel(pad + x, h - pad - 1 - y, Rgb([40, 90, 170]));
        }
    }
    for x in pad..w - pad {
        img.put_pixel(x, h - pad, Rgb([0, 0, 0]));
    }
    for y in pad..=h - pad {
        img.put_pixel(pad - 1, y, Rgb([0, 0, 0]));
    }
    img
}
