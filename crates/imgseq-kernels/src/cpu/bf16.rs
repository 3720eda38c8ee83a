//! bf16 inference kernels for conv and linear: weights and activations rounded to bfloat16,
//! products summed in f32 — AVX512-BF16's `vdpbf16ps`, or a portable reference that does the
//! very same arithmetic (the two agree bit for bit; the tests check it where the CPU has the
//! instruction).
//!
//! # Arithmetic
//! * f32 → bf16 ([`bf16_bits`]): round to nearest even, subnormals → signed zero, NaN → quiet
//!   NaN (what `vcvtne2ps2bf16` does). Weights are converted once ([`ConvWeights::new`],
//!   [`LinearWeights::new`]), activations on every call.
//! * Values are paired along the reduction axis (c_in for a conv, `in` for a linear): element
//!   2k in the low half of a 32-bit word, 2k + 1 in the high half (an odd count gets a zero).
//! * Per word, as `vdpbf16ps`: acc += hi·hi′, then acc += lo·lo′, each a fused multiply-add
//!   rounded to nearest even in f32 (the product of two bf16 is exact), a subnormal
//!   accumulator read as zero and a subnormal result flushed to zero. An output starts at its
//!   bias (flushed the same way) and takes the words in a fixed order: conv tap by tap
//!   (row-major), pairs ascending within a tap; linear pairs ascending.
//!
//! # Layout
//! Everything is a GEMM C (m × n) += A (m × k) · B (k × n) over words, cut into MR × NB
//! micro-tiles: A is packed as `[m / MR][k][MR]` (each word broadcast), B is read as rows of NB
//! consecutive words `ldb` apart, C is f32 with row stride `ldc`.
//! * conv: A = weights `[co / MR][tap][pair][MR]`; B = the input, zero-padded and split into
//!   stride phases as in [`super::conv`], one plane of words per channel pair; tap (i, j) reads
//!   the plane shifted by its offset, so a conv is a sum of shifted GEMMs over the same packed
//!   input (no im2col). n runs over "p-space" (output rows of the padded width); the columns
//!   past the output width are computed and dropped.
//! * linear: A = the input rows `[rows / MR][pair][MR]`; B = weights `[pair][out rounded up to
//!   NB]`.
//!
//! This module owns the arithmetic (rounding, the micro-kernels) and the linear layer; the
//! conv is in [`super::conv::bf16`] (direct), [`super::conv::amx`] and
//! [`super::conv::winograd`], re-exported here as [`ConvWeights`], [`ConvAlgo`] and [`conv2d`].

use super::features::{self, features};
use super::{threads, SyncPtr};
use rayon::prelude::*;

pub use super::conv::bf16::{ConvAlgo, ConvWeights};
pub use super::conv::conv2d_bf16 as conv2d;

/// Rows of a micro-tile (output channels of a conv, input rows of a linear).
pub const MR: usize = 8;
/// Columns of a micro-tile: three 16-lane vectors.
pub const NB: usize = 48;
/// Reduction words per block: a block of B (KC × NB words, 24 KiB) stays in L1.
pub(crate) const KC: usize = 128;

/// Which code path runs the products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// AMX tiles (`tdpbf16ps`, [`super::amx`]) for the direct conv, `vdpbf16ps` for the rest;
    /// only where [`Kernel::amx_available`]. Sums the same products in another order: close
    /// to the other two, not bit for bit.
    Amx,
    /// `vdpbf16ps` (AVX512-BF16); only where [`Kernel::native_available`].
    Native,
    /// Plain Rust with the same rounding: any CPU, several times slower.
    Portable,
}

impl Kernel {
    /// Whether this CPU has AVX512-BF16 (and AVX-512F).
    pub fn native_available() -> bool {
        features().avx512bf16
    }

    /// Whether this process can run AMX bf16 tiles (CPU and OS; see [`features::amx`]).
    pub fn amx_available() -> bool {
        features::amx()
    }

    /// [`Kernel::Amx`], else [`Kernel::Native`], else [`Kernel::Portable`]: the fastest here.
    pub fn best() -> Self {
        if Self::amx_available() {
            Self::Amx
        } else if Self::native_available() {
            Self::Native
        } else {
            Self::Portable
        }
    }

