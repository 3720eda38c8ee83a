//! Using a trained tokenizer: image files → token grids, token grids → images, in batches so
//! that a long list needs memory for one batch only.

use crate::data;
use crate::model::{Bottleneck, VqModel};
use crate::tokens::TokenGrid;
use candle_core::{DType, Device, Tensor};
use image::RgbImage;
use imgseq_core::image_io::{self, PixelRange};
use imgseq_core::progress;
use imgseq_core::Result;
use std::path::PathBuf;

/// Token grids of a batch of preprocessed images (`batched`, n = images).
fn grid_of(indices: &Tensor) -> Result<TokenGrid> {
    let (n, h, w) = indices.dims3()?;
    let data = indices
        .to_dtype(DType::I64)?
        .flatten_all()?
        .to_vec1::<i64>()?;
    Ok(TokenGrid {
        n,
        h,
        w,
        batched: true,
        data,
    })
}

/// Model output in [-1, 1] → 8-bit pictures (clamped).
fn pictures(x: &Tensor) -> Result<Vec<RgbImage>> {
    (0..x.dim(0)?)
        .map(|i| image_io::from_tensor_chw(&x.get(i)?, PixelRange::MinusOneOne))
        .collect()
}

/// Tokens and reconstructions of preprocessed images (all of the model's input size).
pub fn encode_decode(model: &VqModel, imgs: &[RgbImage]) -> Result<(TokenGrid, Vec<RgbImage>)> {
    let f = model.forward(&data::to_batch(imgs)?, Bottleneck::Quantize)?;
    let q = f.quantized.expect("Bottleneck::Quantize quantizes");
    Ok((grid_of(&q.indices)?, pictures(&f.reconstruction)?))
}

/// Encodes image files (shorter side resized to `size`, centre crop) in batches of `batch`.
/// Every header is checked first, so a bad file fails before any compute. One image gives a
/// (h, w) grid, several an (n, h, w) one.
pub fn encode_files(
    model: &VqModel,
    paths: &[PathBuf],
    size: u32,
    upscale: bool,
    batch: usize,
    show_progress: bool,
) -> Result<TokenGrid> {
    model.config().check_input_size(size as usize)?;
    data::check_headers(paths, size, upscale)?;
    let pb = if show_progress {
        progress::items(paths.len(), "encoding")
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut all = TokenGrid {
        n: 0,
        h: 0,
        w: 0,
        batched: paths.len() != 1,
        data: Vec::new(),
    };
    for chunk in paths.chunks(batch.max(1)) {
        let imgs = data::load_square(chunk, size, upscale)?;
        let q = model.encode(&data::to_batch(&imgs)?)?;
        let g = grid_of(&q.indices)?;
        (all.n, all.h, all.w) = (all.n + g.n, g.h, g.w);
        all.data.extend(g.data);
        pb.inc(chunk.len() as u64);
    }
    pb.finish_and_clear();
    Ok(all)
}

/// Decodes every image of `tokens` in batches of `batch`. The indices must be in the
/// codebook (check with [`TokenGrid::check_codebook`] for an error that names the file).
pub fn decode_tokens(
    model: &VqModel,
    tokens: &TokenGrid,
    batch: usize,
    show_progress: bool,
) -> Result<Vec<RgbImage>> {
    let pb = if show_progress {
        progress::items(tokens.n, "decoding")
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut imgs = Vec::with_capacity(tokens.n);
    let plane = tokens.h * tokens.w;
    let step = batch.max(1);
    for start in (0..tokens.n).step_by(step) {
        let k = step.min(tokens.n - start);
        let cells = &tokens.data[start * plane..(start + k) * plane];
        let idx = Tensor::from_vec(cells.to_vec(), (k, tokens.h, tokens.w), &Device::Cpu)?;
        imgs.extend(pictures(&model.decode_indices(&idx)?)?);
        pb.inc(k as u64);
    }
    pb.finish_and_clear();
    Ok(imgs)
}
