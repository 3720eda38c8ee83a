//! LayerNorm (last dim) and GroupNorm (+ optional fused SiLU), forward and backward.

use super::{chunk_len, sum, sum_sq_dev, Real};
use crate::multiversion;
use rayon::prelude::*;

multiversion! {
    fn ln_rows<T>(x: &[T], w: &[T], b: &[T], y: &mut [T], eps: T) {
        let d = w.len();
        let inv_d = T::ONE / T::c(d as f64);
        for (x, y) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)) {
            let mean = sum(x) * inv_d;
            let var = sum_sq_dev(x, mean) * inv_d;
            let rstd = T::ONE / (var + eps).sqrt();
            for (((y, x), w), b) in y.iter_mut().zip(x).zip(w).zip(b) {
                *y = (*x - mean) * rstd * *w + *b;
            }
        }
    }
}

multiversion! {
    /// dx for a chunk of rows; accumulates Σ g·x̂ into dw and Σ g into db.
    fn ln_bwd_rows<T>(x: &[T], w: &[T], g: &[T], dx: &mut [T], dw: &mut [T], db: &mut [T], eps: T) {
        let d = w.len();
        let inv_d = T::ONE / T::c(d as f64);
        for ((x, g), dx) in x.chunks_exact(d).zip(g.chunks_exact(d)).zip(dx.chunks_exact_mut(d)) {
            let mean = sum(x) * inv_d;
            let var = sum_sq_dev(x, mean) * inv_d;
            let rstd = T::ONE / (var + eps).sqrt();
            // dx holds x̂ for now.
            for ((((dx, x), g), dw), db) in dx.iter_mut().zip(x).zip(g).zip(dw.iter_mut()).zip(db.iter_mut()) {
                let xh = (*x - mean) * rstd;
                *dx = xh;
                *dw += *g * xh;
                *db += *g;
            }
            let a = super::dot(g, w) * inv_d;
            let c = super::dot3(g, w, dx) * inv_d;
            for ((dx, g), w) in dx.iter_mut().zip(g).zip(w) {
                let xh = *dx;
                *dx = rstd * (*g * *w - a - xh * c);
            }
        }
    }
}

/// LayerNorm over rows of length `w.len()`.
pub fn layer_norm<T: Real>(x: &[T], w: &[T], b: &[T], eps: f64) -> Vec<T> {
    let d = w.len();
    let mut y = vec![T::ZERO; x.len()];
    if d == 0 {
        return y;
    }
    let c = chunk_len(x.len() / d, 4096usize.div_ceil(d)) * d;
    y.par_chunks_mut(c)
        .zip(x.par_chunks(c))
        .for_each(|(y, x)| ln_rows(x, w, b, y, T::c(eps)));
    y
}

/// LayerNorm backward: (dx, dw, db).
pub fn layer_norm_bwd<T: Real>(x: &[T], w: &[T], g: &[T], eps: f64) -> (Vec<T>, Vec<T>, Vec<T>) {
    let d = w.len();
    let mut dx = vec![T::ZERO; x.len()];
    if d == 0 {
        return (dx, vec![], vec![]);
    }
    let c = chunk_len(x.len() / d, 4096usize.div_ceil(d)) * d;
    let parts: Vec<(Vec<T>, Vec<T>)> = dx
        .par_chunks_mut(c)
        .zip(x.par_chunks(c).zip(g.par_chunks(c)))
        .map(|(dx, (x, g))| {
            let mut dw = vec![T::ZERO; d];
            let mut db = vec![T::ZERO; d];
            ln_bwd_rows(x, w, g, dx, &mut dw, &mut db, T::c(eps));
            (dw, db)
        })
        .collect();
    let mut dw = vec![T::ZERO; d];
    let mut db = vec![T::ZERO; d];
    for (pw, pb) in parts {
        for i in 0..d {
            dw[i] += pw[i];
            db[i] += pb[i];
        }
    }
    (dx, dw, db)
}

/// A group's statistics: (mean, 1/√(var + eps)) of its cg·hw values, in two passes (mean,
/// then the squared deviations from it). A group holds up to millions of values (4 channels
/// of 384² in taming's decoder), so each pass keeps [`WIDE`] partial sums: [`sum`]'s 8 form
/// one chain of dependent adds that runs at a quarter of the load rate.
#[inline(always)]
fn gn_stats<T: Real>(x: &[T], eps: T) -> (T, T) {
    let n = T::c(x.len() as f64);
    let mean = wide_sum(x, |v| v) / n;
    let var = wide_sum(x, |v| {
        let d = v - mean;
        d * d
    }) / n;
    (mean, T::ONE / (var + eps).sqrt())
}

