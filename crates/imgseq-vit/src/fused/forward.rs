//! The forward, one function per layer, called in order by [`forward_shard`] over the
//! shard's preallocated [`Workspace`].

use imgseq_kernels::cpu::heads::{attn_fwd_head, mm, HeadCols};
use imgseq_kernels::cpu::rows::{add_rows, fill_rows, gelu_fwd, gelu_only, ln_fwd_rows};
use imgseq_kernels::cpu::simd::Simd;

use super::layout::{LayerParams, Linear, Norm, ParamLayout};
use super::workspace::{residuals, Dims, LayerActs, Workspace};

/// Forward of `nb` images `x` (nb, c, s, s) through the whole model into `ws` (logits in
/// `ws.logits`); `for_backward`: also leave every activation the backward needs (GELU's
/// derivative in the layers' `fch`), else skip computing what only the backward reads.
pub(super) fn forward_shard(
    dm: &Dims,
    lay: &ParamLayout,
    p: &[f32],
    ws: &mut Workspace,
    x: &[f32],
    nb: usize,
    for_backward: bool,
) {
    let (r, d, cap) = (nb * dm.n, dm.d, ws.cap);
    let slab = cap * dm.n * d;
    patches_forward(dm, x, nb, &mut ws.patches);
    embed_forward(dm, lay, p, &ws.patches, &mut ws.xs[..r * d], nb);
    for (li, lp) in lay.layers.iter().enumerate() {
        let (x_in, x_mid, x_out) = residuals(&mut ws.xs, li, slab, r * d);
        let acts = ws.acts.layer(dm, cap, li, nb);
        block_forward(dm, lp, p, [x_in, x_mid, x_out], acts, nb, for_backward);
    }
    let x_last = &ws.xs[2 * dm.layers * slab..][..r * d];
    final_norm_forward(dm, p, lay.lnf, x_last, &mut ws.lnf, &mut ws.stf, nb);
    let logits = &mut ws.logits[..nb * dm.k];
    linear_forward(p, lay.head, &ws.lnf[..nb * d], logits, nb);
}

/// One pre-LN encoder block: mid = x + Wo·attn(LN1(x)) + bo, out = mid + W2·GELU(W1·LN2(mid)).
fn block_forward(
    dm: &Dims,
    lp: &LayerParams,
    p: &[f32],
    [x_in, x_mid, x_out]: [&mut [f32]; 3],
    a: LayerActs,
    nb: usize,
    for_backward: bool,
) {
    let (r, simd) = (nb * dm.n, dm.simd);
    layernorm_forward(dm, p, lp.ln1, x_in, a.ln1, a.st1);
    linear_forward(p, lp.qkv, a.ln1, a.qkv, r);
    attention_forward(dm, a.qkv, a.att, a.ctx, nb);
    residual_linear_forward(simd, p, lp.o, a.ctx, x_in, x_mid, r);
    layernorm_forward(dm, p, lp.ln2, x_mid, a.ln2, a.st2);
    linear_forward(p, lp.fc1, a.ln2, a.fch, r);
    gelu_forward(simd, a.fch, a.fcg, for_backward);
    residual_linear_forward(simd, p, lp.fc2, a.fcg, x_mid, x_out, r);
}

/// Patches in (c, py, px) order, raster over the grid: (nb·np, kp).
fn patches_forward(dm: &Dims, x: &[f32], nb: usize, patches: &mut [f32]) {
    let Dims {
        c,
        img,
        ps,
        grid,
        np,
        kp,
        ..
    } = *dm;
    for b in 0..nb {
        for gy in 0..grid {
            for gx in 0..grid {
                let row = &mut patches[(b * np + gy * grid + gx) * kp..][..kp];
                for ch in 0..c {
                    for py in 0..ps {
                        let src = &x[((b * c + ch) * img + gy * ps + py) * img + gx * ps..][..ps];
                        row[(ch * ps + py) * ps..][..ps].copy_from_slice(src);
                    }
                }
            }
        }
    }
}

