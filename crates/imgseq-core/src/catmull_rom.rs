//! The `image` crate's `imageops::resize(.., FilterType::CatmullRom)` of 8-bit images, computed
//! for a window of the output only, byte for byte the same as resizing whole and cropping.
//!
//! imgseq's own crop rule (shorter side resized to the size, centre crop) used to resize the
//! whole image before cropping: a 16384×1 sliver up-scaled to a shorter side of 384 is a
//! 6,291,456×384 intermediate (7 GB) for a 384×384 crop. Here only the crop is computed.
//!
//! The arithmetic is the crate's (`imageops/sample.rs`, image 0.25), which this follows
//! exactly, in f32:
//! - separable, vertical pass first into an f32 image, then horizontal into 8-bit pixels;
//! - output coordinate `i` centred on `(i + 0.5)·ratio`, `ratio = in/out`; the support (2) is
//!   stretched by `max(ratio, 1)`; taps from `floor(centre − support)` to
//!   `ceil(centre + support)` clamped to the image, weights `kernel((j − centre + ½)/sratio)`
//!   normalised by their sum;
//! - the horizontal pass clamps to 0..=255 and rounds half away from zero.
//!
//! Each output pixel depends on its own row's and column's taps alone, so a window computes
//! exactly the pixels the whole resize would. A test compares the two on many shapes.

use image::{ImageBuffer, Pixel};
use std::ops::Range;

/// Mitchell–Netravali's cubic with `b`, `c`, as the `image` crate writes it (Catmull-Rom:
/// b = 0, c = ½).
fn bc_cubic_spline(x: f32, b: f32, c: f32) -> f32 {
    let a = x.abs();
    let k = if a < 1.0 {
        (12.0 - 9.0 * b - 6.0 * c) * a.powi(3)
            + (-18.0 + 12.0 * b + 6.0 * c) * a.powi(2)
            + (6.0 - 2.0 * b)
    } else if a < 2.0 {
        (-b - 6.0 * c) * a.powi(3)
            + (6.0 * b + 30.0 * c) * a.powi(2)
            + (-12.0 * b - 48.0 * c) * a
            + (8.0 * b + 24.0 * c)
    } else {
        0.0
    };
    k / 6.0
}

fn catmull_rom(x: f32) -> f32 {
    bc_cubic_spline(x, 0.0, 0.5)
}

/// The Catmull-Rom filter's support before stretching.
const SUPPORT: f32 = 2.0;

/// One output coordinate's taps: the first source index and the normalised weights.
struct Taps {
    first: u32,
    weights: Vec<f32>,
}

/// The taps of the output coordinates `outs` of a resize from `in_size` to `out_size`.
fn taps(in_size: u32, out_size: u32, outs: Range<u32>) -> Vec<Taps> {
    let ratio = in_size as f32 / out_size as f32;
    let sratio = if ratio < 1.0 { 1.0 } else { ratio };
    let src_support = SUPPORT * sratio;
    outs.map(|out| {
        let input = (out as f32 + 0.5) * ratio;
        let left = ((input - src_support).floor() as i64).clamp(0, i64::from(in_size) - 1);
        let right = ((input + src_support).ceil() as i64).clamp(left + 1, i64::from(in_size));
        let input = input - 0.5;
        let mut weights: Vec<f32> = (left..right)
            .map(|i| catmull_rom((i as f32 - input) / sratio))
            .collect();
        let mut sum = 0.0;
        for w in &weights {
            sum += w;
        }
        for w in weights.iter_mut() {
            *w /= sum;
        }
        Taps {
            first: left as u32,
            weights,
        }
    })
    .collect()
}

