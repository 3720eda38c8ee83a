//! Each family's image preprocessing ([`Resize`]): imgseq's shorter-side resize and centre
//! crop, or ADM's `center_crop_arr` that LlamaGen uses, bit-exact with Pillow's resampling.
//!
//! ADM (`guided_diffusion/image_datasets.py`, LlamaGen `dataset/augmentation.py`):
//!
//! ```python
//! while min(*pil_image.size) >= 2 * image_size:
//!     pil_image = pil_image.resize(tuple(x // 2 for x in pil_image.size), resample=Image.BOX)
//! scale = image_size / min(*pil_image.size)
//! pil_image = pil_image.resize(tuple(round(x * scale) for x in pil_image.size), resample=Image.BICUBIC)
//! arr = np.array(pil_image)
//! crop_y = (arr.shape[0] - image_size) // 2
//! crop_x = (arr.shape[1] - image_size) // 2
//! return Image.fromarray(arr[crop_y: crop_y + image_size, crop_x: crop_x + image_size])
//! ```
//!
//! Pillow's resampling (`libImaging/Resample.c`) is reproduced exactly: per-output-pixel
//! filter weights in f64, normalised, turned into 22-bit fixed point, a horizontal pass
//! then a vertical one (each rounded to 8 bits), the vertical pass only over the rows used.

use crate::family::Resize;
use image::RgbImage;
use imgseq_core::image_io;
use imgseq_core::{Error, Result};
use std::path::{Path, PathBuf};

/// Pillow's `PRECISION_BITS` for 8-bit images: 32 − 8 − 2.
const PRECISION_BITS: u32 = 22;

/// A Pillow resampling filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// `Image.BOX`: support 0.5.
    Box,
    /// `Image.BICUBIC`: Keys' cubic with a = −0.5, support 2.
    Bicubic,
}

impl Filter {
    fn support(self) -> f64 {
        match self {
            Filter::Box => 0.5,
            Filter::Bicubic => 2.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        match self {
            Filter::Box => {
                if x > -0.5 && x <= 0.5 {
                    1.0
                } else {
                    0.0
                }
            }
            Filter::Bicubic => {
                let a = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * a
                } else {
                    0.0
                }
            }
        }
    }
}

/// Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc`: for each output pixel, the first
/// input pixel and the fixed-point weights of the input pixels it reads.
fn coeffs(in_size: usize, out_size: usize, filter: Filter) -> Vec<(usize, Vec<i32>)> {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filter.support() * filterscale;
    let ss = 1.0 / filterscale;
    (0..out_size)
        .map(|xx| {
            let center = (xx as f64 + 0.5) * scale;
            // C's (int) truncates toward zero.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            let n = xmax.saturating_sub(xmin);
            let w: Vec<f64> = (0..n)
                .map(|x| filter.weight((x as f64 + xmin as f64 - center + 0.5) * ss))
                .collect();
            let total: f64 = w.iter().sum();
            let k = w
                .iter()
                .map(|&v| {
                    let v = if total != 0.0 { v / total } else { v };
                    let f = v * (1u32 << PRECISION_BITS) as f64;
                    if v < 0.0 {
                        (-0.5 + f) as i32
                    } else {
                        (0.5 + f) as i32
                    }
                })
                .collect();
            (xmin, k)
        })
        .collect()
}

/// `clip8`: the fixed-point sum back to a byte.
fn clip8(ss: i64) -> u8 {
    (ss >> PRECISION_BITS).clamp(0, 255) as u8
}

/// `Image.resize((width, height), resample=filter)` of an RGB image, bit-exact with Pillow.
pub fn pil_resize(img: &RgbImage, width: u32, height: u32, filter: Filter) -> RgbImage {
    let (w0, h0) = (img.width() as usize, img.height() as usize);
    let (w1, h1) = (width as usize, height as usize);
    if (w0, h0) == (w1, h1) || w1 == 0 || h1 == 0 {
        return img.clone();
    }
    let src = img.as_raw();
    let kv = coeffs(h0, h1, filter);
    // Rows the vertical pass reads (Pillow's horizontal pass covers only those).
    let first = kv.first().map_or(0, |k| k.0);
    let last = kv.last().map_or(0, |k| k.0 + k.1.len());
    let rows = last - first;
    let half = 1i64 << (PRECISION_BITS - 1);
    // Horizontal pass (skipped by Pillow when the width does not change).
    let (tmp, tw) = if w1 != w0 {
        let kh = coeffs(w0, w1, filter);
        let mut tmp = vec![0u8; rows * w1 * 3];
        for y in 0..rows {
            let row = &src[(first + y) * w0 * 3..(first + y + 1) * w0 * 3];
            for (x, (xmin, k)) in kh.iter().enumerate() {
                for c in 0..3 {
                    let mut ss = half;
                    for (i, &kk) in k.iter().enumerate() {
                        ss += row[(xmin + i) * 3 + c] as i64 * kk as i64;
                    }
                    tmp[(y * w1 + x) * 3 + c] = clip8(ss);
                }
            }
        }
        (tmp, w1)
    } else {
        (src[first * w0 * 3..last * w0 * 3].to_vec(), w0)
    };
    if h1 == h0 {
        return RgbImage::from_raw(tw as u32, h1 as u32, tmp).expect("sizes match");
    }
    let mut out = vec![0u8; h1 * tw * 3];
    for (y, (ymin, k)) in kv.iter().enumerate() {
        let y0 = ymin - first;
        for x in 0..tw {
            for c in 0..3 {
                let mut ss = half;
                for (i, &kk) in k.iter().enumerate() {
                    ss += tmp[((y0 + i) * tw + x) * 3 + c] as i64 * kk as i64;
                }
                out[(y * tw + x) * 3 + c] = clip8(ss);
            }
        }
    }
    RgbImage::from_raw(tw as u32, h1 as u32, out).expect("sizes match")
}

