//! Image-quality and codebook metrics.
//!
//! [`ssim`] reproduces
//! `skimage.metrics.structural_similarity(a, b, channel_axis=0, data_range=1.0,
//! gaussian_weights=True, sigma=1.5, use_sample_covariance=False)` (Wang et al. 2004):
//! separable Gaussian filter, σ = 1.5 truncated at 3.5σ (11 taps, radius 5), scipy's
//! `reflect` border mode, population covariances, `K1 = 0.01`, `K2 = 0.03`, the SSIM map
//! cropped by `(win_size - 1) / 2 = 5` pixels on each side before averaging, and the mean over
//! channels. All arithmetic is in `f64`. Values are checked against scikit-image 0.26 in the
//! tests (fixtures from `scripts/make_metric_fixtures.py`).

use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};

/// Gaussian σ of the SSIM window.
pub const SSIM_SIGMA: f64 = 1.5;
/// skimage truncates the Gaussian at this many σ.
pub const SSIM_TRUNCATE: f64 = 3.5;
const K1: f64 = 0.01;
const K2: f64 = 0.03;

/// Peak signal-to-noise ratio in dB: `10 log10(data_range² / mse)`; `+inf` for identical
/// inputs.
pub fn psnr(a: &[f32], b: &[f32], data_range: f32) -> Result<f64> {
    if a.len() != b.len() {
        return Err(Error::bad_data(format!(
            "psnr: inputs have {} and {} values",
            a.len(),
            b.len()
        )));
    }
    if a.is_empty() {
        return Err(Error::bad_data("psnr: empty inputs"));
    }
    if !(data_range > 0.0 && data_range.is_finite()) {
        return Err(Error::invalid(format!(
            "psnr: data_range must be positive, got {data_range}"
        )));
    }
    let mse = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = x as f64 - y as f64;
            d * d
        })
        .sum::<f64>()
        / a.len() as f64;
    let r = data_range as f64;
    Ok(10.0 * (r * r / mse).log10())
}

fn tensor_values(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.to_dtype(DType::F32)?
        .to_device(&Device::Cpu)?
        .flatten_all()?
        .to_vec1::<f32>()?)
}

/// [`psnr`] of two tensors of the same shape (any float dtype, any device).
pub fn psnr_tensor(a: &Tensor, b: &Tensor, data_range: f32) -> Result<f64> {
    if a.dims() != b.dims() {
        return Err(Error::bad_data(format!(
            "psnr: shapes differ: {:?} vs {:?}",
            a.dims(),
            b.dims()
        )));
    }
    psnr(&tensor_values(a)?, &tensor_values(b)?, data_range)
}

/// The normalised 1-D Gaussian kernel scipy's `gaussian_filter1d` uses.
fn gaussian_kernel(sigma: f64, truncate: f64) -> Vec<f64> {
    let r = (truncate * sigma + 0.5) as i64;
    let w: Vec<f64> = (-r..=r)
        .map(|x| (-0.5 * (x * x) as f64 / (sigma * sigma)).exp())
        .collect();
    let s: f64 = w.iter().sum();
    w.into_iter().map(|x| x / s).collect()
}

/// scipy `mode="reflect"` (half-sample symmetric: `d c b a | a b c d | d c b a`), for any
/// offset, also when the radius exceeds the length.
fn reflect(i: i64, n: usize) -> usize {
    let n = n as i64;
    let p = 2 * n;
    let m = i.rem_euclid(p);
    (if m >= n { p - 1 - m } else { m }) as usize
}

