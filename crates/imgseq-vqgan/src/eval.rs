//! How lossy the tokenizer is: the one scoring (PSNR, SSIM and sharpness on the 8-bit
//! pictures scaled to [0, 1], codebook usage) used by `vq eval`, `vq roundtrip` and the training reports.

use crate::inference::encode_decode;
use crate::model::VqModel;
use candle_core::Device;
use image::RgbImage;
use imgseq_core::image_io::{self, PixelRange};
use imgseq_core::input::InputSpec;
use imgseq_core::tokenizer::Tokenizer;
use imgseq_core::tokens::TokenGrid;
use imgseq_core::{metrics, Error, Result};
use serde::Serialize;
use std::path::PathBuf;

/// Reconstruction quality of a model over a set of images.
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
fn means(per_image: &[ImageScore]) -> (f64, f64, f64) {
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
/// scaled to [0, 1].
pub fn score(original: &RgbImage, recon: &RgbImage) -> Result<(f64, f64)> {
    metrics::score_pictures(original, recon)
}

/// Encodes and decodes every image (shorter side resized to `size`, centre crop, as
/// `imgseq vq roundtrip`) in batches of `batch` and reports mean PSNR / SSIM and codebook
/// usage over the set.
pub fn evaluate(
    model: &VqModel,
    paths: &[PathBuf],
    size: u32,
    upscale: bool,
    batch: usize,
    progress: bool,
) -> Result<EvalReport> {
    if paths.is_empty() {
        return Err(Error::invalid("eval: no images"));
    }
    crate::inference::check_batch(batch)?;
    model.config().check_input_size(size as usize)?;
    let s = size as usize;
    model
        .config()
        .check_memory(batch.min(paths.len()), s, s, Some(s))?;
    let spec = model.config().input_spec(size);
    // The family's crop (LlamaGen: ADM's); a gray model's pictures are their luma.
    let coder = |imgs: &[RgbImage]| encode_decode(model, imgs);
    score_files(
        &spec,
        paths,
        upscale,
        batch,
        progress,
        model.config().n_embed,
        coder,
    )
}

/// [`evaluate`] with any discrete tokenizer that decodes (Open-MAGVIT2, ...): every image
/// brought to `tok`'s input, encoded, decoded and scored, `batch` images at a time.
pub fn evaluate_tokenizer<T: Tokenizer + ?Sized>(
    tok: &T,
    paths: &[PathBuf],
    upscale: bool,
    batch: usize,
    progress: bool,
) -> Result<EvalReport> {
    if paths.is_empty() {
        return Err(Error::invalid("eval: no images"));
    }
    crate::inference::check_batch(batch)?;
    let Some(n_embed) = tok.codebook_size() else {
        return Err(Error::invalid(format!(
            "eval scores codebook tokens; a {} gives continuous embeddings",
            tok.label()
        )));
    };
    tok.check_batch(batch.min(paths.len()))?;
    let coder = |imgs: &[RgbImage]| {
        let tokens = tok.encode_pictures(imgs)?.into_tokens()?;
        let recons = tok.decode(&tokens)?;
        Ok((tokens, recons))
    };
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

/// The scoring loop of [`evaluate`] and [`evaluate_tokenizer`]: every file brought to `spec`'s
/// input (headers checked first), `batch` at a time through `coder` (pictures → tokens and
/// reconstructions), each picture scored, the codebook usage over the set.
fn score_files(
    spec: &InputSpec,
    paths: &[PathBuf],
    upscale: bool,
    batch: usize,
    progress: bool,
    n_embed: usize,
    mut coder: impl FnMut(&[RgbImage]) -> Result<(TokenGrid, Vec<RgbImage>)>,
) -> Result<EvalReport> {
    spec.check_headers(paths, upscale)?;
    let pb = if progress {
        imgseq_core::progress::items(paths.len(), "vq eval")
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut all_idx: Vec<i64> = Vec::new();
    let mut per_image = Vec::with_capacity(paths.len());
    let mut tokens_per_image = 0;
    for chunk in paths.chunks(batch) {
        let imgs = spec.load_all(chunk, upscale)?;
        let (tokens, recons) = coder(&imgs)?;
        tokens_per_image = tokens.h * tokens.w;
        all_idx.extend(tokens.data);
        for ((p, img), r) in chunk.iter().zip(&imgs).zip(&recons) {
            per_image.push(ImageScore::new(p, img, r)?);
        }
        pb.inc(chunk.len() as u64);
    }
    pb.finish_and_clear();
    let (used, perplexity) = metrics::codebook_usage(&all_idx, n_embed)?;
    let (psnr, ssim, sharpness) = means(&per_image);
    Ok(EvalReport {
        images: per_image.len(),
        size: spec.size,
        psnr,
        ssim,
        sharpness,
        codes_used: used,
        n_embed,
        usage_percent: 100.0 * used as f64 / n_embed as f64,
        perplexity,
        tokens_per_image,
        per_image,
    })
}

/// [`evaluate`] for pictures already at the model's input size (`names[i]` names
/// `imgs[i]` in the report; a gray model reads their luma and is scored against it), also
/// giving back the reconstructions (gray ones with r = g = b), in order.
pub fn evaluate_pictures(
    model: &VqModel,
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
    crate::inference::check_batch(batch)?;
    let (w, h) = imgs[0].dimensions();
    if imgs.iter().any(|i| i.dimensions() != (w, h)) {
        return Err(Error::invalid("eval: the pictures differ in size"));
    }
    let cfg = model.config();
    for side in [w, h] {
        cfg.check_input_size(side as usize)?;
    }
    cfg.check_memory(batch.min(imgs.len()), h as usize, w as usize, None)?;
    let spec = cfg.input_spec(w);
    let pb = if progress {
        imgseq_core::progress::items(imgs.len(), "vq eval")
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut all_idx: Vec<i64> = Vec::new();
    let mut per_image = Vec::with_capacity(imgs.len());
    let mut all_recons = Vec::with_capacity(imgs.len());
    let mut tokens_per_image = 0;
    for (chunk, chunk_names) in imgs.chunks(batch).zip(names.chunks(batch)) {
        let chunk: Vec<RgbImage> = chunk.iter().map(|i| spec.channels_of(i.clone())).collect();
        let (tokens, recons) = encode_decode(model, &chunk)?;
        tokens_per_image = tokens.h * tokens.w;
        all_idx.extend(tokens.data);
        for ((p, img), r) in chunk_names.iter().zip(&chunk).zip(&recons) {
            per_image.push(ImageScore::new(p, img, r)?);
        }
        all_recons.extend(recons);
        pb.inc(chunk.len() as u64);
    }
    pb.finish_and_clear();
    let n_embed = cfg.n_embed;
    let (used, perplexity) = metrics::codebook_usage(&all_idx, n_embed)?;
    let (psnr, ssim, sharpness) = means(&per_image);
    let report = EvalReport {
        images: per_image.len(),
        size: w,
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
    Ok((report, all_recons))
}

/// One image through the tokenizer and back, with how lossy it was.
#[derive(Debug, Clone)]
pub struct Roundtrip {
    /// (h, w) token grid of the image.
    pub tokens: crate::tokens::TokenGrid,
    pub reconstruction: RgbImage,
    pub psnr: f64,
    pub ssim: f64,
    /// Distinct codes among the image's tokens, and their perplexity.
    pub codes_used: usize,
    pub perplexity: f64,
}

/// Encodes `img` (already preprocessed to the model's input size), decodes its tokens and
/// scores the reconstruction (for a gray model: against the image's luma).
pub fn roundtrip(model: &VqModel, img: &RgbImage) -> Result<Roundtrip> {
    for side in [img.width(), img.height()] {
        model.config().check_input_size(side as usize)?;
    }
    let (w, h) = (img.width() as usize, img.height() as usize);
    model
        .config()
        .check_memory(1, h, w, (h == w).then_some(h))?;
    let input = model.config().input_spec(w as u32).channels_of(img.clone());
    let img = &input;
    let (mut tokens, mut recons) = encode_decode(model, std::slice::from_ref(img))?;
    tokens.batched = false;
    let reconstruction = recons.remove(0);
    let (codes_used, perplexity) = metrics::codebook_usage(&tokens.data, model.config().n_embed)?;
    let (psnr, ssim) = score(img, &reconstruction)?;
    Ok(Roundtrip {
        tokens,
        reconstruction,
        psnr,
        ssim,
        codes_used,
        perplexity,
    })
}
