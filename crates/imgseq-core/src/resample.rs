//! Pillow's resampling of 8-bit images, bit for bit: the one resampler of imgseq (the ViT's
//! bilinear resize, LlamaGen's ADM centre crop with its box halving and bicubic resize).
//!
//! HF's `ViTImageProcessor` resizes with `PIL.Image.resize(..., resample=BILINEAR)` (and the
//! torchvision "fast" processor's uint8 antialiased bilinear was written to match it). A model
//! trained on images resized this way, shipped with a `preprocessor_config.json` that says so,
//! gives the same logits in `transformers.pipeline` as here.
//!
//! Pillow's algorithm (`libImaging/Resample.c`), which this follows exactly:
//! - separable, horizontal pass first (into 8-bit rows), then vertical (into 8-bit pixels),
//!   the horizontal pass only over the rows the vertical one reads (the other order for the
//!   shapes below);
//! - output pixel `i` centred on source coordinate `(i + 0.5)·scale`, `scale = in/out`; the
//!   filter's support is stretched by `max(scale, 1)` (antialiasing when shrinking);
//! - the first tap is `round(centre − support)`, the last `round(centre + support)`, clamped to the
//!   image; weights are normalised to sum 1, then turned into 22-bit fixed point
//!   (`round half away from zero`);
//! - each pass sums `pixel · weight` in integers starting from ½ (rounding) and clips to
//!   0..=255.
//!
//! Pillow 13 runs the vertical pass first when the height shrinks by more than twice as many
//! pixels as the width ([`vertical_first`]; always when the height shrinks and the width
//! grows); so does imgseq. Pillow ≤ 12 always ran the horizontal pass first; the two orders
//! differ by a level or more in a few pixels, so for those shapes imgseq's bytes are Pillow
//! 13's. Upscaling (Fashion-MNIST's 28→32) and uniform shrinking of pictures at most twice as
//! tall as wide are the same in every Pillow.
//!
//! ADM's `center_crop_arr` (`guided_diffusion/image_datasets.py`, LlamaGen
//! `dataset/augmentation.py`), [`adm_center_crop`]:
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

use crate::{Error, Result};
use image::RgbImage;
use std::ops::Range;

/// Fixed-point fraction bits of Pillow's 8-bit resampling (`PRECISION_BITS = 32 − 8 − 2`).
const PRECISION_BITS: u32 = 22;

/// A Pillow resampling filter (by its lower-case name in configs and descriptions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Filter {
    /// `Image.BOX`: support 0.5.
    Box,
    /// `Image.BILINEAR`: the triangle, support 1.
    Bilinear,
    /// `Image.BICUBIC`: Keys' cubic with a = −0.5, support 2.
    Bicubic,
}

impl Filter {
    /// The filter of Pillow's `Image.Resampling` number (transformers' `resample` in a
    /// `preprocessor_config.json`): 4 box, 2 bilinear, 3 bicubic; `None` for the others
    /// (0 nearest, 1 Lanczos, 5 Hamming), which imgseq does not run.
    pub fn from_pil(code: i64) -> Option<Self> {
        match code {
            4 => Some(Filter::Box),
            2 => Some(Filter::Bilinear),
            3 => Some(Filter::Bicubic),
            _ => None,
        }
    }

