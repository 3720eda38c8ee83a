//! Winograd F(2×2, 3×3) with the α² products on bf16 words (`vdpbf16ps` or its portable twin,
//! the micro-kernel of [`crate::cpu::bf16`]) and the transforms in f32.

use super::supports;
use super::transform::{transform_weights, F2x3, Wino};
use super::{drive, with_scratch, Fold, Isa};
use crate::cpu::bf16::{pack_pairs, ukernel, word, Kernel, KC, MR, NB};
use crate::cpu::conv::Geom;
use crate::cpu::SyncPtr;
use rayon::prelude::*;
use std::cell::Cell;

thread_local! {
    /// Per-thread bf16 words: a task's packed transformed input.
    static WORDS_V: Cell<Vec<u32>> = const { Cell::new(Vec::new()) };
}

/// Whether `auto` may run a bf16 conv of these channels and kernel by [`conv2d_bf16_folded`] (its
/// weights are then packed for both algorithms): 3×3, stride 1, ≥ 128 channels in and out.
pub fn bf16_candidate(ci: usize, co: usize, kh: usize, kw: usize, stride: usize) -> bool {
    kh == 3 && kw == 3 && stride == 1 && ci >= 128 && co >= 128
}

/// Whether `auto` runs this bf16 conv by [`conv2d_bf16_folded`]: a [`bf16_candidate`] with at least
/// 2²⁹ multiply-adds per image. Measured against the direct bf16 conv (`bf16_bench`, AMD EPYC
/// Zen 4, 2 threads): faster at 128 ch from 64² (3.05 vs 3.38 ms) to 384² (125 vs 131 ms),
/// 256 ch at 48² (5.8 vs 7.3), 512 ch at 24² (6.7 vs 7.6); slower below the threshold (128 ch
/// at 48²: 3.3 vs 2.1 ms; 256 ch at 24²: 2.5 vs 2.1) and at ≤ 64 channels at every size
/// (64 ch at 48²: 1.5 vs 0.6 ms; 32 ch at 384²: 13.4 vs 11.1).
pub fn auto_bf16(g: &Geom) -> bool {
    let (ho, wo) = g.out_hw();
    bf16_candidate(g.ci, g.co, g.kh, g.kw, g.s)
        && supports(g)
        && g.ci * g.co * 9 * ho * wo >= 1 << 29
}

/// Winograd F(2×2, 3×3) in bf16: the input and weight transforms in f32 (as [`conv2d`]),
/// their results rounded to bf16 and paired along c_in, the 16 products (co × ci)·(ci × tiles)
/// summed in f32 by the bf16 micro-kernel of [`bf16`] (`vdpbf16ps`, or its portable twin —
/// same bits), the output transform in f32. x (b, ci, h, w) → (b, co, ho, wo); `ua`: the
/// weights from [`pack_weights_bf16`].
///
/// Only F(2,3): its transforms add and subtract (and halve the weights), so bf16 rounding of
/// the transformed operands costs about twice the direct bf16 conv's error (4.6e-3 vs 2.3e-3
/// relative, 64 channels at 24²); F(4,3)'s (×4, ×5, ×8, 1/24) made it 7.5e-2.
///
/// With a [`Fold`]: the input's GroupNorm and the output's residual, in f32 as in
/// [`super::conv2d_folded`] (`Fold::default()` for neither).
pub fn conv2d_bf16_folded(
    x: &[f32],
    fold: Fold,
    ua: &[u32],
    bias: Option<&[f32]>,
    g: &Geom,
    kernel: Kernel,
) -> Vec<f32> {
    assert!(supports(g), "winograd: not a stride-1 3×3 conv: {g:?}");
    assert_eq!(x.len(), g.b * g.ci * g.h * g.w, "winograd: input size");
    let words = 16 * g.co.next_multiple_of(MR) * g.ci.div_ceil(2);
    assert_eq!(ua.len(), words, "winograd: packed weight size");
    fold.check(g);
    run_bf16::<2, 4, F2x3>(x, fold, ua, bias, g, Isa::best(), kernel.checked())
}

/// The transformed weights U = G g Gᵀ of F(2×2, 3×3) of w (co, ci, 3, 3), rounded to bf16
/// and packed as the micro-kernel's A per transformed element: [16][co_pad / MR][⌈ci/2⌉][MR]
/// words (co_pad = co rounded up to MR; zero past co and ci). Done once per model, at load.
pub fn pack_weights_bf16(w: &[f32], ci: usize, co: usize) -> Vec<u32> {
    assert_eq!(w.len(), co * ci * 9, "winograd: weight size");
    let aa = 16;
    let mut u = vec![0f32; aa * co * ci];
    transform_weights::<2, 4, F2x3>(w, ci, co, &mut u, Isa::best());
    let (ci2, blocks) = (ci.div_ceil(2), co.div_ceil(MR));
    let mut ua = vec![0u32; aa * blocks * MR * ci2];
    ua.par_chunks_mut(ci2 * MR)
        .enumerate()
        .for_each(|(eb, dst)| {
            let (e, blk) = (eb / blocks, eb % blocks);
            for r in 0..MR {
                let o = blk * MR + r;
                if o >= co {
                    continue;
                }
                let row = &u[(e * co + o) * ci..][..ci];
                for k in 0..ci2 {
                    let hi = row.get(2 * k + 1).copied().unwrap_or(0.0);
                    dst[k * MR + r] = word(row[2 * k], hi);
                }
            }
        });
    ua
}

