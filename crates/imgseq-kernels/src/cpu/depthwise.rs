//! Depthwise 2-D convolution (PyTorch `Conv2d(c, c, k, padding=p, groups=c)`, stride 1): each
//! channel's plane correlated with its own k×k kernel, and the backward pass. One plane a
//! task; the inner loops run along a row so that they vectorise.

use super::Real;
use rayon::prelude::*;

/// A depthwise convolution's sizes: `c` channels of `h` × `w`, a `k` × `k` kernel, `p`
/// zero pixels on every side.
#[derive(Debug, Clone, Copy)]
pub struct Geom {
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub k: usize,
    pub p: usize,
}

impl Geom {
    /// The output plane's rows and columns.
    pub fn out_hw(&self) -> (usize, usize) {
        (
            self.h + 2 * self.p + 1 - self.k,
            self.w + 2 * self.p + 1 - self.k,
        )
    }

    /// The output columns `ox` whose input column `ox + j − p` lies inside the row.
    fn cols(&self, j: usize, wo: usize) -> std::ops::Range<usize> {
        let lo = self.p.saturating_sub(j);
        let hi = (self.w + self.p).saturating_sub(j).min(wo);
        lo..hi.max(lo)
    }

    /// The input row of output row `oy` and kernel row `i`, if inside the plane.
    fn row(&self, oy: usize, i: usize) -> Option<usize> {
        (oy + i).checked_sub(self.p).filter(|&r| r < self.h)
    }
}

/// x: planes (n·c) of h × w, weight (c, k·k) → planes of the output size.
pub fn forward<T: Real>(x: &[T], weight: &[T], g: &Geom) -> Vec<T> {
    let (ho, wo) = g.out_hw();
    let kk = g.k * g.k;
    let mut y = vec![T::ZERO; x.len() / (g.h * g.w).max(1) * ho * wo];
    if ho * wo == 0 {
        return y;
    }
    y.par_chunks_mut(ho * wo)
        .zip(x.par_chunks(g.h * g.w))
        .enumerate()
        .for_each(|(q, (dst, src))| {
            let wt = &weight[(q % g.c) * kk..(q % g.c + 1) * kk];
            for (oy, out) in dst.chunks_exact_mut(wo).enumerate() {
                for i in 0..g.k {
                    let Some(iy) = g.row(oy, i) else { continue };
                    let row = &src[iy * g.w..(iy + 1) * g.w];
                    for j in 0..g.k {
                        let (v, cols) = (wt[i * g.k + j], g.cols(j, wo));
                        let shift = cols.start + j - g.p;
                        let ins = &row[shift..shift + cols.len()];
                        for (o, &a) in out[cols].iter_mut().zip(ins) {
                            *o += v * a;
                        }
                    }
                }
            }
        });
    y
}

/// The gradients of [`forward`] for the output gradient `dy`: (dx, dweight (c, k·k)).
pub fn backward<T: Real>(x: &[T], weight: &[T], dy: &[T], g: &Geom) -> (Vec<T>, Vec<T>) {
    let (ho, wo) = g.out_hw();
    let (kk, hw) = (g.k * g.k, g.h * g.w);
    let mut dx = vec![T::ZERO; x.len()];
    if ho * wo == 0 || hw == 0 {
        return (dx, vec![T::ZERO; g.c * kk]);
    }
    let per_plane: Vec<Vec<T>> = dx
        .par_chunks_mut(hw)
        .zip(x.par_chunks(hw))
        .zip(dy.par_chunks(ho * wo))
        .enumerate()
        .map(|(q, ((dxp, xp), dyp))| {
            let wt = &weight[(q % g.c) * kk..(q % g.c + 1) * kk];
            let mut dw = vec![T::ZERO; kk];
            for (oy, grow) in dyp.chunks_exact(wo).enumerate() {
                for i in 0..g.k {
                    let Some(iy) = g.row(oy, i) else { continue };
                    for j in 0..g.k {
                        let cols = g.cols(j, wo);
                        let shift = cols.start + j - g.p;
                        let at = iy * g.w + shift..iy * g.w + shift + cols.len();
                        let v = wt[i * g.k + j];
                        let mut acc = T::ZERO;
                        for ((d, &a), &gr) in dxp[at.clone()]
                            .iter_mut()
                            .zip(&xp[at.clone()])
                            .zip(&grow[cols])
                        {
                            *d += v * gr;
                            acc += a * gr;
                        }
                        dw[i * g.k + j] += acc;
                    }
                }
            }
            dw
        })
        .collect();
    let mut dw = vec![T::ZERO; g.c * kk];
    for (q, p) in per_plane.iter().enumerate() {
        let c = q % g.c;
        for (d, v) in dw[c * kk..(c + 1) * kk].iter_mut().zip(p) {
            *d += *v;
        }
    }
    (dx, dw)
}
