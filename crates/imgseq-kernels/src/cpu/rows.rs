//! f32 row kernels of a hand-written transformer engine (the ViT's fused training engine):
//! LayerNorm forward and backward over rows, bias / residual rows, column sums, GELU (erf form)
//! with its derivative, and the in-place row softmax with its backward. Each runs on one
//! thread (the caller parallelises over shards of work) at a [`Simd`] level; every level
//! gives the same bits.

use super::simd::{simd_kernel, Simd};
use super::{dot, dot3, fast_exp_f32_fma, max, sum, sum_sq_dev};

simd_kernel! {
    /// LayerNorm of rows of `w.len()`: y = (x − mean)/√(var + eps)·w + b; keeps (mean, 1/std)
    /// per row in `st`.
    pub fn ln_fwd_rows(x: &[f32], w: &[f32], b: &[f32], y: &mut [f32], st: &mut [f32], eps: f32) {
        let d = w.len();
        let inv_d = 1.0 / d as f32;
        for ((x, y), st) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)).zip(st.chunks_exact_mut(2)) {
            let mean = sum(x) * inv_d;
            let var = sum_sq_dev(x, mean) * inv_d;
            let rstd = 1.0 / (var + eps).sqrt();
            st[0] = mean;
            st[1] = rstd;
            for (((y, x), w), b) in y.iter_mut().zip(x).zip(w).zip(b) {
                *y = (*x - mean) * rstd * *w + *b;
            }
        }
    }
}

simd_kernel! {
    /// LayerNorm backward given dL/dy `g`: dx += rstd·(g·w − mean(g·w) − x̂·mean(g·w·x̂)),
    /// dw += g·x̂, db += g. `xh` is one row of scratch.
    pub fn ln_bwd_rows(g: &[f32], x: &[f32], st: &[f32], w: &[f32], dx: &mut [f32], dw: &mut [f32], db: &mut [f32], xh: &mut [f32]) {
        let d = w.len();
        let inv_d = 1.0 / d as f32;
        let xh = &mut xh[..d];
        for (((g, x), st), dx) in g.chunks_exact(d).zip(x.chunks_exact(d)).zip(st.chunks_exact(2)).zip(dx.chunks_exact_mut(d)) {
            let (mean, rstd) = (st[0], st[1]);
            for ((((xh, x), g), dw), db) in xh.iter_mut().zip(x).zip(g).zip(dw.iter_mut()).zip(db.iter_mut()) {
                *xh = (*x - mean) * rstd;
                *dw += *g * *xh;
                *db += *g;
            }
            let a = dot(g, w) * inv_d;
            let c = dot3(g, w, xh) * inv_d;
            for (((dx, g), w), xh) in dx.iter_mut().zip(g).zip(w).zip(xh.iter()) {
                *dx += rstd * (*g * *w - a - *xh * c);
            }
        }
    }
}

simd_kernel! {
    /// Every row of `dst` (rows of `bias.len()`) = the same row of `src` + bias.
    pub fn add_rows(dst: &mut [f32], src: &[f32], bias: &[f32]) {
        let d = bias.len();
        for (y, x) in dst.chunks_exact_mut(d).zip(src.chunks_exact(d)) {
            for ((y, x), b) in y.iter_mut().zip(x).zip(bias) {
                *y = *x + *b;
            }
        }
    }
}

/// Every row of `dst` = `row`.
pub fn fill_rows(dst: &mut [f32], row: &[f32]) {
    for y in dst.chunks_exact_mut(row.len()) {
        y.copy_from_slice(row);
    }
}

simd_kernel! {
    /// out += Σ rows (rows of `out.len()`).
    pub fn col_sum_acc(rows: &[f32], out: &mut [f32]) {
        for r in rows.chunks_exact(out.len()) {
            for (o, v) in out.iter_mut().zip(r) {
                *o += *v;
            }
        }
    }
}

/// out = Σ rows (rows of `out.len()`).
pub fn col_sum(simd: Simd, rows: &[f32], out: &mut [f32]) {
    out.fill(0.0);
    col_sum_acc(simd, rows, out);
}

simd_kernel! {
    /// y += x
    pub fn add_assign(y: &mut [f32], x: &[f32]) {
        for (y, x) in y.iter_mut().zip(x) {
            *y += *x;
        }
    }
}

simd_kernel! {
    /// y *= x
    pub fn mul_assign(y: &mut [f32], x: &[f32]) {
        for (y, x) in y.iter_mut().zip(x) {
            *y *= *x;
        }
    }
}

// GELU (erf form) with the erfc approximation of [`super::act`] (relative error < 1.2e-7,
// exact in the tails), so that the fused and the candle-op engines compute the same function.

const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// 1/√(2π)
const INV_SQRT_2PI: f32 = 0.398_942_3;

