//! Times every op at the real model shapes: the plain candle composite (`reference::*`)
//! against the custom kernels (`ops::*`), forward and forward+backward.
//!
//! `cargo run --release -p imgseq-kernels --example kernel_bench [-- filter]`

use candle_core::{DType, Device, Result, Tensor, Var};
use imgseq_kernels::cpu::conv::{with_conv_algo, ConvAlgo};
use imgseq_kernels::cpu::winograd::Tile;
use imgseq_kernels::{ops, reference, Padding};
use std::time::Instant;

fn rand(shape: &[usize], seed: u64, scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (((s >> 40) as f64 / (1u64 << 24) as f64 * 2.0 - 1.0) * scale) as f32
        })
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

/// Median wall time in ms of `f` over enough runs.
fn time(mut f: impl FnMut() -> Result<()>) -> f64 {
    f().unwrap();
    let mut ts = vec![];
    let start = Instant::now();
    while ts.len() < 5 || (start.elapsed().as_secs_f64() < 1.0 && ts.len() < 200) {
        let t = Instant::now();
        f().unwrap();
        ts.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    ts[ts.len() / 2]
}

/// CPU time of this process (all threads) in ms.
fn cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 * 1e-6
}

/// (fastest wall time, fastest process CPU time) in ms of `f` over ~1 s of runs. The minima
/// resist other load on the machine; with RAYON_NUM_THREADS=1 the CPU time is the work alone.
fn time_min(mut f: impl FnMut() -> Result<()>) -> (f64, f64) {
    f().unwrap();
    let (mut wall, mut cpu, start, mut n) = (f64::INFINITY, f64::INFINITY, Instant::now(), 0);
    while n < 5 || (start.elapsed().as_secs_f64() < 1.0 && n < 200) {
        let (t, c) = (Instant::now(), cpu_ms());
        f().unwrap();
        cpu = cpu.min(cpu_ms() - c);
        wall = wall.min(t.elapsed().as_secs_f64() * 1e3);
        n += 1;
    }
    (wall, cpu)
}

type Op<'a> = &'a dyn Fn(&[Tensor]) -> Result<Tensor>;

fn fwd(op: Op, inputs: &[Tensor]) -> f64 {
    time(|| op(inputs).map(|_| ()))
}

/// Forward, then backward of Σ y (its gradient is a free broadcast of ones), so nearly all the
/// time is the op's own forward and backward.
fn fwd_bwd(op: Op, inputs: &[Tensor]) -> f64 {
    let vars: Vec<Var> = inputs
        .iter()
        .map(|t| Var::from_tensor(t).unwrap())
        .collect();
    let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    time(|| {
        let _g = op(&ts)?.sum_all()?.backward()?;
        Ok(())
    })
}

fn row(name: &str, filter: &str, fast: Op, slow: Op, inputs: &[Tensor], bwd: bool) {
    if !name.contains(filter) {
        return;
    }
    let (s, f) = (fwd(slow, inputs), fwd(fast, inputs));
    println!(
        "{name:<44} fwd      candle {s:9.3} ms   ours {f:9.3} ms   x{:.2}",
        s / f
    );
    if bwd {
        let (s, f) = (fwd_bwd(slow, inputs), fwd_bwd(fast, inputs));
        println!(
            "{name:<44} fwd+bwd  candle {s:9.3} ms   ours {f:9.3} ms   x{:.2}",
            s / f
        );
    }
}

