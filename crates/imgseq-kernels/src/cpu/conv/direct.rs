//! The direct convolution (f32/f64), forward and backward, as shifted GEMMs.
//!
//! The input is copied once into a zero-padded buffer, split into s×s stride phases (for
//! stride 1 that is just the padded image; the layout is [`super::Plan`]'s). For every tap the
//! whole output is one GEMM (c_out × c_in) · (c_in × P) against a *shifted view* of the padded
//! input — no im2col copy. Columns with x ≥ w_out are junk and dropped when the tile is written
//! out. The output is computed in column tiles that stay in L2, tiles run in parallel (rayon)
//! with single-threaded GEMMs (the `gemm` crate's microkernels); the bias initialises the tile.

use super::{Geom, Plan};
use crate::cpu::gemm::mm;
use crate::cpu::{threads, Real, SyncPtr};
use gemm::Parallelism;
use rayon::prelude::*;
use std::borrow::Cow;

/// The zero-padded, phase-split copy of x: (b, ci, plane).
fn pad_input<T: Real>(x: &[T], g: &Geom, p: &Plan) -> Vec<T> {
    let mut xp = vec![T::ZERO; g.b * g.ci * p.plane];
    crate::runtime::advise_huge_pages(&mut xp);
    xp.par_chunks_mut(p.plane)
        .zip(x.par_chunks(g.h * g.w))
        .for_each(|(dst, src)| {
            for y in 0..g.h {
                let row = &src[y * g.w..(y + 1) * g.w];
                if p.s == 1 {
                    let d0 = p.index(y, 0);
                    dst[d0..d0 + g.w].copy_from_slice(row);
                } else {
                    p.for_row(y, |x, j| dst[j] = row[x]);
                }
            }
        });
    xp
}

/// The input the GEMMs read, with its plane length: x itself for a pointwise conv (1×1,
/// stride 1, no padding), else its padded, phase-split copy ([`pad_input`]).
fn padded_or_not<'a, T: Real>(x: &'a [T], g: &Geom, p: &Plan) -> (Cow<'a, [T]>, usize) {
    if g.is_pointwise() {
        (Cow::Borrowed(x), g.h * g.w)
    } else {
        (Cow::Owned(pad_input(x, g, p)), p.plane)
    }
}

/// The inverse of [`pad_input`]: crop a padded, phase-split gradient back to (b, ci, h, w).
fn unpad<T: Real>(xp: &[T], g: &Geom, p: &Plan) -> Vec<T> {
    let mut x = vec![T::ZERO; g.b * g.ci * g.h * g.w];
    x.par_chunks_mut(g.h * g.w)
        .zip(xp.par_chunks(p.plane))
        .for_each(|(dst, src)| {
            for y in 0..g.h {
                let row = &mut dst[y * g.w..(y + 1) * g.w];
                if p.s == 1 {
                    let s0 = p.index(y, 0);
                    row.copy_from_slice(&src[s0..s0 + g.w]);
                } else {
                    p.for_row(y, |x, j| row[x] = src[j]);
                }
            }
        });
    x
}

/// Weights as one (co × ci) matrix per tap: wr[tap][co][ci].
fn taps<T: Real>(w: &[T], g: &Geom) -> Vec<T> {
    let kk = g.kh * g.kw;
    let mut wr = vec![T::ZERO; w.len()];
    for co in 0..g.co {
        for ci in 0..g.ci {
            for t in 0..kk {
                wr[(t * g.co + co) * g.ci + ci] = w[(co * g.ci + ci) * kk + t];
            }
        }
    }
    wr
}