/// Separable Gaussian filter of an `h`×`w` plane (rows first, as scipy does axis 0 first).
fn gaussian_filter(src: &[f64], h: usize, w: usize, k: &[f64], tmp: &mut [f64], dst: &mut [f64]) {
    let r = (k.len() / 2) as i64;
    let rows: Vec<Vec<usize>> = (0..h as i64)
        .map(|y| (-r..=r).map(|o| reflect(y + o, h)).collect())
        .collect();
    let cols: Vec<Vec<usize>> = (0..w as i64)
        .map(|x| (-r..=r).map(|o| reflect(x + o, w)).collect())
        .collect();
    // Along axis 0 (rows).
    for (y, idx) in rows.iter().enumerate() {
        let out = &mut tmp[y * w..(y + 1) * w];
        out.fill(0.0);
        for (&yy, &kv) in idx.iter().zip(k) {
            let row = &src[yy * w..(yy + 1) * w];
            for (o, &s) in out.iter_mut().zip(row) {
                *o += kv * s;
            }
        }
    }
    // Along axis 1 (columns).
    for y in 0..h {
        let row = &tmp[y * w..(y + 1) * w];
        for (x, idx) in cols.iter().enumerate() {
            dst[y * w + x] = idx.iter().zip(k).map(|(&xx, &kv)| kv * row[xx]).sum();
        }
    }
}

/// Mean SSIM of one `h`×`w` channel, skimage-style.
fn ssim_plane(a: &[f32], b: &[f32], h: usize, w: usize, data_range: f64) -> f64 {
    let k = gaussian_kernel(SSIM_SIGMA, SSIM_TRUNCATE);
    let n = h * w;
    let x: Vec<f64> = a.iter().map(|&v| v as f64).collect();
    let y: Vec<f64> = b.iter().map(|&v| v as f64).collect();
    let xx: Vec<f64> = x.iter().map(|v| v * v).collect();
    let yy: Vec<f64> = y.iter().map(|v| v * v).collect();
    let xy: Vec<f64> = x.iter().zip(&y).map(|(p, q)| p * q).collect();
    let mut tmp = vec![0.0; n];
    let mut f = |s: &[f64]| {
        let mut d = vec![0.0; n];
        gaussian_filter(s, h, w, &k, &mut tmp, &mut d);
        d
    };
    let (ux, uy, uxx, uyy, uxy) = (f(&x), f(&y), f(&xx), f(&yy), f(&xy));
    let c1 = (K1 * data_range).powi(2);
    let c2 = (K2 * data_range).powi(2);
    let pad = (k.len() - 1) / 2;
    let mut sum = 0.0;
    let mut count = 0usize;
    for r in pad..h - pad {
        for c in pad..w - pad {
            let i = r * w + c;
            let (mx, my) = (ux[i], uy[i]);
            let vx = uxx[i] - mx * mx;
            let vy = uyy[i] - my * my;
            let vxy = uxy[i] - mx * my;
            let a1 = 2.0 * mx * my + c1;
            let a2 = 2.0 * vxy + c2;
            let b1 = mx * mx + my * my + c1;
            let b2 = vx + vy + c2;
            sum += (a1 * a2) / (b1 * b2);
            count += 1;
        }
    }
    sum / count as f64
}

/// Mean SSIM of two `(c, h, w)` images with values in `[0, data_range]` (see the module
/// docs); each side must be at least 11 pixels, as in skimage.
pub fn ssim_chw_range(
    a: &[f32],
    b: &[f32],
    (c, h, w): (usize, usize, usize),
    data_range: f64,
) -> Result<f64> {
    let n = c
        .checked_mul(h)
        .and_then(|x| x.checked_mul(w))
        .ok_or_else(|| Error::resource_limit("ssim: image too large"))?;
    if a.len() != n || b.len() != n {
        return Err(Error::bad_data(format!(
            "ssim: inputs have {} and {} values, expected {c}x{h}x{w}",
            a.len(),
            b.len()
        )));
    }
    let win = gaussian_kernel(SSIM_SIGMA, SSIM_TRUNCATE).len();
    if c == 0 || h < win || w < win {
        return Err(Error::bad_data(format!(
            "ssim: images must have at least one channel and be at least {win}x{win}, got \
             {c}x{h}x{w}"
        )));
    }
    if !(data_range > 0.0 && data_range.is_finite()) {
        return Err(Error::invalid(format!(
            "ssim: data_range must be positive, got {data_range}"
        )));
    }
    let plane = h * w;
    let total: f64 = (0..c)
        .map(|ch| {
            let s = ch * plane..(ch + 1) * plane;
            ssim_plane(&a[s.clone()], &b[s], h, w, data_range)
        })
        .sum();
    Ok(total / c as f64)
}