/// erfc(z) for z ≥ 0 (Numerical Recipes `erfcc`; the coefficients as printed there and in
/// [`super::act`], whose generic version this f32 one mirrors for the SIMD loops).
/// Horner steps are fused multiply-adds (`mul_add`: one rounding each, so every SIMD level and
/// the portable path, where it is libm's `fmaf`, give the same bits).
#[inline(always)]
#[allow(clippy::excessive_precision)]
fn erfc_pos(z: f32) -> f32 {
    let t = 1.0 / 0.5f32.mul_add(z, 1.0);
    let mut p = 0.17087277f32;
    for c in [
        -0.82215223,
        1.48851587,
        -1.13520398,
        0.27886807,
        -0.18628806,
        0.09678418,
        0.37409196,
        1.00002368,
        -1.26551223,
    ] {
        p = p.mul_add(t, c);
    }
    t * fast_exp_f32_fma((-z).mul_add(z, p))
}

/// Φ(x), the normal CDF: what GELU's y = x·Φ(x) multiplies by (one owner for the training
/// and inference forwards, so their y agree bit for bit).
#[inline(always)]
fn gelu_cdf(x: f32) -> f32 {
    let half = 0.5 * erfc_pos(x.abs() * FRAC_1_SQRT_2);
    if x < 0.0 {
        half
    } else {
        1.0 - half
    }
}

simd_kernel! {
    /// GELU forward: y = x·Φ(x); `h` (the pre-activation x) is replaced by the derivative
    /// Φ(x) + x·φ(x), all the backward needs.
    pub fn gelu_fwd(h: &mut [f32], y: &mut [f32]) {
        for (h, y) in h.iter_mut().zip(y.iter_mut()) {
            let x = *h;
            let cdf = gelu_cdf(x);
            *y = x * cdf;
            *h = (x * INV_SQRT_2PI).mul_add(fast_exp_f32_fma(-0.5 * x * x), cdf);
        }
    }
}

simd_kernel! {
    /// GELU forward without the derivative (inference): the same y as [`gelu_fwd`], bit for
    /// bit, at one exp per value instead of two.
    pub fn gelu_only(h: &[f32], y: &mut [f32]) {
        for (h, y) in h.iter().zip(y.iter_mut()) {
            *y = *h * gelu_cdf(*h);
        }
    }
}

simd_kernel! {
    /// Row softmax of the n×n scores `s`, in place. The exp runs as one loop over all n²
    /// values (rows of 65 would leave a scalar tail of one value in every row's loop).
    pub fn softmax_rows(s: &mut [f32], n: usize) {
        for row in s.chunks_exact_mut(n) {
            let m = max(row);
            for x in row.iter_mut() {
                *x -= m;
            }
        }
        for x in s.iter_mut() {
            *x = fast_exp_f32_fma(*x);
        }
        for row in s.chunks_exact_mut(n) {
            let inv = 1.0 / sum(row);
            for x in row.iter_mut() {
                *x *= inv;
            }
        }
    }
}

simd_kernel! {
    /// dS ← P ⊙ (dP − rowsum(P ⊙ dP)) · scale, row by row (dP in `ds`).
    pub fn softmax_bwd_rows(p: &[f32], ds: &mut [f32], n: usize, scale: f32) {
        for (p, ds) in p.chunks_exact(n).zip(ds.chunks_exact_mut(n)) {
            let r = dot(p, ds);
            for (g, p) in ds.iter_mut().zip(p) {
                *g = *p * (*g - r) * scale;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inference_gelu_and_softmax_are_the_training_ones_bit_for_bit_at_every_simd_level() {
        // gelu_only (no derivative) must give gelu_fwd's y; softmax_rows must give the
        // row-at-a-time softmax it replaced; every level the same bits.
        let xs: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.731).sin() * 9.0).collect();
        let levels: Vec<Simd> = [Simd::Portable, Simd::Avx2, Simd::Avx512]
            .into_iter()
            .filter(|&l| l <= Simd::best())
            .collect();
        for &l in &levels {
            let (mut h, mut y1, mut y2) = (xs.clone(), vec![0f32; 1000], vec![0f32; 1000]);
            gelu_only(l, &xs, &mut y2);
            gelu_fwd(l, &mut h, &mut y1);
            assert!(
                y1.iter().zip(&y2).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{l:?}"
            );
            let n = 65;
            let mut s: Vec<f32> = (0..n * n).map(|i| (i as f32 * 0.37).cos() * 30.0).collect();
            let mut want = s.clone();
            for row in want.chunks_exact_mut(n) {
                let m = max(row);
                row.iter_mut().for_each(|x| *x = fast_exp_f32_fma(*x - m));
                let inv = 1.0 / sum(row);
                row.iter_mut().for_each(|x| *x *= inv);
            }
            softmax_rows(l, &mut s, n);
            assert!(
                s.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{l:?}"
            );
        }
        if levels.len() < 3 {
            eprintln!("note: this CPU lacks AVX-512 or AVX2; tested levels {levels:?} only");
        }
    }
}