fn run_bf16<const M: usize, const A: usize, K: Wino<M, A>>(
    x: &[f32],
    fold: Fold,
    ua: &[u32],
    bias: Option<&[f32]>,
    g: &Geom,
    isa: Isa,
    kernel: Kernel,
) -> Vec<f32> {
    let (ci, aa) = (g.ci, A * A);
    let (ci2, co_pad) = (ci.div_ceil(2), g.co.next_multiple_of(MR));
    // Task blocks as in the f32 conv (f32 bytes of transformed input + products).
    drive::<M, A, K>(x, fold, bias, g, isa, (co_pad, NB), |t, mb| {
        with_scratch(&WORDS_V, aa * ci2 * t.tp_max, |vw| {
            pack_tiles(t.v, vw, aa, ci, t.tp, t.outer);
            let vw: &[u32] = vw;
            let products = Products {
                ua,
                vw,
                ci2,
                co_pad,
                tp: t.tp,
                kernel,
            };
            products.run(mb, aa, t.outer);
        })
    })
}

/// V (α², ci, tp) f32 as the micro-kernel's B: (α², ⌈ci/2⌉, tp) words, channels paired.
fn pack_tiles(vb: &[f32], vw: &mut [u32], aa: usize, ci: usize, tp: usize, outer: bool) {
    let ci2 = ci.div_ceil(2);
    let pack = |(e, k): (usize, usize), dst: &mut [u32]| {
        let row = |c: usize| &vb[(e * ci + c) * tp..][..tp];
        let hi = (2 * k + 1 < ci).then(|| row(2 * k + 1));
        pack_pairs(dst, row(2 * k), hi);
    };
    if outer {
        vw[..aa * ci2 * tp]
            .chunks_mut(tp)
            .enumerate()
            .for_each(|(i, d)| pack((i / ci2, i % ci2), d));
    } else {
        vw[..aa * ci2 * tp]
            .par_chunks_mut(tp)
            .enumerate()
            .for_each(|(i, d)| pack((i / ci2, i % ci2), d));
    }
}

/// The α² products M_e (co_pad × tp) = U_e · V_e of one task on bf16 words.
struct Products<'a> {
    /// [α²][co_pad / MR][ci2][MR] words ([`pack_weights_bf16`])
    ua: &'a [u32],
    /// (α², ci2, tp) words
    vw: &'a [u32],
    ci2: usize,
    co_pad: usize,
    tp: usize,
    kernel: Kernel,
}

impl Products<'_> {
    /// Writes every M_e into mb (α², co_pad, tp): one after the other when `outer`, else in
    /// parallel.
    fn run(&self, mb: &mut [f32], aa: usize, outer: bool) {
        let mp = SyncPtr(mb.as_mut_ptr());
        let product = |e: usize| {
            // SAFETY: every e writes its own (co_pad × tp) slice of mb, which holds
            // α²·co_pad·tp_max floats.
            let c = unsafe {
                std::slice::from_raw_parts_mut(
                    mp.get().add(e * self.co_pad * self.tp),
                    self.co_pad * self.tp,
                )
            };
            self.one(e, c);
        };
        if outer {
            (0..aa).for_each(product);
        } else {
            (0..aa).into_par_iter().for_each(product);
        }
    }

    /// M_e into c (co_pad × tp), from zero.
    fn one(&self, e: usize, c: &mut [f32]) {
        let (ci2, tp) = (self.ci2, self.tp);
        let blocks = self.co_pad / MR;
        c.fill(0.0);
        for k0 in (0..ci2).step_by(KC) {
            let kc = KC.min(ci2 - k0);
            for nb in (0..tp).step_by(NB) {
                let bptr = self.vw[(e * ci2 + k0) * tp + nb..].as_ptr();
                for blk in 0..blocks {
                    let a = self.ua[((e * blocks + blk) * ci2 + k0) * MR..].as_ptr();
                    let cp = c[blk * MR * tp + nb..].as_mut_ptr();
                    // SAFETY: a covers kc·MR words; b's kc rows of NB words lie in vw (tp is
                    // a multiple of NB); c is an MR × NB corner of this e's products.
                    unsafe { ukernel(self.kernel, kc, a, bptr, tp, cp, tp) };
                }
            }
        }
    }
}
