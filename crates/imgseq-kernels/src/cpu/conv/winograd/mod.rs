//! Winograd F(m×m, 3×3) convolution for stride-1 3×3 f32 convolutions (m = 2 or 4).
//!
//! Per m×m output tile, Y = Aᵀ [Σ_ci (G g Gᵀ) ⊙ (Bᵀ d B)] A, with d the α×α input tile
//! (α = m + 2) and g a 3×3 kernel (Lavin & Gray's matrices; points 0, ±1, ±2 for m = 4). The
//! sum over ci is α² independent GEMMs (co × ci)·(ci × tiles), one per transformed element, so
//! a conv costs α²/m² multiplies per output and input channel instead of 9: 4 for F(2,3),
//! 2.25 for F(4,3).
//!
//! Layout. The zero-padded input is stored *polyphase*: per channel, plane (ry, rx) holds the
//! padded pixels (m·yq + ry, m·xq + rx) at yq·w1 + xq, with w1 = tiles per row + 1. Tile
//! (ty, tx) has the flat index k = ty·w1 + tx and its input pixel (i, j) lies in plane
//! (i mod m, j mod m) at k + [i ≥ m]·w1 + [j ≥ m] (α ≤ 2m), so each of the α² tile inputs is
//! a contiguous run over k: the transforms are plain vector loads and stores over k, written
//! once over a small SIMD trait and compiled for AVX-512, AVX2 and a portable 8-lane array
//! (picked at run time; no FMA contraction, so the three give bit-identical results). Column
//! tx = w1 − 1 of every tile row is junk: transformed and multiplied, never written out.
//!
//! Work is split into tasks of whole tile rows of one image (a few MiB of transformed tiles):
//! each task transforms its input tiles ([`transform`]), runs the α² GEMMs (`gemm::mm`) and transforms
//! back, adding the bias. Tasks run in parallel (rayon); when there are too few of them (low
//! resolution) they run one after the other, each with its three phases in parallel (over
//! input channels, over the α² GEMMs, over output channels). The transformed weights and the
//! task buffers are per-thread scratch kept between calls. [`bf16`] runs F(2×2, 3×3) with the
//! products on bf16 words.

mod bf16;
mod simd;
mod transform;

pub use crate::cpu::norm::ChannelNorm;
pub use bf16::{auto_bf16, bf16_candidate, conv2d_bf16_folded, pack_weights_bf16};

use super::Geom;
use crate::cpu::features::features;
use crate::cpu::gemm::mm;
use crate::cpu::norm::gn_apply;
use crate::cpu::{threads, SyncPtr};
use gemm::Parallelism;
use rayon::prelude::*;
use std::cell::Cell;
use std::mem::MaybeUninit;
use transform::{input_tiles, output_tiles, transform_weights, F2x3, F4x3, OutputTiles, Wino};

/// Output tile size: F(2×2, 3×3) (4×4 input tiles) or F(4×4, 3×3) (6×6 input tiles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tile {
    F2,
    F4,
}

/// Which instruction set the transforms are compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust on 8-lane arrays (any CPU).
    Portable,
    /// 256-bit vectors (x86-64 with AVX2 + FMA).
    Avx2,
    /// 512-bit vectors (x86-64 with AVX-512F).
    Avx512,
}

impl Isa {
    /// Whether this CPU can run the path.
    pub fn available(self) -> bool {
        match self {
            Isa::Portable => true,
            Isa::Avx2 => features().avx2_fma,
            Isa::Avx512 => features().avx512f,
        }
    }

    /// The widest path this CPU runs.
    pub fn best() -> Isa {
        [Isa::Avx512, Isa::Avx2]
            .into_iter()
            .find(|i| i.available())
            .unwrap_or(Isa::Portable)
    }
}

/// Whether [`conv2d`] computes this convolution: 3×3, stride 1, a non-empty input.
pub fn supports(g: &Geom) -> bool {
    g.kh == 3 && g.kw == 3 && g.s == 1 && g.ci > 0 && g.h > 0 && g.w > 0
}

