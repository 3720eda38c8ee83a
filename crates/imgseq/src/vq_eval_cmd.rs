//! `imgseq vq eval`: how lossy a tokenizer is on a set of images (PSNR, SSIM, codebook
//! usage) and, with `--judge`, whether its reconstructions keep what a classifier sees: the
//! classifier's accuracy on the originals and on the reconstructions of labelled IDX images
//! (Fashion-MNIST's test set against the shipped ViT).

use crate::vq_model_args::{ModelArgs, Preprocess};
use anyhow::{bail, Result};
use clap::Args;
use image::RgbImage;
use imgseq_core::data::idx::load_idx_rgb_centered;
use imgseq_core::data::idx::{is_idx_images_name, read_idx_labels, sibling_labels};
use imgseq_core::eval;
use imgseq_core::tokenizer::Tokenizer;
use imgseq_models::Opened;
use imgseq_vit::judge::{Judge, ReconstructionFigures};
use std::path::{Path, PathBuf};

use crate::precision_arg::PrecisionArg;

#[derive(Args)]
pub struct EvalArgs {
    /// One image, an image folder, a .txt list of image paths, a WebDataset tar, a Parquet
    /// file, or an IDX image file.
    #[arg(required_unless_present = "merge")]
    data: Option<PathBuf>,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    pre: Preprocess,
    /// Images per forward pass.
    #[arg(long, default_value_t = 2)]
    batch_size: usize,
    /// Only the first N images.
    #[arg(long)]
    limit: Option<usize>,
    /// A ViT folder that classifies originals and reconstructions (labelled IDX data).
    #[arg(long)]
    judge: Option<PathBuf>,
    /// Print the report as JSON (with per-image scores) on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    bench: crate::eval_bench_cmd::BenchArgs,
}

pub fn eval(a: &EvalArgs) -> Result<()> {
    if a.limit == Some(0) {
        bail!("--limit 0: must be positive");
    }
    let limit = a.limit.unwrap_or(usize::MAX);
    let data = match (&a.data, &a.bench.merge) {
        (None, Some(dir)) => return crate::eval_bench_cmd::merge(dir, a.json),
        (Some(_), Some(_)) => bail!("--merge reads an evaluation folder only: give no data"),
        (Some(d), None) => d.as_path(),
        (None, None) => bail!("give the images to evaluate"),
    };
    if !is_idx_images_name(data) || a.bench.any() {
        if a.judge.is_some() {
            bail!(
                "--judge needs labelled images: give an IDX image file ({} is not one)",
                data.display()
            );
        }
        // Image files: any tokenizer the loader opens, through the evaluation job (corrupt
        // samples listed and skipped; a protocol, rFID, LPIPS, resuming and job arrays on
        // request).
        let protocol = imgseq_eval::protocol::Protocol::parse(&a.bench.protocol)?;
        let size = a.pre.size.or(protocol.size());
        let t = a
            .model
            .open(size, &mut imgseq_core::fsutil::Outputs::default())?;
        let (b, up) = (a.batch_size, a.pre.upscale);
        return crate::eval_bench_cmd::run(&a.bench, &t, data, limit, b, up, a.json);
    }
    // Labelled IDX images (and the judge): centred on the tokenizer's canvas.
    let t = a
        .model
        .open(a.pre.size, &mut imgseq_core::fsutil::Outputs::default())?;
    let size = t.input().size;
    let mut imgs = load_idx_rgb_centered(data, size as usize)?;
    let labels_path = sibling_labels(data)?;
    let mut labels = read_idx_labels(&labels_path)?;
    if labels.len() != imgs.len() {
        bail!(
            "{}: {} labels for the {} images of {}",
            labels_path.display(),
            labels.len(),
            imgs.len(),
            data.display()
        );
    }
    imgs.truncate(limit);
    labels.truncate(limit);
    let names: Vec<PathBuf> = (0..imgs.len())
        .map(|i| PathBuf::from(format!("{}:{i}", data.display())))
        .collect();
    let (r, recons) = eval::evaluate_pictures(&t, &names, &imgs, a.batch_size, true)?;
    let judged = match &a.judge {
        Some(j) => Some(judge(j, &imgs, &recons, &labels, &a.model.precision)?),
        None => None,
    };
    print_report(a.json, &r, &t, judged)
}

