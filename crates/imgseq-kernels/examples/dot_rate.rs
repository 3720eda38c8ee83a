//! Multiply-adds per second of `vfmadd231ps zmm` (f32) and `vdpbf16ps zmm` (bf16 pairs into
//! f32) on one core: the evidence behind [`imgseq_kernels::precision::bf16_support`].
//!
//! `cargo run --release -p imgseq-kernels --example dot_rate`
//!
//! Twelve independent accumulators, operands in registers: no memory, no dependency chains,
//! so each loop runs at the instruction's issue rate. A `vfmadd231ps zmm` does 16
//! multiply-adds, a `vdpbf16ps zmm` 32. Measured on Intel Xeon (Sapphire Rapids, no AMX
//! exposed, 2026-12-02): `vdpbf16ps` issues at a quarter of the FMA rate, 40 vs 82 GMAC/s
//! (0.49×). Not yet run on AMD Zen 4, where `bf16_bench` measured our bf16 layers at 1.4–4.2×
//! the f32 ones.

#[cfg(target_arch = "x86_64")]
mod probe {
    use std::arch::asm;

    macro_rules! twelve {
        ($op:literal) => {
            concat!(
                $op,
                " zmm0, zmm14, zmm15\n",
                $op,
                " zmm1, zmm14, zmm15\n",
                $op,
                " zmm2, zmm14, zmm15\n",
                $op,
                " zmm3, zmm14, zmm15\n",
                $op,
                " zmm4, zmm14, zmm15\n",
                $op,
                " zmm5, zmm14, zmm15\n",
                $op,
                " zmm6, zmm14, zmm15\n",
                $op,
                " zmm7, zmm14, zmm15\n",
                $op,
                " zmm8, zmm14, zmm15\n",
                $op,
                " zmm9, zmm14, zmm15\n",
                $op,
                " zmm10, zmm14, zmm15\n",
                $op,
                " zmm11, zmm14, zmm15\n",
            )
        };
    }

    macro_rules! looped {
        ($name:ident, $feature:literal, $op:literal) => {
            /// `n` iterations of twelve independent instructions.
            #[target_feature(enable = $feature)]
            pub unsafe fn $name(n: u64) {
                asm!(
                    "vpxord zmm14, zmm14, zmm14",
                    "vpxord zmm15, zmm15, zmm15",
                    "2:",
                    twelve!($op),
                    "dec {n}",
                    "jnz 2b",
                    n = inout(reg) n => _,
                    out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
                    out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
                    out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
                    out("zmm14") _, out("zmm15") _,
                    options(nostack),
                );
            }
        };
    }

    looped!(fma, "avx512f", "vfmadd231ps");
    looped!(dpbf16, "avx512bf16,avx512f", "vdpbf16ps");
}

#[cfg(target_arch = "x86_64")]
fn main() {
    use imgseq_kernels::precision::{bf16_support, cpu_vendor};
    use std::time::Instant;
    println!(
        "CPU vendor: {}; bf16_support(): {:?}",
        cpu_vendor(),
        bf16_support()
    );
    if !std::is_x86_feature_detected!("avx512f") {
        println!("no AVX-512F on this CPU: nothing to measure");
        return;
    }
    let bf16 = std::is_x86_feature_detected!("avx512bf16");
    let n = 20_000_000u64;
    let rate = |f: &dyn Fn(), macs: f64| {
        // best of five: the issue rate, not whatever else shares the core.
        (0..5)
            .map(|_| {
                let t = Instant::now();
                f();
                12.0 * n as f64 * macs / t.elapsed().as_secs_f64() / 1e9
            })
            .fold(0.0, f64::max)
    };
    // SAFETY: each loop runs only where its instructions were detected above.
    let f32_rate = rate(&|| unsafe { probe::fma(n) }, 16.0);
    println!("vfmadd231ps zmm: {f32_rate:.1} GMAC/s on one core");
    if !bf16 {
        println!("no AVX512-BF16 on this CPU: vdpbf16ps not measured");
        return;
    }
    let bf16_rate = rate(&|| unsafe { probe::dpbf16(n) }, 32.0);
    println!(
        "vdpbf16ps zmm:   {bf16_rate:.1} GMAC/s on one core ({:.2}x f32's multiply-adds)",
        bf16_rate / f32_rate
    );
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("dot_rate measures x86-64 AVX-512 instructions only");
}
