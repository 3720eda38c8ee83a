//! Seeded, allocation-free augmentation of `u8` `(c, h, w)` images into normalised `f32`.
//!
//! One fused pass does random shift (as "pad by `shift` pixels with 0, then random crop"),
//! horizontal flip and normalisation `(x / 255 - mean) / std`; random erasing (torchvision's
//! `RandomErasing`: area fraction in `erase_scale`, log-uniform aspect ratio in `erase_ratio`,
//! up to 10 tries) then overwrites a rectangle with `erase_value` in normalised space.
//! About a microsecond per 28×28 image.
//!
//! Randomness is reproducible: [`augment_batch`] derives an independent generator for the
//! k-th image of a batch from `(seed, k)`, so results do not depend on threading. Pass a
//! different seed for every step, e.g. [`mix_seed`]`(&[base, epoch, step])`.

use super::Dataset;
use crate::{Error, Result};
use candle_core::{Device, Tensor};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

/// Which augmentations to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Augment {
    /// Maximum shift in pixels in each direction (pad-and-crop); 0 disables.
    pub shift: usize,
    /// Flip horizontally with probability 1/2.
    pub hflip: bool,
    /// Probability of random erasing; 0 disables.
    pub erase_prob: f32,
    /// Range of the erased area as a fraction of the image.
    pub erase_scale: (f32, f32),
    /// Range of the erased rectangle's aspect ratio (log-uniform).
    pub erase_ratio: (f32, f32),
    /// Value written into the erased rectangle (after normalisation).
    pub erase_value: f32,
}

impl Default for Augment {
    /// No augmentation (evaluation).
    fn default() -> Self {
        Self::none()
    }
}

impl Augment {
    /// No augmentation: only normalisation.
    pub fn none() -> Self {
        Self {
            shift: 0,
            hflip: false,
            erase_prob: 0.0,
            erase_scale: (0.02, 0.33),
            erase_ratio: (0.3, 3.3),
            erase_value: 0.0,
        }
    }

    /// Shift by up to `shift` pixels, horizontal flip, and random erasing with probability
    /// `erase_prob` (torchvision's default scale and ratio ranges).
    pub fn standard(shift: usize, erase_prob: f32) -> Self {
        Self {
            shift,
            hflip: true,
            erase_prob,
            ..Self::none()
        }
    }

    fn validate(&self) -> Result<()> {
        let (s0, s1) = self.erase_scale;
        let (r0, r1) = self.erase_ratio;
        let ok = (0.0..=1.0).contains(&self.erase_prob)
            && 0.0 < s0
            && s0 <= s1
            && s1 <= 1.0
            && 0.0 < r0
            && r0 <= r1
            && r1.is_finite();
        if !ok {
            return Err(Error::invalid(format!(
                "augment: bad random erasing settings (p {}, scale {:?}, ratio {:?})",
                self.erase_prob, self.erase_scale, self.erase_ratio
            )));
        }
        Ok(())
    }
}

/// Per-channel normalisation `(x / 255 - mean) / std`.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalize {
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
}

impl Normalize {
    /// Checks that both have one positive finite entry per channel.
    pub fn new(mean: Vec<f32>, std: Vec<f32>) -> Result<Self> {
        if mean.is_empty()
            || mean.len() != std.len()
            || std.iter().any(|&s| !(s > 0.0 && s.is_finite()))
            || mean.iter().any(|m| !m.is_finite())
        {
            return Err(Error::invalid(format!(
                "normalize: need one mean and one positive std per channel, got mean {mean:?}, \
                 std {std:?}"
            )));
        }
        Ok(Self { mean, std })
    }

    /// `x / 255` for `channels` channels.
    pub fn unit(channels: usize) -> Self {
        Self {
            mean: vec![0.0; channels],
            std: vec![1.0; channels],
        }
    }

    /// Fashion-MNIST training-set statistics (1 channel).
    pub fn fashion_mnist() -> Self {
        Self {
            mean: vec![0.2860],
            std: vec![0.3530],
        }
    }

    /// CIFAR-10 training-set statistics (3 channels).
    pub fn cifar10() -> Self {
        Self {
            mean: vec![0.4914, 0.4822, 0.4465],
            std: vec![0.2470, 0.2435, 0.2616],
        }
    }

    pub fn channels(&self) -> usize {
        self.mean.len()
    }

