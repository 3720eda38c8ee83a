//! The direct bf16 conv (inference): weights packed once ([`ConvWeights`]), the input packed
//! to bf16 words in [`super::Plan`]'s padded, phase-split layout, one plane of words per
//! channel pair, and the output computed as shifted GEMMs on the micro-kernels of
//! [`crate::cpu::bf16`] (the arithmetic and layout are described there). [`direct_conv`] is
//! the frame both direct convs share; the AMX one ([`super::amx`]) brings its own products.

use super::winograd::{self, Fold};
use super::{Geom, Plan};
use crate::cpu::bf16::{pack_pairs, padded_bias, round_up, ukernel, word, Kernel, KC, MR, NB};
use crate::cpu::norm::{gn_apply, ChannelNorm};
use crate::cpu::{threads, SyncPtr};
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Conv weights rounded to bf16 and packed for the micro-kernel, with the conv's geometry.
#[derive(Debug, Clone)]
pub struct ConvWeights {
    pub co: usize,
    pub ci: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: usize,
    /// (left, right, top, bottom)
    pub pad: (usize, usize, usize, usize),
    /// Channel pairs: ⌈ci / 2⌉.
    pub(super) ci2: usize,
    /// `[co rounded up to MR / MR][tap][pair][MR]` words.
    pub(super) data: Vec<u32>,
    /// (co rounded up to MR)
    pub(super) bias: Vec<f32>,
    /// The transformed weights of Winograd F(2×2, 3×3)
    /// ([`super::winograd::pack_weights_bf16`]), where `algo` may run it.
    wino: Option<Vec<u32>>,
    algo: ConvAlgo,
    /// The weights as AMX tiles ([`super::amx`]), packed on first use.
    pub(super) amx: std::sync::OnceLock<Vec<u32>>,
}

/// Which algorithm a bf16 3×3 stride-1 conv runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvAlgo {
    /// The direct conv: the exact sum of the bf16-rounded operands (f32 accumulation).
    Direct,
    /// Winograd F(2×2, 3×3) with bf16 products ([`winograd::conv2d_bf16`]): 2.25× fewer
    /// multiplies, about twice the direct conv's rounding error.
    Winograd,
    /// Winograd where it was measured faster ([`winograd::auto_bf16`]: ≥ 128 channels in and
    /// out and ≥ 2²⁹ multiply-adds per image), else direct; decided per call from the input
    /// size (both packings are kept for such convs).
    Auto,
}

impl ConvWeights {
    /// Packs `w` (co, ci, kh, kw) and `bias` (co) for [`ConvAlgo::Auto`]. The caller checks
    /// the sizes.
    pub fn new(
        w: &[f32],
        bias: Option<&[f32]>,
        dims: (usize, usize, usize, usize),
        stride: usize,
        pad: (usize, usize, usize, usize),
    ) -> Self {
        Self::with_algo(w, bias, dims, stride, pad, ConvAlgo::Auto)
    }

    /// [`ConvWeights::new`] with the algorithm chosen ([`ConvAlgo::Winograd`]: a 3×3
    /// stride-1 conv only).
    pub fn with_algo(
        w: &[f32],
        bias: Option<&[f32]>,
        (co, ci, kh, kw): (usize, usize, usize, usize),
        stride: usize,
        pad: (usize, usize, usize, usize),
        algo: ConvAlgo,
    ) -> Self {
        assert_eq!(w.len(), co * ci * kh * kw, "conv weight size");
        let (ci2, co_pad, kk) = (ci.div_ceil(2), round_up(co, MR), kh * kw);
        let pack_wino = match algo {
            ConvAlgo::Direct => false,
            ConvAlgo::Winograd => {
                assert!(
                    kh == 3 && kw == 3 && stride == 1,
                    "winograd: not a stride-1 3×3 conv"
                );
                true
            }
            ConvAlgo::Auto => winograd::bf16_candidate(ci, co, kh, kw, stride),
        };
        let mut data = vec![0u32; co_pad * kk * ci2];
        let at = |o: usize, c: usize, t: usize| {
            if c < ci {
                w[(o * ci + c) * kk + t]
            } else {
                0.0
            }
        };
        for o in 0..co {
            let (blk, r) = (o / MR, o % MR);
            for t in 0..kk {
                for k in 0..ci2 {
                    data[((blk * kk + t) * ci2 + k) * MR + r] =
                        word(at(o, 2 * k, t), at(o, 2 * k + 1, t));
                }
            }
        }
        Self {
            co,
            ci,
            kh,
            kw,
            stride,
            pad,
            ci2,
            data,
            bias: padded_bias(bias, co_pad),
            wino: pack_wino.then(|| winograd::pack_weights_bf16(w, ci, co)),
            algo,
            amx: std::sync::OnceLock::new(),
        }
    }

