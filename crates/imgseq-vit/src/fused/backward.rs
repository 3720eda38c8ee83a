//! The backward, one function per layer, called in reverse order by [`backward_shard`] over
//! the activations the forward left in the shard's [`Workspace`]. Every parameter gradient is
//! written (set, not accumulated) into the shard's gradient array.

use imgseq_kernels::cpu::heads::{attn_bwd_head, mm};
use imgseq_kernels::cpu::rows::{add_assign, col_sum, col_sum_acc, ln_bwd_rows, mul_assign};
use imgseq_kernels::cpu::simd::Simd;

use super::forward::head_cols;
use super::layout::{LayerParams, Linear, Norm, ParamLayout};
use super::workspace::{residuals, Dims, LayerActs, Scratch, Workspace};

/// Backward of [`super::forward::forward_shard`] from dL/dlogits (in `ws.logits`): writes the
/// shard's gradient of every parameter into `g`.
pub(super) fn backward_shard(
    dm: &Dims,
    lay: &ParamLayout,
    p: &[f32],
    ws: &mut Workspace,
    nb: usize,
    g: &mut [f32],
) {
    let (r, d, cap) = (nb * dm.n, dm.d, ws.cap);
    let slab = cap * dm.n * d;
    let Workspace {
        patches,
        xs,
        acts,
        lnf,
        stf,
        logits,
        scratch,
        ..
    } = ws;
    let dlogits = &logits[..nb * dm.k];
    let dt = &mut scratch.dt[..r * d];
    linear_backward(
        dm.simd,
        p,
        g,
        lay.head,
        &lnf[..nb * d],
        dlogits,
        &mut dt[..nb * d],
        nb,
    );
    let x_last = &xs[2 * dm.layers * slab..][..r * d];
    let dx = &mut scratch.dx[..r * d];
    dx.fill(0.0);
    final_norm_backward(dm, p, g, lay.lnf, dt, x_last, stf, dx, &mut scratch.row, nb);
    for (li, lp) in lay.layers.iter().enumerate().rev() {
        let (x_in, x_mid, _) = residuals(xs, li, slab, r * d);
        let acts = acts.layer(dm, cap, li, nb);
        block_backward(dm, lp, p, g, [&*x_in, &*x_mid], acts, scratch, nb);
    }
    embed_backward(dm, lay, g, &scratch.dx[..r * d], patches, nb);
}

/// Backward of one encoder block: dL/d its output in `s.dx` becomes dL/d its input there.
#[allow(clippy::too_many_arguments)]
fn block_backward(
    dm: &Dims,
    lp: &LayerParams,
    p: &[f32],
    g: &mut [f32],
    [x_in, x_mid]: [&[f32]; 2],
    a: LayerActs,
    s: &mut Scratch,
    nb: usize,
) {
    let (r, d, simd) = (nb * dm.n, dm.d, dm.simd);
    let (dx, dt) = (&mut s.dx[..r * d], &mut s.dt[..r * d]);
    let dfc = &mut s.dfc[..r * dm.m];
    let dqkv = &mut s.dqkv[..r * 3 * d];
    linear_backward(simd, p, g, lp.fc2, a.fcg, dx, dfc, r);
    mul_assign(simd, dfc, a.fch); // GELU′ (the forward left it in fch)
    linear_backward(simd, p, g, lp.fc1, a.ln2, dfc, dt, r);
    layernorm_backward(dm, p, g, lp.ln2, dt, x_mid, a.st2, dx, &mut s.row);
    linear_backward(simd, p, g, lp.o, a.ctx, dx, dt, r);
    attention_backward(dm, a.qkv, a.att, dt, dqkv, &mut s.at, nb);
    linear_backward(simd, p, g, lp.qkv, a.ln1, dqkv, dt, r);
    layernorm_backward(dm, p, g, lp.ln1, dt, x_in, a.st1, dx, &mut s.row);
}

/// Backward of y = x·Wᵀ + b given dL/dy `dy`: dW = dyᵀ·x, db = Σ dy (into `g`), dx = dy·W.
#[allow(clippy::too_many_arguments)]
fn linear_backward(
    simd: Simd,
    p: &[f32],
    g: &mut [f32],
    lin: Linear,
    x: &[f32],
    dy: &[f32],
    dx: &mut [f32],
    rows: usize,
) {
    let Linear { w, b, inp, out } = lin;
    let gw = &mut g[w..][..out * inp];
    mm(
        out,
        inp,
        rows,
        gw,
        inp,
        false,
        dy,
        (1, out),
        x,
        (inp, 1),
        1.0,
    );
    if let Some(b) = b {
        col_sum(simd, dy, &mut g[b..][..out]);
    }
    mm(
        rows,
        inp,
        out,
        dx,
        inp,
        false,
        dy,
        (out, 1),
        &p[w..],
        (inp, 1),
        1.0,
    );
}