    /// `(scale, offset)` per channel so that `out = x * scale + offset`.
    fn affine(&self) -> Vec<(f32, f32)> {
        self.mean
            .iter()
            .zip(&self.std)
            .map(|(&m, &s)| (1.0 / (255.0 * s), -m / s))
            .collect()
    }
}

fn check_lens(
    img: &[u8],
    out: &[f32],
    (c, h, w): (usize, usize, usize),
    norm: &Normalize,
) -> Result<()> {
    let n = c * h * w;
    if img.len() != n || out.len() != n {
        return Err(Error::bad_data(format!(
            "augment: image has {} bytes and output {} values, expected {c}x{h}x{w}",
            img.len(),
            out.len()
        )));
    }
    if norm.channels() != c {
        return Err(Error::bad_data(format!(
            "augment: normalisation has {} channels, the image {c}",
            norm.channels()
        )));
    }
    Ok(())
}

/// Normalises a `(c, h, w)` image (`c = norm.channels()`) into `out`.
pub fn normalize(img: &[u8], norm: &Normalize, out: &mut [f32]) -> Result<()> {
    let c = norm.channels();
    if c == 0 || !img.len().is_multiple_of(c) {
        return Err(Error::bad_data(format!(
            "normalize: {} bytes is not a whole number of {c}-channel planes",
            img.len()
        )));
    }
    check_lens(img, out, (c, 1, img.len() / c), norm)?;
    let plane = img.len() / c;
    for (ch, (a, b)) in norm.affine().into_iter().enumerate() {
        let r = ch * plane..(ch + 1) * plane;
        for (o, &x) in out[r.clone()].iter_mut().zip(&img[r]) {
            *o = x as f32 * a + b;
        }
    }
    Ok(())
}

/// Augments one `(c, h, w)` image into `out` (same length), drawing from `rng`.
pub fn augment_into<R: Rng + ?Sized>(
    img: &[u8],
    dims: (usize, usize, usize),
    aug: &Augment,
    norm: &Normalize,
    rng: &mut R,
    out: &mut [f32],
) -> Result<()> {
    check_lens(img, out, dims, norm)?;
    aug.validate()?;
    let (c, h, w) = dims;
    let k = aug.shift.min(i32::MAX as usize) as i64;
    let (dy, dx) = if k > 0 {
        (
            rng.random_range(-k..=k) as isize,
            rng.random_range(-k..=k) as isize,
        )
    } else {
        (0, 0)
    };
    let flip = aug.hflip && rng.random::<bool>();
    let (hi, wi) = (h as isize, w as isize);
    for (ch, (a, b)) in norm.affine().into_iter().enumerate() {
        let src = &img[ch * h * w..(ch + 1) * h * w];
        let dst = &mut out[ch * h * w..(ch + 1) * h * w];
        for y in 0..hi {
            let row = &mut dst[y as usize * w..(y as usize + 1) * w];
            let sy = y - dy;
            if sy < 0 || sy >= hi {
                row.fill(b);
                continue;
            }
            let srow = &src[sy as usize * w..(sy as usize + 1) * w];
            for (x, o) in row.iter_mut().enumerate() {
                let xf = if flip {
                    wi - 1 - x as isize
                } else {
                    x as isize
                };
                let sx = xf - dx;
                *o = if sx < 0 || sx >= wi {
                    b
                } else {
                    srow[sx as usize] as f32 * a + b
                };
            }
        }
    }
    if aug.erase_prob > 0.0 && rng.random::<f32>() < aug.erase_prob {
        let area = (h * w) as f32;
        let (lr0, lr1) = (aug.erase_ratio.0.ln(), aug.erase_ratio.1.ln());
        for _ in 0..10 {
            let target = area * uniform(rng, aug.erase_scale.0, aug.erase_scale.1);
            let ratio = uniform(rng, lr0, lr1).exp();
            let eh = (target * ratio).sqrt().round() as usize;
            let ew = (target / ratio).sqrt().round() as usize;
            if eh == 0 || ew == 0 || eh >= h || ew >= w {
                continue;
            }
            let y0 = rng.random_range(0..=h - eh);
            let x0 = rng.random_range(0..=w - ew);
            for ch in 0..c {
                for y in y0..y0 + eh {
                    let s = ch * h * w + y * w + x0;
                    out[s..s + ew].fill(aug.erase_value);
                }
            }
            break;
        }
    }
    Ok(())
}