    /// Whether an h × w input runs Winograd F(2×2, 3×3) on `kernel` (else the direct conv):
    /// [`ConvAlgo::Auto`] never takes it on AMX, whose direct conv is the faster.
    pub fn runs_winograd_on(&self, h: usize, w: usize, kernel: Kernel) -> bool {
        self.runs_winograd(h, w)
            && !(self.algo == ConvAlgo::Auto && kernel.checked() == Kernel::Amx)
    }

    /// Whether an h × w input runs Winograd F(2×2, 3×3) on `vdpbf16ps` or the portable path
    /// (else the direct conv).
    pub fn runs_winograd(&self, h: usize, w: usize) -> bool {
        let g = self.geom(1, h, w);
        self.wino.is_some()
            && winograd::supports(&g)
            && (self.algo == ConvAlgo::Winograd || winograd::auto_bf16(&g))
    }

    /// Output size for an h × w input (the caller checks that the kernel fits).
    pub fn out_hw(&self, h: usize, w: usize) -> (usize, usize) {
        self.geom(1, h, w).out_hw()
    }

    /// The conv's geometry for a batch of b inputs of h × w.
    pub fn geom(&self, b: usize, h: usize, w: usize) -> Geom {
        Geom {
            b,
            ci: self.ci,
            h,
            w,
            co: self.co,
            kh: self.kh,
            kw: self.kw,
            s: self.stride,
            pad: self.pad,
        }
    }

    /// The bias (co values, flushed to zero).
    pub(super) fn bias(&self) -> &[f32] {
        &self.bias[..self.co]
    }

    /// The Winograd weights when an h × w input runs Winograd on `kernel` (checked).
    pub(super) fn winograd_weights(&self, h: usize, w: usize, kernel: Kernel) -> Option<&[u32]> {
        self.wino
            .as_deref()
            .filter(|_| self.runs_winograd_on(h, w, kernel))
    }
}