/// A LayerNorm's weight and bias gradients, zeroed (its backward accumulates into them).
fn norm_grads(g: &mut [f32], ln: Norm, d: usize) -> (&mut [f32], &mut [f32]) {
    assert!(ln.w + d <= ln.b);
    let (lo, hi) = g.split_at_mut(ln.b);
    let (gw, gb) = (&mut lo[ln.w..][..d], &mut hi[..d]);
    gw.fill(0.0);
    gb.fill(0.0);
    (gw, gb)
}

/// LayerNorm backward given dL/dy `dy`: dx += dL/dx; the weight and bias gradients into `g`.
#[allow(clippy::too_many_arguments)]
fn layernorm_backward(
    dm: &Dims,
    p: &[f32],
    g: &mut [f32],
    ln: Norm,
    dy: &[f32],
    x: &[f32],
    st: &[f32],
    dx: &mut [f32],
    row: &mut [f32],
) {
    let d = dm.d;
    let (gw, gb) = norm_grads(g, ln, d);
    ln_bwd_rows(dm.simd, dy, x, st, &p[ln.w..][..d], dx, gw, gb, row);
}

/// The final LayerNorm's backward: only the CLS rows get a gradient (dL/dlnf in the first
/// `nb` rows of `dt`).
#[allow(clippy::too_many_arguments)]
fn final_norm_backward(
    dm: &Dims,
    p: &[f32],
    g: &mut [f32],
    ln: Norm,
    dt: &[f32],
    x_last: &[f32],
    stf: &[f32],
    dx: &mut [f32],
    row: &mut [f32],
    nb: usize,
) {
    let (n, d) = (dm.n, dm.d);
    let (gw, gb) = norm_grads(g, ln, d);
    let w = &p[ln.w..][..d];
    for b in 0..nb {
        let (dy, x) = (&dt[b * d..][..d], &x_last[b * n * d..][..d]);
        let dxb = &mut dx[b * n * d..][..d];
        ln_bwd_rows(dm.simd, dy, x, &stf[b * 2..][..2], w, dxb, gw, gb, row);
    }
}

/// Attention per image and head given dL/dctx `dctx`: writes dQ, dK, dV into `dqkv`.
fn attention_backward(
    dm: &Dims,
    qkv: &[f32],
    att: &[f32],
    dctx: &[f32],
    dqkv: &mut [f32],
    ds: &mut [f32],
    nb: usize,
) {
    let Dims { n, d, h, hd, .. } = *dm;
    let nn = n * n;
    for b in 0..nb {
        for hh in 0..h {
            let hc = head_cols(dm, b, hh);
            let p = &att[(b * h + hh) * nn..][..nn];
            let d_o = &dctx[b * n * d + hh * hd..];
            attn_bwd_head(dm.simd, qkv, hc, p, d_o, d, dqkv, ds);
        }
    }
}

/// Embeddings: CLS and positions sum over images; the patch conv over patch rows.
fn embed_backward(
    dm: &Dims,
    lay: &ParamLayout,
    g: &mut [f32],
    dx: &[f32],
    patches: &[f32],
    nb: usize,
) {
    let Dims {
        np, n, kp, d, simd, ..
    } = *dm;
    let gc = &mut g[lay.cls..][..d];
    gc.fill(0.0);
    for b in 0..nb {
        add_assign(simd, gc, &dx[b * n * d..][..d]);
    }
    let gp = &mut g[lay.pos..][..n * d];
    gp.copy_from_slice(&dx[..n * d]);
    for b in 1..nb {
        add_assign(simd, gp, &dx[b * n * d..][..n * d]);
    }
    let pw = lay.patch;
    let gb = &mut g[pw.b.expect("the patch conv has a bias")..][..d];
    gb.fill(0.0);
    for b in 0..nb {
        col_sum_acc(simd, &dx[(b * n + 1) * d..][..np * d], gb);
    }
    for b in 0..nb {
        mm(
            d,
            kp,
            np,
            &mut g[pw.w..],
            kp,
            b > 0,
            &dx[(b * n + 1) * d..],
            (1, d),
            &patches[b * np * kp..],
            (kp, 1),
            1.0,
        );
    }
}
