//! What this CPU (and this process) can run: the one place that asks.
//!
//! Every code path that picks an instruction set — the [`crate::multiversion!`] kernels, the
//! Winograd transforms ([`super::winograd::Isa`]), the bf16 micro-kernels
//! ([`super::bf16::Kernel`]), the AMX tiles ([`super::amx`]) and the precision choice
//! ([`crate::precision`]) — reads [`features`] or [`amx`], so one switch here moves them all.
//!
//! Environment: `IMGSEQ_NO_AMX` (any value but empty or `0`) turns the AMX path off, to compare
//! against `vdpbf16ps` on the same machine.

use std::sync::OnceLock;

/// The instruction sets our kernels use, detected once per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Features {
    /// AVX2 and FMA (the [`crate::multiversion!`] kernels, the 256-bit Winograd path).
    pub avx2_fma: bool,
    /// AVX-512 Foundation (the 512-bit Winograd path).
    pub avx512f: bool,
    /// AVX-512 Vector Length extensions.
    pub avx512vl: bool,
    /// AVX-512 Byte and Word (the vectorised bf16 packing).
    pub avx512bw: bool,
    /// AVX512-BF16 together with AVX-512F (`vdpbf16ps`, `vcvtne2ps2bf16`).
    pub avx512bf16: bool,
}

impl Features {
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            use std::is_x86_feature_detected as has;
            let avx512f = has!("avx512f");
            Features {
                avx2_fma: has!("avx2") && has!("fma"),
                avx512f,
                avx512vl: has!("avx512vl"),
                avx512bw: has!("avx512bw"),
                avx512bf16: has!("avx512bf16") && avx512f,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Features::default()
        }
    }

    /// AVX-512 F and VL with AVX2 and FMA: the level a kernel written for 512-bit vectors
    /// with 256-bit tails may assume.
    pub fn avx512_full(&self) -> bool {
        self.avx512f && self.avx512vl && self.avx2_fma
    }
}

/// This CPU's [`Features`] (detected on first use, then a load).
#[inline]
pub fn features() -> Features {
    static FEATURES: OnceLock<Features> = OnceLock::new();
    *FEATURES.get_or_init(Features::detect)
}

/// Whether the AVX2+FMA code paths may be used on this CPU.
#[inline(always)]
pub fn has_avx2() -> bool {
    features().avx2_fma
}

/// Whether the `multiversion!` kernels may take their AVX-512 build: AVX-512 F, BW and VL
/// with AVX2 + FMA (every AVX-512 CPU seen here: Zen 4, Sapphire Rapids).
#[inline(always)]
pub fn has_avx512() -> bool {
    let f = features();
    f.avx512_full() && f.avx512bw
}

/// Whether AMX bf16 tiles can run in this process: `IMGSEQ_NO_AMX` is not set, the CPU has
/// AMX-TILE, AMX-BF16 and AVX512-BF16, and Linux granted the tile state
/// (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, asked on the first call only — a
/// process that never asks about AMX never requests it).
pub fn amx() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(detect_amx)
}

/// Whether `IMGSEQ_NO_AMX` turns AMX off: set to anything but empty or `0`.
fn amx_disabled(var: Option<&std::ffi::OsStr>) -> bool {
    var.is_some_and(|v| !v.is_empty() && v != "0")
}

fn detect_amx() -> bool {
    if amx_disabled(std::env::var_os("IMGSEQ_NO_AMX").as_deref()) {
        return false;
    }
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        if __cpuid(0).eax < 7 {
            return false;
        }
        let edx = __cpuid_count(7, 0).edx;
        let (amx_bf16, amx_tile) = (edx >> 22 & 1 == 1, edx >> 24 & 1 == 1);
        if !(amx_bf16 && amx_tile && features().avx512bf16) {
            return false;
        }
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: arch_prctl with this request only changes the process's permission to use
        // the AMX tile state; it reads and writes no memory of ours.
        let r = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        };
        r == 0
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        false
    }
}

/// The CPUID vendor string ("AuthenticAMD", "GenuineIntel", …; "" off x86-64).
pub fn vendor() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        let r = std::arch::x86_64::__cpuid(0); // leaf 0: the vendor string
        let bytes: Vec<u8> = [r.ebx, r.edx, r.ecx]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn features_are_the_ones_std_detects() {
        let f = features();
        assert_eq!(f, features(), "cached");
        #[cfg(target_arch = "x86_64")]
        {
            use std::is_x86_feature_detected as has;
            assert_eq!(f.avx2_fma, has!("avx2") && has!("fma"));
            assert_eq!(f.avx512f, has!("avx512f"));
            assert_eq!(f.avx512bw, has!("avx512bw"));
            assert_eq!(f.avx512bf16, has!("avx512bf16") && has!("avx512f"));
        }
        assert_eq!(has_avx2(), f.avx2_fma);
        // AMX needs AVX512-BF16.
        assert!(!amx() || f.avx512bf16);
    }

    #[test]
    fn imgseq_no_amx_turns_amx_off_unless_empty_or_zero() {
        assert!(!amx_disabled(None));
        assert!(!amx_disabled(Some(OsStr::new(""))));
        assert!(!amx_disabled(Some(OsStr::new("0"))));
        assert!(amx_disabled(Some(OsStr::new("1"))));
        assert!(amx_disabled(Some(OsStr::new("yes"))));
    }
}