    /// Its name (`box`, `bilinear`, `bicubic`).
    pub fn name(self) -> &'static str {
        match self {
            Filter::Box => "box",
            Filter::Bilinear => "bilinear",
            Filter::Bicubic => "bicubic",
        }
    }

    fn support(self) -> f64 {
        match self {
            Filter::Box => 0.5,
            Filter::Bilinear => 1.0,
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
            Filter::Bilinear => {
                let x = x.abs();
                if x < 1.0 {
                    1.0 - x
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

/// The taps of one output coordinate: first source index and fixed-point weights.
struct Taps {
    first: usize,
    weights: Vec<i32>,
}

/// Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc` for the output coordinates `outs`
/// (each coordinate's taps depend on it alone, so a window of the output is computed exactly
/// as Pillow computes it within the whole).
fn taps(in_size: usize, out_size: usize, outs: Range<usize>, filter: Filter) -> Vec<Taps> {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filter.support() * filterscale;
    let ss = 1.0 / filterscale;
    let one = (1u32 << PRECISION_BITS) as f64;
    outs.map(|xx| {
        let center = (xx as f64 + 0.5) * scale;
        // C's `(int)` truncates toward zero; both values here are > −1, as in Pillow.
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
        let w: Vec<f64> = (xmin..xmax.max(xmin))
            .map(|x| filter.weight((x as f64 - center + 0.5) * ss))
            .collect();
        let total: f64 = w.iter().sum();
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
fn clip8(ss: i64) -> u8 {
    (ss >> PRECISION_BITS).clamp(0, 255) as u8
}

/// One pass's output value: `src[at(i)]` weighted by the taps, rounded.
fn tap_sum(t: &Taps, at: impl Fn(usize) -> u8) -> u8 {
    let half = 1i64 << (PRECISION_BITS - 1);
    let s = t
        .weights
        .iter()
        .enumerate()
        .fold(half, |s, (i, &k)| s + at(t.first + i) as i64 * k as i64);
    clip8(s)
}

/// Resizes an interleaved 8-bit image `(h, w, c)` to `(out_h, out_w, c)` as Pillow's
/// `Image.resize((out_w, out_h), filter)` does (each channel on its own). Sizes must be
/// positive and `src` must hold h·w·c bytes.
///
/// # Shapes
/// src: h·w·c bytes, row-major, channels last → out_h·out_w·c bytes
pub fn resize_pil(
    src: &[u8],
    (h, w, c): (usize, usize, usize),
    (out_h, out_w): (usize, usize),
    filter: Filter,
) -> Vec<u8> {
    let whole = Window {
        y: 0..out_h,
        x: 0..out_w,
    };
    resize_pil_window(src, (h, w, c), (out_h, out_w), whole, filter)
}

/// Rows and columns of a resized image's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub y: Range<usize>,
    pub x: Range<usize>,
}

/// The `window` of [`resize_pil`]'s output, byte for byte, computing only what it needs: the
/// first pass over the source rows (or columns) and for the columns (or rows) the window
/// reads. A crop of an up-scaled sliver (16384×1 to a shorter side of 384: 6.3 M × 384 pixels
/// whole) costs the crop, not the whole resized image.
///
/// # Shapes
/// src: h·w·c bytes, row-major, channels last → window.y.len()·window.x.len()·c bytes
pub fn resize_pil_window(
    src: &[u8],
    (h, w, c): (usize, usize, usize),
    (out_h, out_w): (usize, usize),
    window: Window,
    filter: Filter,
) -> Vec<u8> {
    debug_assert_eq!(src.len(), h * w * c);
    debug_assert!(window.y.end <= out_h && window.x.end <= out_w);
    if vertical_first((h, w), (out_h, out_w)) {
        return resize_vertical_first(src, (h, w, c), (out_h, out_w), window, filter);
    }
    let (wh, ww) = (window.y.len(), window.x.len());
    let kv = (h != out_h).then(|| taps(h, out_h, window.y.clone(), filter));
    // Rows the vertical pass reads (Pillow's horizontal pass covers only those).
    let (first, last) = match &kv {
        Some(kv) => span(kv),
        None => (window.y.start, window.y.end),
    };
    let rows = last - first;
    // Horizontal pass (skipped by Pillow when the width does not change).
    let tmp = if w != out_w {
        let kh = taps(w, out_w, window.x.clone(), filter);
        let mut tmp = vec![0u8; rows * ww * c];
        for y in 0..rows {
            let row = &src[(first + y) * w * c..(first + y + 1) * w * c];
            for (x, t) in kh.iter().enumerate() {
                for ch in 0..c {
                    tmp[(y * ww + x) * c + ch] = tap_sum(t, |i| row[i * c + ch]);
                }
            }
        }
        tmp
    } else {
        let mut tmp = Vec::with_capacity(rows * ww * c);
        for y in first..last {
            tmp.extend_from_slice(&src[(y * w + window.x.start) * c..(y * w + window.x.end) * c]);
        }
        tmp
    };
    let Some(kv) = kv else {
        return tmp;
    };
    let mut out = vec![0u8; wh * ww * c];
    for (y, t) in kv.iter().enumerate() {
        for x in 0..ww {
            for ch in 0..c {
                out[(y * ww + x) * c + ch] = tap_sum(t, |i| tmp[((i - first) * ww + x) * c + ch]);
            }
        }
    }
    out
}

/// Whether Pillow runs the vertical pass first: Pillow 13 does when the height shrinks by more
/// than twice as many pixels as the width does (h − out_h > 2·(w − out_w); so always when the
/// height shrinks and the width grows); Pillow ≤ 12 never. The order changes a few pixels by
/// a level or more (each pass rounds to 8 bits); measured on 2,900 random shapes, this rule
/// gives Pillow 13's order in every one.
pub fn vertical_first((h, w): (usize, usize), (out_h, out_w): (usize, usize)) -> bool {
    out_h < h && (h - out_h) as i64 > 2 * (w as i64 - out_w as i64)
}

/// The source indices a set of taps reads: `first..last`.
fn span(t: &[Taps]) -> (usize, usize) {
    (
        t.first().map_or(0, |t| t.first),
        t.last().map_or(0, |t| t.first + t.weights.len()),
    )
}

/// [`resize_pil_window`] in Pillow 13's other order: the vertical pass first (into 8-bit
/// rows, over the columns the horizontal pass reads), then the horizontal pass.
fn resize_vertical_first(
    src: &[u8],
    (h, w, c): (usize, usize, usize),
    (out_h, out_w): (usize, usize),
    window: Window,
    filter: Filter,
) -> Vec<u8> {
    let (wh, ww) = (window.y.len(), window.x.len());
    let kv = taps(h, out_h, window.y.clone(), filter);
    let kh = (w != out_w).then(|| taps(w, out_w, window.x.clone(), filter));
    let (first, last) = match &kh {
        Some(kh) => span(kh),
        None => (window.x.start, window.x.end),
    };
    let cols = last - first;
    let mut tmp = vec![0u8; wh * cols * c];
    for (y, t) in kv.iter().enumerate() {
        for x in 0..cols {
            for ch in 0..c {
                tmp[(y * cols + x) * c + ch] = tap_sum(t, |i| src[(i * w + first + x) * c + ch]);
            }
        }
    }
    let Some(kh) = kh else {
        return tmp;
    };
    let mut out = vec![0u8; wh * ww * c];
    for y in 0..wh {
        let row = &tmp[y * cols * c..(y + 1) * cols * c];
        for (x, t) in kh.iter().enumerate() {
            for ch in 0..c {
                out[(y * ww + x) * c + ch] = tap_sum(t, |i| row[(i - first) * c + ch]);
            }
        }
    }
    out
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
        return Err(Error::bad_data(format!(
            "resize: {} bytes do not make a {c}x{h}x{w} image",
            src.len()
        )));
    }
    if h == 0 || w == 0 || out_h == 0 || out_w == 0 {
        return Err(Error::invalid(format!(
            "resize: cannot resize {h}x{w} to {out_h}x{out_w}"
        )));
    }
    let mut out = Vec::with_capacity(c * out_h * out_w);
    for plane in src.chunks_exact(h * w) {
        out.extend(resize_pil(
            plane,
            (h, w, 1),
            (out_h, out_w),
            Filter::Bilinear,
        ));
    }
    Ok(out)
}

/// `Image.resize((width, height), resample=filter)` of an RGB image, bit-exact with Pillow
/// (the image itself when the size does not change or is empty).
pub fn pil_resize(img: &RgbImage, width: u32, height: u32, filter: Filter) -> RgbImage {
    let (w0, h0) = (img.width() as usize, img.height() as usize);
    let (w1, h1) = (width as usize, height as usize);
    if (w0, h0) == (w1, h1) || w1 == 0 || h1 == 0 || w0 == 0 || h0 == 0 {
        return img.clone();
    }
    let out = resize_pil(img.as_raw(), (h0, w0, 3), (h1, w1), filter);
    RgbImage::from_raw(width, height, out).expect("sizes match")
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
    let mut halved: Option<RgbImage> = None;
    loop {
        let cur = halved.as_ref().unwrap_or(img);
        if cur.width().min(cur.height()) < 2 * size {
            break;
        }
        halved = Some(pil_resize(
            cur,
            cur.width() / 2,
            cur.height() / 2,
            Filter::Box,
        ));
    }
    let img = halved.as_ref().unwrap_or(img);
    let (w, h) = (img.width(), img.height());
    if w == 0 || h == 0 {
        return Err(Error::invalid("adm_center_crop: the image is empty"));
    }
    let scale = size as f64 / w.min(h) as f64;
    let (nw, nh) = (
        round_half_even(w as f64 * scale),
        round_half_even(h as f64 * scale),
    );
    if nw < size || nh < size {
        return Err(Error::invalid(format!(
            "the resized image is {nw}x{nh}, smaller than {size}x{size}"
        )));
    }
    // Only the crop of the bicubic resize is computed (the same bytes as resizing whole).
    let (x0, y0) = ((nw - size) / 2, (nh - size) / 2);
    let window = Window {
        y: y0 as usize..(y0 + size) as usize,
        x: x0 as usize..(x0 + size) as usize,
    };
    let out = resize_pil_window(
        img.as_raw(),
        (h as usize, w as usize, 3),
        (nh as usize, nw as usize),
        window,
        Filter::Bicubic,
    );
    Ok(RgbImage::from_raw(size, size, out).expect("the window is size x size"))
}

/// transformers' `get_resize_output_image_size(default_to_square=False)` (the
/// `shortest_edge` rule): the shorter side becomes `side`, the longer
/// `int(side · longer / shorter)` (truncated); `(width, height)` out.
pub fn shortest_edge_size(width: u32, height: u32, side: u32) -> (u32, u32) {
    let (short, long) = (width.min(height), width.max(height));
    let new_long = (side as f64 * long as f64 / short.max(1) as f64) as u32;
    if width <= height {
        (side, new_long)
    } else {
        (new_long, side)
    }
}

/// transformers' image processors (PIL backend) up to their 8-bit picture: `img` resized to
/// `width`×`height` with Pillow's `filter` (`Image.resize`), then transformers' `center_crop`
/// to `size`×`size`: the crop's top left at ⌊(side − size) / 2⌋, black (0) where it reaches
/// past a side smaller than the crop. Only the crop of the resize is computed.
pub fn resize_center_crop(
    img: &RgbImage,
    (width, height): (u32, u32),
    size: u32,
    filter: Filter,
) -> Result<RgbImage> {
    let (w, h) = (img.width(), img.height());
    if size == 0 || width == 0 || height == 0 {
        return Err(Error::invalid(format!(
            "resize: cannot resize to {width}x{height} and crop {size}x{size}"
        )));
    }
    if w == 0 || h == 0 {
        return Err(Error::invalid("resize: the image is empty"));
    }
    // Python's floor division: negative where the resized side is smaller than the crop.
    let offset = |side: u32| (side as i64 - size as i64).div_euclid(2);
    let (x0, y0) = (offset(width), offset(height));
    let inside =
        |o: i64, side: u32| o.max(0) as usize..((o + size as i64).min(side as i64)) as usize;
    let window = Window {
        y: inside(y0, height),
        x: inside(x0, width),
    };
    let same = (w, h) == (width, height);
    let part = if same {
        let mut v = Vec::with_capacity(window.y.len() * window.x.len() * 3);
        for y in window.y.clone() {
            let row = y * w as usize * 3;
            v.extend_from_slice(&img.as_raw()[row + window.x.start * 3..row + window.x.end * 3]);
        }
        v
    } else {
        resize_pil_window(
            img.as_raw(),
            (h as usize, w as usize, 3),
            (height as usize, width as usize),
            window.clone(),
            filter,
        )
    };
    let part = RgbImage::from_raw(window.x.len() as u32, window.y.len() as u32, part)
        .expect("sized from the window");
    if x0 >= 0 && y0 >= 0 && window.x.len() == size as usize && window.y.len() == size as usize {
        return Ok(part);
    }
    let mut out = RgbImage::new(size, size);
    image::imageops::replace(&mut out, &part, (-x0).max(0), (-y0).max(0));
    Ok(out)
}

/// The padding colour of Janus's image processor: `int(0.5 · 255)` per channel (its mean).
pub const JANUS_FILL: [u8; 3] = [127, 127, 127];

/// transformers' `JanusImageProcessor` (PIL backend) up to its 8-bit picture: the longer side
/// resized to `size` with Pillow's bicubic (the other side `round(side · size / longer)`,
/// half to even as Python rounds, at least 14 or `size` when that is smaller), then pasted
/// onto a `size`×`size` canvas of `fill` at offset ⌊(size − side) / 2⌋.
pub fn pad_to_square(img: &RgbImage, size: u32, fill: [u8; 3]) -> Result<RgbImage> {
    if size == 0 {
        return Err(Error::setting("size", size, "must be positive"));
    }
    let (w, h) = (img.width(), img.height());
    if w == 0 || h == 0 {
        return Err(Error::invalid("pad_to_square: the image is empty"));
    }
    let delta = size as f64 / w.max(h) as f64;
    let min_side = 14.min(size);
    let side = |s: u32| round_half_even(s as f64 * delta).clamp(min_side, size);
    let (nw, nh) = (side(w), side(h));
    let resized = pil_resize(img, nw, nh, Filter::Bicubic);
    let mut out = RgbImage::from_pixel(size, size, image::Rgb(fill));
    let (x0, y0) = ((size - nw) / 2, (size - nh) / 2);
    image::imageops::replace(&mut out, &resized, x0 as i64, y0 as i64);
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

    #[test]
    fn pillow_13_pass_order() {
        assert!(vertical_first((90, 37), (77, 32))); // 13 > 2 · 5
        assert!(!vertical_first((41, 75), (32, 58))); // 9 < 2 · 17
        assert!(vertical_first((50, 30), (36, 36))); // width grows
        assert!(!vertical_first((30, 50), (36, 36))); // height grows
        assert!(!vertical_first((60, 40), (40, 30))); // 20 = 2 · 10
    }

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

    /// A window of a resize is the whole resize cropped, byte for byte, for every filter,
    /// shrinking and growing; ADM's crop computed through it equals the whole-image path.
    #[test]
    fn resize_window_equals_the_whole_resize_cropped() {
        let img = RgbImage::from_fn(41, 17, |x, y| {
            let v = x.wrapping_mul(2654435761u32.wrapping_mul(y + 1)) ^ (y * 97);
            image::Rgb([v as u8, (v >> 8) as u8, (v >> 16) as u8])
        });
        for filter in [Filter::Box, Filter::Bilinear, Filter::Bicubic] {
            for (oh, ow, wy, wx) in [
                (9, 20, 2..7, 3..18),
                (68, 164, 10..60, 40..150),
                (17, 100, 0..17, 90..100),
                (5, 41, 1..3, 0..41),
                // Height shrinking more than twice the width: the vertical pass first.
                (6, 44, 1..5, 3..40),
                (3, 40, 0..3, 0..40),
            ] {
                let whole = resize_pil(img.as_raw(), (17, 41, 3), (oh, ow), filter);
                let want: Vec<u8> = wy
                    .clone()
                    .flat_map(|y| whole[(y * ow + wx.start) * 3..(y * ow + wx.end) * 3].to_vec())
                    .collect();
                let window = Window {
                    y: wy.clone(),
                    x: wx.clone(),
                };
                let got = resize_pil_window(img.as_raw(), (17, 41, 3), (oh, ow), window, filter);
                assert_eq!(got, want, "{filter:?} to {oh}x{ow}, {wy:?} x {wx:?}");
            }
        }
        let (nw, nh) = (round_half_even(41.0 * 16.0 / 17.0), 16);
        let whole = pil_resize(&img, nw, nh, Filter::Bicubic);
        let want = image::imageops::crop_imm(&whole, (nw - 16) / 2, 0, 16, 16).to_image();
        assert_eq!(adm_center_crop(&img, 16).unwrap(), want);
    }

    #[test]
    fn adm_crop_is_square_of_the_size() {
        let img = RgbImage::from_fn(150, 101, |x, y| image::Rgb([x as u8, y as u8, 7]));
        let out = adm_center_crop(&img, 32).unwrap();
        assert_eq!(out.dimensions(), (32, 32));
    }

    #[test]
    fn bilinear_of_planes_equals_bilinear_of_interleaved_channels() {
        let (h, w) = (9, 13);
        let rgb = RgbImage::from_fn(w, h, |x, y| {
            image::Rgb([(x * 19) as u8, (y * 23) as u8, (x * y) as u8])
        });
        let inter = pil_resize(&rgb, 5, 17, Filter::Bilinear);
        let planar: Vec<u8> = (0..3)
            .flat_map(|c| rgb.pixels().map(move |p| p.0[c]))
            .collect();
        let out = resize_bilinear_pil(&planar, (3, h as usize, w as usize), (17, 5)).unwrap();
        for (i, p) in inter.pixels().enumerate() {
            for c in 0..3 {
                assert_eq!(p.0[c], out[c * 17 * 5 + i]);
            }
        }
    }
}