    /// A path this CPU lacks falls back to the next one down.
    pub(crate) fn checked(self) -> Self {
        match self {
            Self::Amx if Self::amx_available() => Self::Amx,
            Self::Amx | Self::Native if Self::native_available() => Self::Native,
            _ => Self::Portable,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Conversion

/// f32 → bf16 bits: round to nearest even; zero and subnormals → signed zero; ±∞ kept; NaN →
/// quiet NaN with the same sign and top payload bits (`vcvtne2ps2bf16`).
#[inline(always)]
pub fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let exp = b & 0x7f80_0000;
    let r = if exp == 0 {
        b & 0x8000_0000
    } else if exp == 0x7f80_0000 {
        // ∞ stays ∞ (truncation), NaN gets its quiet bit.
        if b & 0x007f_ffff != 0 {
            b | 0x0040_0000
        } else {
            b
        }
    } else {
        b.wrapping_add(0x7fff + ((b >> 16) & 1))
    };
    (r >> 16) as u16
}

/// bf16 bits → f32 (exact).
#[inline(always)]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// `x` rounded to bf16 and back.
#[inline(always)]
pub fn round_bf16(x: f32) -> f32 {
    bf16_to_f32(bf16_bits(x))
}

/// A word of two bf16: `lo` in the low half, `hi` in the high half.
#[inline(always)]
pub(crate) fn word(lo: f32, hi: f32) -> u32 {
    bf16_bits(lo) as u32 | (bf16_bits(hi) as u32) << 16
}

/// Subnormal → signed zero (the accumulator's "flush to zero").
#[inline(always)]
fn ftz(v: f32) -> f32 {
    if v.abs() < f32::MIN_POSITIVE {
        f32::from_bits(v.to_bits() & 0x8000_0000)
    } else {
        v
    }
}

/// dst[i] = word(lo[i], hi[i]) (hi = 0 when absent). Vectorised per CPU.
pub(crate) fn pack_pairs(dst: &mut [u32], lo: &[f32], hi: Option<&[f32]>) {
    #[inline(always)]
    fn body(dst: &mut [u32], lo: &[f32], hi: Option<&[f32]>) {
        match hi {
            Some(hi) => {
                for ((d, &l), &h) in dst.iter_mut().zip(lo).zip(hi) {
                    *d = word(l, h);
                }
            }
            None => {
                for (d, &l) in dst.iter_mut().zip(lo) {
                    *d = bf16_bits(l) as u32;
                }
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw")]
        unsafe fn avx512(dst: &mut [u32], lo: &[f32], hi: Option<&[f32]>) {
            body(dst, lo, hi)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(dst: &mut [u32], lo: &[f32], hi: Option<&[f32]>) {
            body(dst, lo, hi)
        }
        if features().avx512bw {
            // SAFETY: the CPU has AVX-512F/BW (checked just above).
            return unsafe { avx512(dst, lo, hi) };
        }
        if super::has_avx2() {
            // SAFETY: the CPU has AVX2 and FMA.
            return unsafe { avx2(dst, lo, hi) };
        }
    }
    body(dst, lo, hi)
}

// ---------------------------------------------------------------------------------------------
// Micro-kernels: C[MR][NB] += Σ_k A[k][MR] (broadcast) · B[k][NB]

/// # Safety
/// `a` covers kc·MR words, `b` covers (kc − 1)·ldb + NB words, `c` covers (MR − 1)·ldc + NB
/// floats, and the CPU has AVX512-BF16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512bf16,avx512f")]
unsafe fn ukernel_native(
    kc: usize,
    a: *const u32,
    b: *const u32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); 3]; MR];
    for (r, row) in acc.iter_mut().enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            *v = _mm512_loadu_ps(c.add(r * ldc + 16 * j));
        }
    }
    let (mut a, mut b) = (a, b);
    for _ in 0..kc {
        let bv: [__m512bh; 3] = [
            std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_epi32(b as *const i32)),
            std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_epi32(b.add(16) as *const i32)),
            std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_epi32(b.add(32) as *const i32)),
        ];
        for (r, row) in acc.iter_mut().enumerate() {
            let av = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(*a.add(r) as i32));
            for (v, &bj) in row.iter_mut().zip(&bv) {
                *v = _mm512_dpbf16_ps(*v, av, bj);
            }
        }
        a = a.add(MR);
        b = b.add(ldb);
    }
    for (r, row) in acc.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            _mm512_storeu_ps(c.add(r * ldc + 16 * j), *v);
        }
    }
}

