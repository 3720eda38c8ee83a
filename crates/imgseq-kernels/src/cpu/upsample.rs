//! Nearest-neighbour 2× upsampling (taming's `Upsample`, `F.interpolate(scale_factor=2.0,
//! mode="nearest")`) and its backward: each input pixel is copied to a 2×2 block, and its
//! gradient is the sum of that block's gradients.

use super::Real;
use rayon::prelude::*;

/// (planes of h × w) → (planes of 2h × 2w), every pixel repeated into a 2×2 block.
pub fn upsample2x<T: Real>(x: &[T], h: usize, w: usize) -> Vec<T> {
    let mut y = vec![T::ZERO; x.len() * 4];
    if h == 0 || w == 0 {
        return y;
    }
    y.par_chunks_mut(4 * h * w)
        .zip(x.par_chunks(h * w))
        .for_each(|(dst, src)| {
            for (r, row) in src.chunks_exact(w).enumerate() {
                let (top, bottom) = dst[2 * r * 2 * w..(2 * r + 2) * 2 * w].split_at_mut(2 * w);
                for (pair, &v) in top.chunks_exact_mut(2).zip(row) {
                    pair[0] = v;
                    pair[1] = v;
                }
                bottom.copy_from_slice(top);
            }
        });
    y
}

/// The gradient of [`upsample2x`]: (planes of 2h × 2w) → (planes of h × w), the sum of each
/// 2×2 block.
pub fn upsample2x_bwd<T: Real>(dy: &[T], h: usize, w: usize) -> Vec<T> {
    let mut dx = vec![T::ZERO; dy.len() / 4];
    if h == 0 || w == 0 {
        return dx;
    }
    dx.par_chunks_mut(h * w)
        .zip(dy.par_chunks(4 * h * w))
        .for_each(|(dst, src)| {
            for (r, out) in dst.chunks_exact_mut(w).enumerate() {
                let top = &src[2 * r * 2 * w..(2 * r + 1) * 2 * w];
                let bottom = &src[(2 * r + 1) * 2 * w..(2 * r + 2) * 2 * w];
                for ((o, t), b) in out
                    .iter_mut()
                    .zip(top.chunks_exact(2))
                    .zip(bottom.chunks_exact(2))
                {
                    *o = (t[0] + t[1]) + (b[0] + b[1]);
                }
            }
        });
    dx
}