/// Pixels `window_x` × `window_y` of `img` resized to `nw`×`nh` with the `image` crate's
/// Catmull-Rom, without making the rest. The window must lie inside `nw`×`nh`; the image must
/// not be empty.
pub fn resize_window<P>(
    img: &ImageBuffer<P, Vec<u8>>,
    (nw, nh): (u32, u32),
    window_x: Range<u32>,
    window_y: Range<u32>,
) -> ImageBuffer<P, Vec<u8>>
where
    P: Pixel<Subpixel = u8> + 'static,
{
    let (w, h) = img.dimensions();
    debug_assert!(w > 0 && h > 0 && window_x.end <= nw && window_y.end <= nh);
    let (ww, wh) = (window_x.len() as u32, window_y.len() as u32);
    if (nw, nh) == (w, h) {
        return image::imageops::crop_imm(img, window_x.start, window_y.start, ww, wh).to_image();
    }
    let c = P::CHANNEL_COUNT as usize;
    let kh = taps(w, nw, window_x);
    let kv = taps(h, nh, window_y);
    // The source columns the horizontal taps read; the vertical pass runs over those only.
    let x0 = kh.first().map_or(0, |t| t.first);
    let x1 = kh.last().map_or(0, |t| t.first + t.weights.len() as u32);
    let cols = (x1 - x0) as usize;
    let src = img.as_raw();
    // Vertical pass: (window rows) × (columns read), f32, channels last.
    let mut tmp = vec![0f32; wh as usize * cols * c];
    for (y, t) in kv.iter().enumerate() {
        for x in 0..cols {
            let mut acc = [0f32; 4];
            for (i, wt) in t.weights.iter().enumerate() {
                let at = ((t.first as usize + i) * w as usize + x0 as usize + x) * c;
                for (ch, a) in acc.iter_mut().enumerate().take(c) {
                    *a += src[at + ch] as f32 * wt;
                }
            }
            tmp[(y * cols + x) * c..(y * cols + x + 1) * c].copy_from_slice(&acc[..c]);
        }
    }
    // Horizontal pass into bytes.
    let mut out = vec![0u8; (ww * wh) as usize * c];
    for (x, t) in kh.iter().enumerate() {
        let from = (t.first - x0) as usize;
        for y in 0..wh as usize {
            let mut acc = [0f32; 4];
            for (i, wt) in t.weights.iter().enumerate() {
                let at = (y * cols + from + i) * c;
                for (ch, a) in acc.iter_mut().enumerate().take(c) {
                    *a += tmp[at + ch] * wt;
                }
            }
            for ch in 0..c {
                out[(y * ww as usize + x) * c + ch] = acc[ch].clamp(0.0, 255.0).round() as u8;
            }
        }
    }
    ImageBuffer::from_raw(ww, wh, out).expect("the window's size")
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{GrayImage, RgbImage};

    fn noise(w: u32, h: u32, seed: u32) -> RgbImage {
        RgbImage::from_fn(w, h, |x, y| {
            let v = (x.wrapping_mul(73) ^ y.wrapping_mul(151) ^ seed).wrapping_mul(2654435761);
            image::Rgb([(v >> 24) as u8, (v >> 16) as u8, (v >> 8) as u8])
        })
    }

    /// The window equals the `image` crate's whole resize cropped, byte for byte, when
    /// shrinking, growing, and growing one side while shrinking the other.
    #[test]
    fn window_equals_the_image_crates_resize_then_crop() {
        let cases = [
            ((37, 23), (19, 11), (3..15, 2..9)),
            ((37, 23), (64, 40), (10..42, 5..37)),
            ((5, 90), (40, 33), (0..40, 0..33)),
            ((200, 3), (6400, 96), (3152..3248, 0..96)),
            ((1, 1), (7, 7), (2..5, 1..6)),
            ((300, 301), (129, 130), (0..129, 1..130)),
        ];
        for (i, ((w, h), (nw, nh), (wx, wy))) in cases.into_iter().enumerate() {
            let img = noise(w, h, i as u32);
            let what = format!("{w}x{h} -> {nw}x{nh}, window {wx:?} x {wy:?}");
            check(&img, (nw, nh), &wx, &wy, &what);
            let gray: GrayImage = image::DynamicImage::ImageRgb8(img).to_luma8();
            check(&gray, (nw, nh), &wx, &wy, &format!("gray {what}"));
        }
    }

    /// [`resize_window`] of `img` against the crate's whole resize, cropped.
    fn check<P: Pixel<Subpixel = u8> + PartialEq + std::fmt::Debug + 'static>(
        img: &ImageBuffer<P, Vec<u8>>,
        (nw, nh): (u32, u32),
        wx: &Range<u32>,
        wy: &Range<u32>,
        what: &str,
    ) {
        let whole = image::imageops::resize(img, nw, nh, image::imageops::FilterType::CatmullRom);
        let (ww, wh) = (wx.len() as u32, wy.len() as u32);
        let want = image::imageops::crop_imm(&whole, wx.start, wy.start, ww, wh).to_image();
        let got = resize_window(img, (nw, nh), wx.clone(), wy.clone());
        assert_eq!(got, want, "{what}");
    }
}
