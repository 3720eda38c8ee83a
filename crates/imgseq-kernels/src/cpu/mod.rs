//! Portable CPU kernels (f32 and f64), with AVX2+FMA code paths picked at run time.
//!
//! Every kernel body is a generic `#[inline(always)]` function over [`Real`]; the
//! [`multiversion!`] macro compiles it twice (once inside a `#[target_feature(enable =
//! "avx2,fma")]` wrapper, once plain) and picks the right one on each call. The bodies are
//! written so that LLVM's auto-vectoriser handles them: lane-wise accumulators for
//! reductions, no libm calls in hot loops (see [`fast_exp_f32`]).
//!
//! What the CPU can run is asked of [`features()`] only; the convolutions live in [`conv`].

use candle_core::{CpuStorage, Layout, Result, Storage, Tensor, WithDType};
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

pub mod act;
pub mod amx;
pub mod attn;
pub mod bf16;
pub mod codebook;
pub mod conv;
pub mod depthwise;
pub mod features;
mod gemm;
pub mod heads;
pub mod layer_norm;
pub mod linear;
pub mod norm;
pub mod rows;
pub mod simd;
pub mod upsample;

pub use conv::winograd;
pub use features::{features, has_avx2, has_avx512, Features};

/// Number of lanes used by the manual reductions (one AVX register of f32).
pub const LANES: usize = 8;

