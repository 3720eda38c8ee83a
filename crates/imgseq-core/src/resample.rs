//! Pillow's bilinear resize of 8-bit images, bit for bit.
//!
//! HF's `ViTImageProcessor` resizes with `PIL.Image.resize(..., resample=BILINEAR)` (and the
//! torchvision "fast" processor's uint8 antialiased bilinear was written to match it). A model
//! trained on images resized this way, shipped with a `preprocessor_config.json` that says so,
//! gives the same logits in `transformers.pipeline` as here.
//!
//! Pillow's algorithm (`libImaging/Resample.c`), which this follows exactly:
//! - separable, horizontal pass first (into 8-bit rows), then vertical (into 8-bit pixels);
//! - output pixel `i` centred on source coordinate `(i + 0.5)·scale`, `scale = in/out`; the
//!   triangle filter's support is stretched by `max(scale, 1)` (antialiasing when shrinking);
//! - the first tap is `round(centre − support)`, the last `round(centre + support)`, clamped to the
//!   image; weights are normalised to sum 1, then turned into 22-bit fixed point
//!   (`round half away from zero`);
//! - each pass sums `pixel · weight` in 32-bit integers starting from ½ (rounding) and clips to
//!   0..=255.
//!
//! Pillow 13 runs the vertical pass first for some shapes whose height shrinks (always when
//! the height shrinks and the width grows); that order differs by ±1 in a few pixels. Upscaling
//! (Fashion-MNIST's 28→32) is the same in every Pillow.

use crate::{Error, Result};

/// Fixed-point fraction bits of Pillow's 8-bit resampling (`PRECISION_BITS = 32 − 8 − 2`).
const PRECISION_BITS: u32 = 22;

/// The taps of one output coordinate: first source index and fixed-point weights.
struct Taps {
    first: usize,
    weights: Vec<i32>,
}

/// Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc` for the bilinear (triangle) filter.
fn taps(in_size: usize, out_size: usize) -> Vec<Taps> {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filterscale; // the triangle's support is 1
    let ss = 1.0 / filterscale;
    (0..out_size)
        .map(|xx| {
            let center = (xx as f64 + 0.5) * scale;
            // C's `(int)` truncates toward zero; both values here are > −1, as in Pillow.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            let w: Vec<f64> = (xmin..xmax)
                .map(|x| {
                    let t = ((x as f64 - center + 0.5) * ss).abs();
                    if t < 1.0 {
                        1.0 - t
                    } else {
                        0.0
                    }
                })
                .collect();
            let total: f64 = w.iter().sum();
            let one = (1u32 << PRECISION_BITS) as f64;
            let weights = w
                .iter()
                .map(|&k| {
                    let k = if total != 0.0 { k / total } else { k };
                    if k < 0.0 {
                        (-0.5 + k * one) as i32
                    } else {
                        (0.5 + k * one) as i32
                    }
                })
                .collect();
            Taps {
                first: xmin,
                weights,
            }
        })
        .collect()
}

/// Pillow's `clip8`: the rounded fixed-point sum back to a byte.
fn clip8(v: i32) -> u8 {
    (v >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Resizes planar 8-bit images `(c, h, w)` to `(c, out_h, out_w)` exactly as Pillow's
/// `Image.resize((out_w, out_h), Image.BILINEAR)` does (per channel; RGB images resize each
/// channel independently in Pillow too).
///
/// # Shapes
/// src: c·h·w bytes, channel-major → c·out_h·out_w bytes
pub fn resize_bilinear_pil(
    src: &[u8],
    (c, h, w): (usize, usize, usize),
    (out_h, out_w): (usize, usize),
) -> Result<Vec<u8>> {
    if src.len() != c * h * w {
        return Err(Error::invalid(format!(
            "resize: {} bytes do not make a {c}x{h}x{w} image",
            src.len()
        )));
    }
    if h == 0 || w == 0 || out_h == 0 || out_w == 0 {
        return Err(Error::invalid(format!(
            "resize: cannot resize {h}x{w} to {out_h}x{out_w}"
        )));
    }
    let half = 1i32 << (PRECISION_BITS - 1);
    let horiz = (w != out_w).then(|| taps(w, out_w));
    let vert = (h != out_h).then(|| taps(h, out_h));
    let mut out = Vec::with_capacity(c * out_h * out_w);
    let mut tmp = vec![0u8; h * out_w];
    for plane in src.chunks_exact(h * w) {
        // Horizontal pass: (h, w) → (h, out_w).
        match &horiz {
            Some(taps) => {
                for y in 0..h {
                    let row = &plane[y * w..(y + 1) * w];
                    for (x, t) in taps.iter().enumerate() {
                        let s = t
                            .weights
                            .iter()
                            .enumerate()
                            .fold(half, |s, (i, &k)| s + row[t.first + i] as i32 * k);
                        tmp[y * out_w + x] = clip8(s);
                    }
                }
            }
            None => tmp.copy_from_slice(plane),
        }
        // Vertical pass: (h, out_w) → (out_h, out_w).
        match &vert {
            Some(taps) => {
                for t in taps {
                    for x in 0..out_w {
                        let s = t.weights.iter().enumerate().fold(half, |s, (i, &k)| {
                            s + tmp[(t.first + i) * out_w + x] as i32 * k
                        });
                        out.push(clip8(s));
                    }
                }
            }
            None => out.extend_from_slice(&tmp),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_size_is_the_identity() {
        let src: Vec<u8> = (0..2 * 5 * 7).map(|i| (i * 37 % 256) as u8).collect();
        assert_eq!(resize_bilinear_pil(&src, (2, 5, 7), (5, 7)).unwrap(), src);
    }

    #[test]
    fn a_flat_image_stays_flat_at_any_size() {
        let src = vec![173u8; 28 * 28];
        for (oh, ow) in [(32, 32), (13, 40), (1, 1), (100, 3)] {
            let out = resize_bilinear_pil(&src, (1, 28, 28), (oh, ow)).unwrap();
            assert!(out.iter().all(|&v| v == 173), "{oh}x{ow}");
        }
    }

    #[test]
    fn wrong_length_and_empty_sizes_are_errors() {
        assert!(resize_bilinear_pil(&[0; 10], (1, 3, 3), (4, 4)).is_err());
        assert!(resize_bilinear_pil(&[0; 9], (1, 3, 3), (0, 4)).is_err());
    }
}
