//! Cosmos' `Patcher` / `UnPatcher` (`cosmos_tokenizer/modules/patching.py`): pixels folded into
//! channels before the encoder and unfolded after the decoder.
//!
//! Haar: log2(patch) levels of a 2-D discrete wavelet transform. Upstream convolves each
//! channel with the low-pass taps `hl = wavelets.flip()` and the high-pass taps
//! `hh = wavelets · (−1)^[0, 1]` at stride 2, first along the width then along the height, and
//! concatenates `[LL, LH, HL, HH]` (first letter: the width's filter) divided by 2; the
//! inverse is the matching pair of stride-2 transposed convolutions, times 2. With stride =
//! kernel = 2 those are sums of even/odd neighbours, written so here (sides are even: the
//! tokenizer's sides are multiples of the compression, so upstream's reflect padding of one
//! pixel is never read).

use super::config::PatchMethod;
use candle_core::{Result, Tensor};

/// `(even, odd)` halves of `x` along `dim` (2: rows, 3: columns of (b, c, h, w)).
fn split_pairs(x: &Tensor, dim: usize) -> Result<(Tensor, Tensor)> {
    let (b, c, h, w) = x.dims4()?;
    let (x, at) = match dim {
        2 => (x.reshape((b, c, h / 2, 2, w))?, 3),
        _ => (x.reshape((b, c, h, w / 2, 2))?, 4),
    };
    Ok((
        x.narrow(at, 0, 1)?.squeeze(at)?,
        x.narrow(at, 1, 1)?.squeeze(at)?,
    ))
}

/// `even` and `odd` interleaved along `dim` (2 or 3) of (b, c, h, w) maps.
fn interleave(even: &Tensor, odd: &Tensor, dim: usize) -> Result<Tensor> {
    let (b, c, h, w) = even.dims4()?;
    match dim {
        2 => Tensor::stack(&[even, odd], 3)?.reshape((b, c, 2 * h, w)),
        _ => Tensor::stack(&[even, odd], 4)?.reshape((b, c, h, 2 * w)),
    }
}

/// `a·x + b·y`.
fn mix(x: &Tensor, a: f32, y: &Tensor, b: f32) -> Result<Tensor> {
    (x.affine(a as f64, 0.0)? + y.affine(b as f64, 0.0)?)?.contiguous()
}

/// One level of the analysis: (b, c, h, w) → (b, 4c, h/2, w/2), `[LL, LH, HL, HH]` / 2.
/// Taps `[t0, t1]`: low-pass `[t1, t0]`, high-pass `[t0, −t1]`.
fn dwt(x: &Tensor, [t0, t1]: [f32; 2]) -> Result<Tensor> {
    let (e, o) = split_pairs(x, 3)?; // columns
    let xl = mix(&e, t1, &o, t0)?;
    let xh = mix(&e, t0, &o, -t1)?;
    let rows = |t: &Tensor| -> Result<(Tensor, Tensor)> {
        let (e, o) = split_pairs(t, 2)?;
        Ok((mix(&e, t1, &o, t0)?, mix(&e, t0, &o, -t1)?))
    };
    let (xll, xlh) = rows(&xl)?;
    let (xhl, xhh) = rows(&xh)?;
    Tensor::cat(&[xll, xlh, xhl, xhh], 1)? / 2.0
}

/// One level of the synthesis: (b, 4g, h, w) → (b, g, 2h, 2w).
fn idwt(x: &Tensor, [t0, t1]: [f32; 2]) -> Result<Tensor> {
    let parts = x.chunk(4, 1)?;
    let [xll, xlh, xhl, xhh] = <[Tensor; 4]>::try_from(parts)
        .map_err(|_| candle_core::Error::Msg("wavelet channels not a multiple of 4".into()))?;
    // Transposed stride-2 convs: out[2i + k] = Σ x[i] · taps[k].
    let rows = |lo: &Tensor, hi: &Tensor| -> Result<Tensor> {
        let even = mix(lo, t1, hi, t0)?;
        let odd = mix(lo, t0, hi, -t1)?;
        interleave(&even, &odd, 2)
    };
    let yl = rows(&xll, &xlh)?;
    let yh = rows(&xhl, &xhh)?;
    let even = mix(&yl, t1, &yh, t0)?;
    let odd = mix(&yl, t0, &yh, -t1)?;
    interleave(&even, &odd, 3)? * 2.0
}

