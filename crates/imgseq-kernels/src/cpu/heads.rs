//! Single-threaded strided GEMM on slices and one attention head's forward and backward as
//! two GEMMs around the row softmax: the matrix kernels of a hand-written transformer engine
//! that parallelises over shards of work (the ViT's fused training engine).

use super::gemm::mm_scaled;
use super::rows::{softmax_bwd_rows, softmax_rows};
use super::simd::Simd;

/// dst (m×n, row stride `ld`) = [dst +] alpha · a (m×k) · b (k×n), with a and b given by
/// (row, column) strides. Single-threaded: the caller's shards are the parallelism.
/// Panics if an operand is too short for its strides.
#[allow(clippy::too_many_arguments)]
pub fn mm(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    ld: usize,
    acc: bool,
    a: &[f32],
    a_st: (usize, usize),
    b: &[f32],
    b_st: (usize, usize),
    alpha: f32,
) {
    if m == 0 || n == 0 {
        return;
    }
    let covers = |len: usize, rows: usize, cols: usize, (rs, cs): (usize, usize)| {
        rows == 0 || cols == 0 || len > (rows - 1) * rs + (cols - 1) * cs
    };
    assert!(
        covers(dst.len(), m, n, (ld, 1)),
        "mm: destination too short"
    );
    if k == 0 {
        if !acc {
            for i in 0..m {
                dst[i * ld..][..n].fill(0.0);
            }
        }
        return;
    }
    assert!(
        covers(a.len(), m, k, a_st) && covers(b.len(), k, n, b_st),
        "mm: operand too short"
    );
    // SAFETY: every operand covers its strided range (checked above); `dst` is a unique
    // borrow, so it does not overlap `a` or `b`.
    unsafe {
        mm_scaled(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            (ld, 1),
            acc,
            a.as_ptr(),
            a_st,
            b.as_ptr(),
            b_st,
            alpha,
            gemm::Parallelism::None,
        )
    }
}

/// Where one head's q, k and v columns are in the (rows, 3·hidden) qkv buffer.
#[derive(Debug, Clone, Copy)]
pub struct HeadCols {
    pub q: usize,
    pub k: usize,
    pub v: usize,
    /// Row stride of qkv (3·hidden).
    pub ld: usize,
    /// Tokens, head width, softmax scale.
    pub n: usize,
    pub hd: usize,
    pub scale: f32,
}

/// One head's attention: `p` (n × n) ← P = softmax(scale·Q·Kᵀ) (kept for the backward),
/// ctx rows (stride ldc) ← P·V. The two products are GEMMs.
pub fn attn_fwd_head(
    simd: Simd,
    qkv: &[f32],
    hc: HeadCols,
    p: &mut [f32],
    ctx: &mut [f32],
    ldc: usize,
) {
    let HeadCols {
        q,
        k,
        v,
        ld,
        n,
        hd,
        scale,
    } = hc;
    // S = scale · Q·Kᵀ: Kᵀ's (row, col) strides are (1, ld).
    mm(
        n,
        n,
        hd,
        p,
        n,
        false,
        &qkv[q..],
        (ld, 1),
        &qkv[k..],
        (1, ld),
        scale,
    );
    softmax_rows(simd, &mut p[..n * n], n);
    mm(
        n,
        hd,
        n,
        ctx,
        ldc,
        false,
        p,
        (n, 1),
        &qkv[v..],
        (ld, 1),
        1.0,
    ); // P·V
}

/// Backward of [`attn_fwd_head`] given P and dL/dctx `d_o` (rows at stride ldo): writes dQ,
/// dK, dV into dqkv's head columns. `ds`: n × n scratch.
#[allow(clippy::too_many_arguments)]
pub fn attn_bwd_head(
    simd: Simd,
    qkv: &[f32],
    hc: HeadCols,
    p: &[f32],
    d_o: &[f32],
    ldo: usize,
    dqkv: &mut [f32],
    ds: &mut [f32],
) {
    let HeadCols {
        q,
        k,
        v,
        ld,
        n,
        hd,
        scale,
    } = hc;
    let ds = &mut ds[..n * n];
    mm(
        n,
        hd,
        n,
        &mut dqkv[v..],
        ld,
        false,
        p,
        (1, n),
        d_o,
        (ldo, 1),
        1.0,
    ); // dV = Pᵀ·dO
    mm(
        n,
        n,
        hd,
        ds,
        n,
        false,
        d_o,
        (ldo, 1),
        &qkv[v..],
        (1, ld),
        1.0,
    ); // dP = dO·Vᵀ
    softmax_bwd_rows(simd, &p[..n * n], ds, n, scale); // dS
    mm(
        n,
        hd,
        n,
        &mut dqkv[q..],
        ld,
        false,
        ds,
        (n, 1),
        &qkv[k..],
        (ld, 1),
        1.0,
    ); // dQ = dS·K
    mm(
        n,
        hd,
        n,
        &mut dqkv[k..],
        ld,
        false,
        ds,
        (1, n),
        &qkv[q..],
        (ld, 1),
        1.0,
    ); // dK = dSᵀ·Q
}