/// [`super::conv2d`] by shifted GEMMs, whatever the shape and type.
pub fn conv2d_direct<T: Real>(x: &[T], w: &[T], bias: Option<&[T]>, g: &Geom) -> Vec<T> {
    let p = g.plan();
    let mut out = vec![T::ZERO; g.b * g.co * p.ho * p.wo];
    crate::runtime::advise_huge_pages(&mut out);
    if out.is_empty() {
        return out;
    }
    let (xp, plane) = padded_or_not(x, g, &p);
    let xp: &[T] = &xp;
    let wr = taps(w, g);
    // Column tiles of about 64K outputs (stays in L2), evened out so that the tasks split
    // evenly over the threads. At low resolution (few output columns per weight) the per-tile
    // re-packing of the weights would dominate: there, one tile per image and threaded GEMMs.
    let t = threads();
    let whole = p.np < 4 * g.co;
    let (tile, ntiles) = if whole {
        (p.np, 1)
    } else {
        let tile = (65536 / g.co.max(1)).clamp(64, 2048).min(p.np);
        let ntiles = (g.b * p.np.div_ceil(tile)).div_ceil(t) * t;
        let tile = p.np.div_ceil(ntiles.div_ceil(g.b).min(p.np));
        (tile, p.np.div_ceil(tile))
    };
    let par = if whole {
        Parallelism::Rayon(t)
    } else {
        Parallelism::None
    };
    let outp = SyncPtr(out.as_mut_ptr());
    let out_plane = p.ho * p.wo;
    let run = |buf: &mut Vec<T>, task: usize| {
        let (bi, ti) = (task / ntiles, task % ntiles);
        let p0 = ti * tile;
        let len = tile.min(p.np - p0);
        for co in 0..g.co {
            let v = bias.map_or(T::ZERO, |b| b[co]);
            buf[co * len..(co + 1) * len].fill(v);
        }
        let img = &xp[bi * g.ci * plane..(bi + 1) * g.ci * plane];
        for i in 0..g.kh {
            for j in 0..g.kw {
                let tap = i * g.kw + j;
                let off = p0 + p.off(i, j);
                debug_assert!((g.ci - 1) * plane + off + len - 1 < img.len());
                // SAFETY: the strided rhs view stays inside `img` (plan() sizes hq for it).
                unsafe {
                    mm(
                        g.co,
                        len,
                        g.ci,
                        buf.as_mut_ptr(),
                        (len, 1),
                        true,
                        wr[tap * g.co * g.ci..].as_ptr(),
                        (g.ci, 1),
                        img.as_ptr().add(off),
                        (plane, 1),
                        par,
                    );
                }
            }
        }
        // Write the valid columns out.
        let o = outp.get();
        for co in 0..g.co {
            let row = &buf[co * len..(co + 1) * len];
            let mut q = p0;
            while q < p0 + len {
                let (y, x0) = (q / p.wq, q % p.wq);
                let end = (q - x0 + p.wq).min(p0 + len);
                if x0 < p.wo {
                    let n = (p.wo - x0).min(end - q);
                    // SAFETY: (bi, co, y, x0..x0+n) is inside out, and each task owns its
                    // p-range, so no two tasks write the same element.
                    unsafe {
                        let dst = o.add(bi * g.co * out_plane + co * out_plane + y * p.wo + x0);
                        std::ptr::copy_nonoverlapping(row[q - p0..].as_ptr(), dst, n);
                    }
                }
                q = end;
            }
        }
    };
    if whole {
        let mut buf = vec![T::ZERO; g.co * tile];
        (0..g.b).for_each(|task| run(&mut buf, task));
    } else {
        (0..g.b * ntiles)
            .into_par_iter()
            .for_each_init(|| vec![T::ZERO; g.co * tile], run);
    }
    out
}

/// dY in p-space: (b, co, np) with zeros in the junk columns.
fn grad_pspace<T: Real>(dy: &[T], g: &Geom, p: &Plan) -> Vec<T> {
    let mut d = vec![T::ZERO; g.b * g.co * p.np];
    d.par_chunks_mut(p.np)
        .zip(dy.par_chunks(p.ho * p.wo))
        .for_each(|(dst, src)| {
            for y in 0..p.ho {
                dst[y * p.wq..y * p.wq + p.wo].copy_from_slice(&src[y * p.wo..(y + 1) * p.wo]);
            }
        });
    d
}