/// Embeddings: row 0 = CLS + pos 0, row 1 + i = patch_i·Wᵀ + bias + pos (1 + i).
fn embed_forward(
    dm: &Dims,
    lay: &ParamLayout,
    p: &[f32],
    patches: &[f32],
    x0: &mut [f32],
    nb: usize,
) {
    let Dims {
        np, n, kp, d, simd, ..
    } = *dm;
    let pw = lay.patch;
    let pb = pw.b.expect("the patch conv has a bias");
    let (cls, pos, pb) = (&p[lay.cls..][..d], &p[lay.pos..][..n * d], &p[pb..][..d]);
    for b in 0..nb {
        let xb = &mut x0[b * n * d..][..n * d];
        add_rows(simd, &mut xb[..d], &pos[..d], cls);
        add_rows(simd, &mut xb[d..], &pos[d..], pb);
        mm(
            np,
            d,
            kp,
            &mut xb[d..],
            d,
            true,
            &patches[b * np * kp..],
            (kp, 1),
            &p[pw.w..],
            (1, kp),
            1.0,
        );
    }
}

/// LayerNorm of the rows of `x` into `y`, keeping (mean, 1/std) per row in `st`.
fn layernorm_forward(dm: &Dims, p: &[f32], ln: Norm, x: &[f32], y: &mut [f32], st: &mut [f32]) {
    let d = dm.d;
    let (w, b) = (&p[ln.w..][..d], &p[ln.b..][..d]);
    ln_fwd_rows(dm.simd, x, w, b, y, st, dm.eps);
}

/// y (rows, out) = x (rows, inp)·Wᵀ + b.
fn linear_forward(p: &[f32], lin: Linear, x: &[f32], y: &mut [f32], rows: usize) {
    match lin.b {
        Some(b) => fill_rows(y, &p[b..][..lin.out]),
        None => y.fill(0.0),
    }
    add_product(p, lin, x, y, rows);
}

/// y (rows, out) += x (rows, inp)·Wᵀ.
fn add_product(p: &[f32], lin: Linear, x: &[f32], y: &mut [f32], rows: usize) {
    let Linear { w, inp, out, .. } = lin;
    mm(
        rows,
        out,
        inp,
        y,
        out,
        true,
        x,
        (inp, 1),
        &p[w..],
        (1, inp),
        1.0,
    );
}

/// y (rows, out) = res + x (rows, inp)·Wᵀ + b: a projection back into the residual stream.
fn residual_linear_forward(
    simd: Simd,
    p: &[f32],
    lin: Linear,
    x: &[f32],
    res: &[f32],
    y: &mut [f32],
    rows: usize,
) {
    let b = lin.b.expect("a residual projection has a bias");
    add_rows(simd, y, res, &p[b..][..lin.out]);
    add_product(p, lin, x, y, rows);
}

/// Multi-head self-attention of every image and head: `att` ← P, ctx ← P·V per head.
fn attention_forward(dm: &Dims, qkv: &[f32], att: &mut [f32], ctx: &mut [f32], nb: usize) {
    let Dims { n, d, h, .. } = *dm;
    let nn = n * n;
    for b in 0..nb {
        for hh in 0..h {
            let hc = head_cols(dm, b, hh);
            let p = &mut att[(b * h + hh) * nn..][..nn];
            attn_fwd_head(dm.simd, qkv, hc, p, &mut ctx[b * n * d + hh * dm.hd..], d);
        }
    }
}

/// Where head `hh` of image `b` has its q, k and v columns in the (rows, 3·hidden) qkv rows.
pub(super) fn head_cols(dm: &Dims, b: usize, hh: usize) -> HeadCols {
    let (d3, d) = (3 * dm.d, dm.d);
    let base = b * dm.n * d3 + hh * dm.hd;
    HeadCols {
        q: base,
        k: base + d,
        v: base + 2 * d,
        ld: d3,
        n: dm.n,
        hd: dm.hd,
        scale: dm.scale,
    }
}

/// GELU of the MLP's hidden rows into `fcg`; `for_backward`: `fch` becomes GELU′ there.
fn gelu_forward(simd: Simd, fch: &mut [f32], fcg: &mut [f32], for_backward: bool) {
    if for_backward {
        gelu_fwd(simd, fch, fcg);
    } else {
        gelu_only(simd, fch, fcg);
    }
}

/// The final LayerNorm of the CLS rows (nothing else reaches the loss).
fn final_norm_forward(
    dm: &Dims,
    p: &[f32],
    ln: Norm,
    x_last: &[f32],
    lnf: &mut [f32],
    stf: &mut [f32],
    nb: usize,
) {
    let (n, d) = (dm.n, dm.d);
    for b in 0..nb {
        let cls = &x_last[b * n * d..][..d];
        layernorm_forward(
            dm,
            p,
            ln,
            cls,
            &mut lnf[b * d..][..d],
            &mut stf[b * 2..][..2],
        );
    }
}
