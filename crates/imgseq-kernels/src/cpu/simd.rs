//! The vector instruction level of the f32 row kernels ([`super::rows`], [`super::heads`]) and
//! the macro that compiles one kernel body once per level.
//!
//! Every level computes the same arithmetic in the same order (no implicit FMA contraction;
//! explicit `mul_add`s are one rounding everywhere, libm's `fmaf` on the portable path;
//! reductions over 8 fixed lanes), so every level gives the same bits: the level is a speed
//! setting, never a numerics one.

use std::sync::OnceLock;

/// The instructions a row kernel runs with, picked at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Simd {
    /// Baseline x86-64 (SSE2) or another architecture.
    Portable,
    /// AVX2 + FMA.
    Avx2,
    /// AVX-512 (F, VL) + AVX2 + FMA.
    Avx512,
}

impl Simd {
    /// The best level this CPU has (detected once).
    pub fn best() -> Self {
        static BEST: OnceLock<Simd> = OnceLock::new();
        *BEST.get_or_init(detect)
    }

    /// `self`, or the best level this CPU has if that is lower: the level a kernel really
    /// runs at (so no level a caller names can run instructions the CPU lacks).
    #[inline]
    pub fn capped(self) -> Self {
        self.min(Self::best())
    }
}

/// The level [`super::features`] allows: AVX-512 where F, VL, AVX2 and FMA are all there.
fn detect() -> Simd {
    let f = super::features::features();
    if f.avx512_full() {
        Simd::Avx512
    } else if f.avx2_fma {
        Simd::Avx2
    } else {
        Simd::Portable
    }
}

/// Defines `fn name(simd: Simd, args)` whose body is compiled for AVX-512, AVX2 + FMA and the
/// baseline target, running the version of `simd` capped to what the CPU has
/// ([`Simd::capped`]).
macro_rules! simd_kernel {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        #[allow(clippy::too_many_arguments)]
        #[inline]
        $vis fn $name(simd: $crate::cpu::simd::Simd, $($arg: $ty),*) {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn inner($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn v4($($arg: $ty),*) {
                inner($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn v3($($arg: $ty),*) {
                inner($($arg),*)
            }
            match simd.capped() {
                // SAFETY: `capped` never names a level whose instructions this CPU lacks.
                #[cfg(target_arch = "x86_64")]
                $crate::cpu::simd::Simd::Avx512 => unsafe { v4($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                $crate::cpu::simd::Simd::Avx2 => unsafe { v3($($arg),*) },
                _ => inner($($arg),*),
            }
        }
    };
}
pub(crate) use simd_kernel;