/// The tile size that beats the direct conv on this shape, or `None` where the direct conv is
/// as fast. Measured on a 2-core Sapphire Rapids (AVX-512), 1 and 2 threads: F(4,3) is 1.3–2.5×
/// faster than direct from 32 channels in and out (32 @384² … 512 @24²) and F(2,3) is slower
/// than or level with F(4,3) everywhere except 512 @24² (level); at 16 channels both are level
/// with direct or slower, and with 3 (conv_in / conv_out) direct wins.
pub fn auto_tile(g: &Geom) -> Option<Tile> {
    (supports(g) && g.ci >= 32 && g.co >= 32).then_some(Tile::F4)
}

/// Forward 3×3 stride-1 convolution by Winograd: x (b, ci, h, w), w (co, ci, 3, 3), bias (co)
/// → (b, co, ho, wo), on the widest instruction set this CPU has.
pub fn conv2d(x: &[f32], w: &[f32], bias: Option<&[f32]>, g: &Geom, tile: Tile) -> Vec<f32> {
    conv2d_isa(x, w, bias, g, tile, Isa::best())
}

/// [`conv2d`] on a chosen instruction set (panics if this CPU lacks it, or if
/// [`supports`]`(g)` is false).
pub fn conv2d_isa(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Geom,
    tile: Tile,
    isa: Isa,
) -> Vec<f32> {
    conv2d_folded_isa(x, Fold::default(), w, bias, g, tile, isa)
}

/// What a Winograd conv folds into its packing: each input channel through its
/// [`ChannelNorm`] (`norm`: one per (image, channel), [`crate::cpu::norm::group_norm_coefs`];
/// GroupNorm (+ SiLU) → conv with the normalised map never written), and a map of the
/// output's shape added to the output (`residual`: a ResNet block's skip connection, added
/// as `residual + (conv + bias)`, the bits of adding it afterwards).
#[derive(Debug, Clone, Copy, Default)]
pub struct Fold<'a> {
    pub norm: Option<&'a [ChannelNorm<f32>]>,
    pub residual: Option<&'a [f32]>,
}

impl Fold<'_> {
    /// Panics unless the sizes fit the conv: one norm per (image, channel in), a residual
    /// of the output's size.
    pub(in crate::cpu::conv) fn check(&self, g: &Geom) {
        if let Some(n) = self.norm {
            assert_eq!(n.len(), g.b * g.ci, "conv: one norm per (image, channel)");
        }
        if let Some(r) = self.residual {
            let (ho, wo) = g.out_hw();
            assert_eq!(r.len(), g.b * g.co * ho * wo, "conv: residual size");
        }
    }
}

/// [`conv2d`] with a [`Fold`].
pub fn conv2d_folded(
    x: &[f32],
    fold: Fold,
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Geom,
    tile: Tile,
) -> Vec<f32> {
    conv2d_folded_isa(x, fold, w, bias, g, tile, Isa::best())
}

/// [`conv2d_folded`] on a chosen instruction set.
pub fn conv2d_folded_isa(
    x: &[f32],
    fold: Fold,
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Geom,
    tile: Tile,
    isa: Isa,
) -> Vec<f32> {
    assert!(supports(g), "winograd: not a stride-1 3×3 conv: {g:?}");
    assert!(isa.available(), "winograd: this CPU cannot run {isa:?}");
    assert_eq!(x.len(), g.b * g.ci * g.h * g.w, "winograd: input size");
    assert_eq!(w.len(), g.co * g.ci * 9, "winograd: weight size");
    fold.check(g);
    match tile {
        Tile::F2 => run::<2, 4, F2x3>(x, fold, w, bias, g, isa),
        Tile::F4 => run::<4, 6, F4x3>(x, fold, w, bias, g, isa),
    }
}

/// The largest vector length: buffers are padded to a multiple of it.
const MAX_L: usize = 16;

/// Over-read room past the last tile row of a polyphase plane: a task's tile columns are
/// rounded up to MAX_L (f32) or to the bf16 micro-tile width [`crate::cpu::bf16::NB`] (48).
const SLACK: usize = crate::cpu::bf16::NB;

