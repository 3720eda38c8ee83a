//! Fused scaled-dot-product attention for small heads (ViT: n = 65, d = 12), forward and
//! backward (the backward recomputes the probabilities instead of storing them).
//!
//! Per head, the four small products go through the `gemm` crate's microkernels
//! (single-threaded; heads run in parallel on rayon); the softmax and its backward are ours.

use super::{dot, max, sum, Real};
use crate::multiversion;
use rayon::prelude::*;

/// Where the rows of one (b, h, n, d) operand live in its storage: element (bi, hi, i, c) is at
/// `start + bi·sb + hi·sh + i·sn + c·sd`.
#[derive(Debug, Clone, Copy)]
pub struct View {
    pub start: usize,
    pub sb: usize,
    pub sh: usize,
    pub sn: usize,
    pub sd: usize,
}

impl View {
    pub fn contiguous(h: usize, n: usize, d: usize) -> Self {
        Self {
            start: 0,
            sb: h * n * d,
            sh: n * d,
            sn: d,
            sd: 1,
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

/// The attention variant: the softmax scale and whether query i sees keys 0..=i only.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    pub scale: f64,
    pub causal: bool,
}

multiversion! {
    /// In-place row softmax of the n×n scores; `causal`: row i covers columns 0..=i only
    /// (the rest become exact zeros, as softmax gives for −∞ scores).
    fn softmax_rows<T>(s: &mut [T], n: usize, causal: bool) {
        for (i, row) in s.chunks_exact_mut(n).enumerate() {
            let row = if causal {
                let (keep, masked) = row.split_at_mut(i + 1);
                masked.fill(T::ZERO);
                keep
            } else {
                row
            };
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

/// P = softmax(scale · Q·Kᵀ) of one head into `s` (n×n, row-major); `causal` masks
/// column j > row i.
#[allow(clippy::too_many_arguments)]
fn probs<T: Real>(
    q: &[T],
    k: &[T],
    sq: (usize, usize),
    sk: (usize, usize),
    n: usize,
    d: usize,
    scale: T,
    causal: bool,
    s: &mut [T],
    par: gemm::Parallelism,
) {
    assert!(covers(q, sq, n, d) && covers(k, sk, n, d) && s.len() >= n * n);
    // SAFETY: all pointers cover the strided ranges checked above.
    unsafe {
        gemm(
            n,
            n,
            d,
            s.as_mut_ptr(),
            n,
            1,
            q.as_ptr(),
            sq.0,
            sq.1,
            k.as_ptr(),
            sk.1,
            sk.0,
            scale,
            par,
        )
    };
    softmax_rows(&mut s[..n * n], n, causal);
}

/// Whether `x` holds an n×d operand with (row, col) strides `st`.
fn covers<T>(x: &[T], st: (usize, usize), n: usize, d: usize) -> bool {
    n == 0 || d == 0 || x.len() > (n - 1) * st.0 + (d - 1) * st.1
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
    par: gemm::Parallelism,
) {
    super::gemm::mm_scaled(
        m,
        n,
        k,
        dst,
        (dst_rs, dst_cs),
        false,
        lhs,
        (lhs_rs, lhs_cs),
        rhs,
        (rhs_rs, rhs_cs),
        beta,
        par,
    )
}

/// How to run the per-head work: heads in parallel with single-threaded GEMMs, or (few large
/// heads, as the VQGAN's single spatial head) heads in turn with multi-threaded GEMMs.
fn plan(dims: Dims) -> (bool, gemm::Parallelism) {
    let t = super::threads();
    if dims.b * dims.h >= t || t == 1 {
        (true, gemm::Parallelism::None)
    } else {
        (false, gemm::Parallelism::Rayon(t))
    }
}

/// Runs `f(bi, hi, out_chunk_of_batch_bi)` for every head, over chunks of `len` per batch.
fn for_heads<T: Real, S: Send>(
    bufs: &mut [&mut [T]],
    per_batch: usize,
    dims: Dims,
    parallel: bool,
    init: impl Fn() -> S + Sync + Send,
    f: impl Fn(&mut S, usize, usize, &mut [&mut [T]]) + Sync + Send,
) {
    let n_bufs = bufs.len();
    let mut per: Vec<Vec<&mut [T]>> = (0..dims.b).map(|_| Vec::with_capacity(n_bufs)).collect();
    for buf in bufs.iter_mut() {
        for (bi, c) in buf.chunks_mut(per_batch).enumerate() {
            per[bi].push(c);
        }
    }
    let run = |st: &mut S, (bi, chunks): (usize, &mut Vec<&mut [T]>)| {
        for hi in 0..dims.h {
            f(st, bi, hi, chunks);
        }
    };
    if parallel {
        per.par_iter_mut().enumerate().for_each_init(&init, run);
    } else {
        let mut st = init();
        per.iter_mut().enumerate().for_each(|x| run(&mut st, x));
    }
}

/// softmax(q·kᵀ·scale)·v for every (batch, head). The output is laid out as (b, n, h, d), i.e.
/// ready for the usual "merge heads" transpose; index it as (b, h, n, d) through strides.
#[allow(clippy::too_many_arguments)]
pub fn attention<T: Real>(
    q: &[T],
    qv: View,
    k: &[T],
    kv: View,
    v: &[T],
    vv: View,
    dims: Dims,
    mode: Mode,
) -> Vec<T> {
    let Mode { scale, causal } = mode;
    let Dims { h, n, d, .. } = dims;
    let mut out = vec![T::ZERO; dims.b * h * n * d];
    if n == 0 || d == 0 || h == 0 {
        return out;
    }
    let (parallel, par) = plan(dims);
    let hd = h * d;
    for_heads(
        &mut [&mut out[..]],
        n * hd,
        dims,
        parallel,
        || vec![T::ZERO; n * n],
        |sc, bi, hi, o| {
            let (q, k, v) = (
                &q[qv.base(bi, hi)..],
                &k[kv.base(bi, hi)..],
                &v[vv.base(bi, hi)..],
            );
            assert!(covers(v, (vv.sn, vv.sd), n, d) && o[0].len() >= (n - 1) * hd + hi * d + d);
            probs(
                q,
                k,
                (qv.sn, qv.sd),
                (kv.sn, kv.sd),
                n,
                d,
                T::c(scale),
                causal,
                sc,
                par,
            );
            // SAFETY: o rows of the head are at hi·d + i·h·d, sc is n×n, v covers n strided rows.
            unsafe {
                gemm(
                    n,
                    d,
                    n,
                    o[0][hi * d..].as_mut_ptr(),
                    hd,
                    1,
                    sc.as_ptr(),
                    n,
                    1,
                    v.as_ptr(),
                    vv.sn,
                    vv.sd,
                    T::ONE,
                    par,
                )
            };
        },
    );
    out
}

/// Backward of [`attention`] given dL/dout `g` laid out (b, n, h, d): (dq, dk, dv), each laid
/// out (b, n, h, d) as well.
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
    mode: Mode,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let Mode { scale, causal } = mode;
    let Dims { h, n, d, .. } = dims;
    let len = dims.b * h * n * d;
    let (mut dq, mut dk, mut dv) = (vec![T::ZERO; len], vec![T::ZERO; len], vec![T::ZERO; len]);
    if n == 0 || d == 0 || h == 0 {
        return (dq, dk, dv);
    }
    let (parallel, par) = plan(dims);
    let hd = h * d;
    let per_batch = n * hd;
    for_heads(
        &mut [&mut dq[..], &mut dk[..], &mut dv[..]],
        per_batch,
        dims,
        parallel,
        || vec![T::ZERO; 2 * n * n],
        |sc, bi, hi, outs| {
            let (q, k, v) = (
                &q[qv.base(bi, hi)..],
                &k[kv.base(bi, hi)..],
                &v[vv.base(bi, hi)..],
            );
            let (sq, sk, sv) = ((qv.sn, qv.sd), (kv.sn, kv.sd), (vv.sn, vv.sd));
            assert!(covers(v, sv, n, d));
            let g = &g[bi * per_batch + hi * d..];
            assert!(g.len() >= (n - 1) * hd + d);
            let (p, dp) = sc.split_at_mut(n * n);
            probs(q, k, sq, sk, n, d, T::c(scale), causal, p, par);
            let dq = outs[0][hi * d..].as_mut_ptr();
            let dk = outs[1][hi * d..].as_mut_ptr();
            let dv = outs[2][hi * d..].as_mut_ptr();
            // Operands as (pointer, (row, col) strides); Vᵀ is V with its strides swapped.
            let (pt, go) = ((p.as_ptr(), (1, n)), (g.as_ptr(), (hd, 1)));
            let vt = (v.as_ptr(), (sv.1, sv.0));
            // SAFETY: every operand covers the (strided) n×d or n×n ranges used below (checked
            // above and by `probs`); output rows of the head are at hi·d + i·h·d inside this
            // batch's chunk.
            unsafe {
                head_mm((n, d, n), (dv, hd), pt, go, par); // dV = Pᵀ·dO
                head_mm((n, n, d), (dp.as_mut_ptr(), n), go, vt, par); // dP = dO·Vᵀ
            }
            softmax_bwd_rows(p, dp, n, T::c(scale));
            let (ds, ds_t) = ((dp.as_ptr(), (n, 1)), (dp.as_ptr(), (1, n)));
            // SAFETY: as above.
            unsafe {
                head_mm((n, d, n), (dq, hd), ds, (k.as_ptr(), sk), par); // dQ = dS·K
                head_mm((n, d, n), (dk, hd), ds_t, (q.as_ptr(), sq), par); // dK = dSᵀ·Q
            }
        },
    );
    (dq, dk, dv)
}

/// One product of [`attention_bwd`]: dst (m×n, rows `ld` apart) = a (m×k) · b (k×n), the
/// operands as (pointer, (row, col) strides).
///
/// # Safety
/// Each pointer covers its operand's strided range.
unsafe fn head_mm<T: Real>(
    (m, n, k): (usize, usize, usize),
    (dst, ld): (*mut T, usize),
    (a, sa): (*const T, (usize, usize)),
    (b, sb): (*const T, (usize, usize)),
    par: gemm::Parallelism,
) {
    gemm(
        m,
        n,
        k,
        dst,
        ld,
        1,
        a,
        sa.0,
        sa.1,
        b,
        sb.0,
        sb.1,
        T::ONE,
        par,
    )
}