/// Partial sums of [`gn_stats`]: four AVX-512 registers of f32.
const WIDE: usize = 64;

/// Σ f(a) over [`WIDE`] lane-wise partial sums, added pairwise at the end.
#[inline(always)]
fn wide_sum<T: Real>(a: &[T], f: impl Fn(T) -> T) -> T {
    let mut acc = [T::ZERO; WIDE];
    let mut ch = a.chunks_exact(WIDE);
    for c in &mut ch {
        for l in 0..WIDE {
            acc[l] += f(c[l]);
        }
    }
    let mut w = WIDE;
    while w > 1 {
        w /= 2;
        for l in 0..w {
            acc[l] += acc[l + w];
        }
    }
    let mut s = T::ZERO;
    for v in ch.remainder() {
        s += f(*v);
    }
    acc[0] + s
}

/// One channel's normalisation: y = (x − mean)·scale + shift, then SiLU when asked, where
/// scale = rstd·weight and shift = bias of its channel ([`group_norm_coefs`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChannelNorm<T> {
    pub mean: T,
    pub scale: T,
    pub shift: T,
    pub silu: bool,
}

multiversion! {
    /// [`ChannelNorm`] applied to one run of a channel's values: the GroupNorm's arithmetic,
    /// owned here for [`group_norm`] and the convolutions that fold it into their input
    /// packing (`conv::conv2d_normed`), so both give the same bits.
    pub fn gn_apply<T>(x: &[T], y: &mut [T], n: ChannelNorm<T>) {
        let (mean, s, sh) = (n.mean, n.scale, n.shift);
        if n.silu {
            for (y, x) in y.iter_mut().zip(x) {
                let a = (*x - mean) * s + sh;
                *y = a / (T::ONE + (-a).exp());
            }
        } else {
            for (y, x) in y.iter_mut().zip(x) {
                *y = (*x - mean) * s + sh;
            }
        }
    }
}

multiversion! {
    /// [`gn_slab`] compiled for the CPU's widest path.
    fn gn_slab_mv<T>(x: &[T], w: &[T], b: &[T], y: &mut [T], eps: T, silu: bool) {
        gn_slab(x, w, b, y, eps, silu)
    }
}

/// One (sample, group) slab: `x` is cg·hw values, `w`/`b` the group's cg channels.
#[inline(always)]
fn gn_slab<T: Real>(x: &[T], w: &[T], b: &[T], y: &mut [T], eps: T, silu: bool) {
    let (mean, rstd) = gn_stats(x, eps);
    let hw = x.len() / w.len();
    for (ci, (x, y)) in x.chunks_exact(hw).zip(y.chunks_exact_mut(hw)).enumerate() {
        let n = ChannelNorm {
            mean,
            scale: rstd * w[ci],
            shift: b[ci],
            silu,
        };
        gn_apply(x, y, n);
    }
}

/// The per-(sample, channel) [`ChannelNorm`]s of a GroupNorm of x (b, c, hw) with `groups`
/// groups (+ SiLU when `silu`): its statistics, without writing the normalised map.
#[allow(clippy::too_many_arguments)]
pub fn group_norm_coefs<T: Real>(
    x: &[T],
    c: usize,
    hw: usize,
    groups: usize,
    w: &[T],
    b: &[T],
    eps: f64,
    silu: bool,
) -> Vec<ChannelNorm<T>> {
    let cg = c / groups.max(1);
    let slab = cg * hw;
    if slab == 0 {
        return Vec::new();
    }
    let stats: Vec<(T, T)> = x
        .par_chunks(slab)
        .map(|x| gn_stats_mv(x, T::c(eps)))
        .collect();
    (0..stats.len() * cg)
        .map(|i| {
            let (mean, rstd) = stats[i / cg];
            let ch = i % c;
            ChannelNorm {
                mean,
                scale: rstd * w[ch],
                shift: b[ch],
                silu,
            }
        })
        .collect()
}

multiversion! {
    /// [`gn_stats`] compiled for the CPU's widest path.
    fn gn_stats_mv<T>(x: &[T], eps: T) -> (T, T) {
        gn_stats(x, eps)
    }
}