/// Sizes of the polyphase layout for output tile size M.
#[derive(Debug, Clone, Copy)]
struct Plan {
    ho: usize,
    wo: usize,
    /// tile rows
    nty: usize,
    /// flat row length: tiles per row + 1
    w1: usize,
    /// length of one polyphase plane (room for the shifted reads and a vector of over-read)
    pl: usize,
    /// floats per channel: M² planes
    chan: usize,
}

fn plan<const M: usize>(g: &Geom) -> Plan {
    let (ho, wo) = g.out_hw();
    let (nty, ntx) = (ho.div_ceil(M), wo.div_ceil(M));
    let w1 = ntx + 1;
    let pl = (nty + 1) * w1 + SLACK + 1;
    Plan {
        ho,
        wo,
        nty,
        w1,
        pl,
        chan: M * M * pl,
    }
}

/// The zero-padded input in polyphase layout: (b, ci, M, M, pl); with `norm`, every channel
/// goes through its [`ChannelNorm`] (GroupNorm's affine + SiLU, the arithmetic of
/// [`gn_apply`]) on the way, so the normalised map is never written out. Only the plane rows
/// that no input row fills (the zero padding) and the slack are zeroed.
fn polyphase<const M: usize>(
    x: &[f32],
    g: &Geom,
    p: &Plan,
    norm: Option<&[ChannelNorm<f32>]>,
) -> Vec<f32> {
    let n = g.b * g.ci * p.chan;
    let mut xp = crate::runtime::unfilled(n, f32::NAN);
    let (l, t) = (g.pad.0, g.pad.2);
    xp.spare_capacity_mut()[..n]
        .par_chunks_mut(p.chan)
        .zip(x.par_chunks(g.h * g.w))
        .enumerate()
        .for_each(|(ch, (dst, src))| {
            let zero = MaybeUninit::new(0.0f32);
            // Zeros only where the rows below leave a gap: the plane rows no input row lands
            // on (the padding above and below the picture) and the slack after the rows.
            let lands =
                |ry: usize, yq: usize| (yq * M + ry).checked_sub(t).is_some_and(|y| y < g.h);
            for (i, plane) in dst.chunks_exact_mut(p.pl).enumerate() {
                for yq in (0..=p.nty).filter(|&yq| !lands(i / M, yq)) {
                    plane[yq * p.w1..][..p.w1].fill(zero);
                }
                plane[(p.nty + 1) * p.w1..].fill(zero);
            }
            // One padded row (zeros left and right), then split into its M column phases:
            // every column of the row's plane rows.
            let mut padded = vec![0.0f32; p.w1 * M];
            for (y, row) in src.chunks_exact(g.w).enumerate() {
                let (ry, yq) = ((y + t) % M, (y + t) / M);
                match norm {
                    Some(nm) => gn_apply(row, &mut padded[l..l + g.w], nm[ch]),
                    None => padded[l..l + g.w].copy_from_slice(row),
                }
                let planes = &mut dst[ry * M * p.pl..(ry + 1) * M * p.pl];
                let mut it = planes.chunks_exact_mut(p.pl);
                let ph: [&mut [MaybeUninit<f32>]; M] = std::array::from_fn(|_| {
                    let pl = it.next().expect("M planes");
                    &mut pl[yq * p.w1..(yq + 1) * p.w1]
                });
                for (q, px) in padded.chunks_exact(M).enumerate() {
                    for rx in 0..M {
                        ph[rx][q] = MaybeUninit::new(px[rx]);
                    }
                }
            }
        });
    // SAFETY: the chunks above initialised all n elements (n = b·ci·chan, x has b·ci chunks;
    // in each, every plane row is a landed input row or zeroed, and so is the slack).
    unsafe { xp.set_len(n) };
    xp
}

/// Contiguous ranges covering 0..n in about `parts` pieces.
fn ranges(n: usize, parts: usize) -> Vec<(usize, usize)> {
    let step = n.div_ceil(parts.max(1)).max(1);
    (0..n)
        .step_by(step)
        .map(|a| (a, (a + step).min(n)))
        .collect()
}