/// The patcher: (b, c, H, W) → (b, c·p², H/p, W/p).
pub fn patch(x: &Tensor, p: usize, method: PatchMethod) -> Result<Tensor> {
    match method {
        PatchMethod::Haar { taps } => {
            let mut x = x.clone();
            for _ in 0..p.trailing_zeros() {
                x = dwt(&x, taps)?;
            }
            Ok(x)
        }
        PatchMethod::Rearrange => {
            let (b, c, h, w) = x.dims4()?;
            x.reshape((b, c, h / p, p, w / p, p))?
                .permute((0, 1, 3, 5, 2, 4))?
                .reshape((b, c * p * p, h / p, w / p))
        }
    }
}

/// The unpatcher: (b, c·p², h, w) → (b, c, h·p, w·p).
pub fn unpatch(x: &Tensor, p: usize, method: PatchMethod) -> Result<Tensor> {
    match method {
        PatchMethod::Haar { taps } => {
            let mut x = x.clone();
            for _ in 0..p.trailing_zeros() {
                x = idwt(&x, taps)?;
            }
            Ok(x)
        }
        PatchMethod::Rearrange => {
            let (b, cpp, h, w) = x.dims4()?;
            let c = cpp / (p * p);
            x.reshape((b, c, p, p, h, w))?
                .permute((0, 1, 4, 2, 5, 3))?
                .reshape((b, c, h * p, w * p))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, D};

    fn ramp(c: usize, s: usize) -> Tensor {
        let n = c * s * s;
        let v: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32) / 50.0 - 1.0)
            .collect();
        Tensor::from_vec(v, (1, c, s, s), &Device::Cpu).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(D::Minus1)
            .unwrap()
            .to_scalar()
            .unwrap()
    }

    #[test]
    fn haar_with_exact_taps_inverts_itself() {
        let h = PatchMethod::Haar {
            taps: [std::f32::consts::FRAC_1_SQRT_2; 2],
        };
        let x = ramp(3, 16);
        let p = patch(&x, 4, h).unwrap();
        assert_eq!(p.dims(), [1, 48, 4, 4]);
        assert!(max_diff(&unpatch(&p, 4, h).unwrap(), &x) < 1e-5);
    }

    #[test]
    fn haar_low_band_is_the_mean_of_each_block() {
        let h = PatchMethod::Haar {
            taps: [std::f32::consts::FRAC_1_SQRT_2; 2],
        };
        let x = ramp(1, 4);
        let p = patch(&x, 2, h).unwrap();
        // LL = (a + b + c + d) / 2 · (1/√2)² = the 2×2 block's mean.
        let v: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
        let ll: f32 = p
            .get(0)
            .unwrap()
            .get(0)
            .unwrap()
            .get(0)
            .unwrap()
            .get(0)
            .unwrap()
            .to_scalar()
            .unwrap();
        assert!((ll - (v[0] + v[1] + v[4] + v[5]) / 4.0).abs() < 1e-6);
    }

    #[test]
    fn rearrange_inverts_itself() {
        let x = ramp(3, 8);
        let p = patch(&x, 2, PatchMethod::Rearrange).unwrap();
        assert_eq!(p.dims(), [1, 12, 4, 4]);
        assert_eq!(
            max_diff(&unpatch(&p, 2, PatchMethod::Rearrange).unwrap(), &x),
            0.0
        );
    }
}