/// The float types our kernels run on: f32 (fast path) and f64 (used by the gradient checks).
pub trait Real:
    WithDType
    + Default
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + Send
    + Sync
{
    const ZERO: Self;
    const ONE: Self;
    fn c(v: f64) -> Self;
    fn exp(self) -> Self;
    fn sqrt(self) -> Self;
    #[inline(always)]
    fn maxv(self, o: Self) -> Self {
        if self > o {
            self
        } else {
            o
        }
    }
    #[inline(always)]
    fn absv(self) -> Self {
        if self < Self::ZERO {
            -self
        } else {
            self
        }
    }
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline(always)]
    fn c(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn exp(self) -> Self {
        fast_exp_f32(self)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline(always)]
    fn c(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn exp(self) -> Self {
        f64::exp(self)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
}

/// Cephes `expf`: the clamp that keeps 2^n a normal number (n ∈ [-126, 127]), the two-part
/// ln 2 of the range reduction, and the polynomial's coefficients (highest power first).
const EXP_CLAMP: (f32, f32) = (-87.3, 88.0);
const EXP_LN2: (f32, f32) = (0.693_359_4, 2.121_944_4e-4);
const EXP_POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// 2^fx for an integral `fx` via the 1.5·2^23 trick: the integer lands in the low mantissa
/// bits (no float→int cast, so it vectorises).
#[inline(always)]
fn exp2_int(fx: f32) -> f32 {
    let n = (fx + 12_582_912.0).to_bits().wrapping_sub(0x4B40_0000);
    f32::from_bits(n.wrapping_add(127) << 23)
}

/// `exp` for f32 without a libm call (Cephes `expf` polynomial, ~1 ulp over the clamped range),
/// written branch-free and without float→int casts so that it vectorises.
#[inline(always)]
pub fn fast_exp_f32(x: f32) -> f32 {
    let x = if x > EXP_CLAMP.1 { EXP_CLAMP.1 } else { x };
    let x = if x < EXP_CLAMP.0 { EXP_CLAMP.0 } else { x };
    let fx = (x * std::f32::consts::LOG2_E + 0.5).floor();
    let r = x - fx * EXP_LN2.0 + fx * EXP_LN2.1;
    let z = r * r;
    let mut y = EXP_POLY[0];
    for c in &EXP_POLY[1..] {
        y = y * r + c;
    }
    let y = y * z + r + 1.0;
    y * exp2_int(fx)
}

/// [`fast_exp_f32`] with its range reduction and polynomial in explicit fused multiply-adds
/// (`mul_add`: one rounding each): a third fewer instructions in SIMD loops compiled with FMA,
/// within an ulp of the unfused one, the same bits at every SIMD level (the portable path
/// calls libm's `fmaf`, so use it only in code that runs with FMA on the CPUs that matter).
#[inline(always)]
pub fn fast_exp_f32_fma(x: f32) -> f32 {
    let x = x.clamp(EXP_CLAMP.0, EXP_CLAMP.1);
    let fx = x.mul_add(std::f32::consts::LOG2_E, 0.5).floor();
    let r = fx.mul_add(EXP_LN2.1, fx.mul_add(-EXP_LN2.0, x));
    let mut y = EXP_POLY[0];
    for &c in &EXP_POLY[1..] {
        y = y.mul_add(r, c);
    }
    let y = y.mul_add(r * r, r) + 1.0;
    y * exp2_int(fx)
}

/// Defines `fn name<T: Real>(args) -> ret` whose body is compiled for AVX-512, for AVX2+FMA and
/// for the baseline target, dispatching at run time. The bodies never contract a multiply and
/// an add (Rust does not), so the three give the same bits; only the vector width differs.
#[macro_export]
macro_rules! multiversion {
    ($(#[$m:meta])* $vis:vis fn $name:ident<$T:ident>($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name<$T: $crate::cpu::Real>($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn inner<$T: $crate::cpu::Real>($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn avx2<$T: $crate::cpu::Real>($($arg: $ty),*) $(-> $ret)? { inner::<$T>($($arg),*) }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn avx512<$T: $crate::cpu::Real>($($arg: $ty),*) $(-> $ret)? { inner::<$T>($($arg),*) }
            #[cfg(target_arch = "x86_64")]
            if $crate::cpu::has_avx512() {
                // SAFETY: the CPU supports AVX-512 F/BW/VL, AVX2 and FMA (checked just above).
                return unsafe { avx512::<$T>($($arg),*) };
            }
            #[cfg(target_arch = "x86_64")]
            if $crate::cpu::has_avx2() {
                // SAFETY: the CPU supports AVX2 and FMA (checked just above).
                return unsafe { avx2::<$T>($($arg),*) };
            }
            inner::<$T>($($arg),*)
        }
    };
}

/// Σ a, with lane-wise partial sums so that it vectorises.
#[inline(always)]
pub fn sum<T: Real>(a: &[T]) -> T {
    let mut acc = [T::ZERO; LANES];
    let mut ch = a.chunks_exact(LANES);
    for c in &mut ch {
        for l in 0..LANES {
            acc[l] += c[l];
        }
    }
    let mut s = T::ZERO;
    for v in ch.remainder() {
        s += *v;
    }
    hsum(acc) + s
}

/// Σ a·b, with lane-wise partial sums so that it vectorises.
#[inline(always)]
pub fn dot<T: Real>(a: &[T], b: &[T]) -> T {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [T::ZERO; LANES];
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in (&mut ca).zip(&mut cb) {
        let x: &[T; LANES] = x.try_into().unwrap();
        let y: &[T; LANES] = y.try_into().unwrap();
        acc = std::array::from_fn(|l| acc[l] + x[l] * y[l]);
    }
    let mut s = T::ZERO;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        s += *x * *y;
    }
    hsum(acc) + s
}

/// Σ a·b·c, lane-wise.
#[inline(always)]
pub fn dot3<T: Real>(a: &[T], b: &[T], c: &[T]) -> T {
    let n = a.len().min(b.len()).min(c.len());
    let (a, b, c) = (&a[..n], &b[..n], &c[..n]);
    let mut acc = [T::ZERO; LANES];
    let m = n / LANES * LANES;
    for i in (0..m).step_by(LANES) {
        for l in 0..LANES {
            acc[l] += a[i + l] * b[i + l] * c[i + l];
        }
    }
    let mut s = T::ZERO;
    for i in m..n {
        s += a[i] * b[i] * c[i];
    }
    hsum(acc) + s
}

/// Σ a·(x − m), lane-wise.
#[inline(always)]
pub fn dot_dev<T: Real>(a: &[T], x: &[T], m: T) -> T {
    let n = a.len().min(x.len());
    let (a, x) = (&a[..n], &x[..n]);
    let mut acc = [T::ZERO; LANES];
    let mut ca = a.chunks_exact(LANES);
    let mut cx = x.chunks_exact(LANES);
    for (p, q) in (&mut ca).zip(&mut cx) {
        let p: &[T; LANES] = p.try_into().unwrap();
        let q: &[T; LANES] = q.try_into().unwrap();
        acc = std::array::from_fn(|l| acc[l] + p[l] * (q[l] - m));
    }
    let mut s = T::ZERO;
    for (p, q) in ca.remainder().iter().zip(cx.remainder()) {
        s += *p * (*q - m);
    }
    hsum(acc) + s
}

/// Σ (a − m)², lane-wise.
#[inline(always)]
pub fn sum_sq_dev<T: Real>(a: &[T], m: T) -> T {
    let mut acc = [T::ZERO; LANES];
    let mut ch = a.chunks_exact(LANES);
    for c in &mut ch {
        for l in 0..LANES {
            let d = c[l] - m;
            acc[l] += d * d;
        }
    }
    let mut s = T::ZERO;
    for v in ch.remainder() {
        let d = *v - m;
        s += d * d;
    }
    hsum(acc) + s
}

/// max a (a must be non-empty).
#[inline(always)]
pub fn max<T: Real>(a: &[T]) -> T {
    let mut acc = [a[0]; LANES];
    let mut ch = a.chunks_exact(LANES);
    for c in &mut ch {
        for l in 0..LANES {
            acc[l] = acc[l].maxv(c[l]);
        }
    }
    let mut m = a[0];
    for v in acc.iter().chain(ch.remainder()) {
        m = m.maxv(*v);
    }
    m
}

#[inline(always)]
fn hsum<T: Real>(acc: [T; LANES]) -> T {
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// y += a·x
#[inline(always)]
pub fn axpy<T: Real>(y: &mut [T], a: T, x: &[T]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += a * *x;
    }
}

/// The contiguous slice behind `layout` in a CPU storage.
pub fn slice<'a, T: Real>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [T]> {
    let data = T::cpu_storage_as_slice(s)?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => candle_core::bail!("imgseq-kernels: expected a contiguous input, got {l:?}"),
    }
}

