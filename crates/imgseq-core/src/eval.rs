//! How lossy a tokenizer is, whatever its family: the one scoring — PSNR, SSIM and sharpness
//! on the 8-bit pictures scaled to [0, 1], codebook usage and perplexity — of `imgseq eval`,
//! `imgseq roundtrip`, the service's round trips and the training reports, over any
//! [`Tokenizer`].

use crate::image_io::{self, PixelRange};
use crate::input::InputSpec;
use crate::tokenizer::{check_batch_size, Tokenizer};
use crate::tokens::TokenGrid;
use crate::{metrics, Error, Result};
use candle_core::Device;
use image::RgbImage;
use serde::Serialize;
use std::path::PathBuf;

/// Reconstruction quality of a tokenizer over a set of images.
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub images: usize,
    pub size: u32,
    /// Mean PSNR (dB) and SSIM over the images, on the 8-bit pictures scaled to [0, 1].
    pub psnr: f64,
    pub ssim: f64,
    /// Mean sharpness ([`metrics::sharpness`]: the rebuilt picture's mean luma gradient over
    /// the original's) over the images that are not flat.
    pub sharpness: f64,
    /// Distinct codes used across the whole set, of `n_embed`, and their perplexity.
    pub codes_used: usize,
    pub n_embed: usize,
    pub usage_percent: f64,
    pub perplexity: f64,
    pub tokens_per_image: usize,
    pub per_image: Vec<ImageScore>,
}

/// PSNR and SSIM of one reconstruction.
#[derive(Debug, Clone, Serialize)]
pub struct ImageScore {
    pub path: PathBuf,
    pub psnr: f64,
    pub ssim: f64,
    /// `None` for a flat original.
    pub sharpness: Option<f64>,
}

impl ImageScore {
    /// Scores `recon` against `original` ([`score`], [`sharpness`]).
    pub fn new(path: &std::path::Path, original: &RgbImage, recon: &RgbImage) -> Result<Self> {
        let (psnr, ssim) = score(original, recon)?;
        Ok(Self {
            path: path.to_path_buf(),
            psnr,
            ssim,
            sharpness: sharpness(original, recon)?,
        })
    }
}

/// Means of PSNR (each capped at 100 dB: identical images give an infinite one), SSIM and
/// sharpness (over the images that have one; NaN when none has).
pub fn means(per_image: &[ImageScore]) -> (f64, f64, f64) {
    let n = per_image.len() as f64;
    let psnr = per_image.iter().map(|s| s.psnr.min(100.0)).sum::<f64>() / n;
    let ssim = per_image.iter().map(|s| s.ssim).sum::<f64>() / n;
    let sharp: Vec<f64> = per_image.iter().filter_map(|s| s.sharpness).collect();
    let sharpness = sharp.iter().sum::<f64>() / sharp.len() as f64;
    (psnr, ssim, sharpness)
}

/// [`metrics::sharpness`] of `recon` against `original` on the 8-bit pictures scaled to
/// [0, 1]; `None` for a flat original.
pub fn sharpness(original: &RgbImage, recon: &RgbImage) -> Result<Option<f64>> {
    let unit = |i: &RgbImage| image_io::to_tensor_chw(i, PixelRange::ZeroOne, &Device::Cpu);
    let (a, b) = (unit(original)?, unit(recon)?);
    let (c, h, w) = a.dims3()?;
    let flat = |t: candle_core::Tensor| t.flatten_all()?.to_vec1::<f32>();
    metrics::sharpness(&flat(a)?, &flat(b)?, (c, h, w))
}

/// (PSNR dB, SSIM) of `recon` against `original`, on the 8-bit pictures (what is saved)
/// scaled to [0, 1] ([`metrics::score_pictures`]).
pub fn score(original: &RgbImage, recon: &RgbImage) -> Result<(f64, f64)> {
    metrics::score_pictures(original, recon)
}

/// `tok` as a coder of [`score_files`]: pictures → their tokens and the pictures decoded
/// from them.
fn through<T: Tokenizer + ?Sized>(
    tok: &T,
) -> impl FnMut(&[RgbImage]) -> Result<(TokenGrid, Vec<RgbImage>)> + '_ {
    move |imgs| {
        let tokens = tok.encode_pictures(imgs)?.into_tokens()?;
        let recons = tok.decode_admitted(&tokens)?;
        Ok((tokens, recons))
    }
}

/// [`evaluate`] with any discrete tokenizer that decodes (Open-MAGVIT2, ...): every image
/// brought to `tok`'s input, encoded, decoded and scored, `batch` images at a time.
pub fn evaluate_files<T: Tokenizer + ?Sized>(
    tok: &T,
    paths: &[PathBuf],
    upscale: bool,
    batch: usize,
    progress: bool,
) -> Result<EvalReport> {
    if paths.is_empty() {
        return Err(Error::invalid("eval: no images"));
    }
    check_batch_size(batch)?;
    let Some(n_embed) = tok.codebook_size() else {
        return Err(Error::invalid(format!(
            "eval scores codebook tokens; a {} gives continuous embeddings",
            tok.label()
        )));
    };
    tok.check_batch(batch.min(paths.len()))?;
    let coder = through(tok);
    score_files(
        &tok.input(),
        paths,
        upscale,
        batch,
        progress,
        n_embed,
        coder,
    )
}

