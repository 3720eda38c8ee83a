//! Bicubic resizing of the position-embedding grid, numerically as PyTorch's
//! `F.interpolate(mode="bicubic", align_corners=False)` (used by HF `interpolate_pos_encoding`).
//!
//! The resize is separable and linear, so it is expressed as two small matrices applied with
//! matmuls: it stays differentiable and runs on any device.

use candle_core::{Result, Tensor};

/// PyTorch's cubic convolution constant (Keys' kernel with a = −0.75).
const A: f64 = -0.75;

fn cubic1(x: f64) -> f64 {
    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0 // |x| <= 1
}
fn cubic2(x: f64) -> f64 {
    ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A // 1 < |x| < 2
}

/// The (out, inp) matrix that bicubically resizes a 1-D signal of length `inp` to `out`,
/// with align_corners=False: source = (dst + 0.5)·inp/out − 0.5, border taps clamped.
pub fn bicubic_matrix(inp: usize, out: usize) -> Vec<f32> {
    let mut m = vec![0f32; out * inp];
    let scale = inp as f64 / out as f64;
    for o in 0..out {
        let src = (o as f64 + 0.5) * scale - 0.5;
        let i0 = src.floor();
        let t = src - i0;
        let weights = [cubic2(t + 1.0), cubic1(t), cubic1(1.0 - t), cubic2(2.0 - t)];
        for (k, wk) in weights.iter().enumerate() {
            let idx = (i0 as i64 - 1 + k as i64).clamp(0, inp as i64 - 1) as usize;
            m[o * inp + idx] += *wk as f32;
        }
    }
    m
}

/// The (out, inp) matrix of PyTorch's `F.interpolate(mode="bicubic", align_corners=False,
/// antialias=True)` along one axis (`upsample_bicubic2d_aa`, what DINOv2 with registers
/// interpolates its positions with): output `i` is centred on source `(i + 0.5)·scale`,
/// `scale = inp/out`; the cubic (a = −0.5) is stretched by `max(scale, 1)` when shrinking; the
/// taps from `trunc(centre − support + 0.5)` (at least 0) to `trunc(centre + support + 0.5)`
/// (at most `inp`), weights normalised to sum 1.
pub fn bicubic_aa_matrix(inp: usize, out: usize) -> Vec<f32> {
    fn cubic(x: f64) -> f64 {
        const A: f64 = -0.5;
        let x = x.abs();
        if x < 1.0 {
            ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
        } else if x < 2.0 {
            (((x - 5.0) * x + 8.0) * x - 4.0) * A
        } else {
            0.0
        }
    }
    let mut m = vec![0f32; out * inp];
    let scale = inp as f64 / out as f64;
    let (support, invscale) = if scale >= 1.0 {
        (2.0 * scale, 1.0 / scale)
    } else {
        (2.0, 1.0)
    };
    for o in 0..out {
        let centre = scale * (o as f64 + 0.5);
        let lo = ((centre - support + 0.5) as i64).max(0) as usize;
        let hi = ((centre + support + 0.5) as i64).min(inp as i64) as usize;
        let w: Vec<f64> = (lo..hi)
            .map(|j| cubic((j as f64 - centre + 0.5) * invscale))
            .collect();
        let total: f64 = w.iter().sum();
        for (j, wj) in (lo..hi).zip(&w) {
            m[o * inp + j] = if total != 0.0 { wj / total } else { 0.0 } as f32;
        }
    }
    m
}

/// Resizes a (h, w, c) grid to (new_h, new_w, c) bicubically.
pub fn bicubic_resize_grid(grid: &Tensor, new_h: usize, new_w: usize) -> Result<Tensor> {
    resize_grid(grid, new_h, new_w, bicubic_matrix)
}

/// Resizes a (h, w, c) grid to (new_h, new_w, c) bicubically with antialiasing
/// ([`bicubic_aa_matrix`]).
pub fn bicubic_aa_resize_grid(grid: &Tensor, new_h: usize, new_w: usize) -> Result<Tensor> {
    resize_grid(grid, new_h, new_w, bicubic_aa_matrix)
}

/// Resizes a (h, w, c) grid to (new_h, new_w, c) by the separable `matrix` (rows, then
/// columns).
fn resize_grid(
    grid: &Tensor,
    new_h: usize,
    new_w: usize,
    matrix: fn(usize, usize) -> Vec<f32>,
) -> Result<Tensor> {
    let (h, w, c) = grid.dims3()?;
    let dev = grid.device();
    let mh = Tensor::from_vec(matrix(h, new_h), (new_h, h), dev)?.to_dtype(grid.dtype())?;
    let mw = Tensor::from_vec(matrix(w, new_w), (new_w, w), dev)?.to_dtype(grid.dtype())?;
    let rows = mh
        .matmul(&grid.reshape((h, w * c))?)?
        .reshape((new_h, w, c))?; // (new_h, w, c)
    let cols = rows
        .transpose(0, 1)?
        .contiguous()?
        .reshape((w, new_h * c))?; // (w, new_h·c)
    mw.matmul(&cols)?
        .reshape((new_w, new_h, c))?
        .transpose(0, 1)?
        .contiguous() // (new_h, new_w, c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_size_is_identity() {
        let m = bicubic_matrix(8, 8);
        for i in 0..8 {
            for j in 0..8 {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((m[i * 8 + j] - want).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn aa_same_size_is_identity() {
        let m = bicubic_aa_matrix(5, 5);
        for i in 0..5 {
            for j in 0..5 {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((m[i * 5 + j] - want).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn rows_sum_to_one_so_constants_survive() {
        for (i, o, aa) in [
            (8, 12, false),
            (8, 5, false),
            (3, 7, false),
            (8, 5, true),
            (5, 7, true),
        ] {
            let m = if aa {
                bicubic_aa_matrix(i, o)
            } else {
                bicubic_matrix(i, o)
            };
            for r in 0..o {
                let s: f32 = m[r * i..(r + 1) * i].iter().sum();
                assert!((s - 1.0).abs() < 1e-5, "{i}->{o} row {r}: {s}");
            }
        }
    }
}