/// Runs `f` on the contiguous CPU data of `t` (call `.contiguous()` first).
pub fn with_data<T: Real, R>(t: &Tensor, f: impl FnOnce(&[T]) -> Result<R>) -> Result<R> {
    let (s, l) = t.storage_and_layout();
    match &*s {
        Storage::Cpu(c) => f(slice::<T>(c, l)?),
        _ => candle_core::bail!("imgseq-kernels: expected a CPU tensor"),
    }
}

/// Runs `f` on the raw CPU storage and layout of `t`.
pub fn with_storage<R>(t: &Tensor, f: impl FnOnce(&CpuStorage, &Layout) -> Result<R>) -> Result<R> {
    let (s, l) = t.storage_and_layout();
    match &*s {
        Storage::Cpu(c) => f(c, l),
        _ => candle_core::bail!("imgseq-kernels: expected a CPU tensor"),
    }
}

/// A raw pointer handed to several threads that write disjoint parts of one buffer.
#[derive(Clone, Copy)]
pub(crate) struct SyncPtr<T>(pub(crate) *mut T);
// SAFETY: only used to hand disjoint regions of one buffer to several threads.
unsafe impl<T> Send for SyncPtr<T> {}
unsafe impl<T> Sync for SyncPtr<T> {}
impl<T> SyncPtr<T> {
    /// The pointer (a method, so that closures capture the whole `SyncPtr`, not its field).
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}

/// Number of worker threads rayon will use.
pub fn threads() -> usize {
    rayon::current_num_threads().max(1)
}

/// A chunk length (in units) that gives each thread a few chunks, but not chunks below `min`.
pub fn chunk_len(total: usize, min: usize) -> usize {
    let per = total.div_ceil(threads() * 4);
    per.max(min).max(1)
}