/// The same sums as [`ukernel_native`] in plain Rust (compiled for AVX2 where available).
///
/// # Safety
/// As [`ukernel_native`], without the CPU requirement.
unsafe fn ukernel_portable(
    kc: usize,
    a: *const u32,
    b: *const u32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    #[inline(always)]
    unsafe fn body(kc: usize, a: *const u32, b: *const u32, ldb: usize, c: *mut f32, ldc: usize) {
        let mut acc = [[0f32; NB]; MR];
        for (r, row) in acc.iter_mut().enumerate() {
            let src = std::slice::from_raw_parts(c.add(r * ldc), NB);
            for (d, &s) in row.iter_mut().zip(src) {
                *d = ftz(s); // a subnormal accumulator reads as zero
            }
        }
        for k in 0..kc {
            let bw = std::slice::from_raw_parts(b.add(k * ldb), NB);
            let mut bh = [0f32; NB];
            let mut bl = [0f32; NB];
            for j in 0..NB {
                bh[j] = f32::from_bits(bw[j] & 0xffff_0000);
                bl[j] = f32::from_bits(bw[j] << 16);
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let aw = *a.add(k * MR + r);
                let ah = f32::from_bits(aw & 0xffff_0000);
                let al = f32::from_bits(aw << 16);
                for j in 0..NB {
                    // One rounding per product-sum, as vdpbf16ps (the products are exact
                    // unless they fall below f32's normal range; mul_add keeps those exact
                    // too).
                    let v = ftz(ah.mul_add(bh[j], row[j]));
                    row[j] = ftz(al.mul_add(bl[j], v));
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            std::slice::from_raw_parts_mut(c.add(r * ldc), NB).copy_from_slice(row);
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(
            kc: usize,
            a: *const u32,
            b: *const u32,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
        ) {
            body(kc, a, b, ldb, c, ldc)
        }
        if super::has_avx2() {
            return avx2(kc, a, b, ldb, c, ldc);
        }
    }
    body(kc, a, b, ldb, c, ldc)
}

/// One micro-tile on the chosen path.
///
/// # Safety
/// As [`ukernel_native`]; `kernel` must have been [`Kernel::checked`].
#[inline(always)]
pub(crate) unsafe fn ukernel(
    kernel: Kernel,
    kc: usize,
    a: *const u32,
    b: *const u32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    match kernel {
        // The AMX path runs tiles only in the direct conv; everything else takes vdpbf16ps.
        #[cfg(target_arch = "x86_64")]
        Kernel::Native | Kernel::Amx => ukernel_native(kc, a, b, ldb, c, ldc),
        _ => ukernel_portable(kc, a, b, ldb, c, ldc),
    }
}

pub(crate) fn round_up(n: usize, m: usize) -> usize {
    n.div_ceil(m) * m
}

/// f32 bias (flushed to zero like every accumulator value), zero-padded to `len`.
pub(crate) fn padded_bias(bias: Option<&[f32]>, len: usize) -> Vec<f32> {
    let mut b = vec![0f32; len];
    if let Some(bias) = bias {
        for (d, &s) in b.iter_mut().zip(bias) {
            *d = ftz(s);
        }
    }
    b
}

// ---------------------------------------------------------------------------------------------
// Linear

/// Linear weights (PyTorch layout, (out, in)) rounded to bf16 and packed for the micro-kernel.
#[derive(Debug, Clone)]
pub struct LinearWeights {
    pub inp: usize,
    pub out: usize,
    inp2: usize,
    /// out rounded up to NB.
    out_pad: usize,
    /// `[pair][out_pad]` words.
    data: Vec<u32>,
    /// (out_pad)
    bias: Vec<f32>,
}

impl LinearWeights {
    /// Packs `w` (out, inp) and `bias` (out).
    pub fn new(w: &[f32], bias: Option<&[f32]>, inp: usize, out: usize) -> Self {
        assert_eq!(w.len(), inp * out, "linear weight size");
        let (inp2, out_pad) = (inp.div_ceil(2), round_up(out.max(1), NB));
        let mut data = vec![0u32; inp2 * out_pad];
        for o in 0..out {
            let row = &w[o * inp..(o + 1) * inp];
            for k in 0..inp2 {
                let hi = row.get(2 * k + 1).copied().unwrap_or(0.0);
                data[k * out_pad + o] = word(row[2 * k], hi);
            }
        }
        Self {
            inp,
            out,
            inp2,
            out_pad,
            data,
            bias: padded_bias(bias, out_pad),
        }
    }
}

/// bf16 linear: x (rows × inp) f32 → (rows × out) f32.
pub fn linear(x: &[f32], wt: &LinearWeights, kernel: Kernel) -> Vec<f32> {
    let kernel = kernel.checked();
    let (inp, inp2, out, out_pad) = (wt.inp, wt.inp2, wt.out, wt.out_pad);
    let rows = x.len().checked_div(inp).unwrap_or(0);
    let mut y = vec![0f32; rows * out];
    if y.is_empty() {
        return y;
    }
    // Row blocks of MR, spread over tasks of whole blocks.
    let blocks = rows.div_ceil(MR);
    let per = blocks.div_ceil(4 * threads()).clamp(1, 64);
    let yp = SyncPtr(y.as_mut_ptr());
    let run = |(xa, c): &mut (Vec<u32>, Vec<f32>), task: usize| {
        let (b0, b1) = (task * per, ((task + 1) * per).min(blocks));
        let nblk = b1 - b0;
        // A: this task's rows as [block][pair][MR] words (rows past the end are zero).
        xa.clear();
        xa.resize(nblk * inp2 * MR, 0);
        for blk in 0..nblk {
            for r in 0..MR {
                let row = (b0 + blk) * MR + r;
                if row >= rows {
                    break;
                }
                let xr = &x[row * inp..(row + 1) * inp];
                let a = &mut xa[blk * inp2 * MR..(blk + 1) * inp2 * MR];
                for k in 0..inp2 {
                    a[k * MR + r] = word(xr[2 * k], xr.get(2 * k + 1).copied().unwrap_or(0.0));
                }
            }
        }
        c.clear();
        for _ in 0..nblk * MR {
            c.extend_from_slice(&wt.bias);
        }
        for k0 in (0..inp2).step_by(KC) {
            let kc = KC.min(inp2 - k0);
            for nb in (0..out_pad).step_by(NB) {
                let b = wt.data[k0 * out_pad + nb..].as_ptr();
                for blk in 0..nblk {
                    let a = xa[(blk * inp2 + k0) * MR..].as_ptr();
                    let cp = c[blk * MR * out_pad + nb..].as_mut_ptr();
                    // SAFETY: a covers kc·MR words of xa, b covers (kc − 1)·out_pad + NB
                    // words of the packed weights, cp a MR × NB corner of c.
                    unsafe { ukernel(kernel, kc, a, b, out_pad, cp, out_pad) };
                }
            }
        }
        let o = yp.get();
        for r in 0..(nblk * MR).min(rows - b0 * MR) {
            // SAFETY: row b0·MR + r is inside y and owned by this task.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    c[r * out_pad..].as_ptr(),
                    o.add((b0 * MR + r) * out),
                    out,
                );
            }
        }
    };
    (0..blocks.div_ceil(per))
        .into_par_iter()
        .for_each_init(|| (Vec::new(), Vec::new()), |buf, task| run(buf, task));
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_is_nearest_even_with_flushed_subnormals() {
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
        assert_eq!(round_bf16(1.0 + 1.0 / 256.0), 1.0);
        // 1 + 3·2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
        assert_eq!(round_bf16(1.0 + 3.0 / 256.0), 1.0 + 1.0 / 64.0);
        assert_eq!(round_bf16(1.0 + 1.0 / 256.0 + 1e-6), 1.0 + 1.0 / 128.0);
        assert_eq!(round_bf16(-2.5), -2.5);
        assert_eq!(bf16_bits(f32::from_bits(1)), 0);
        assert_eq!(bf16_bits(-f32::from_bits(0x0040_0000)), 0x8000);
        assert_eq!(bf16_bits(f32::INFINITY), 0x7f80);
        assert_eq!(bf16_bits(f32::MAX), 0x7f80); // rounds up to ∞
        assert!(round_bf16(f32::NAN).is_nan());
        assert_eq!(bf16_bits(f32::from_bits(0x7f80_0001)), 0x7fc0); // quiet NaN
    }

    #[test]
    fn portable_microkernel_sums_hi_then_lo_with_one_rounding_each() {
        // acc = 1, hi product = 2^-24 (lost: 1 + 2^-24 rounds to 1), lo product = 2^-24 (lost
        // again): the result stays 1. Summing the products first would give 1 + 2^-23.
        let a = [word(2f32.powi(-12), 2f32.powi(-12)); MR];
        let mut b = [0u32; NB];
        b.fill(word(2f32.powi(-12), 2f32.powi(-12)));
        let mut c = vec![1f32; MR * NB];
        unsafe { ukernel_portable(1, a.as_ptr(), b.as_ptr(), NB, c.as_mut_ptr(), NB) };
        assert!(c.iter().all(|&v| v == 1.0), "{:?}", &c[..4]);
    }

    #[test]
    fn bf16_conversion_equals_vcvtne2ps2bf16() {
        if !Kernel::native_available() {
            eprintln!("note: this CPU has no AVX512-BF16; conversion not compared with it");
            return;
        }
        let mut vals: Vec<f32> = vec![
            0.0,
            -0.0,
            1.0 + 1.0 / 256.0,
            1.0 + 3.0 / 256.0,
            f32::MAX,
            f32::MIN_POSITIVE,
            f32::from_bits(1),
            -f32::from_bits(0x007f_ffff),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::from_bits(0xff80_0001),
            f32::from_bits(0x7fff_ffff),
        ];
        let mut s = 0x1234_5678_9abc_def0u64;
        while !vals.len().is_multiple_of(32) || vals.len() < 4096 {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            vals.push(f32::from_bits((s >> 32) as u32));
        }
        #[target_feature(enable = "avx512bf16,avx512f")]
        unsafe fn hw(v: &[f32]) -> Vec<u16> {
            use std::arch::x86_64::*;
            let mut out = vec![0u16; v.len()];
            for (o, c) in out.chunks_exact_mut(32).zip(v.chunks_exact(32)) {
                let r = _mm512_cvtne2ps_pbh(
                    _mm512_loadu_ps(c[16..].as_ptr()),
                    _mm512_loadu_ps(c.as_ptr()),
                );
                _mm512_storeu_si512(
                    o.as_mut_ptr() as *mut _,
                    std::mem::transmute::<__m512bh, __m512i>(r),
                );
            }
            out
        }
        // SAFETY: the CPU has AVX512-BF16 (checked above).
        let want = unsafe { hw(&vals) };
        for (v, w) in vals.iter().zip(&want) {
            assert_eq!(bf16_bits(*v), *w, "{v:e} ({:#010x})", v.to_bits());
        }
    }

    #[test]
    fn native_microkernel_equals_portable_on_tiny_and_cancelling_sums() {
        if !Kernel::native_available() {
            eprintln!("note: this CPU has no AVX512-BF16; micro-kernel not compared");
            return;
        }
        // Products near the subnormal range and sums that cancel to tiny values: the flush to
        // zero of both paths must agree.
        let kc = 4;
        let mut s = 7u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let m = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
            m * 2f32.powi(-60 + ((s >> 20) % 8) as i32)
        };
        let a: Vec<u32> = (0..kc * MR).map(|_| word(next(), next())).collect();
        let b: Vec<u32> = (0..kc * NB).map(|_| word(next(), next())).collect();
        let c0: Vec<f32> = (0..MR * NB)
            .map(|i| if i % 3 == 0 { 0.0 } else { next() * next() })
            .collect();
        let (mut cn, mut cp) = (c0.clone(), c0);
        // SAFETY: sizes as documented; the CPU has AVX512-BF16.
        unsafe {
            ukernel_native(kc, a.as_ptr(), b.as_ptr(), NB, cn.as_mut_ptr(), NB);
            ukernel_portable(kc, a.as_ptr(), b.as_ptr(), NB, cp.as_mut_ptr(), NB);
        }
        for (i, (x, y)) in cn.iter().zip(&cp).enumerate() {
            assert_eq!(x.to_bits(), y.to_bits(), "element {i}: {x:e} vs {y:e}");
        }
    }
}