fn uniform<R: Rng + ?Sized>(rng: &mut R, lo: f32, hi: f32) -> f32 {
    lo + (hi - lo) * rng.random::<f32>()
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Combines several numbers (base seed, epoch, step, ...) into one well-mixed seed.
pub fn mix_seed(parts: &[u64]) -> u64 {
    parts
        .iter()
        .fold(0x5eed_u64, |acc, &p| splitmix(acc ^ splitmix(p)))
}

/// The generator [`augment_batch`] uses for the `k`-th image of a batch with `seed`.
pub fn item_rng(seed: u64, k: u64) -> SmallRng {
    SmallRng::seed_from_u64(mix_seed(&[seed, k]))
}

/// Augments the images `indices` of `ds` (in parallel) into `out`, resized to
/// `indices.len() * c * h * w` values, `(b, c, h, w)` order.
pub fn augment_batch(
    ds: &Dataset,
    indices: &[usize],
    aug: &Augment,
    norm: &Normalize,
    seed: u64,
    out: &mut Vec<f32>,
) -> Result<()> {
    let per = ds.image_len();
    if let Some(&bad) = indices.iter().find(|&&i| i >= ds.n) {
        return Err(Error::invalid(format!(
            "augment: index {bad} out of range (n = {})",
            ds.n
        )));
    }
    aug.validate()?;
    out.clear();
    out.resize(indices.len() * per, 0.0);
    if per == 0 {
        return Ok(());
    }
    out.par_chunks_mut(per)
        .zip(indices.par_iter())
        .enumerate()
        .try_for_each(|(k, (o, &i))| {
            let mut rng = item_rng(seed, k as u64);
            augment_into(ds.image(i), ds.dims(), aug, norm, &mut rng, o)
        })
}

/// [`augment_batch`] as tensors on `device`: images `(b, c, h, w)` `f32` and labels `(b,)`
/// `u32`.
pub fn batch_tensors(
    ds: &Dataset,
    indices: &[usize],
    aug: &Augment,
    norm: &Normalize,
    seed: u64,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let mut buf = Vec::new();
    augment_batch(ds, indices, aug, norm, seed, &mut buf)?;
    let (c, h, w) = ds.dims();
    let x = Tensor::from_vec(buf, (indices.len(), c, h, w), device)?;
    let labels: Vec<u32> = indices.iter().map(|&i| ds.labels[i] as u32).collect();
    let y = Tensor::from_vec(labels, indices.len(), device)?;
    Ok((x, y))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(h: usize, w: usize) -> Vec<u8> {
        (0..h * w).map(|i| (i + 1) as u8).collect()
    }

    #[test]
    fn none_is_plain_normalisation() {
        let img = ramp(3, 4);
        let norm = Normalize::new(vec![0.5], vec![0.25]).unwrap();
        let mut a = vec![0.0; 12];
        let mut b = vec![0.0; 12];
        let mut rng = item_rng(1, 2);
        augment_into(&img, (1, 3, 4), &Augment::none(), &norm, &mut rng, &mut a).unwrap();
        normalize(&img, &norm, &mut b).unwrap();
        assert_eq!(a, b);
        for (o, &x) in a.iter().zip(&img) {
            assert!((o - (x as f32 / 255.0 - 0.5) / 0.25).abs() < 1e-5);
        }
    }

    #[test]
    fn shift_and_flip_move_pixels() {
        let (h, w) = (5, 6);
        let img = ramp(h, w);
        let norm = Normalize::unit(1);
        let aug = Augment {
            shift: 2,
            hflip: true,
            ..Augment::none()
        };
        let mut seen_shift = false;
        for seed in 0..50 {
            let mut out = vec![0.0; h * w];
            augment_into(
                &img,
                (1, h, w),
                &aug,
                &norm,
                &mut item_rng(seed, 0),
                &mut out,
            )
            .unwrap();
            let px: Vec<u8> = out.iter().map(|v| (v * 255.0).round() as u8).collect();
            // Every non-zero output pixel is a source pixel, and rows stay rows.
            for y in 0..h {
                let row: Vec<u8> = px[y * w..(y + 1) * w]
                    .iter()
                    .copied()
                    .filter(|&v| v > 0)
                    .collect();
                if let Some(&first) = row.first() {
                    let sy = (first as usize - 1) / w;
                    assert!(row.iter().all(|&v| (v as usize - 1) / w == sy));
                    assert!((sy as isize - y as isize).abs() <= 2);
                }
            }
            seen_shift |= px != img;
        }
        assert!(seen_shift);
    }

    #[test]
    fn erasing_writes_a_rectangle() {
        let (h, w) = (28, 28);
        let img = vec![200u8; h * w];
        let aug = Augment {
            erase_prob: 1.0,
            erase_value: -7.0,
            ..Augment::none()
        };
        let mut out = vec![0.0; h * w];
        augment_into(
            &img,
            (1, h, w),
            &aug,
            &Normalize::unit(1),
            &mut item_rng(3, 0),
            &mut out,
        )
        .unwrap();
        let erased: Vec<usize> = (0..h * w).filter(|&i| out[i] == -7.0).collect();
        assert!(!erased.is_empty());
        let ys: Vec<usize> = erased.iter().map(|i| i / w).collect();
        let xs: Vec<usize> = erased.iter().map(|i| i % w).collect();
        let (y0, y1) = (*ys.iter().min().unwrap(), *ys.iter().max().unwrap());
        let (x0, x1) = (*xs.iter().min().unwrap(), *xs.iter().max().unwrap());
        assert_eq!(erased.len(), (y1 - y0 + 1) * (x1 - x0 + 1));
        let frac = erased.len() as f32 / (h * w) as f32;
        assert!((0.01..=0.4).contains(&frac), "{frac}");
    }

    #[test]
    fn batches_are_deterministic_and_checked() {
        let n = 40;
        let ds = Dataset::new(
            (0..n * 3 * 8 * 8).map(|i| (i * 7 % 256) as u8).collect(),
            (0..n).map(|i| (i % 10) as u16).collect(),
            (3, 8, 8),
            (0..10).map(|i| i.to_string()).collect(),
        )
        .unwrap();
        let aug = Augment::standard(2, 0.5);
        let norm = Normalize::cifar10();
        let idx: Vec<usize> = (0..n).rev().collect();
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        augment_batch(&ds, &idx, &aug, &norm, 11, &mut a).unwrap();
        augment_batch(&ds, &idx, &aug, &norm, 11, &mut b).unwrap();
        augment_batch(&ds, &idx, &aug, &norm, 12, &mut c).unwrap();
        assert_eq!(a.len(), n * 192);
        assert_eq!(a, b);
        assert_ne!(a, c);
        // The k-th image depends only on (seed, k).
        let mut one = vec![0.0; 192];
        augment_into(
            ds.image(idx[5]),
            ds.dims(),
            &aug,
            &norm,
            &mut item_rng(11, 5),
            &mut one,
        )
        .unwrap();
        assert_eq!(&a[5 * 192..6 * 192], &one[..]);

        let (x, y) = batch_tensors(&ds, &[0, 3], &aug, &norm, 1, &Device::Cpu).unwrap();
        assert_eq!(x.dims(), &[2, 3, 8, 8]);
        assert_eq!(y.to_vec1::<u32>().unwrap(), vec![0, 3]);

        assert!(augment_batch(&ds, &[n], &aug, &norm, 1, &mut a).is_err());
        assert!(augment_batch(&ds, &[0], &aug, &Normalize::unit(1), 1, &mut a).is_err());
        let bad = Augment {
            erase_prob: 2.0,
            ..aug.clone()
        };
        assert!(augment_batch(&ds, &[0], &bad, &norm, 1, &mut a).is_err());
        let mut short = vec![0.0; 3];
        assert!(augment_into(
            ds.image(0),
            ds.dims(),
            &aug,
            &norm,
            &mut item_rng(0, 0),
            &mut short
        )
        .is_err());
        assert!(Normalize::new(vec![0.0], vec![0.0]).is_err());
        assert!(Normalize::new(vec![0.0, 1.0], vec![1.0]).is_err());
    }

    #[test]
    fn fast_enough() {
        let n = 2000;
        let ds = Dataset::new(
            vec![128u8; n * 28 * 28],
            vec![0; n],
            (1, 28, 28),
            vec!["x".into()],
        )
        .unwrap();
        let aug = Augment::standard(2, 0.5);
        let norm = Normalize::fashion_mnist();
        let mut out = vec![0.0; 784];
        let t = std::time::Instant::now();
        let mut rng = item_rng(0, 0);
        for i in 0..n {
            augment_into(ds.image(i), ds.dims(), &aug, &norm, &mut rng, &mut out).unwrap();
        }
        let per = t.elapsed().as_secs_f64() / n as f64 * 1e6;
        eprintln!("augment: {per:.2} us per 28x28 image");
        // Generous bound (debug builds, busy machines); the release figure is ~1 us.
        assert!(per < 200.0, "{per} us per image");
    }
}