/// The input as words: (b, planes, plane), zero-padded (planes ≥ ⌈ci / 2⌉: the ones past
/// the channels are zero), plus NB words of slack at the end (the last micro-tile reads past
/// p-space; those columns are dropped). With `norm` (one per (image, channel)) each row is
/// normalised on its way in ([`gn_apply`], the bits of GroupNorm run first).
fn pack_input(
    x: &[f32],
    b: usize,
    ci: usize,
    planes: usize,
    g: &Plan,
    norm: Option<&[ChannelNorm<f32>]>,
) -> Vec<u32> {
    let ci2 = ci.div_ceil(2);
    let hw = g.h * g.w;
    let n = b * planes * g.plane + NB;
    let mut xp = crate::runtime::unfilled(n, 0x7fc0_7fc0u32); // poison: bf16 NaN pairs
    let zero = MaybeUninit::new(0u32);
    let (body, slack) = xp.spare_capacity_mut()[..n].split_at_mut(n - NB);
    slack.fill(zero);
    body.par_chunks_mut(g.plane)
        .enumerate()
        .for_each(|(n, dst)| {
            let (bi, k) = (n / planes, n % planes);
            if k >= ci2 {
                dst.fill(zero);
                return;
            }
            // Stride 1: only the padding around the rows is zeroed; a strided layout's phases
            // interleave, so its plane starts all zero.
            if g.s == 1 {
                zero_padding(dst, g);
            } else {
                dst.fill(zero);
            }
            let ch = |c: usize| &x[(bi * ci + c) * hw..(bi * ci + c + 1) * hw];
            let lo = ch(2 * k);
            let hi = (2 * k + 1 < ci).then(|| ch(2 * k + 1));
            let coef = |c: usize| norm.filter(|_| c < ci).map(|nm| nm[bi * ci + c]);
            let (nlo, nhi) = (coef(2 * k), coef(2 * k + 1));
            // The normalised rows (only with a norm) and one packed row.
            let mut rows = vec![0f32; if norm.is_some() { 2 * g.w } else { 0 }];
            let mut packed = vec![0u32; g.w];
            for y in 0..g.h {
                let mut rl = &lo[y * g.w..(y + 1) * g.w];
                let mut rh = hi.map(|c| &c[y * g.w..(y + 1) * g.w]);
                if let Some(nl) = nlo {
                    let (bl, bh) = rows.split_at_mut(g.w);
                    gn_apply(rl, bl, nl);
                    rl = bl;
                    if let (Some(r), Some(nh)) = (rh, nhi) {
                        gn_apply(r, bh, nh);
                        rh = Some(bh);
                    }
                }
                if g.s == 1 {
                    pack_pairs(&mut packed, rl, rh);
                    let d0 = g.index(y, 0);
                    for (d, v) in dst[d0..d0 + g.w].iter_mut().zip(&packed) {
                        *d = MaybeUninit::new(*v);
                    }
                } else {
                    for x in 0..g.w {
                        dst[g.index(y, x)] =
                            MaybeUninit::new(word(rl[x], rh.map_or(0.0, |r| r[x])));
                    }
                }
            }
        });
    // SAFETY: every plane was written whole (zeroed where no pixel lands: the padding, the
    // planes past the channels) and so was the slack.
    unsafe { xp.set_len(n) };
    xp
}

/// Zeroes what a stride-1 plane's rows leave unwritten: everything before the first row,
/// between consecutive rows (right and left padding) and after the last.
fn zero_padding(plane: &mut [MaybeUninit<u32>], g: &Plan) {
    debug_assert_eq!(g.s, 1);
    let mut from = 0;
    for y in 0..g.h {
        let start = g.index(y, 0);
        plane[from..start].fill(MaybeUninit::new(0));
        from = start + g.w;
    }
    plane[from..].fill(MaybeUninit::new(0));
}

/// The direct bf16 conv on `kernel`'s micro-kernel (`vdpbf16ps` or portable; checked by
/// the caller, [`super::conv2d_bf16`]).
pub(super) fn conv2d_direct(
    x: &[f32],
    fold: Fold,
    (b, h, w): (usize, usize, usize),
    wt: &ConvWeights,
    kernel: Kernel,
) -> Vec<f32> {
    let (kk, ci2) = (wt.kh * wt.kw, wt.ci2);
    let grid = (MR, NB, 16);
    direct_conv(
        x,
        fold,
        (b, h, w),
        wt,
        ci2,
        grid,
        true,
        |cbuf, t, img, g| {
            let len = t.len;
            for tap in 0..kk {
                let off = g.off(tap / wt.kw, tap % wt.kw);
                for k0 in (0..ci2).step_by(KC) {
                    let kc = KC.min(ci2 - k0);
                    for nb in (0..len).step_by(NB) {
                        let bptr = img[k0 * g.plane + off + t.p0 + nb..].as_ptr();
                        for blk in t.blk0..t.blk1 {
                            let a = wt.data[((blk * kk + tap) * ci2 + k0) * MR..].as_ptr();
                            let c = cbuf[(blk - t.blk0) * MR * len + nb..].as_mut_ptr();
                            // SAFETY: a covers kc·MR words of the packed weights; b's rows are
                            // inside the packed input (NB words of slack past the last plane); c
                            // is a MR × NB corner of cbuf (len is a multiple of NB).
                            unsafe { ukernel(kernel, kc, a, bptr, g.plane, c, len) };
                        }
                    }
                }
            }
        },
    )
}

