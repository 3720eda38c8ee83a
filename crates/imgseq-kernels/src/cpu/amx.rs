//! Intel AMX (Advanced Matrix Extensions) tile primitives for the bf16 conv of
//! [`super::conv::amx`].
//!
//! AMX-BF16's `tdpbf16ps` multiplies a 16 × 32 bf16 tile by a 32 × 16 one into a 16 × 16 f32
//! tile — 16,384 multiply-adds per instruction, ~1,000 a cycle per core (measured 2.3 TFLOP/s
//! on one Sapphire Rapids core, against ~80 GFLOP/s for the f32 FMA). It reads its operands in
//! exactly the word layout [`super::bf16`] already uses: a tile row of A is one output row's
//! 16 words (32 bf16, pairs along the reduction axis), a tile row of B is 16 consecutive words
//! of one reduction pair, so the packed conv input is read in place.
//!
//! # Arithmetic
//! The products of the bf16-rounded operands are summed in f32, but not in `vdpbf16ps`'s
//! order and rounding: on a Sapphire Rapids Xeon the results matched neither a hi-then-lo nor
//! a lo-then-hi chain of fused multiply-adds, nor pair sums rounded once (2026-12-03, ~45% of
//! outputs differ in the last bits). So the AMX path is tested against the portable reference
//! to within f32 accumulation error, not bit for bit; the portable and `vdpbf16ps` paths
//! still agree exactly.
//!
//! # Use
//! [`available`] says whether the CPU has AMX-TILE and AMX-BF16 *and* Linux granted this
//! process the tile state (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, asked once;
//! [`super::features::amx`] asks).
//! Each thread that runs tiles calls [`TileScope::new`] first (loads the tile configuration)
//! and drops it after (releases the tile state). `IMGSEQ_NO_AMX=1` in the environment turns
//! the path off (to compare against `vdpbf16ps` on the same machine).

/// Words (bf16 pairs) in a tile row: 64 bytes.
pub const TK: usize = 16;
/// Rows of a tile.
pub const TM: usize = 16;
/// Words in one packed A tile (16 rows × 16 words).
pub const TILE_WORDS: usize = TM * TK;

/// Whether the AMX bf16 path can run in this process (see the module docs;
/// [`super::features::amx`] decides).
pub fn available() -> bool {
    super::features::amx()
}

/// The tile configuration: palette 1, all eight tiles 16 rows × 64 bytes.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

const CONFIG: TileConfig = {
    let mut c = [0u8; 64];
    c[0] = 1; // palette
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64; // bytes per row (u16, little-endian)
        c[48 + t] = TM as u8; // rows
        t += 1;
    }
    TileConfig(c)
};

/// Tiles configured on this thread for as long as it lives. Only made where [`available`].
pub(crate) struct TileScope(());

impl TileScope {
    /// # Safety
    /// [`available`] must have returned true (else `ldtilecfg` faults).
    pub(crate) unsafe fn new() -> Self {
        #[cfg(target_arch = "x86_64")]
        std::arch::asm!("ldtilecfg [{}]", in(reg) CONFIG.0.as_ptr(), options(nostack, readonly));
        TileScope(())
    }
}

impl Drop for TileScope {
    fn drop(&mut self) {
        // SAFETY: tiles were configured by `new` on this thread.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            std::arch::asm!("tilerelease", options(nostack, nomem))
        };
    }
}

/// C (32 × 32 f32, rows `ldc` floats apart) = start + Σ over `steps` of A (32 × 16 words) ·
/// B (16 word-rows × 32 columns), the four 16 × 16 accumulators held in tiles 0–3 throughout.
/// `start` is C's own contents, or with `init` a 32 × 16 block (rows 16 floats apart) that
/// both 16-column halves of C start from (a conv's bias, one value a row: no C buffer to fill).
///
/// Step `s` reads A at `a(s)` (two 16 × 16-word tiles, rows 0–15 then 16–31, each row 16
/// consecutive words) and B at `b(s)` (16 rows `ldb` words apart, 32 consecutive words each).
///
/// # Safety
/// A [`TileScope`] is alive on this thread; `c` covers 31·ldc + 32 floats; `init`, when
/// given, covers 512 floats; every `a(s)` covers 2·[`TILE_WORDS`] words and every `b(s)`
/// covers 15·ldb + 32 words.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn block_32x32(
    c: *mut f32,
    ldc: usize,
    init: Option<*const f32>,
    steps: usize,
    ldb: usize,
    mut a: impl FnMut(usize) -> *const u32,
    mut b: impl FnMut(usize) -> *const u32,
) {
    use std::arch::asm;
    let sc = ldc * 4;
    // Where the four accumulators start: C itself, or the init block for both halves.
    let (start, ss) = match init {
        Some(p) => ([p, p, p.add(256), p.add(256)], 64),
        None => {
            let c = c as *const f32;
            ([c, c.add(16), c.add(16 * ldc), c.add(16 * ldc + 16)], sc)
        }
    };
    asm!(
        "tileloadd tmm0, [{c0} + {s}*1]",
        "tileloadd tmm1, [{c1} + {s}*1]",
        "tileloadd tmm2, [{c2} + {s}*1]",
        "tileloadd tmm3, [{c3} + {s}*1]",
        c0 = in(reg) start[0],
        c1 = in(reg) start[1],
        c2 = in(reg) start[2],
        c3 = in(reg) start[3],
        s = in(reg) ss,
        options(nostack, readonly),
    );
    let sb = ldb * 4;
    for st in 0..steps {
        let (ap, bp) = (a(st), b(st));
        asm!(
            "tileloadd tmm4, [{a0} + {sa}*1]",
            "tileloadd tmm5, [{a1} + {sa}*1]",
            "tileloadd tmm6, [{b0} + {sb}*1]",
            "tileloadd tmm7, [{b1} + {sb}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            a0 = in(reg) ap,
            a1 = in(reg) ap.add(TILE_WORDS),
            sa = in(reg) TK * 4,
            b0 = in(reg) bp,
            b1 = in(reg) bp.add(16),
            sb = in(reg) sb,
            options(nostack, readonly),
        );
    }
    asm!(
        "tilestored [{c0} + {s}*1], tmm0",
        "tilestored [{c1} + {s}*1], tmm1",
        "tilestored [{c2} + {s}*1], tmm2",
        "tilestored [{c3} + {s}*1], tmm3",
        c0 = in(reg) c,
        c1 = in(reg) c.add(16),
        c2 = in(reg) c.add(16 * ldc),
        c3 = in(reg) c.add(16 * ldc + 16),
        s = in(reg) sc,
        options(nostack),
    );
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn block_32x32(
    _c: *mut f32,
    _ldc: usize,
    _init: Option<*const f32>,
    _steps: usize,
    _ldb: usize,
    _a: impl FnMut(usize) -> *const u32,
    _b: impl FnMut(usize) -> *const u32,
) {
    unreachable!("AMX is x86-64 only")
}
