//! How lossy a VQ model is: the generic scoring of [`imgseq_core::eval`] (re-exported here)
//! run on a [`VqModel`] directly — `vq train`'s reports and the round trip of one picture.

use crate::inference::encode_decode;
use crate::model::VqModel;
use image::RgbImage;
use imgseq_core::{metrics, Error, Result};
use std::path::PathBuf;

pub use imgseq_core::eval::{
    evaluate_files as evaluate_tokenizer, means, score, score_files, sharpness, EvalReport,
    ImageScore,
};

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
