//! Fused scaled-dot-product attention for small heads (ViT: n = 65, d = 12), forward and
//! backward (the backward recomputes the probabilities instead of storing them).
//!
//! Per head, the four small products go through the `gemm` crate's microkernels
//! (single-threaded; heads run in parallel on rayon); the softmax and its backward are ours.

use super::{dot, max, sum, Real};
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

multiversion! {
    /// In-place row softmax of the n×n scores.
    fn softmax_rows<T>(s: &mut [T], n: usize) {
        for row in s.chunks_exact_mut(n) {
            let m = max(row);
            for x in row.iter_mut() {
                *x = (*x - m).exp();
            }
            let inv = T::ONE / sum(row);
            for x in row.iter_mut() {
                *x *= inv;
            }
        }
    }
}

multiversion! {
    /// dP ← P ⊙ (dP − rowsum(P ⊙ dP)) · scale, row by row.
    fn softmax_bwd_rows<T>(p: &[T], dp: &mut [T], n: usize, scale: T) {
        for (p, dp) in p.chunks_exact(n).zip(dp.chunks_exact_mut(n)) {
            let r = dot(p, dp);
            for (dp, p) in dp.iter_mut().zip(p) {
                *dp = *p * (*dp - r) * scale;
            }
        }
    }
}

/// P = softmax(scale · Q·Kᵀ) of one head into `s` (n×n, row-major).
#[allow(clippy::too_many_arguments)]
fn probs<T: Real>(
    q: &[T],
    k: &[T],
    sq: usize,
    sk: usize,
    n: usize,
    d: usize,
    scale: T,
    s: &mut [T],
) {
    debug_assert!(q.len() > (n - 1) * sq + d - 1 && k.len() > (n - 1) * sk + d - 1);
    // SAFETY: all pointers cover the strided ranges checked above; s has n·n elements.
    unsafe {
        gemm(
            n,
            n,
            d,
            s.as_mut_ptr(),
            n,
            1,
            q.as_ptr(),
            sq,
            1,
            k.as_ptr(),
            1,
            sk,
            scale,
        );
    }
    softmax_rows(s, n);
}

/// dst (m×n) = beta · lhs (m×k) · rhs (k×n), all with explicit (row, col) strides.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_rs: usize,
    dst_cs: usize,
    lhs: *const T,
    lhs_rs: usize,
    lhs_cs: usize,
    rhs: *const T,
    rhs_rs: usize,
    rhs_cs: usize,
    beta: T,
) {
    gemm::gemm(
        m,
        n,
        k,
        dst,
        dst_cs as isize,
        dst_rs as isize,
        false,
        lhs,
        lhs_cs as isize,
        lhs_rs as isize,
        rhs,
        rhs_cs as isize,
        rhs_rs as isize,
        T::ZERO,
        beta,
        false,
        false,
        false,
        gemm::Parallelism::None,
    )
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
        || vec![T::ZERO; n * n],
        |sc, (bh, o)| {
            let (bi, hi) = (bh / h, bh % h);
            let (q, k, v) = (
                &q[qv.base(bi, hi)..],
                &k[kv.base(bi, hi)..],
                &v[vv.base(bi, hi)..],
            );
            assert!(v.len() > (n - 1) * vv.sn + d - 1);
            probs(q, k, qv.sn, kv.sn, n, d, T::c(scale), sc);
            // SAFETY: o is n×d, sc n×n, v covers n strided rows of d.
            unsafe {
                gemm(
                    n,
                    d,
                    n,
                    o.as_mut_ptr(),
                    d,
                    1,
                    sc.as_ptr(),
                    n,
                    1,
                    v.as_ptr(),
                    vv.sn,
                    1,
                    T::ONE,
                )
            };
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
            || vec![T::ZERO; 2 * n * n],
            |sc, (bh, (dq, (dk, dv)))| {
                let (bi, hi) = (bh / h, bh % h);
                let (q, k, v) = (
                    &q[qv.base(bi, hi)..],
                    &k[kv.base(bi, hi)..],
                    &v[vv.base(bi, hi)..],
                );
                let (sq, sk, sv) = (qv.sn, kv.sn, vv.sn);
                assert!(v.len() > (n - 1) * sv + d - 1);
                let g = &g[bh * nd..(bh + 1) * nd];
                let (p, dp) = sc.split_at_mut(n * n);
                probs(q, k, sq, sk, n, d, T::c(scale), p);
                // SAFETY: every operand covers the (strided) n×d or n×n ranges used below.
                unsafe {
                    // dV = Pᵀ·dO
                    gemm(
                        n,
                        d,
                        n,
                        dv.as_mut_ptr(),
                        d,
                        1,
                        p.as_ptr(),
                        1,
                        n,
                        g.as_ptr(),
                        d,
                        1,
                        T::ONE,
                    );
                    // dP = dO·Vᵀ
                    gemm(
                        n,
                        n,
                        d,
                        dp.as_mut_ptr(),
                        n,
                        1,
                        g.as_ptr(),
                        d,
                        1,
                        v.as_ptr(),
                        1,
                        sv,
                        T::ONE,
                    );
                }
                softmax_bwd_rows(p, dp, n, T::c(scale));
                unsafe {
                    // dQ = dS·K, dK = dSᵀ·Q
                    gemm(
                        n,
                        d,
                        n,
                        dq.as_mut_ptr(),
                        d,
                        1,
                        dp.as_ptr(),
                        n,
                        1,
                        k.as_ptr(),
                        sk,
                        1,
                        T::ONE,
                    );
                    gemm(
                        n,
                        d,
                        n,
                        dk.as_mut_ptr(),
                        d,
                        1,
                        dp.as_ptr(),
                        1,
                        n,
                        q.as_ptr(),
                        sq,
                        1,
                        T::ONE,
                    );
                }
            },
        );
    (dq, dk, dv)
}