/// Python's `round` of a non-negative float: halves to even.
fn round_half_even(x: f64) -> u32 {
    let r = x.round();
    let v = if (x - x.trunc() - 0.5).abs() == 0.0 && r as u64 % 2 == 1 {
        r - 1.0
    } else {
        r
    };
    v as u32
}

/// ADM's `center_crop_arr(img, size)` (see the module docs), bit-exact with Pillow.
pub fn adm_center_crop(img: &RgbImage, size: u32) -> Result<RgbImage> {
    if size == 0 {
        return Err(Error::setting("size", size, "must be positive"));
    }
    let mut img = img.clone();
    while img.width().min(img.height()) >= 2 * size {
        img = pil_resize(&img, img.width() / 2, img.height() / 2, Filter::Box);
    }
    let (w, h) = (img.width(), img.height());
    let scale = size as f64 / w.min(h) as f64;
    let (nw, nh) = (
        round_half_even(w as f64 * scale),
        round_half_even(h as f64 * scale),
    );
    let img = pil_resize(&img, nw, nh, Filter::Bicubic);
    if nw < size || nh < size {
        return Err(Error::invalid(format!(
            "the resized image is {nw}x{nh}, smaller than {size}x{size}"
        )));
    }
    let (x0, y0) = ((nw - size) / 2, (nh - size) / 2);
    Ok(image::imageops::crop_imm(&img, x0, y0, size, size).to_image())
}

/// The model's square input from a decoded image: `resize`'s way to `size`×`size`.
pub fn square(img: &RgbImage, size: u32, resize: Resize) -> Result<RgbImage> {
    match resize {
        Resize::ShorterSide => image_io::resize_shorter_center_crop(img, size),
        Resize::AdmCenterCrop => adm_center_crop(img, size),
    }
}

/// Loads an image file as the model's square input (the shorter side must be at least
/// `size` unless `upscale`), errors naming the file.
pub fn load_square(path: &Path, size: u32, upscale: bool, resize: Resize) -> Result<RgbImage> {
    match resize {
        Resize::ShorterSide => image_io::load_rgb_square(path, size, upscale),
        Resize::AdmCenterCrop => {
            let img = image_io::load_rgb(path)?;
            image_io::check_min_size(path, img.width(), img.height(), size, upscale)?;
            adm_center_crop(&img, size).map_err(|e| Error::format(path, e.to_string()))
        }
    }
}

/// [`load_square`] of every path.
pub fn load_squares(
    paths: &[PathBuf],
    size: u32,
    upscale: bool,
    resize: Resize,
) -> Result<Vec<RgbImage>> {
    paths
        .iter()
        .map(|p| load_square(p, size, upscale, resize))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_round_is_half_to_even() {
        assert_eq!(round_half_even(2.5), 2);
        assert_eq!(round_half_even(3.5), 4);
        assert_eq!(round_half_even(3.4999), 3);
        assert_eq!(round_half_even(7.0), 7);
    }

    #[test]
    fn box_halving_averages_pairs() {
        // Box filter at exactly half size: each output is the rounded mean of 2×2 inputs.
        let img = RgbImage::from_fn(4, 2, |x, _| image::Rgb([(x * 10) as u8, 0, 255]));
        let out = pil_resize(&img, 2, 1, Filter::Box);
        assert_eq!(out.get_pixel(0, 0).0, [5, 0, 255]);
        assert_eq!(out.get_pixel(1, 0).0, [25, 0, 255]);
    }

    #[test]
    fn adm_crop_is_square_of_the_size() {
        let img = RgbImage::from_fn(150, 101, |x, y| image::Rgb([x as u8, y as u8, 7]));
        let out = adm_center_crop(&img, 32).unwrap();
        assert_eq!(out.dimensions(), (32, 32));
    }
}