/// Prints the report of tokenizer `t` (as JSON with `json`) with its precision (its name,
/// and how it was chosen); `judged`: the classifier's scores.
fn print_report(
    json: bool,
    r: &eval::EvalReport,
    t: &Opened,
    judged: Option<ReconstructionFigures>,
) -> Result<()> {
    let precision_name = t.precision.as_ref().map_or("f32", |c| c.precision.name());
    let precision = t.precision.as_ref().map_or("f32".into(), |c| c.to_string());
    if json {
        let mut report = serde_json::to_value(r)?;
        report["precision"] = serde_json::json!(precision_name);
        if let Some(j) = &judged {
            report["judged"] = serde_json::to_value(j)?;
        }
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("model: {}", t.source.display());
    println!("precision: {precision}");
    // Thousands of IDX images: the per-image lines only for small sets.
    if r.per_image.len() <= 100 {
        for i in &r.per_image {
            let sharp = i.sharpness.map_or("-".into(), |s| format!("{s:.3}"));
            println!(
                "  {}: PSNR {:.2} dB, SSIM {:.4}, sharpness {sharp}",
                i.path.display(),
                i.psnr,
                i.ssim
            );
        }
    }
    println!("images: {} at {}x{}", r.images, r.size, r.size);
    println!("PSNR: {:.2} dB (mean)", r.psnr);
    println!("SSIM: {:.4} (mean)", r.ssim);
    println!(
        "sharpness: {:.3} (mean; rebuilt/original mean luma gradient, 1.0 = as sharp)",
        r.sharpness
    );
    println!(
        "codebook usage: {} of {} codes ({:.1}%), perplexity {:.1}, {} tokens per image",
        r.codes_used, r.n_embed, r.usage_percent, r.perplexity, r.tokens_per_image
    );
    if let Some(j) = judged {
        println!(
            "judge {}: accuracy {:.2}% on the originals, {:.2}% on the reconstructions \
             (gap {:+.2} points, {} images); Fréchet distance of the reconstructions' features \
             to the originals' {:.3}",
            j.judge.display(),
            100.0 * j.original_accuracy,
            100.0 * j.reconstruction_accuracy,
            100.0 * j.gap,
            j.images,
            j.fd_reconstructions
        );
    }
    Ok(())
}

/// The judge in `dir` (in the tokenizer's `--precision`) on the originals and on the
/// reconstructions (both gray pictures of the classifier's input size, r = g = b), scored
/// against `labels` (its label ids): [`imgseq_vit::judge`], as `gpt judge` does.
pub fn judge(
    dir: &Path,
    originals: &[RgbImage],
    recons: &[RgbImage],
    labels: &[u8],
    precision: &PrecisionArg,
) -> Result<ReconstructionFigures> {
    let mut j = Judge::load(dir)?;
    let choice = j.clf.choose_precision(precision.precision)?;
    if precision.verbose {
        eprintln!("judge precision: {choice}");
    }
    let (side, channels) = j.canvas();
    if channels != 1 {
        bail!(
            "--judge {}: a {channels}-channel classifier; the judge reads gray images",
            dir.display()
        );
    }
    if let Some(img) = originals.first() {
        if img.dimensions() != (side as u32, side as u32) {
            bail!(
                "--judge {}: the classifier reads {side}x{side} images, the tokenizer's are \
                 {}x{} (give --size {side})",
                dir.display(),
                img.width(),
                img.height()
            );
        }
    }
    let labels = labels.iter().map(|&l| l as u16).collect();
    let set = j.set_of(originals, labels, j.class_names())?;
    let scored = j.score(&set)?;
    Ok(j.reconstructions(&set, &scored, recons)?.0)
}