/// Mean SSIM of two `(c, h, w)` images in `[0, 1]`.
pub fn ssim_chw(a: &[f32], b: &[f32], dims: (usize, usize, usize)) -> Result<f64> {
    ssim_chw_range(a, b, dims, 1.0)
}

/// Mean SSIM of two `(c, h, w)` (or `(h, w)`) tensors in `[0, 1]` (any float dtype, any
/// device).
pub fn ssim(a: &Tensor, b: &Tensor) -> Result<f64> {
    if a.dims() != b.dims() {
        return Err(Error::bad_data(format!(
            "ssim: shapes differ: {:?} vs {:?}",
            a.dims(),
            b.dims()
        )));
    }
    let dims = match *a.dims() {
        [c, h, w] => (c, h, w),
        [h, w] => (1, h, w),
        ref d => {
            return Err(Error::bad_data(format!(
                "ssim: expected (c, h, w) images, got shape {d:?}"
            )))
        }
    };
    ssim_chw(&tensor_values(a)?, &tensor_values(b)?, dims)
}

/// Mean gradient magnitude of a `(c, h, w)` image's luma (c = 3: BT.601
/// `0.299 r + 0.587 g + 0.114 b`; c = 1: the channel): central differences
/// `gx = (Y[y][x+1] − Y[y][x−1]) / 2`, `gy = (Y[y+1][x] − Y[y−1][x]) / 2` at the interior
/// pixels (1 ≤ x < w − 1, 1 ≤ y < h − 1), averaged `√(gx² + gy²)`. In the image's units.
pub fn mean_gradient(img: &[f32], (c, h, w): (usize, usize, usize)) -> Result<f64> {
    let weights: &[f64] = match c {
        3 => &[0.299, 0.587, 0.114],
        1 => &[1.0],
        _ => {
            return Err(Error::invalid(format!(
                "mean_gradient: expected 1 or 3 channels, got {c}"
            )))
        }
    };
    if h < 3 || w < 3 || img.len() != c * h * w {
        return Err(Error::invalid(format!(
            "mean_gradient: expected a {c}x{h}x{w} image of at least 3x3, got {} values",
            img.len()
        )));
    }
    let plane = h * w;
    let luma: Vec<f64> = (0..plane)
        .map(|i| {
            (0..c)
                .map(|ch| weights[ch] * img[ch * plane + i] as f64)
                .sum()
        })
        .collect();
    let mut sum = 0.0;
    for y in 1..h - 1 {
        for x in 1..w - 1 {
            let gx = (luma[y * w + x + 1] - luma[y * w + x - 1]) / 2.0;
            let gy = (luma[(y + 1) * w + x] - luma[(y - 1) * w + x]) / 2.0;
            sum += (gx * gx + gy * gy).sqrt();
        }
    }
    Ok(sum / ((h - 2) * (w - 2)) as f64)
}

/// Sharpness of a reconstruction: its [`mean_gradient`] over the original's (1.0 = as much
/// edge energy as the original; a blurred rebuild is below 1). `None` when the original has
/// no gradient at all (a flat picture).
pub fn sharpness(
    original: &[f32],
    recon: &[f32],
    dims: (usize, usize, usize),
) -> Result<Option<f64>> {
    let g0 = mean_gradient(original, dims)?;
    let g1 = mean_gradient(recon, dims)?;
    Ok((g0 > 0.0).then(|| g1 / g0))
}