thread_local! {
    /// Per-thread buffers kept between calls (transformed weights; a task's transformed input
    /// and products), so that each call does not page in and zero tens of MB afresh.
    static WEIGHTS: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
    static TILES: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` on `len` elements of this thread's `slot` (contents unspecified). The buffer is
/// taken out while `f` runs, so a nested call (rayon may run another conv on this thread while
/// it waits) simply gets a fresh one.
fn with_scratch<T: Copy + Default, R>(
    slot: &'static std::thread::LocalKey<Cell<Vec<T>>>,
    len: usize,
    f: impl FnOnce(&mut [T]) -> R,
) -> R {
    let mut buf = slot.with(Cell::take);
    if buf.len() < len {
        buf = vec![T::default(); len];
    }
    let r = f(&mut buf[..len]);
    slot.with(|s| {
        let old = s.take();
        s.set(if old.len() > buf.len() { old } else { buf });
    });
    r
}

/// Bytes of transformed input + products one task aims at (at least 128 tile columns). The
/// speed hardly depends on it (1–16 MiB measured within noise at 128 channels @96²).
const TASK_BYTES: usize = 4 << 20;

/// How a conv's tile rows are cut into tasks: blocks of `rpt` tile rows (about
/// [`TASK_BYTES`] of f32 transformed input and products), `nblk` per image. Blocks of all
/// images run in parallel when there are enough of them (`outer`), else one after the other
/// with parallel phases.
struct Tasks {
    b: usize,
    rpt: usize,
    nblk: usize,
    outer: bool,
}

/// One task: image `bi`, tile rows `ty0..ty0 + rows`.
struct Task {
    bi: usize,
    ty0: usize,
    rows: usize,
}

impl Tasks {
    /// `floats_per_col`: f32 values of transformed input and products per tile column.
    fn new(p: &Plan, b: usize, floats_per_col: usize) -> Self {
        let threads = threads();
        let target = (TASK_BYTES / (4 * floats_per_col)).clamp(128, 4096);
        let mut rpt = target.div_ceil(p.w1).clamp(1, p.nty);
        let mut nblk = p.nty.div_ceil(rpt);
        let outer = b * nblk >= 2 * threads;
        if outer {
            // Even out the number of tasks over the threads.
            let ntasks = (b * nblk).div_ceil(threads) * threads;
            rpt = p.nty.div_ceil(ntasks.div_ceil(b).min(p.nty));
            nblk = p.nty.div_ceil(rpt);
        }
        Tasks {
            b,
            rpt,
            nblk,
            outer,
        }
    }

    /// Tile columns of the largest task, rounded up to a multiple of `m`.
    fn max_cols(&self, p: &Plan, m: usize) -> usize {
        (self.rpt * p.w1).next_multiple_of(m)
    }

    fn task(&self, t: usize, p: &Plan) -> Task {
        let (bi, blk) = (t / self.nblk, t % self.nblk);
        let ty0 = blk * self.rpt;
        Task {
            bi,
            ty0,
            rows: self.rpt.min(p.nty - ty0),
        }
    }

    /// Runs `f` on every task: in parallel when `outer`, else in order.
    fn for_each(&self, f: impl Fn(usize) + Sync + Send) {
        if self.outer {
            (0..self.b * self.nblk).into_par_iter().for_each(f);
        } else {
            (0..self.b * self.nblk).for_each(f);
        }
    }
}

/// One task's transformed input, as [`drive`] hands it to the products.
struct TaskTiles<'a> {
    /// tile columns of the task (the last of every tile row is junk)
    cols: usize,
    /// cols rounded up: the row length of v and of the products
    tp: usize,
    /// tp of the largest task (sizes per-thread scratch)
    tp_max: usize,
    /// V (α², ci, tp)
    v: &'a [f32],
    /// whether tasks run in parallel (then each task's phases run in turn)
    outer: bool,
}

/// The frame of both Winograd convs: the output, the polyphase input (through `fold.norm`),
/// the [`Tasks`], and per
/// task the input transform, `products(task, mb)` writing the α² products M (α², `rows_mb`,
/// tp) with `rows_mb` ≥ co, and the output transform. Task columns are rounded up to
/// `col_mult`.
fn drive<const M: usize, const A: usize, K: Wino<M, A>>(
    x: &[f32],
    fold: Fold,
    bias: Option<&[f32]>,
    g: &Geom,
    isa: Isa,
    (rows_mb, col_mult): (usize, usize),
    products: impl Fn(&TaskTiles, &mut [f32]) + Sync,
) -> Vec<f32> {
    let p = plan::<M>(g);
    let n = g.b * g.co * p.ho * p.wo;
    if n == 0 {
        return Vec::new();
    }
    // Every element is written by the output transform (each task writes whole rows of its
    // tile rows, every channel).
    let mut out = crate::runtime::unfilled(n, f32::NAN);
    let (ci, co, aa) = (g.ci, g.co, A * A);
    let tasks = Tasks::new(&p, g.b, aa * (ci + rows_mb));
    let tp_max = tasks.max_cols(&p, col_mult);
    let xp = polyphase::<M>(x, g, &p, fold.norm);
    let outp = SyncPtr(out.as_mut_ptr());
    tasks.for_each(|t| {
        let Task { bi, ty0, rows } = tasks.task(t, &p);
        let cols = rows * p.w1;
        let tp = cols.next_multiple_of(col_mult);
        let img = &xp[bi * ci * p.chan..(bi + 1) * ci * p.chan];
        with_scratch(&TILES, aa * (ci + rows_mb) * tp_max, |buf| {
            let (vb, mb) = buf.split_at_mut(aa * ci * tp_max);
            let vp = SyncPtr(vb.as_mut_ptr());
            input_tiles::<M, A, K>(img, p, ci, ty0 * p.w1, tp, vp, isa, tasks.outer);
            let v: &[f32] = vb;
            let tiles = TaskTiles {
                cols,
                tp,
                tp_max,
                v,
                outer: tasks.outer,
            };
            products(&tiles, mb);
            let img_out = co * p.ho * p.wo;
            let o = OutputTiles {
                mb,
                bias,
                residual: fold.residual.map(|r| &r[bi * img_out..(bi + 1) * img_out]),
                rows_mb,
                co,
                tp,
                ty0,
                rows,
                // SAFETY: image bi's output starts there.
                out: SyncPtr(unsafe { outp.get().add(bi * img_out) }),
            };
            output_tiles::<M, A, K>(o, p, isa, tasks.outer);
        })
    });
    // SAFETY: the tasks cover every (image, tile row) and write every channel's rows whole
    // (`OutputJob`), so all n elements are initialised.
    unsafe { out.set_len(n) };
    out
}

fn run<const M: usize, const A: usize, K: Wino<M, A>>(
    x: &[f32],
    fold: Fold,
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Geom,
    isa: Isa,
) -> Vec<f32> {
    let (ci, co, aa) = (g.ci, g.co, A * A);
    let (ho, wo) = g.out_hw();
    if g.b * co * ho * wo == 0 {
        return Vec::new();
    }
    with_scratch(&WEIGHTS, aa * co * ci, |u| {
        transform_weights::<M, A, K>(w, ci, co, u, isa);
        let u: &[f32] = u;
        drive::<M, A, K>(x, fold, bias, g, isa, (co, MAX_L), |t, mb| {
            let (cols, tp) = (t.cols, t.tp);
            let mp = SyncPtr(mb.as_mut_ptr());
            let product = |e: usize| {
                // SAFETY: v is (α², ci, tp), u (α², co, ci), mb (α², co, tp); every e
                // writes its own slice of mb.
                unsafe {
                    mm(
                        co,
                        cols,
                        ci,
                        mp.get().add(e * co * tp),
                        (tp, 1),
                        false,
                        u.as_ptr().add(e * co * ci),
                        (ci, 1),
                        t.v.as_ptr().add(e * ci * tp),
                        (tp, 1),
                        Parallelism::None,
                    )
                }
            };
            if t.outer {
                (0..aa).for_each(product);
            } else {
                (0..aa).into_par_iter().for_each(product);
            }
        })
    })
}
