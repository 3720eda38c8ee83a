//! bf16 conv / linear against f32, per layer shape of the taming VQGAN and the ViT.
//!
//! `cargo run --release -p imgseq-kernels --example bf16_bench -- [filter] [--portable]
//!  [--conv CI,CO,SIDE ...]` (`--conv`: only these 3×3 stride-1 convs, 1 image).
//!
//! Each row: best of ≥ 3 timed runs (≥ 0.5 s in all) of the f32 op (`ops::conv2d` /
//! `ops::linear`) and of the bf16 op on weights packed beforehand (`ops::conv2d_bf16` /
//! `ops::linear_bf16`, `vdpbf16ps` where the CPU has it), with GMAC/s (of the direct conv's
//! multiply-adds, so Winograd shows above the peak) and the speed-up. Where the bf16 conv runs
//! Winograd F(2,3), the bf16 direct conv is timed beside it.

use candle_core::{DType, Device, Result, Tensor};
use imgseq_kernels::ops::{self, Bf16Conv2d, Bf16ConvAlgo, Bf16Kernel, Bf16Linear, Padding};
use std::time::Instant;

/// (name, input shape (b, c, h, w), output channels, kernel, stride, padding).
type ConvRow = (&'static str, [usize; 4], usize, usize, usize, Padding);

fn best_ms(mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?; // warm-up
    let (mut best, mut total, mut n) = (f64::INFINITY, 0.0, 0);
    while n < 3 || total < 0.5 {
        let t = Instant::now();
        f()?;
        let s = t.elapsed().as_secs_f64();
        best = best.min(s);
        total += s;
        n += 1;
    }
    Ok(best * 1e3)
}

fn row(name: &str, macs: f64, f32_ms: f64, bf16_ms: f64, direct_ms: Option<f64>) {
    let direct = direct_ms.map_or("–".to_string(), |d| format!("{d:.2}"));
    println!(
        "| {name} | {f32_ms:.2} | {bf16_ms:.2} | {direct} | {:.1} | {:.1} | {:.2}x |",
        macs / f32_ms / 1e6,
        macs / bf16_ms / 1e6,
        f32_ms / bf16_ms
    );
}

fn main() -> Result<()> {
    imgseq_kernels::tune_allocator();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kernel = if args.iter().any(|a| a == "--portable") {
        Bf16Kernel::Portable
    } else {
        Bf16Kernel::best()
    };
    let filter = args
        .iter()
        .enumerate()
        .find(|(i, a)| !a.starts_with("--") && (*i == 0 || args[i - 1] != "--conv"))
        .map(|(_, a)| a.clone());
    let dev = Device::Cpu;
    println!(
        "bf16 path: {kernel:?} (AVX512-BF16 present: {}, AMX usable: {}; IMGSEQ_NO_AMX=1 turns AMX off), {} threads",
        Bf16Kernel::native_available(),
        Bf16Kernel::amx_available(),
        rayon::current_num_threads()
    );
    println!(
        "| layer | f32 ms | bf16 ms | bf16 direct ms | f32 GMAC/s | bf16 GMAC/s | bf16 speed-up |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let convs: [ConvRow; 12] = [
        (
            "conv3x3 128->128 @32²",
            [1, 128, 32, 32],
            128,
            3,
            1,
            Padding::same(1),
        ),
        (
            "conv3x3 64->64 @64²",
            [1, 64, 64, 64],
            64,
            3,
            1,
            Padding::same(1),
        ),
        (
            "conv3x3 128->128 @384²",
            [1, 128, 384, 384],
            128,
            3,
            1,
            Padding::same(1),
        ),
        (
            "conv3x3 128->128 @192²",
            [1, 128, 192, 192],
            128,
            3,
            1,
            Padding::same(1),
        ),
        (
            "conv3x3 256->256 @96²",
            [1, 256, 96, 96],
            256,
            3,
            1,
            Padding::same(1),
        ),
        (
            "conv3x3 128->128 @96²",
            [1, 128, 96, 96],
            128,
            3,
            1,
            Padding::same(1),
        ),
        (
            "conv3x3 256->256 @48²",
            [1, 256, 48, 48],
            256,
            3,
            1,
            Padding::same(1),
        ),
        (
            "conv3x3 512->512 @24²",
            [1, 512, 24, 24],
            512,
            3,
            1,
            Padding::same(1),
        ),
        (
            "conv3x3 s2 128 @384² (taming down)",
            [1, 128, 384, 384],
            128,
            3,
            2,
            Padding::TAMING_DOWN,
        ),
        (
            "conv1x1 128->256 @96²",
            [1, 128, 96, 96],
            256,
            1,
            1,
            Padding::same(0),
        ),
        (
            "conv3x3 3->128 @384² (conv_in)",
            [1, 3, 384, 384],
            128,
            3,
            1,
            Padding::same(1),
        ),
        (
            "conv3x3 128->3 @384² (conv_out)",
            [1, 128, 384, 384],
            3,
            3,
            1,
            Padding::same(1),
        ),
    ];
    let custom: Vec<(String, [usize; 4], usize, usize, usize, Padding)> = args
        .windows(2)
        .filter(|w| w[0] == "--conv")
        .map(|w| {
            let v: Vec<usize> = w[1].split(',').filter_map(|t| t.parse().ok()).collect();
            assert_eq!(v.len(), 3, "--conv CI,CO,SIDE");
            let name = format!("conv3x3 {}->{} @{}²", v[0], v[1], v[2]);
            (name, [1, v[0], v[2], v[2]], v[1], 3, 1, Padding::same(1))
        })
        .collect();
    let rows: Vec<(String, [usize; 4], usize, usize, usize, Padding)> = if custom.is_empty() {
        convs
            .iter()
            .map(|c| (c.0.to_string(), c.1, c.2, c.3, c.4, c.5))
            .collect()
    } else {
        custom
    };
    for (name, xs, co, k, s, pad) in rows {
        let name = name.as_str();
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        let x = Tensor::randn(0f32, 1.0, xs.to_vec(), &dev)?;
        let w = (Tensor::randn(0f32, 1.0, (co, xs[1], k, k), &dev)? * 0.05)?;
        let b = Tensor::randn(0f32, 1.0, co, &dev)?;
        let packed = Bf16Conv2d::new(&w, Some(&b), s, pad, kernel)?;
        let y = ops::conv2d(&x, &w, Some(&b), s, pad)?;
        let (_, _, ho, wo) = y.dims4()?;
        let macs = (xs[0] * co * ho * wo * xs[1] * k * k) as f64;
        let f = best_ms(|| ops::conv2d(&x, &w, Some(&b), s, pad).map(|_| ()))?;
        let h = best_ms(|| ops::conv2d_bf16(&x, &packed).map(|_| ()))?;
        let direct = if packed.runs_winograd(xs[2], xs[3]) {
            let d = Bf16Conv2d::with_algo(&w, Some(&b), s, pad, kernel, Bf16ConvAlgo::Direct)?;
            Some(best_ms(|| ops::conv2d_bf16(&x, &d).map(|_| ()))?)
        } else {
            None
        };
        row(name, macs, f, h, direct);
    }
    let lins: [(&str, usize, usize, usize); 3] = [
        ("linear (500·65)x48 -> 192 (ViT MLP in)", 500 * 65, 48, 192),
        ("linear (500·65)x192 -> 48 (ViT MLP out)", 500 * 65, 192, 48),
        ("linear 4096x512 -> 512", 4096, 512, 512),
    ];
    for (name, rows, inp, out) in lins {
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        let x = Tensor::randn(0f32, 1.0, (rows, inp), &dev)?;
        let w = (Tensor::randn(0f32, 1.0, (out, inp), &dev)? * 0.05)?;
        let b = Tensor::zeros(out, DType::F32, &dev)?;
        let packed = Bf16Linear::new(&w, Some(&b), kernel)?;
        let macs = (rows * inp * out) as f64;
        let f = best_ms(|| ops::linear(&x, &w, Some(&b)).map(|_| ()))?;
        let h = best_ms(|| ops::linear_bf16(&x, &packed).map(|_| ()))?;
        row(name, macs, f, h, None);
    }
    Ok(())
}
