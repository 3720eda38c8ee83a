//! Fused scaled-dot-product attention for small heads (ViT: n = 65, d = 12), forward and
//! backward (the backward recomputes the probabilities instead of storing them).
//!
//! Within a head K and V are transposed into (d, n) scratch so that every inner loop runs
//! over the n keys and vectorises.

use super::{axpy, dot, max, sum, Real};
use crate::multiversion;
use rayon::prelude::*;

/// Where the rows of one (b, h, n, d) operand live in its storage: element (bi, hi, i, c) is at
/// `start + bi·sb + hi·sh + i·sn + c`.
#[derive(Debug, Clone, Copy)]
pub struct View {
    pub start: usize,
    pub sb: usize,
    pub sh: usize,
    pub sn: usize,
}

impl View {
    pub fn contiguous(h: usize, n: usize, d: usize) -> Self {
        Self {
            start: 0,
            sb: h * n * d,
            sh: n * d,
            sn: d,
        }
    }
    fn base(&self, bi: usize, hi: usize) -> usize {
        self.start + bi * self.sb + hi * self.sh
    }
}

/// Problem sizes.
#[derive(Debug, Clone, Copy)]
pub struct Dims {
    pub b: usize,
    pub h: usize,
    pub n: usize,
    pub d: usize,
}

#[inline(always)]
fn transpose_in<T: Real>(src: &[T], sn: usize, n: usize, d: usize, dst: &mut [T]) {
    for j in 0..n {
        let row = &src[j * sn..j * sn + d];
        for c in 0..d {
            dst[c * n + j] = row[c];
        }
    }
}

/// Softmax row i of the head into `p` (normalised).
#[inline(always)]
fn prob_row<T: Real>(qi: &[T], kt: &[T], p: &mut [T], n: usize, scale: T) {
    p.fill(T::ZERO);
    for (c, qc) in qi.iter().enumerate() {
        axpy(p, *qc * scale, &kt[c * n..(c + 1) * n]);
    }
    let m = max(p);
    for x in p.iter_mut() {
        *x = (*x - m).exp();
    }
    let inv = T::ONE / sum(p);
    for x in p.iter_mut() {
        *x *= inv;
    }
}

multiversion! {
    fn head_fwd<T>(q: &[T], k: &[T], v: &[T], sq: usize, sk: usize, sv: usize, n: usize, d: usize, scale: T, out: &mut [T], scratch: &mut [T]) {
        let (kt, rest) = scratch.split_at_mut(n * d);
        let (vt, rest) = rest.split_at_mut(n * d);
        let p = &mut rest[..n];
        transpose_in(k, sk, n, d, kt);
        transpose_in(v, sv, n, d, vt);
        for i in 0..n {
            prob_row(&q[i * sq..i * sq + d], kt, p, n, scale);
            let o = &mut out[i * d..(i + 1) * d];
            for c in 0..d {
                o[c] = dot(p, &vt[c * n..(c + 1) * n]);
            }
        }
    }
}

multiversion! {
    fn head_bwd<T>(q: &[T], k: &[T], v: &[T], g: &[T], sq: usize, sk: usize, sv: usize, n: usize, d: usize, scale: T, dq: &mut [T], dk: &mut [T], dv: &mut [T], scratch: &mut [T]) {
        let (kt, rest) = scratch.split_at_mut(n * d);
        let (vt, rest) = rest.split_at_mut(n * d);
        let (dkt, rest) = rest.split_at_mut(n * d);
        let (dvt, rest) = rest.split_at_mut(n * d);
        let (p, rest) = rest.split_at_mut(n);
        let dp = &mut rest[..n];
        transpose_in(k, sk, n, d, kt);
        transpose_in(v, sv, n, d, vt);
        dkt.fill(T::ZERO);
        dvt.fill(T::ZERO);
        for i in 0..n {
            let qi = &q[i * sq..i * sq + d];
            let gi = &g[i * d..(i + 1) * d];
            prob_row(qi, kt, p, n, scale);
            dp.fill(T::ZERO);
            for c in 0..d {
                axpy(dp, gi[c], &vt[c * n..(c + 1) * n]);
            }
            let r = dot(p, dp);
            for (dp, p) in dp.iter_mut().zip(p.iter()) {
                *dp = *p * (*dp - r) * scale;
            }
            let dqi = &mut dq[i * d..(i + 1) * d];
            for c in 0..d {
                dqi[c] = dot(dp, &kt[c * n..(c + 1) * n]);
                axpy(&mut dkt[c * n..(c + 1) * n], qi[c], dp);
                axpy(&mut dvt[c * n..(c + 1) * n], gi[c], p);
            }
        }
        for j in 0..n {
            for c in 0..d {
                dk[j * d + c] = dkt[c * n + j];
                dv[j * d + c] = dvt[c * n + j];
            }
        }
    }
}

/// softmax(q·kᵀ·scale)·v for every (batch, head); output contiguous (b, h, n, d).
#[allow(clippy::too_many_arguments)]
pub fn attention<T: Real>(
    q: &[T],
    qv: View,
    k: &[T],
    kv: View,
    v: &[T],
    vv: View,
    dims: Dims,
    scale: f64,
) -> Vec<T> {
    let Dims { h, n, d, .. } = dims;
    let mut out = vec![T::ZERO; dims.b * h * n * d];
    if n == 0 || d == 0 {
        return out;
    }
    out.par_chunks_mut(n * d).enumerate().for_each_init(
        || vec![T::ZERO; 2 * n * d + n],
        |scratch, (bh, o)| {
            let (bi, hi) = (bh / h, bh % h);
            head_fwd(
                &q[qv.base(bi, hi)..],
                &k[kv.base(bi, hi)..],
                &v[vv.base(bi, hi)..],
                qv.sn,
                kv.sn,
                vv.sn,
                n,
                d,
                T::c(scale),
                o,
                scratch,
            );
        },
    );
    out
}

/// Backward of [`attention`] given dL/dout `g` (contiguous): (dq, dk, dv), contiguous.
#[allow(clippy::too_many_arguments)]
pub fn attention_bwd<T: Real>(
    q: &[T],
    qv: View,
    k: &[T],
    kv: View,
    v: &[T],
    vv: View,
    g: &[T],
    dims: Dims,
    scale: f64,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let Dims { h, n, d, .. } = dims;
    let len = dims.b * h * n * d;
    let (mut dq, mut dk, mut dv) = (vec![T::ZERO; len], vec![T::ZERO; len], vec![T::ZERO; len]);
    if n == 0 || d == 0 {
        return (dq, dk, dv);
    }
    let nd = n * d;
    dq.par_chunks_mut(nd)
        .zip(dk.par_chunks_mut(nd).zip(dv.par_chunks_mut(nd)))
        .enumerate()
        .for_each_init(
            || vec![T::ZERO; 4 * nd + 2 * n],
            |scratch, (bh, (dq, (dk, dv)))| {
                let (bi, hi) = (bh / h, bh % h);
                head_bwd(
                    &q[qv.base(bi, hi)..],
                    &k[kv.base(bi, hi)..],
                    &v[vv.base(bi, hi)..],
                    &g[bh * nd..(bh + 1) * nd],
                    qv.sn,
                    kv.sn,
                    vv.sn,
                    n,
                    d,
                    T::c(scale),
                    dq,
                    dk,
                    dv,
                    scratch,
                );
            },
        );
    (dq, dk, dv)
}