multiversion! {
    /// Backward of one slab: writes dx, and the slab's per-channel Σ g'·x̂ / Σ g' into dw / db.
    fn gn_bwd_slab<T>(x: &[T], w: &[T], b: &[T], g: &[T], dx: &mut [T], dw: &mut [T], db: &mut [T], eps: T, silu: bool) {
        let n = T::c(x.len() as f64);
        let (mean, rstd) = gn_stats(x, eps);
        let hw = x.len() / w.len();
        let mut a_sum = T::ZERO;
        let mut b_sum = T::ZERO;
        for (ci, ((x, g), dx)) in x.chunks_exact(hw).zip(g.chunks_exact(hw)).zip(dx.chunks_exact_mut(hw)).enumerate() {
            let wc = w[ci];
            let bc = b[ci];
            for ((x, g), dx) in x.iter().zip(g).zip(dx.iter_mut()) {
                *dx = if silu {
                    let a = (*x - mean) * rstd * wc + bc;
                    let s = T::ONE / (T::ONE + (-a).exp());
                    *g * s * (T::ONE + a * (T::ONE - s))
                } else {
                    *g
                };
            }
            let sg = sum(dx);
            let sgx = super::dot_dev(dx, x, mean) * rstd;
            dw[ci] = sgx;
            db[ci] = sg;
            a_sum += wc * sg;
            b_sum += wc * sgx;
        }
        let a = a_sum / n;
        let bb = b_sum / n;
        for (ci, (x, dx)) in x.chunks_exact(hw).zip(dx.chunks_exact_mut(hw)).enumerate() {
            let wc = w[ci];
            for (x, dx) in x.iter().zip(dx.iter_mut()) {
                let xh = (*x - mean) * rstd;
                *dx = rstd * (*dx * wc - a - xh * bb);
            }
        }
    }
}

/// GroupNorm of x (b, c, hw) with `groups` groups, optional SiLU after the affine.
#[allow(clippy::too_many_arguments)]
pub fn group_norm<T: Real>(
    x: &[T],
    c: usize,
    hw: usize,
    groups: usize,
    w: &[T],
    b: &[T],
    eps: f64,
    silu: bool,
) -> Vec<T> {
    let mut y = vec![T::ZERO; x.len()];
    let cg = c / groups.max(1);
    let slab = cg * hw;
    if slab == 0 {
        return y;
    }
    y.par_chunks_mut(slab)
        .zip(x.par_chunks(slab))
        .enumerate()
        .for_each(|(i, (y, x))| {
            let g = i % groups;
            let ch = g * cg..(g + 1) * cg;
            gn_slab_mv(x, &w[ch.clone()], &b[ch], y, T::c(eps), silu);
        });
    y
}

/// GroupNorm backward: (dx, dw, db). `x` is (bs, c, hw) flattened.
#[allow(clippy::too_many_arguments)]
pub fn group_norm_bwd<T: Real>(
    x: &[T],
    c: usize,
    hw: usize,
    groups: usize,
    w: &[T],
    b: &[T],
    g: &[T],
    eps: f64,
    silu: bool,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let mut dx = vec![T::ZERO; x.len()];
    let mut dw = vec![T::ZERO; c];
    let mut db = vec![T::ZERO; c];
    let cg = c / groups.max(1);
    let slab = cg * hw;
    if slab == 0 {
        return (dx, dw, db);
    }
    let parts: Vec<(usize, Vec<T>, Vec<T>)> = dx
        .par_chunks_mut(slab)
        .zip(x.par_chunks(slab).zip(g.par_chunks(slab)))
        .enumerate()
        .map(|(i, (dx, (x, g)))| {
            let gi = i % groups;
            let ch = gi * cg..(gi + 1) * cg;
            let mut pw = vec![T::ZERO; cg];
            let mut pb = vec![T::ZERO; cg];
            gn_bwd_slab(
                x,
                &w[ch.clone()],
                &b[ch],
                g,
                dx,
                &mut pw,
                &mut pb,
                T::c(eps),
                silu,
            );
            (gi, pw, pb)
        })
        .collect();
    for (gi, pw, pb) in parts {
        for j in 0..cg {
            dw[gi * cg + j] += pw[j];
            db[gi * cg + j] += pb[j];
        }
    }
    (dx, dw, db)
}
