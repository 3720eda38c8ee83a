//! bf16 conv / linear (`ops::conv2d_bf16`, `ops::linear_bf16`): exact sums of the bf16-rounded
//! operands up to f32 accumulation, close to the f32 ops, and — where the CPU has
//! AVX512-BF16 — the native `vdpbf16ps` path equal bit for bit to the portable one; where it
//! has AMX, the AMX conv within f32 accumulation error of both.

use crate::common::*;
use candle_core::{DType, Tensor};
use imgseq_kernels::cpu::bf16::round_bf16;
use imgseq_kernels::ops::{self, Bf16Conv2d, Bf16ConvAlgo, Bf16Kernel, Bf16Linear};
use imgseq_kernels::Padding;

fn vec32(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

/// Direct convolution in f64 of the bf16-rounded input and weights (bias as is).
#[allow(clippy::too_many_arguments)]
fn conv_rounded_f64(x: &Tensor, w: &Tensor, b: &Tensor, stride: usize, pad: Padding) -> Tensor {
    let (n, ci, h, wd) = x.dims4().unwrap();
    let (co, _, kh, kw) = w.dims4().unwrap();
    let (xs, ws, bs) = (vec32(x), vec32(w), vec32(b));
    let ho = (h + pad.top + pad.bottom - kh) / stride + 1;
    let wo = (wd + pad.left + pad.right - kw) / stride + 1;
    let mut y = vec![0f64; n * co * ho * wo];
    for bi in 0..n {
        for o in 0..co {
            for oy in 0..ho {
                for ox in 0..wo {
                    let mut s = bs[o] as f64;
                    for c in 0..ci {
                        for i in 0..kh {
                            for j in 0..kw {
                                let (yy, xx) = (oy * stride + i, ox * stride + j);
                                if yy < pad.top || xx < pad.left {
                                    continue;
                                }
                                let (yy, xx) = (yy - pad.top, xx - pad.left);
                                if yy >= h || xx >= wd {
                                    continue;
                                }
                                let xv = round_bf16(xs[((bi * ci + c) * h + yy) * wd + xx]);
                                let wv = round_bf16(ws[((o * ci + c) * kh + i) * kw + j]);
                                s += xv as f64 * wv as f64;
                            }
                        }
                    }
                    y[((bi * co + o) * ho + oy) * wo + ox] = s;
                }
            }
        }
    }
    Tensor::from_vec(y, (n, co, ho, wo), x.device()).unwrap()
}

struct ConvCase {
    x: [usize; 4],
    co: usize,
    k: usize,
    stride: usize,
    pad: Padding,
    what: &'static str,
}

fn conv_cases() -> Vec<ConvCase> {
    let c = |x, co, k, stride, pad, what| ConvCase {
        x,
        co,
        k,
        stride,
        pad,
        what,
    };
    vec![
        c([2, 8, 12, 10], 16, 3, 1, Padding::same(1), "3x3 s1 p1"),
        c(
            [1, 3, 20, 17],
            13,
            3,
            1,
            Padding::same(1),
            "3x3, 3 -> 13 channels (odd c_in, co % 8 != 0)",
        ),
        c(
            [2, 10, 12, 10],
            8,
            3,
            2,
            Padding::TAMING_DOWN,
            "3x3 s2 taming padding, even",
        ),
        c(
            [1, 6, 13, 11],
            8,
            3,
            2,
            Padding::TAMING_DOWN,
            "3x3 s2 taming padding, odd",
        ),
        c([1, 6, 13, 11], 5, 3, 2, Padding::same(1), "3x3 s2 p1"),
        c([2, 12, 9, 9], 24, 1, 1, Padding::same(0), "1x1"),
        c(
            [1, 1, 32, 32],
            48,
            4,
            4,
            Padding::same(0),
            "4x4 s4 patchify, 1 channel",
        ),
        c(
            [1, 4, 11, 13],
            6,
            5,
            3,
            Padding {
                left: 2,
                right: 0,
                top: 1,
                bottom: 2,
            },
            "5x5 s3 asymmetric padding",
        ),
        // 300 channels: two reduction blocks; 40 outputs on 8x8: channels split over tasks.
        c(
            [1, 300, 8, 8],
            40,
            3,
            1,
            Padding::same(1),
            "3x3, 300 -> 40 at 8x8",
        ),
        // Many p-space tiles per image.
        c([1, 16, 70, 66], 8, 3, 1, Padding::same(1), "3x3 at 70x66"),
        // AMX blocks: 70 outputs = two full 32-channel blocks and a partial one; 40 inputs =
        // 20 pairs, one full 16-pair tile and a partial one; 2 images.
        c(
            [2, 40, 23, 19],
            70,
            3,
            1,
            Padding::same(1),
            "3x3, 40 -> 70 at 23x19 (AMX edges)",
        ),
    ]
}

#[test]
fn bf16_conv_is_the_exact_sum_of_bf16_rounded_operands() {
    for c in conv_cases() {
        let x = rand(&c.x, 11, 1.0, DType::F32);
        let w = rand(&[c.co, c.x[1], c.k, c.k], 12, 0.5, DType::F32);
        let b = rand(&[c.co], 13, 0.5, DType::F32);
        let want = conv_rounded_f64(&x, &w, &b, c.stride, c.pad);
        for kernel in [Bf16Kernel::Portable, Bf16Kernel::best()] {
            // The direct conv (`new` would pick Winograd for the 300 -> 40 case).
            let p =
                Bf16Conv2d::with_algo(&w, Some(&b), c.stride, c.pad, kernel, Bf16ConvAlgo::Direct)
                    .unwrap();
            let y = ops::conv2d_bf16(&x, &p).unwrap();
            // Only the f32 accumulation differs from the f64 sum.
            assert_close(&y, &want, 1e-5, &format!("{} ({kernel:?})", c.what));
            // And bf16 rounding of the operands is all that separates it from the f32 conv.
            let f = ops::conv2d(&x, &w, Some(&b), c.stride, c.pad).unwrap();
            assert_close(&y, &f, 1.5e-2, &format!("{} vs f32 ({kernel:?})", c.what));
        }
    }
}

/// 3×3 stride-1 convs of the sizes the bf16 Winograd runs on (≥ 32 channels), with odd
/// channel counts, co not a multiple of the micro-tile, odd image sides and batches.
struct WinoCase {
    x: [usize; 4],
    co: usize,
    pad: Padding,
    what: &'static str,
}

impl WinoCase {
    fn tensors(&self) -> (Tensor, Tensor, Tensor) {
        let ci = self.x[1];
        // Weights at the scale of a trained conv (He init), inputs like activations.
        let scale = (2.0 / (9.0 * ci as f64)).sqrt();
        (
            rand(&self.x, 41, 1.0, DType::F32),
            rand(&[self.co, ci, 3, 3], 42, scale, DType::F32),
            rand(&[self.co], 43, 0.1, DType::F32),
        )
    }
}

fn winograd_cases() -> Vec<WinoCase> {
    let c = |x, co, pad, what| WinoCase { x, co, pad, what };
    vec![
        c([1, 64, 24, 24], 64, Padding::same(1), "64 -> 64 at 24x24"),
        c(
            [2, 33, 13, 11],
            40,
            Padding::same(1),
            "odd c_in, 2 images, odd sides",
        ),
        c([1, 48, 7, 9], 35, Padding::same(1), "co % 8 != 0"),
        c([3, 32, 5, 5], 32, Padding::same(0), "no padding, 3 images"),
        c(
            [1, 260, 10, 12],
            48,
            Padding::same(1),
            "c_in over two reduction blocks",
        ),
    ]
}

/// The bf16 Winograd conv against the f32 direct conv: only the bf16 rounding of the
/// transformed operands separates them (F(2,3)'s transforms add, subtract and halve, so the
/// error stays within ~2.5× the direct bf16 conv's).
#[test]
fn bf16_winograd_is_close_to_the_f32_conv() {
    for c in winograd_cases() {
        let (x, w, b) = c.tensors();
        let f = ops::conv2d(&x, &w, Some(&b), 1, c.pad).unwrap();
        let k = Bf16Kernel::best();
        let err = |algo| {
            let p = Bf16Conv2d::with_algo(&w, Some(&b), 1, c.pad, k, algo).unwrap();
            let y = ops::conv2d_bf16(&x, &p).unwrap();
            assert_eq!(y.dims(), f.dims());
            rel_err(&y, &f)
        };
        let (direct, wino) = (err(Bf16ConvAlgo::Direct), err(Bf16ConvAlgo::Winograd));
        println!(
            "{}: relative error {wino:.2e} (bf16 direct {direct:.2e})",
            c.what
        );
        assert!(
            wino <= 1e-2 && wino <= 2.5 * direct,
            "{}: {wino:e} (direct {direct:e})",
            c.what
        );
    }
}

/// `auto` runs Winograd only for ≥ 128 channels and ≥ 2²⁹ multiply-adds per image, deciding
/// per input size; it then gives exactly the Winograd result, and the direct one below.
/// The AMX tiles sum the same bf16 products as the other paths, in their own order: every
/// conv case within f32 accumulation error of the portable path (and the exact f64 sum).
#[test]
fn amx_conv_agrees_with_the_portable_path() {
    if !Bf16Kernel::amx_available() {
        eprintln!("note: no AMX tiles here (CPU or OS); the AMX conv is not run");
        return;
    }
    for c in conv_cases() {
        let x = rand(&c.x, 21, 1.0, DType::F32);
        let w = rand(&[c.co, c.x[1], c.k, c.k], 22, 0.5, DType::F32);
        let b = rand(&[c.co], 23, 0.5, DType::F32);
        let run = |kernel| {
            let p =
                Bf16Conv2d::with_algo(&w, Some(&b), c.stride, c.pad, kernel, Bf16ConvAlgo::Direct)
                    .unwrap();
            ops::conv2d_bf16(&x, &p).unwrap()
        };
        let (a, p) = (run(Bf16Kernel::Amx), run(Bf16Kernel::Portable));
        assert_close(&a, &p, 1e-5, &format!("{} (AMX vs portable)", c.what));
        let want = conv_rounded_f64(&x, &w, &b, c.stride, c.pad);
        assert_close(&a, &want, 1e-5, &format!("{} (AMX vs f64)", c.what));
    }
    // `auto` takes the AMX direct conv where the other kernels would run Winograd.
    let w = rand(&[128, 128, 3, 3], 1, 0.03, DType::F32);
    let auto = Bf16Conv2d::new(&w, None, 1, Padding::same(1), Bf16Kernel::Amx).unwrap();
    assert!(!auto.runs_winograd(384, 384));
    let x = rand(&[1, 128, 64, 64], 2, 1.0, DType::F32);
    let direct = Bf16Conv2d::with_algo(
        &w,
        None,
        1,
        Padding::same(1),
        Bf16Kernel::Amx,
        Bf16ConvAlgo::Direct,
    )
    .unwrap();
    let (a, d) = (
        vec32(&ops::conv2d_bf16(&x, &auto).unwrap()),
        vec32(&ops::conv2d_bf16(&x, &direct).unwrap()),
    );
    assert!(a.iter().zip(&d).all(|(p, q)| p.to_bits() == q.to_bits()));
}

#[test]
fn bf16_auto_picks_winograd_by_channels_and_size() {
    // The rule of the vdpbf16ps and portable paths (on AMX, `auto` is always direct: above).
    let k = if Bf16Kernel::native_available() {
        Bf16Kernel::Native
    } else {
        Bf16Kernel::Portable
    };
    let w = rand(&[128, 128, 3, 3], 1, 0.03, DType::F32);
    let auto = Bf16Conv2d::new(&w, None, 1, Padding::same(1), k).unwrap();
    assert!(auto.runs_winograd(64, 64) && auto.runs_winograd(384, 384));
    assert!(!auto.runs_winograd(48, 48) && !auto.runs_winograd(0, 0));
    for (side, algo) in [(64, Bf16ConvAlgo::Winograd), (40, Bf16ConvAlgo::Direct)] {
        let x = rand(&[1, 128, side, side], 2, 1.0, DType::F32);
        let forced = Bf16Conv2d::with_algo(&w, None, 1, Padding::same(1), k, algo).unwrap();
        let (a, f) = (
            vec32(&ops::conv2d_bf16(&x, &auto).unwrap()),
            vec32(&ops::conv2d_bf16(&x, &forced).unwrap()),
        );
        assert!(
            a.iter().zip(&f).all(|(p, q)| p.to_bits() == q.to_bits()),
            "{side}: {algo:?}"
        );
    }
    // ≤ 64 channels or a stride-2 conv: never Winograd; forcing it on a stride 2 is an error.
    let w = rand(&[64, 64, 3, 3], 1, 0.03, DType::F32);
    assert!(!Bf16Conv2d::new(&w, None, 1, Padding::same(1), k)
        .unwrap()
        .runs_winograd(384, 384));
    let s2 = Bf16Conv2d::new(&w, None, 2, Padding::same(1), k).unwrap();
    assert!(!s2.runs_winograd(384, 384));
    let err = Bf16Conv2d::with_algo(&w, None, 2, Padding::same(1), k, Bf16ConvAlgo::Winograd);
    assert!(err.is_err());
}

#[test]
fn bf16_native_conv_and_linear_equal_the_portable_reference_bit_for_bit() {
    if !Bf16Kernel::native_available() {
        eprintln!("note: this CPU has no AVX512-BF16; the native vdpbf16ps path is not tested");
        return;
    }
    for c in conv_cases() {
        let x = rand(&c.x, 21, 3.0, DType::F32);
        let w = rand(&[c.co, c.x[1], c.k, c.k], 22, 0.5, DType::F32);
        let b = rand(&[c.co], 23, 0.5, DType::F32);
        let run = |k| {
            let p = Bf16Conv2d::with_algo(&w, Some(&b), c.stride, c.pad, k, Bf16ConvAlgo::Direct)
                .unwrap();
            vec32(&ops::conv2d_bf16(&x, &p).unwrap())
        };
        let (n, p) = (run(Bf16Kernel::Native), run(Bf16Kernel::Portable));
        let diff = n
            .iter()
            .zip(&p)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(diff, 0, "{}: {diff} of {} outputs differ", c.what, n.len());
    }
    for c in winograd_cases() {
        let (x, w, b) = c.tensors();
        let run = |k| {
            let p =
                Bf16Conv2d::with_algo(&w, Some(&b), 1, c.pad, k, Bf16ConvAlgo::Winograd).unwrap();
            vec32(&ops::conv2d_bf16(&x, &p).unwrap())
        };
        let (n, p) = (run(Bf16Kernel::Native), run(Bf16Kernel::Portable));
        let diff = n
            .iter()
            .zip(&p)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(diff, 0, "winograd {}: {diff} of {} differ", c.what, n.len());
    }
    for (shape, out) in [
        (vec![130, 47], 10),
        (vec![3, 65, 48], 192),
        (vec![5, 300], 100),
    ] {
        let inp = *shape.last().unwrap();
        let x = rand(&shape, 31, 2.0, DType::F32);
        let w = rand(&[out, inp], 32, 0.5, DType::F32);
        let b = rand(&[out], 33, 0.5, DType::F32);
        let run = |k| {
            let p = Bf16Linear::new(&w, Some(&b), k).unwrap();
            vec32(&ops::linear_bf16(&x, &p).unwrap())
        };
        assert_eq!(
            run(Bf16Kernel::Native)
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>(),
            run(Bf16Kernel::Portable)
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>(),
            "linear {shape:?} -> {out}"
        );
    }
}

#[test]
fn bf16_linear_is_the_exact_sum_of_bf16_rounded_operands() {
    for (shape, out, bias) in [
        (vec![130, 47], 10, true),
        (vec![3, 65, 48], 192, true),
        (vec![5, 300], 100, false),
        (vec![1, 1], 1, true),
    ] {
        let inp = *shape.last().unwrap();
        let rows: usize = shape.iter().product::<usize>() / inp;
        let x = rand(&shape, 41, 1.0, DType::F32);
        let w = rand(&[out, inp], 42, 0.5, DType::F32);
        let b = rand(&[out], 43, 0.5, DType::F32);
        let (xs, ws, bs) = (vec32(&x), vec32(&w), vec32(&b));
        let mut want = vec![0f64; rows * out];
        for r in 0..rows {
            for o in 0..out {
                let mut s = if bias { bs[o] as f64 } else { 0.0 };
                for i in 0..inp {
                    s += round_bf16(xs[r * inp + i]) as f64 * round_bf16(ws[o * inp + i]) as f64;
                }
                want[r * out + o] = s;
            }
        }
        let mut dims = shape.clone();
        *dims.last_mut().unwrap() = out;
        let want = Tensor::from_vec(want, dims.as_slice(), x.device()).unwrap();
        for kernel in [Bf16Kernel::Portable, Bf16Kernel::best()] {
            let p = Bf16Linear::new(&w, bias.then_some(&b), kernel).unwrap();
            let y = ops::linear_bf16(&x, &p).unwrap();
            assert_eq!(y.dims(), want.dims());
            assert_close(
                &y,
                &want,
                1e-5,
                &format!("linear {shape:?} -> {out} ({kernel:?})"),
            );
        }
    }
}

#[test]
fn bf16_ops_refuse_mismatched_inputs() {
    let w = rand(&[4, 3, 3, 3], 1, 1.0, DType::F32);
    let p = Bf16Conv2d::new(&w, None, 1, Padding::same(1), Bf16Kernel::Portable).unwrap();
    let x = rand(&[1, 5, 8, 8], 2, 1.0, DType::F32);
    let e = ops::conv2d_bf16(&x, &p).unwrap_err().to_string();
    assert!(e.contains("does not match weight (4, 3, 3, 3)"), "{e}");
    let x64 = rand(&[1, 3, 8, 8], 2, 1.0, DType::F64);
    assert!(ops::conv2d_bf16(&x64, &p).is_err());
    let wl = rand(&[4, 6], 1, 1.0, DType::F32);
    let pl = Bf16Linear::new(&wl, None, Bf16Kernel::Portable).unwrap();
    let e = ops::linear_bf16(&rand(&[2, 5], 3, 1.0, DType::F32), &pl)
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not match weight (4, 6)"), "{e}");
    let b = rand(&[5], 1, 1.0, DType::F32);
    assert!(Bf16Linear::new(&wl, Some(&b), Bf16Kernel::Portable).is_err());
}

/// `group_norm_conv2d_bf16` (the GroupNorm folded into the bf16 conv's packing, the residual
/// into its output) against GroupNorm → bf16 conv → + residual as separate ops: the same bits,
/// for Winograd and the direct conv (on AMX tiles where the CPU has them), on the portable and
/// the best kernel, with and without SiLU, an odd channel count and a strided conv.
#[test]
fn bf16_group_norm_conv_equals_the_separate_ops() {
    // (channels in, groups, SiLU, stride)
    for (ci, groups, silu, stride) in [(64, 32, true, 1), (63, 21, false, 1), (64, 32, true, 2)] {
        let (b, co, h, w) = (2, 32, 13, 11);
        let x = rand(&[b, ci, h, w], 61, 1.0, DType::F32);
        let cw = rand(
            &[co, ci, 3, 3],
            62,
            (2.0 / (9.0 * ci as f64)).sqrt(),
            DType::F32,
        );
        let cb = rand(&[co], 63, 0.1, DType::F32);
        let nw = (rand(&[ci], 64, 0.5, DType::F32) + 1.0).unwrap();
        let nb = rand(&[ci], 65, 0.5, DType::F32);
        let (ho, wo) = ((h + 2 - 3) / stride + 1, (w + 2 - 3) / stride + 1);
        let res = rand(&[b, co, ho, wo], 66, 1.0, DType::F32);
        let algos: &[Bf16ConvAlgo] = match stride {
            1 => &[Bf16ConvAlgo::Winograd, Bf16ConvAlgo::Direct],
            _ => &[Bf16ConvAlgo::Direct],
        };
        for kernel in [Bf16Kernel::Portable, Bf16Kernel::best()] {
            for &algo in algos {
                let pad = Padding::same(1);
                let p = Bf16Conv2d::with_algo(&cw, Some(&cb), stride, pad, kernel, algo).unwrap();
                let normed = ops::group_norm(&x, groups, &nw, &nb, 1e-6, silu).unwrap();
                for r in [None, Some(&res)] {
                    let sep = ops::conv2d_bf16(&normed, &p).unwrap();
                    let sep = match r {
                        Some(r) => (r + sep).unwrap(),
                        None => sep,
                    };
                    let gn = (groups, &nw, &nb, 1e-6, silu);
                    let one = ops::group_norm_conv2d_bf16(&x, gn, &p, r).unwrap();
                    let (a, e) = (vec32(&one), vec32(&sep));
                    let same = a.iter().zip(&e).all(|(a, e)| a.to_bits() == e.to_bits());
                    let case = format!("ci {ci} silu {silu} stride {stride}");
                    assert!(same, "{kernel:?} {algo:?} {case} residual {}", r.is_some());
                }
            }
        }
    }
}