/// Stride-1 3×3 conv (ci → co @ h²) through `ops::conv2d`, forced direct, Winograd F(2,3),
/// Winograd F(4,3), and as `auto` picks; with `bwd`, also forward+backward direct vs auto.
fn algo_row(filter: &str, ci: usize, co: usize, h: usize, bwd: bool) {
    let name = format!("conv2d 3x3 {ci}->{co} @{h}^2 algos");
    if !name.contains(filter) {
        return;
    }
    let inputs = [
        rand(&[1, ci, h, h], 70, 1.0),
        rand(&[co, ci, 3, 3], 71, (1.0 / (9.0 * ci as f64)).sqrt()),
        rand(&[co], 72, 0.1),
    ];
    let op: Op = &|t| ops::conv2d(&t[0], &t[1], Some(&t[2]), 1, Padding::same(1));
    let algos = [
        ("direct", ConvAlgo::Direct),
        ("F2", ConvAlgo::Winograd(Tile::F2)),
        ("F4", ConvAlgo::Winograd(Tile::F4)),
        ("auto", ConvAlgo::Auto),
    ];
    let ms: Vec<(f64, f64)> = algos
        .iter()
        .map(|&(_, a)| with_conv_algo(a, || time_min(|| op(&inputs).map(|_| ()))))
        .collect();
    for (i, what) in ["wall", "cpu "].iter().enumerate() {
        let t = |j: usize| if i == 0 { ms[j].0 } else { ms[j].1 };
        let mut line = format!("{name:<40} fwd {what} min");
        for (j, (n, _)) in algos.iter().enumerate() {
            line += &format!(" {n} {:8.3}", t(j));
        }
        println!("{line} ms   direct/auto x{:.2}", t(0) / t(3));
    }
    if bwd {
        let vars: Vec<Var> = inputs
            .iter()
            .map(|t| Var::from_tensor(t).unwrap())
            .collect();
        let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
        let step = || time_min(|| op(&ts)?.sum_all()?.backward().map(|_| ()));
        let d = with_conv_algo(ConvAlgo::Direct, step);
        let a = with_conv_algo(ConvAlgo::Auto, step);
        println!(
            "{name:<40} fwd+bwd wall min direct {:8.3} auto {:8.3} ms   x{:.2}",
            d.0,
            a.0,
            d.0 / a.0
        );
        println!(
            "{name:<40} fwd+bwd cpu  min direct {:8.3} auto {:8.3} ms   x{:.2}",
            d.1,
            a.1,
            d.1 / a.1
        );
    }
}