/// The scoring loop of [`evaluate_files`] (and of a family's own evaluation): every file
/// brought to `spec`'s input (headers checked first), `batch` at a time through `coder`
/// (pictures → tokens and reconstructions), each picture scored, the codebook usage over the
/// set.
pub fn score_files(
    spec: &InputSpec,
    paths: &[PathBuf],
    upscale: bool,
    batch: usize,
    progress: bool,
    n_embed: usize,
    coder: impl FnMut(&[RgbImage]) -> Result<(TokenGrid, Vec<RgbImage>)>,
) -> Result<EvalReport> {
    spec.check_headers(paths, upscale)?;
    let batches = paths
        .chunks(batch)
        .map(|chunk| Ok((chunk.to_vec(), spec.load_all(chunk, upscale)?)));
    let scored = score_batches(
        batches,
        paths.len(),
        spec.size,
        progress,
        n_embed,
        coder,
        false,
    )?;
    Ok(scored.0)
}

/// The one loop under [`score_files`] and [`evaluate_pictures`]: each batch of named pictures
/// through `coder`, every reconstruction scored against its picture, the tokens' codebook
/// usage over the set; the reconstructions kept when `keep`.
fn score_batches(
    batches: impl Iterator<Item = Result<(Vec<PathBuf>, Vec<RgbImage>)>>,
    total: usize,
    size: u32,
    progress: bool,
    n_embed: usize,
    mut coder: impl FnMut(&[RgbImage]) -> Result<(TokenGrid, Vec<RgbImage>)>,
    keep: bool,
) -> Result<(EvalReport, Vec<RgbImage>)> {
    let pb = if progress {
        crate::progress::items(total, "eval")
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut all_idx: Vec<i64> = Vec::new();
    let mut per_image = Vec::with_capacity(total);
    let mut kept = Vec::new();
    let mut tokens_per_image = 0;
    for b in batches {
        let (names, imgs) = b?;
        let (tokens, recons) = coder(&imgs)?;
        tokens_per_image = tokens.h * tokens.w;
        all_idx.extend(tokens.data);
        for ((p, img), r) in names.iter().zip(&imgs).zip(&recons) {
            per_image.push(ImageScore::new(p, img, r)?);
        }
        if keep {
            kept.extend(recons);
        }
        pb.inc(imgs.len() as u64);
    }
    pb.finish_and_clear();
    let (used, perplexity) = metrics::codebook_usage(&all_idx, n_embed)?;
    let (psnr, ssim, sharpness) = means(&per_image);
    let report = EvalReport {
        images: per_image.len(),
        size,
        psnr,
        ssim,
        sharpness,
        codes_used: used,
        n_embed,
        usage_percent: 100.0 * used as f64 / n_embed as f64,
        perplexity,
        tokens_per_image,
        per_image,
    };
    Ok((report, kept))
}

/// [`evaluate_files`] for pictures already at the tokenizer's input size (`names[i]` names
/// `imgs[i]` in the report; a gray tokenizer reads their luma and is scored against it), also
/// giving back the reconstructions (gray ones with r = g = b), in order.
pub fn evaluate_pictures<T: Tokenizer + ?Sized>(
    tok: &T,
    names: &[PathBuf],
    imgs: &[RgbImage],
    batch: usize,
    progress: bool,
) -> Result<(EvalReport, Vec<RgbImage>)> {
    if imgs.is_empty() || names.len() != imgs.len() {
        return Err(Error::invalid(format!(
            "eval: {} images with {} names",
            imgs.len(),
            names.len()
        )));
    }
    check_batch_size(batch)?;
    let spec = tok.input();
    let Some(n_embed) = tok.codebook_size() else {
        return Err(Error::invalid(format!(
            "eval scores codebook tokens; a {} gives continuous values",
            tok.label()
        )));
    };
    if let Some(i) = imgs
        .iter()
        .find(|i| i.dimensions() != (spec.size, spec.size))
    {
        return Err(Error::invalid(format!(
            "eval: a {}x{} picture; the tokenizer reads {s}x{s}",
            i.width(),
            i.height(),
            s = spec.size
        )));
    }
    tok.check_batch(batch.min(imgs.len()))?;
    let batches = imgs
        .chunks(batch)
        .zip(names.chunks(batch))
        .map(|(chunk, chunk_names)| {
            let chunk: Vec<RgbImage> = chunk.iter().map(|i| spec.channels_of(i.clone())).collect();
            Ok((chunk_names.to_vec(), chunk))
        });
    let coder = through(tok);
    score_batches(
        batches,
        imgs.len(),
        spec.size,
        progress,
        n_embed,
        coder,
        true,
    )
}