/// Codebook usage of a set of token indices: `(number of distinct codes used, perplexity)`,
/// where perplexity is `exp(-Σ p log p)` of the code frequencies (1 when one code is used,
/// `n_codes` when all are used equally). Indices outside `0..n_codes` are an error.
pub fn codebook_usage<T: Copy + Into<i64>>(indices: &[T], n_codes: usize) -> Result<(usize, f64)> {
    if n_codes == 0 {
        return Err(Error::bad_data("codebook usage: the codebook is empty"));
    }
    if indices.is_empty() {
        return Err(Error::bad_data("codebook usage: no indices"));
    }
    if let Some((_, i)) = crate::codes::first_out_of_range(indices, n_codes) {
        return Err(Error::bad_data(format!(
            "codebook usage: index {i} is outside the codebook of {n_codes} codes"
        )));
    }
    let mut counts = vec![0u64; n_codes];
    for &i in indices {
        counts[i.into() as usize] += 1;
    }
    Ok(crate::codes::usage_from_counts(&counts))
}

/// (PSNR dB, SSIM) of `recon` against `original`, on the 8-bit pictures (what is saved)
/// scaled to [0, 1]: the one scoring of a round trip (`vq roundtrip`, `vq eval`, the service).
pub fn score_pictures(original: &image::RgbImage, recon: &image::RgbImage) -> Result<(f64, f64)> {
    use crate::image_io::{to_tensor_chw, PixelRange};
    let unit = |i: &image::RgbImage| to_tensor_chw(i, PixelRange::ZeroOne, &Device::Cpu);
    let (a, b) = (unit(original)?, unit(recon)?);
    Ok((psnr_tensor(&a, &b, 1.0)?, ssim(&a, &b)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn psnr_values() {
        let a = [0.0f32, 0.5, 1.0, 0.25];
        assert_eq!(psnr(&a, &a, 1.0).unwrap(), f64::INFINITY);
        let b = [0.1f32, 0.5, 1.0, 0.25];
        // mse = 0.01 / 4
        let want = 10.0 * (1.0 / (0.01f64 / 4.0)).log10();
        assert!((psnr(&a, &b, 1.0).unwrap() - want).abs() < 1e-4);
        assert!(psnr(&a, &b[..3], 1.0).is_err());
        assert!(psnr(&[], &[], 1.0).is_err());
        assert!(psnr(&a, &b, 0.0).is_err());
        let ta = Tensor::new(&a, &Device::Cpu).unwrap();
        let tb = Tensor::new(&b, &Device::Cpu).unwrap();
        assert!((psnr_tensor(&ta, &tb, 1.0).unwrap() - want).abs() < 1e-4);
        assert!(psnr_tensor(&ta, &ta.reshape((2, 2)).unwrap(), 1.0).is_err());
    }

    #[test]
    fn kernel_and_reflect_match_scipy() {
        let k = gaussian_kernel(1.5, 3.5);
        assert_eq!(k.len(), 11);
        assert!((k.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // scipy.ndimage._filters._gaussian_kernel1d(1.5, 0, 5)[5]
        assert!((k[5] - 0.266_011_724_861_794_36).abs() < 1e-12, "{}", k[5]);
        // n = 3: ... 2 1 0 | 0 1 2 | 2 1 0 ...
        let got: Vec<usize> = (-4..7).map(|i| reflect(i, 3)).collect();
        assert_eq!(got, vec![2, 2, 1, 0, 0, 1, 2, 2, 1, 0, 0]);
    }

    #[test]
    fn ssim_basic_properties() {
        let dims = (2, 12, 14);
        let n = 2 * 12 * 14;
        let a: Vec<f32> = (0..n).map(|i| ((i * 37) % 101) as f32 / 100.0).collect();
        assert!((ssim_chw(&a, &a, dims).unwrap() - 1.0).abs() < 1e-12);
        let b: Vec<f32> = a.iter().map(|x| 1.0 - x).collect();
        assert!(ssim_chw(&a, &b, dims).unwrap() < 0.0);
        assert!(ssim_chw(&a, &a[1..], dims).is_err());
        assert!(ssim_chw(&a[..2 * 10 * 14], &a[..2 * 10 * 14], (2, 10, 14)).is_err());
        let t = Tensor::from_vec(a.clone(), dims, &Device::Cpu).unwrap();
        assert!((ssim(&t, &t).unwrap() - 1.0).abs() < 1e-12);
        assert!(ssim(&t, &t.flatten_all().unwrap()).is_err());
    }

    fn fixture_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/metrics")
    }

    #[test]
    fn matches_skimage() {
        let dir = fixture_dir();
        let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let cases = v["cases"].as_object().unwrap();
        assert_eq!(cases.len(), 3);
        for (name, case) in cases {
            let (sa, a) = crate::npy::read_npy_f32(dir.join(format!("{name}_a.npy"))).unwrap();
            let (sb, b) = crate::npy::read_npy_f32(dir.join(format!("{name}_b.npy"))).unwrap();
            assert_eq!(sa, sb);
            let dims = (sa[0], sa[1], sa[2]);
            let want_ssim = case["ssim"].as_f64().unwrap();
            let want_psnr = case["psnr"].as_f64().unwrap();
            let got_ssim = ssim_chw(&a, &b, dims).unwrap();
            let got_psnr = psnr(&a, &b, 1.0).unwrap();
            assert!(
                (got_ssim - want_ssim).abs() < 1e-5,
                "{name}: ssim {got_ssim} vs skimage {want_ssim}"
            );
            assert!(
                (got_psnr - want_psnr).abs() < 1e-5,
                "{name}: psnr {got_psnr} vs skimage {want_psnr}"
            );
        }
    }

    #[test]
    fn sharpness_is_the_ratio_of_mean_luma_gradients() {
        // A horizontal ramp of slope 0.1 per pixel: every interior central difference is 0.1.
        let (h, w) = (4, 5);
        let ramp: Vec<f32> = (0..h * w).map(|i| (i % w) as f32 * 0.1).collect();
        let g = mean_gradient(&ramp, (1, h, w)).unwrap();
        assert!((g - 0.1).abs() < 1e-7, "{g}");
        // Luma weights: the same ramp in green only has 0.587 of it.
        let mut rgb = vec![0.0f32; 3 * h * w];
        rgb[h * w..2 * h * w].copy_from_slice(&ramp);
        let gg = mean_gradient(&rgb, (3, h, w)).unwrap();
        assert!((gg - 0.0587).abs() < 1e-7, "{gg}");
        // Half the contrast: sharpness 0.5; itself: 1; a flat original: None.
        let half: Vec<f32> = ramp.iter().map(|v| v * 0.5).collect();
        let s = sharpness(&ramp, &half, (1, h, w)).unwrap().unwrap();
        assert!((s - 0.5).abs() < 1e-6, "{s}");
        assert_eq!(sharpness(&ramp, &ramp, (1, h, w)).unwrap(), Some(1.0));
        assert_eq!(sharpness(&[0.3; 20], &ramp, (1, h, w)).unwrap(), None);
        assert!(mean_gradient(&ramp, (2, 2, 5)).is_err());
    }

    #[test]
    fn codebook_usage_values() {
        let (used, ppl) = codebook_usage(&[3u32, 3, 3], 8).unwrap();
        assert_eq!(used, 1);
        assert!((ppl - 1.0).abs() < 1e-12);
        let idx: Vec<i64> = (0..16).map(|i| i % 4).collect();
        let (used, ppl) = codebook_usage(&idx, 16).unwrap();
        assert_eq!(used, 4);
        assert!((ppl - 4.0).abs() < 1e-9);
        assert!(codebook_usage(&[16i64], 16).is_err());
        assert!(codebook_usage(&[-1i64], 16).is_err());
        assert!(codebook_usage::<i64>(&[], 16).is_err());
        assert!(codebook_usage(&[0u16], 0).is_err());
    }
}
