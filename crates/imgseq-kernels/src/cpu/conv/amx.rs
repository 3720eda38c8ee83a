//! The direct bf16 conv on AMX tiles ([`crate::cpu::amx`]): the same packed input as
//! [`super::bf16`] (channel pairs padded to 16 planes), the same p-space tiles and frame
//! ([`super::bf16::direct_conv`]), C blocks of 32 channels × 32 columns held in tiles over
//! every tap and reduction block ([`amx::block_32x32`]).

use super::bf16::{direct_conv, ConvWeights};
use super::winograd::Fold;
use crate::cpu::amx;
use crate::cpu::bf16::{round_up, MR};

/// The packed words of `wt` as AMX A tiles: `[co / 32][tap][pair / 16][2][16 rows][16 words]`
/// (co rounded up to 32 and pairs to 16 with zeros); two tiles of 16 output channels side by
/// side, so one step of [`amx::block_32x32`] reads 2 KiB in a row. Packed on first use and
/// kept with the weights.
fn tiles(wt: &ConvWeights) -> &[u32] {
    wt.amx.get_or_init(|| {
        let (kk, ci2) = (wt.kh * wt.kw, wt.ci2);
        let (co32, kb) = (round_up(wt.co, 32), ci2.div_ceil(amx::TK));
        let mut t = vec![0u32; co32 * kk * kb * amx::TILE_WORDS / amx::TM];
        for o in 0..wt.co {
            let (blk, half, row) = (o / 32, (o % 32) / amx::TM, o % amx::TM);
            for tap in 0..kk {
                for k in 0..ci2 {
                    let (kbi, col) = (k / amx::TK, k % amx::TK);
                    let tile = ((blk * kk + tap) * kb + kbi) * 2 + half;
                    t[tile * amx::TILE_WORDS + row * amx::TK + col] =
                        wt.data[((o / MR * kk + tap) * ci2 + k) * MR + o % MR];
                }
            }
        }
        t
    })
}

/// The direct bf16 conv on AMX tiles (only where [`amx::available`]: the caller,
/// [`super::conv2d_bf16`], runs it for a checked [`crate::cpu::bf16::Kernel::Amx`]).
pub(super) fn conv2d(
    x: &[f32],
    fold: Fold,
    bhw: (usize, usize, usize),
    wt: &ConvWeights,
) -> Vec<f32> {
    const BLK: usize = 32; // C block: rows (channels) and columns (p-space)
    let (kk, kb) = (wt.kh * wt.kw, wt.ci2.div_ceil(amx::TK));
    let tiles_a = tiles(wt);
    let a_block = kk * kb * 2 * amx::TILE_WORDS;
    // Where each row block's C starts, for every task alike: the bias, 16 copies of each
    // channel's (32 rows a block, 0 past co).
    let starts: Vec<f32> = (0..round_up(wt.co, BLK))
        .flat_map(|o| [wt.bias.get(o).copied().unwrap_or(0.0); amx::TK])
        .collect();
    direct_conv(
        x,
        fold,
        bhw,
        wt,
        kb * amx::TK,
        (BLK, BLK, 24),
        false,
        |cbuf, t, img, g| {
            let off = |tap: usize| g.off(tap / wt.kw, tap % wt.kw);
            let img = img.as_ptr();
            // SAFETY: amx::available() (the caller's kernel was checked to be Amx).
            let _scope = unsafe { amx::TileScope::new() };
            for nb in (0..t.len).step_by(BLK) {
                for blk in t.blk0..t.blk1 {
                    let c = cbuf[(blk - t.blk0) * BLK * t.len + nb..].as_mut_ptr();
                    let init = starts[blk * BLK * amx::TK..].as_ptr();
                    let a = tiles_a[blk * a_block..].as_ptr();
                    // SAFETY: c is a 32 × 32 corner of cbuf (rows and len are multiples of 32),
                    // written whole; init is this block's 32 × 16 floats of `starts`;
                    // step s = (tap, pair block) reads 2 tiles of this block's packed weights and
                    // 16 planes of this image at the tap's offset: inside the packed input, whose
                    // slack covers the columns read past the last plane.
                    unsafe {
                        amx::block_32x32(
                            c,
                            t.len,
                            Some(init),
                            kk * kb,
                            g.plane,
                            |s| a.add(s * 2 * amx::TILE_WORDS),
                            |s| img.add((s % kb) * amx::TK * g.plane + off(s / kb) + t.p0 + nb),
                        )
                    };
                }
            }
        },
    )
}