/// The frame of both direct convs (`vdpbf16ps`/portable and AMX): the output, the input packed
/// to `planes` planes per image (normalised on the way in with `fold.norm`), the [`TaskGrid`]
/// of `row_blk` × `col_blk` blocks (at most `max_col_blks` a tile), each task's C buffer
/// (started at the bias when `fill_bias`; else `products` writes every element of it, bias
/// included), `products(cbuf, task, image's packed planes, plan)` adding the sums, and the
/// copy into the output (`fold.residual` added on the way out).
#[allow(clippy::too_many_arguments)]
pub(super) fn direct_conv(
    x: &[f32],
    fold: Fold,
    (b, h, w): (usize, usize, usize),
    wt: &ConvWeights,
    planes: usize,
    (row_blk, col_blk, max_col_blks): (usize, usize, usize),
    fill_bias: bool,
    products: impl Fn(&mut [f32], &Task, &[u32], &Plan) + Sync,
) -> Vec<f32> {
    let geom = wt.geom(b, h, w);
    fold.check(&geom);
    let g = geom.plan();
    let n = b * wt.co * g.ho * g.wo;
    if n == 0 {
        return Vec::new();
    }
    // Every element is written by `scatter_rows` (the tasks cover every channel and all of
    // p-space, which holds every output pixel). Fresh pages: at 384² their faults took as
    // long as the AMX tile products (measured), hence `unfilled`'s huge-page hint.
    let mut out = crate::runtime::unfilled(n, f32::NAN);
    let xp = pack_input(x, b, wt.ci, planes, &g, fold.norm);
    let grid = TaskGrid::new(
        b,
        g.np,
        round_up(wt.co, row_blk),
        row_blk,
        col_blk,
        max_col_blks,
    );
    let outp = SyncPtr(out.as_mut_ptr());
    let run = |cbuf: &mut Vec<f32>, task: usize| {
        let t = grid.task(task);
        let rows = (t.blk1 - t.blk0) * row_blk;
        if fill_bias {
            let bias = wt.bias.get(t.blk0 * row_blk..).unwrap_or(&[]);
            start_at_bias(cbuf, t.len, bias, rows);
        } else {
            cbuf.resize(rows * t.len, 0.0);
        }
        products(cbuf, &t, &xp[t.bi * planes * g.plane..], &g);
        let co0 = t.blk0 * row_blk;
        let block = (rows.min(wt.co - co0), t.bi, co0, t.p0);
        scatter_rows(cbuf, t.len, block, wt.co, &g, fold.residual, outp);
    };
    (0..grid.tasks)
        .into_par_iter()
        .for_each_init(Vec::new, |buf, task| run(buf, task));
    // SAFETY: the tasks wrote all n elements (see above).
    unsafe { out.set_len(n) };
    out
}

/// How a direct conv's work is cut into tasks: per image, tiles of p-space (whole column
/// blocks) with a C tile of ~256 KiB; with too few tiles for the threads, output channels are
/// split too (in whole row blocks).
struct TaskGrid {
    /// Columns per p-space tile.
    nt: usize,
    /// p-space rounded up to whole column blocks.
    np_pad: usize,
    tiles: usize,
    blocks: usize,
    blocks_per: usize,
    co_split: usize,
    tasks: usize,
}

/// One task: image `bi`, columns `p0..p0 + len`, row blocks `blk0..blk1`.
pub(super) struct Task {
    pub(super) bi: usize,
    pub(super) p0: usize,
    pub(super) len: usize,
    pub(super) blk0: usize,
    pub(super) blk1: usize,
}