/// Backward: (dx, dw, db) given x, w and dL/dy (b, co, ho, wo).
pub fn conv2d_bwd<T: Real>(x: &[T], w: &[T], dy: &[T], g: &Geom) -> (Vec<T>, Vec<T>, Vec<T>) {
    let p = g.plan();
    let db = grad_bias(dy, g, &p);

    // dY in the p-space layout (rows of wq, zero padding columns), shared by dx's general
    // path and dw; dY itself when the rows have no padding columns.
    let dyp_owned = (p.wq != p.wo).then(|| grad_pspace(dy, g, &p));
    let dyp: &[T] = dyp_owned.as_deref().unwrap_or(dy);

    let (l, r, t, bo) = g.pad;
    let dx = if g.s == 1 && l < g.kw && r < g.kw && t < g.kh && bo < g.kh {
        grad_input_stride1(w, dy, g, &p)
    } else {
        grad_input_scatter(w, dyp, g, &p)
    };

    // dw: all taps at once, per block of output pixels ([`dw_blocked`]).
    let (xp, plane) = padded_or_not(x, g, &p);
    let xp: &[T] = &xp;
    let dw = dw_blocked(xp, plane, dyp, g, &p);
    (dx, dw, db)
}

/// db: Σ dL/dy over images and pixels, per output channel.
fn grad_bias<T: Real>(dy: &[T], g: &Geom, p: &Plan) -> Vec<T> {
    let plane_o = p.ho * p.wo;
    (0..g.co)
        .into_par_iter()
        .map(|co| {
            let mut s = T::ZERO;
            for bi in 0..g.b {
                let o = (bi * g.co + co) * plane_o;
                s += crate::cpu::sum(&dy[o..o + plane_o]);
            }
            s
        })
        .collect()
}

/// dx of a stride-1 conv: conv(dy, w flipped and transposed, padding k−1−p).
fn grad_input_stride1<T: Real>(w: &[T], dy: &[T], g: &Geom, p: &Plan) -> Vec<T> {
    let (l, r, t, bo) = g.pad;
    let mut wf = vec![T::ZERO; w.len()];
    for co in 0..g.co {
        for ci in 0..g.ci {
            for i in 0..g.kh {
                for j in 0..g.kw {
                    wf[((ci * g.co + co) * g.kh + (g.kh - 1 - i)) * g.kw + (g.kw - 1 - j)] =
                        w[((co * g.ci + ci) * g.kh + i) * g.kw + j];
                }
            }
        }
    }
    let gt = Geom {
        b: g.b,
        ci: g.co,
        h: p.ho,
        w: p.wo,
        co: g.ci,
        kh: g.kh,
        kw: g.kw,
        s: 1,
        pad: (g.kw - 1 - l, g.kw - 1 - r, g.kh - 1 - t, g.kh - 1 - bo),
    };
    super::conv2d(dy, &wf, None, &gt)
}

/// dx in general: scatter Wₜᵀ·dY (dY in p-space) into the padded gradient at every tap's
/// shifted view, then crop.
fn grad_input_scatter<T: Real>(w: &[T], dyp: &[T], g: &Geom, p: &Plan) -> Vec<T> {
    let kk = g.kh * g.kw;
    let nt = threads();
    let wr = taps(w, g);
    let plane = p.plane;
    let mut dxp = vec![T::ZERO; g.b * g.ci * plane];
    let par_imgs = g.b >= nt;
    let par = if par_imgs {
        Parallelism::None
    } else {
        Parallelism::Rayon(nt)
    };
    let work = |(bi, img): (usize, &mut [T])| {
        for tap in 0..kk {
            let off = p.off(tap / g.kw, tap % g.kw);
            // SAFETY: the dst view stays inside img, as in the forward pass.
            unsafe {
                mm(
                    g.ci,
                    p.np,
                    g.co,
                    img.as_mut_ptr().add(off),
                    (plane, 1),
                    true,
                    wr[tap * g.co * g.ci..].as_ptr(),
                    (1, g.ci),
                    dyp[bi * g.co * p.np..].as_ptr(),
                    (p.np, 1),
                    par,
                );
            }
        }
    };
    if par_imgs {
        dxp.par_chunks_mut(g.ci * plane).enumerate().for_each(work);
    } else {
        dxp.chunks_mut(g.ci * plane).enumerate().for_each(work);
    }
    unpad(&dxp, g, p)
}

