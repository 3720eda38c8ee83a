//! The vectors the Winograd transforms are written over: a small [`Simd`] trait with a
//! portable 8-lane array and AVX2 / AVX-512 registers, and [`dispatch`], which runs a [`Job`]
//! compiled for the instruction set asked for.

use super::Isa;
use std::ops::{Add, Mul, Sub};

/// The few vector operations the transforms need. Only `add`, `sub` and `mul` (no FMA), so
/// every implementation rounds exactly like scalar f32 code.
pub(super) trait Simd:
    Copy + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self>
{
    const L: usize;
    /// # Safety
    /// `p` must be valid for reading `L` floats.
    unsafe fn load(p: *const f32) -> Self;
    /// # Safety
    /// `p` must be valid for writing `L` floats.
    unsafe fn store(self, p: *mut f32);
    fn splat(v: f32) -> Self;
}

/// The portable vector: 8 lanes of plain f32 arithmetic (the compiler vectorises it for the
/// baseline target).
#[derive(Clone, Copy)]
struct Lanes([f32; 8]);

macro_rules! lanes_op {
    ($tr:ident, $f:ident, $op:tt) => {
        impl $tr for Lanes {
            type Output = Lanes;
            #[inline(always)]
            fn $f(self, o: Lanes) -> Lanes {
                let mut r = self.0;
                for (a, b) in r.iter_mut().zip(o.0) {
                    *a $op b;
                }
                Lanes(r)
            }
        }
    };
}
lanes_op!(Add, add, +=);
lanes_op!(Sub, sub, -=);
lanes_op!(Mul, mul, *=);

impl Simd for Lanes {
    const L: usize = 8;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        Lanes(std::ptr::read_unaligned(p as *const [f32; 8]))
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        std::ptr::write_unaligned(p as *mut [f32; 8], self.0)
    }
    #[inline(always)]
    fn splat(v: f32) -> Self {
        Lanes([v; 8])
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! AVX2 and AVX-512 vectors. Their values only exist inside functions compiled with the
    //! matching `#[target_feature]` (see `dispatch`), which run only after the CPU was checked.
    use super::Simd;
    use std::arch::x86_64::*;
    use std::ops::{Add, Mul, Sub};

    macro_rules! vec_type {
        ($name:ident, $reg:ty, $l:expr, $add:ident, $sub:ident, $mul:ident, $load:ident,
         $store:ident, $set1:ident) => {
            #[derive(Clone, Copy)]
            pub(super) struct $name($reg);
            impl Add for $name {
                type Output = $name;
                #[inline(always)]
                fn add(self, o: $name) -> $name {
                    // SAFETY: only reached from code compiled for (and run on) this ISA.
                    $name(unsafe { $add(self.0, o.0) })
                }
            }
            impl Sub for $name {
                type Output = $name;
                #[inline(always)]
                fn sub(self, o: $name) -> $name {
                    // SAFETY: as for `add`.
                    $name(unsafe { $sub(self.0, o.0) })
                }
            }
            impl Mul for $name {
                type Output = $name;
                #[inline(always)]
                fn mul(self, o: $name) -> $name {
                    // SAFETY: as for `add`.
                    $name(unsafe { $mul(self.0, o.0) })
                }
            }
            impl Simd for $name {
                const L: usize = $l;
                #[inline(always)]
                unsafe fn load(p: *const f32) -> Self {
                    $name($load(p))
                }
                #[inline(always)]
                unsafe fn store(self, p: *mut f32) {
                    $store(p, self.0)
                }
                #[inline(always)]
                fn splat(v: f32) -> Self {
                    // SAFETY: as for `add`.
                    $name(unsafe { $set1(v) })
                }
            }
        };
    }
    vec_type!(
        V8,
        __m256,
        8,
        _mm256_add_ps,
        _mm256_sub_ps,
        _mm256_mul_ps,
        _mm256_loadu_ps,
        _mm256_storeu_ps,
        _mm256_set1_ps
    );
    vec_type!(
        V16,
        __m512,
        16,
        _mm512_add_ps,
        _mm512_sub_ps,
        _mm512_mul_ps,
        _mm512_loadu_ps,
        _mm512_storeu_ps,
        _mm512_set1_ps
    );
}

/// A piece of work written once over [`Simd`] and compiled per instruction set.
pub(super) trait Job {
    fn run<S: Simd>(&self);
}

/// Runs `job` compiled for `isa` (which the CPU must have: [`Isa::available`]).
pub(super) fn dispatch<J: Job>(isa: Isa, job: &J) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512<J: Job>(job: &J) {
            job.run::<x86::V16>()
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<J: Job>(job: &J) {
            job.run::<x86::V8>()
        }
        match isa {
            // SAFETY: the callers checked that the CPU has the feature (`conv2d_isa`, `Isa::best`).
            Isa::Avx512 => return unsafe { avx512(job) },
            // SAFETY: as above.
            Isa::Avx2 => return unsafe { avx2(job) },
            Isa::Portable => {}
        }
    }
    let _ = isa;
    job.run::<Lanes>()
}