impl TaskGrid {
    /// `rows` (a multiple of `row_blk`) output rows, `np` p-space columns cut in blocks of
    /// `col_blk`, at most `max_col_blks` blocks a tile.
    fn new(
        b: usize,
        np: usize,
        rows: usize,
        row_blk: usize,
        col_blk: usize,
        max_col_blks: usize,
    ) -> Self {
        let np_pad = round_up(np, col_blk);
        let nt = round_up((65536 / rows).max(col_blk), col_blk)
            .min(max_col_blks * col_blk)
            .min(np_pad);
        let tiles = np_pad.div_ceil(nt);
        let blocks = rows / row_blk;
        let co_split = (4 * threads()).div_ceil(b * tiles).clamp(1, blocks);
        let blocks_per = blocks.div_ceil(co_split);
        let co_split = blocks.div_ceil(blocks_per);
        Self {
            nt,
            np_pad,
            tiles,
            blocks,
            blocks_per,
            co_split,
            tasks: b * tiles * co_split,
        }
    }

    fn task(&self, task: usize) -> Task {
        let per_image = self.tiles * self.co_split;
        let (bi, rest) = (task / per_image, task % per_image);
        let (ti, cs) = (rest / self.co_split, rest % self.co_split);
        let p0 = ti * self.nt;
        Task {
            bi,
            p0,
            len: self.nt.min(self.np_pad - p0),
            blk0: cs * self.blocks_per,
            blk1: ((cs + 1) * self.blocks_per).min(self.blocks),
        }
    }
}

/// A task's C buffer: `rows` rows of `len` columns, row r filled with `bias[r]` (0 past the
/// end of `bias`: the padded rows of a block).
fn start_at_bias(cbuf: &mut Vec<f32>, len: usize, bias: &[f32], rows: usize) {
    cbuf.resize(rows * len, 0.0);
    for (r, row) in cbuf.chunks_exact_mut(len).enumerate() {
        row.fill(bias.get(r).copied().unwrap_or(0.0));
    }
}

/// Copies the first `rows` rows of a task's C buffer (rows of `len` p-space columns from
/// `p0`, output channels from `co0` of image `bi`) into the (b, co, ho, wo) output, dropping
/// the columns past the output width and past p-space; with `residual` (the output's shape)
/// its values are added on the way (`residual + sum`, the bits of adding it afterwards).
fn scatter_rows(
    cbuf: &[f32],
    len: usize,
    (rows, bi, co0, p0): (usize, usize, usize, usize),
    co: usize,
    g: &Plan,
    residual: Option<&[f32]>,
    out: SyncPtr<f32>,
) {
    let o = out.get();
    let out_plane = g.ho * g.wo;
    for r in 0..rows {
        let c = co0 + r;
        let row = &cbuf[r * len..(r + 1) * len];
        let mut q = p0;
        let end_all = (p0 + len).min(g.np);
        while q < end_all {
            let (y, x0) = (q / g.wq, q % g.wq);
            let end = (q - x0 + g.wq).min(end_all);
            if x0 < g.wo {
                let n = (g.wo - x0).min(end - q);
                let at = (bi * co + c) * out_plane + y * g.wo + x0;
                let src = &row[q - p0..q - p0 + n];
                // SAFETY: (bi, c, y, x0..x0 + n) is inside out; tasks own disjoint (image,
                // p-range, channel) blocks.
                unsafe {
                    let dst = o.add(at);
                    match residual {
                        Some(r) => {
                            let dst = std::slice::from_raw_parts_mut(dst, n);
                            for ((d, s), r) in dst.iter_mut().zip(src).zip(&r[at..at + n]) {
                                *d = *r + *s;
                            }
                        }
                        None => std::ptr::copy_nonoverlapping(src.as_ptr(), dst, n),
                    }
                }
            }
            q = end;
        }
    }
}