/// Output pixels (p-space positions) per block of [`dw_blocked`]: its im2col block of
/// `kh·kw·ci` rows stays in L2 (512 KiB of f32), and each gemm still has a long enough inner
/// dimension. Measured on the VQGAN's 32→32 conv at 256², batch 2 (Sapphire Rapids, 2
/// threads; `examples/conv_train_bench`): the weight gradient in 15.3 ms at this size, 16.3 at
/// a quarter and 16.1 at twice of it, 19.4 ms by the former nine whole-image gemms.
fn dw_block(rows: usize) -> usize {
    ((1 << 17) / rows.max(1)).clamp(128, 4096)
}

/// dW = Σ_images Σ_blocks dY'[:, block] · colᵀ, one gemm per block of output pixels, where
/// col holds, for every (tap, ci), the block's run of the padded input shifted by the tap (a
/// contiguous copy in p-space). All taps share one pass over dY', and the block's operands stay
/// in cache, instead of 9 whole-image gemms that each stream dY' and x from memory. Each thread
/// sums a fixed range of blocks and the thread sums are added in order: the result depends on
/// the thread count only, not on scheduling.
fn dw_blocked<T: Real>(xp: &[T], plane: usize, dyp: &[T], g: &Geom, p: &Plan) -> Vec<T> {
    let kk = g.kh * g.kw;
    let n_all = kk * g.ci; // columns: (tap, ci)
    let chunk = dw_block(n_all).min(p.np);
    let per_img = p.np.div_ceil(chunk);
    let jobs = g.b * per_img;
    let nt = threads().min(jobs).max(1);
    let offs: Vec<usize> = (0..kk).map(|t| p.off(t / g.kw, t % g.kw)).collect();
    let sums: Vec<Vec<T>> = (0..nt)
        .into_par_iter()
        .map(|t| {
            let mut acc = vec![T::ZERO; g.co * n_all];
            let mut col = vec![T::ZERO; n_all * chunk];
            for job in jobs * t / nt..jobs * (t + 1) / nt {
                let (bi, p0) = (job / per_img, (job % per_img) * chunk);
                let len = chunk.min(p.np - p0);
                let img = &xp[bi * g.ci * plane..(bi + 1) * g.ci * plane];
                for (tap, &off) in offs.iter().enumerate() {
                    for c in 0..g.ci {
                        let src = c * plane + off + p0;
                        let dst = (tap * g.ci + c) * len;
                        col[dst..dst + len].copy_from_slice(&img[src..src + len]);
                    }
                }
                // SAFETY: acc is co × n_all (row stride n_all); the lhs view is dY' rows of
                // image bi from p0 (len ≤ np − p0 columns); col is n_all runs of len.
                unsafe {
                    mm(
                        g.co,
                        n_all,
                        len,
                        acc.as_mut_ptr(),
                        (n_all, 1),
                        true,
                        dyp[bi * g.co * p.np + p0..].as_ptr(),
                        (p.np, 1),
                        col.as_ptr(),
                        (1, len),
                        Parallelism::None,
                    );
                }
            }
            acc
        })
        .collect();
    let mut dw = vec![T::ZERO; g.co * n_all];
    for sum in &sums {
        for co in 0..g.co {
            for tap in 0..kk {
                for c in 0..g.ci {
                    dw[(co * g.ci + c) * kk + tap] += sum[co * n_all + tap * g.ci + c];
                }
            }
        }
    }
    dw
}