fn main() {
    imgseq_kernels::tune_allocator(); // as the imgseq binary does
    let filter = std::env::args().nth(1).unwrap_or_default();
    println!("threads: {}", rayon::current_num_threads());
    let (b, n, c, h, dh) = (128, 65, 48, 4, 12);

    // ----- ViT training ops -----
    let x = rand(&[b, n, c], 1, 1.0);
    let w = rand(&[c], 2, 1.0);
    let bb = rand(&[c], 3, 1.0);
    row(
        "layer_norm (128,65,48)",
        &filter,
        &|t| ops::layer_norm(&t[0], &t[1], &t[2], 1e-12),
        &|t| reference::layer_norm(&t[0], &t[1], &t[2], 1e-12),
        &[x.clone(), w, bb],
        true,
    );
    let xm = rand(&[b, n, 4 * c], 4, 3.0);
    row(
        "gelu (128,65,192)",
        &filter,
        &|t| ops::gelu(&t[0]),
        &|t| reference::gelu(&t[0]),
        &[xm],
        true,
    );
    let s = rand(&[b, h, n, n], 5, 5.0);
    row(
        "softmax_last_dim (128,4,65,65)",
        &filter,
        &|t| ops::softmax_last_dim(&t[0]),
        &|t| reference::softmax_last_dim(&t[0]),
        &[s],
        true,
    );
    let qkv = [
        rand(&[b, h, n, dh], 6, 1.0),
        rand(&[b, h, n, dh], 7, 1.0),
        rand(&[b, h, n, dh], 8, 1.0),
    ];
    let scale = (dh as f64).powf(-0.5);
    row(
        "attention (128,4,65,12) contiguous",
        &filter,
        &|t| ops::attention(&t[0], &t[1], &t[2], scale),
        &|t| reference::attention(&t[0], &t[1], &t[2], scale),
        &qkv,
        true,
    );
    // As the ViT calls it: q/k/v as head-split views of (b, n, h·d) projections.
    let proj = [
        rand(&[b, n, c], 9, 1.0),
        rand(&[b, n, c], 10, 1.0),
        rand(&[b, n, c], 11, 1.0),
    ];
    let heads = |t: &Tensor| t.reshape((b, n, h, dh))?.transpose(1, 2);
    row(
        "attention (128,4,65,12) from (b,n,h*d) views",
        &filter,
        &|t| ops::attention(&heads(&t[0])?, &heads(&t[1])?, &heads(&t[2])?, scale),
        &|t| reference::attention(&heads(&t[0])?, &heads(&t[1])?, &heads(&t[2])?, scale),
        &proj,
        true,
    );
    let big = [
        rand(&[1, 1, 576, 512], 14, 1.0),
        rand(&[1, 1, 576, 512], 15, 1.0),
        rand(&[1, 1, 576, 512], 16, 1.0),
    ];
    row(
        "attention (1,1,576,512) VQGAN mid-block",
        &filter,
        &|t| ops::attention(&t[0], &t[1], &t[2], 512f64.powf(-0.5)),
        &|t| reference::attention(&t[0], &t[1], &t[2], 512f64.powf(-0.5)),
        &big,
        false,
    );
    let wl = rand(&[4 * c, c], 12, 0.2);
    let bl = rand(&[4 * c], 13, 0.2);
    row(
        "linear (128,65,48)->192",
        &filter,
        &|t| ops::linear(&t[0], &t[1], Some(&t[2])),
        &|t| reference::linear(&t[0], &t[1], Some(&t[2])),
        &[x.clone(), wl, bl],
        true,
    );

    // A whole pre-LN ViT block as crates/imgseq-vit writes it (q/k/v linears, head split with
    // .contiguous(), attention, output, MLP with GELU), through `ops` or through `reference`.
    let block = |r: bool, t: &[Tensor]| -> Result<Tensor> {
        let ln = |x: &Tensor, i: usize| {
            if r {
                reference::layer_norm(x, &t[i], &t[i + 1], 1e-12)
            } else {
                ops::layer_norm(x, &t[i], &t[i + 1], 1e-12)
            }
        };
        let lin = |x: &Tensor, i: usize| {
            if r {
                reference::linear(x, &t[i], Some(&t[i + 1]))
            } else {
                ops::linear(x, &t[i], Some(&t[i + 1]))
            }
        };
        let x = &t[0];
        let hsplit = |u: Tensor| u.reshape((b, n, h, dh))?.transpose(1, 2)?.contiguous();
        let y = ln(x, 1)?;
        let (q, k, v) = (
            hsplit(lin(&y, 3)?)?,
            hsplit(lin(&y, 5)?)?,
            hsplit(lin(&y, 7)?)?,
        );
        let ctx = if r {
            reference::attention(&q, &k, &v, scale)?
        } else {
            ops::attention(&q, &k, &v, scale)?
        };
        let ctx = ctx.transpose(1, 2)?.reshape((b, n, c))?;
        let x = (x + lin(&ctx, 9)?)?;
        let m = lin(&ln(&x, 11)?, 13)?;
        let m = if r {
            reference::gelu(&m)?
        } else {
            ops::gelu(&m)?
        };
        x + lin(&m, 15)?
    };
    let mut bt = vec![x.clone()];
    for (i, (o, inp)) in [
        (c, 0),
        (c, c),
        (c, c),
        (c, c),
        (c, c),
        (c, 0),
        (4 * c, c),
        (c, 4 * c),
    ]
    .iter()
    .enumerate()
    {
        if *inp == 0 {
            bt.push((rand(&[*o], 50 + i as u64, 0.1) + 1.0).unwrap());
            bt.push(rand(&[*o], 60 + i as u64, 0.1));
        } else {
            bt.push(rand(&[*o, *inp], 50 + i as u64, 0.2));
            bt.push(rand(&[*o], 60 + i as u64, 0.1));
        }
    }
    row(
        "ViT block (128,65,48), 4 heads, MLP 192",
        &filter,
        &|t| block(false, t),
        &|t| block(true, t),
        &bt,
        true,
    );

    // ----- VQGAN ops -----
    let xc = rand(&[1, 128, 96, 96], 20, 1.0);
    let wc = rand(&[128, 128, 3, 3], 21, 0.05);
    let bc = rand(&[128], 22, 0.1);
    row(
        "conv2d 3x3 128->128 @96^2",
        &filter,
        &|t| ops::conv2d(&t[0], &t[1], Some(&t[2]), 1, Padding::same(1)),
        &|t| reference::conv2d(&t[0], &t[1], Some(&t[2]), 1, Padding::same(1)),
        &[xc.clone(), wc, bc.clone()],
        true,
    );
    let wd = rand(&[128, 128, 3, 3], 23, 0.05);
    row(
        "conv2d 3x3 s2 (0,1,0,1) 128 @96^2",
        &filter,
        &|t| ops::conv2d(&t[0], &t[1], Some(&t[2]), 2, Padding::TAMING_DOWN),
        &|t| reference::conv2d(&t[0], &t[1], Some(&t[2]), 2, Padding::TAMING_DOWN),
        &[xc.clone(), wd, bc.clone()],
        true,
    );
    let x24 = rand(&[1, 512, 24, 24], 28, 1.0);
    let w24 = rand(&[512, 512, 3, 3], 29, 0.02);
    let b24 = rand(&[512], 30, 0.1);
    row(
        "conv2d 3x3 512->512 @24^2",
        &filter,
        &|t| ops::conv2d(&t[0], &t[1], Some(&t[2]), 1, Padding::same(1)),
        &|t| reference::conv2d(&t[0], &t[1], Some(&t[2]), 1, Padding::same(1)),
        &[x24, w24, b24],
        false,
    );
    let w1 = rand(&[256, 128, 1, 1], 24, 0.05);
    let b1 = rand(&[256], 25, 0.1);
    row(
        "conv2d 1x1 128->256 @96^2",
        &filter,
        &|t| ops::conv2d(&t[0], &t[1], Some(&t[2]), 1, Padding::same(0)),
        &|t| reference::conv2d(&t[0], &t[1], Some(&t[2]), 1, Padding::same(0)),
        &[xc.clone(), w1, b1],
        true,
    );
    let gw = rand(&[128], 26, 1.0);
    let gb = rand(&[128], 27, 1.0);
    row(
        "group_norm(32)+silu 128 @96^2",
        &filter,
        &|t| ops::group_norm(&t[0], 32, &t[1], &t[2], 1e-6, true),
        &|t| reference::group_norm(&t[0], 32, &t[1], &t[2], 1e-6, true),
        &[xc.clone(), gw, gb],
        true,
    );
    row(
        "silu 128 @96^2",
        &filter,
        &|t| ops::silu(&t[0]),
        &|t| reference::silu(&t[0]),
        &[xc],
        true,
    );
    let z = rand(&[576, 256], 30, 1.0);
    let e = rand(&[1024, 256], 31, 1.0);
    row(
        "nearest_codebook 576x256 vs 1024",
        &filter,
        &|t| ops::nearest_codebook(&t[0], &t[1]),
        &|t| reference::nearest_codebook(&t[0], &t[1]),
        &[z, e],
        false,
    );
    // taming ResnetBlock (128 → 128): norm1, swish, conv1, norm2, swish, conv2, residual.
    let resblock = |r: bool, t: &[Tensor]| -> Result<Tensor> {
        let gn = |x: &Tensor, i: usize| {
            if r {
                reference::group_norm(x, 32, &t[i], &t[i + 1], 1e-6, true)
            } else {
                ops::group_norm(x, 32, &t[i], &t[i + 1], 1e-6, true)
            }
        };
        let conv = |x: &Tensor, i: usize| {
            if r {
                reference::conv2d(x, &t[i], Some(&t[i + 1]), 1, Padding::same(1))
            } else {
                ops::conv2d(x, &t[i], Some(&t[i + 1]), 1, Padding::same(1))
            }
        };
        let h = conv(&gn(&t[0], 1)?, 3)?;
        let h = conv(&gn(&h, 5)?, 7)?;
        &t[0] + h
    };
    for (res, bwd) in [(96, true), (192, false)] {
        let rb = vec![
            rand(&[1, 128, res, res], 40, 1.0),
            (rand(&[128], 41, 0.1) + 1.0).unwrap(),
            rand(&[128], 42, 0.1),
            rand(&[128, 128, 3, 3], 43, 0.03),
            rand(&[128], 44, 0.1),
            (rand(&[128], 45, 0.1) + 1.0).unwrap(),
            rand(&[128], 46, 0.1),
            rand(&[128, 128, 3, 3], 47, 0.03),
            rand(&[128], 48, 0.1),
        ];
        row(
            &format!("taming ResnetBlock 128ch @{res}^2"),
            &filter,
            &|t| resblock(false, t),
            &|t| resblock(true, t),
            &rb,
            bwd,
        );
    }

    // ----- Winograd vs direct (3×3 stride 1): the taming f16 widths, the shipped model's -----
    for (c, h, bwd) in [
        (128, 96, true),
        (512, 24, false),
        (256, 48, false),
        (128, 192, false),
        (128, 48, false),
        (128, 24, false),
        (64, 192, false),
        (64, 96, false),
        (32, 384, false),
        (32, 96, false),
        (16, 192, false),
    ] {
        algo_row(&filter, c, c, h, bwd);
    }
    algo_row(&filter, 128, 64, 24, false);
    algo_row(&filter, 64, 128, 24, false);
    let _ = DType::F32;
}
