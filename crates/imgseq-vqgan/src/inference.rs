//! Using a trained tokenizer: image files → token grids, token grids → images, in batches so
//! that a long list needs memory for one batch only.

use crate::config::VqConfig;
use crate::data;
use crate::model::VqModel;
use crate::tokens::TokenGrid;
use candle_core::{DType, Device, Tensor};
use image::RgbImage;
use imgseq_core::image_io::{self, PixelRange};
use imgseq_core::progress;
use imgseq_core::{Error, Result};
use std::path::PathBuf;

impl VqConfig {
    /// An estimate (an upper bound in practice) of the peak memory in bytes of one
    /// encode + decode of `batch` images of `height`×`width` pixels: the largest activation
    /// (times 6: input, output, residual, normalised copy, padded conv input and slack), the
    /// attention matrices ((h·w)² floats per image at every attention resolution and in the
    /// middle block, the lowest level) and the codebook distances (positions × codes).
    pub fn forward_bytes(&self, batch: usize, height: usize, width: usize) -> u128 {
        let d = &self.ddconfig;
        let levels = d.ch_mult.len().max(1);
        let b = batch as u128;
        let (mut act, mut attn) = (3 * b * height as u128 * width as u128, 0u128);
        for i in 0..levels {
            let (hi, wi) = ((height >> i) as u128, (width >> i) as u128);
            // A level sees its own channels, its predecessor's (encoder) and, upsampled, its
            // successor's (decoder).
            let c = [i.saturating_sub(1), i, (i + 1).min(levels - 1)]
                .iter()
                .map(|&j| d.ch as u128 * d.ch_mult.get(j).copied().unwrap_or(1) as u128)
                .max()
                .unwrap_or(0);
            act = act.max(b.saturating_mul(c).saturating_mul(hi * wi));
            let n = hi * wi;
            if d.attn_resolutions.contains(&(d.resolution >> i)) || i == levels - 1 {
                attn = attn.max(b.saturating_mul(n.saturating_mul(n)));
            }
        }
        let low = (height >> (levels - 1)) as u128 * (width >> (levels - 1)) as u128;
        let codes = b.saturating_mul(low).saturating_mul(self.n_embed as u128);
        4 * act
            .saturating_mul(6)
            .saturating_add(attn)
            .saturating_add(codes)
    }

    /// Refuses (before anything is allocated) a forward of `batch` images of
    /// `height`×`width` pixels that would need more memory than
    /// [`imgseq_core::budget::memory_limit`]; the error names `batch_size` when one image would fit,
    /// else `size` (the square input side) when given, else the input size.
    pub fn check_memory(
        &self,
        batch: usize,
        height: usize,
        width: usize,
        size: Option<usize>,
    ) -> Result<()> {
        let Err(msg) = imgseq_core::budget::check_memory(self.forward_bytes(batch, height, width))
        else {
            return Ok(());
        };
        if batch > 1
            && imgseq_core::budget::check_memory(self.forward_bytes(1, height, width)).is_ok()
        {
            return Err(Error::setting(
                "batch_size",
                batch,
                format!("at {height}x{width} pixels {msg}"),
            ));
        }
        Err(match size {
            Some(s) => Error::setting("size", s, msg),
            None => Error::resource_limit(format!("a {height}x{width} image {msg}")),
        })
    }
}

/// A batch size must be positive ([`imgseq_core::tokenizer::check_batch_size`]).
pub use imgseq_core::tokenizer::check_batch_size as check_batch;

/// Token grids of a batch of preprocessed images (`batched`, n = images).
pub(crate) fn grid_of(indices: &Tensor) -> Result<TokenGrid> {
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

/// Tokens and reconstructions of preprocessed images (all of the model's input size; a gray
/// model reads their luma and gives gray pictures, r = g = b).
pub fn encode_decode(model: &VqModel, imgs: &[RgbImage]) -> Result<(TokenGrid, Vec<RgbImage>)> {
    let x = data::to_input(imgs, model.config().ddconfig.in_channels)?;
    // The decoder reads the codebook entries of the indices, exactly as `vq decode` of the
    // token file does (the straight-through z + (z_q − z) of training differs from them in the
    // last bits, which a bf16 decoder can turn into different pixels).
    let indices = model.encode(&x)?.indices; // (b, h, w)
    let recon = model.decode_indices(&indices)?;
    Ok((grid_of(&indices)?, pictures(&recon)?))
}

/// Encodes image files (brought to the model's input at `size`: [`VqConfig::input_spec`]) in
/// batches of `batch`.
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
    check_batch(batch)?;
    let cfg = model.config();
    cfg.check_input_size(size as usize)?;
    let s = size as usize;
    cfg.check_memory(batch.min(paths.len()).max(1), s, s, Some(s))?;
    let spec = cfg.input_spec(size);
    spec.check_headers(paths, upscale)?;
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
    for chunk in paths.chunks(batch) {
        let imgs = spec.load_all(chunk, upscale)?;
        let q = model.encode(&spec.to_tensor(&imgs)?)?;
        let g = grid_of(&q.indices)?;
        (all.n, all.h, all.w) = (all.n + g.n, g.h, g.w);
        all.data.extend(g.data);
        pb.inc(chunk.len() as u64);
    }
    pb.finish_and_clear();
    Ok(all)
}

/// Decodes every image of `tokens` in batches of `batch`. The indices must be in the
/// codebook (check with [`TokenGrid::check_codebook`] for an error that names the file); a
/// grid whose decoding would need more memory than allowed is refused before any work.
pub fn decode_tokens(
    model: &VqModel,
    tokens: &TokenGrid,
    batch: usize,
    show_progress: bool,
) -> Result<Vec<RgbImage>> {
    check_batch(batch)?;
    if !model.has_decoder() {
        return Err(Error::invalid(crate::chameleon::NO_DECODER));
    }
    let cfg = model.config();
    let f = cfg.downsample_factor();
    let (hp, wp) = (tokens.h.saturating_mul(f), tokens.w.saturating_mul(f));
    if let Err(e) = cfg.check_memory(batch.min(tokens.n), hp, wp, None) {
        return Err(match e {
            Error::ResourceLimit(_) => Error::resource_limit(format!(
                "a {}x{} token grid decodes to a {hp}x{wp} image, which {}",
                tokens.h,
                tokens.w,
                imgseq_core::budget::check_memory(cfg.forward_bytes(1, hp, wp)).unwrap_err()
            )),
            e => e,
        });
    }
    let pb = if show_progress {
        progress::items(tokens.n, "decoding")
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut imgs = Vec::with_capacity(tokens.n);
    let plane = tokens.h * tokens.w;
    let step = batch;
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

#[cfg(test)]
mod tests {
    use super::*;
    use imgseq_core::error::ErrorKind;

    #[test]
    fn memory_refusal_of_one_image_is_a_resource_limit() {
        let cfg = VqConfig::vqgan_imagenet_f16_1024();
        let side = 1 << 20;
        let e = cfg.check_memory(1, side, side, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ResourceLimit);
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("a {side}x{side} image needs about ")),
            "{msg}"
        );
        // A named setting is still blamed as a setting.
        let e = cfg.check_memory(1, side, side, Some(side)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadSetting);
        assert!(cfg.check_memory(1, 64, 64, None).is_ok());
    }
}
