//! Winograd 3×3 convolution (`cpu::winograd`) against the direct convolution: error bounds at
//! the VQGAN's channel counts, every SIMD path against the portable one, and the switch that
//! picks the algorithm (`IMGSEQ_CONV` / `with_conv_algo`).

use crate::common;
use candle_core::{DType, Tensor};
use imgseq_kernels::cpu::conv::{self, with_conv_algo, ConvAlgo, Geom};
use imgseq_kernels::cpu::winograd::{self, Isa, Tile};
use imgseq_kernels::{ops, reference, Padding};

/// Deterministic values in [-scale, scale).
fn vals(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn geom(b: usize, ci: usize, co: usize, h: usize, w: usize, pad: [usize; 4]) -> Geom {
    Geom {
        b,
        ci,
        h,
        w,
        co,
        kh: 3,
        kw: 3,
        s: 1,
        pad: (pad[0], pad[1], pad[2], pad[3]),
    }
}

/// Inputs for one conv: x in [-1, 1), weights at He-like scale (1/√(9·ci)), bias.
struct Case {
    g: Geom,
    x: Vec<f32>,
    w: Vec<f32>,
    b: Vec<f32>,
}

impl Case {
    fn new(g: Geom, seed: u64) -> Case {
        let f = |v: Vec<f64>| v.into_iter().map(|v| v as f32).collect::<Vec<f32>>();
        Case {
            x: f(vals(g.b * g.ci * g.h * g.w, seed, 1.0)),
            w: f(vals(
                g.co * g.ci * 9,
                seed + 1,
                (1.0 / (9.0 * g.ci as f64)).sqrt(),
            )),
            b: f(vals(g.co, seed + 2, 0.1)),
            g,
        }
    }
    /// The exact result of the f32 inputs (computed in f64).
    fn exact(&self) -> Vec<f64> {
        let f = |v: &[f32]| v.iter().map(|&v| v as f64).collect::<Vec<f64>>();
        conv::conv2d_direct(&f(&self.x), &f(&self.w), Some(&f(&self.b)), &self.g)
    }
    fn wino(&self, tile: Tile, isa: Isa) -> Vec<f32> {
        winograd::conv2d_isa(&self.x, &self.w, Some(&self.b), &self.g, tile, isa)
    }
}

/// max |a − e| / max |e|
fn rel_err(a: &[f32], e: &[f64]) -> f64 {
    assert_eq!(a.len(), e.len());
    let num = a
        .iter()
        .zip(e)
        .map(|(&a, &e)| (a as f64 - e).abs())
        .fold(0.0, f64::max);
    num / e.iter().map(|e| e.abs()).fold(1e-30, f64::max)
}

/// Bound on the normwise relative error of each tile size: about twice the worst measured at
/// these shapes (512 channels: F(2,3) 8.7e-7, F(4,3) 1.8e-5; the f32 direct conv 5.0e-7). A
/// wrong tile, edge or transform gives errors of order 1.
fn bound(tile: Tile) -> f64 {
    match tile {
        Tile::F2 => 2e-6,
        Tile::F4 => 4e-5,
    }
}

#[test]
fn winograd_error_is_bounded_at_vqgan_shapes() {
    // (b, ci, co, h, w, pad): the taming f16 model's widths (512 @24², 256 @48², 128 at the
    // large levels, cropped: the error depends on ci and the tile, not the image size), the
    // shipped model's (32–128), odd sizes, a batch, ci ≠ co and asymmetric padding.
    let shapes = [
        (1, 512, 512, 24, 24, [1, 1, 1, 1]),
        (1, 256, 256, 48, 48, [1, 1, 1, 1]),
        (1, 128, 128, 37, 43, [1, 1, 1, 1]),
        (2, 64, 128, 29, 31, [0, 1, 1, 0]),
        (1, 128, 64, 24, 24, [1, 1, 1, 1]),
        (2, 32, 32, 64, 50, [1, 1, 1, 1]),
        (1, 32, 32, 9, 7, [0, 0, 0, 0]),
    ];
    let isa = Isa::best();
    for (i, &(b, ci, co, h, w, pad)) in shapes.iter().enumerate() {
        let c = Case::new(geom(b, ci, co, h, w, pad), 10 * i as u64);
        let exact = c.exact();
        let direct = conv::conv2d_direct(&c.x, &c.w, Some(&c.b), &c.g);
        let ed = rel_err(&direct, &exact);
        for tile in [Tile::F2, Tile::F4] {
            let e = rel_err(&c.wino(tile, isa), &exact);
            println!(
                "{b}x{ci}->{co} @{h}x{w} pad {pad:?} {tile:?}: winograd {e:.2e}, direct {ed:.2e}"
            );
            assert!(
                e <= bound(tile),
                "{b}x{ci}->{co} @{h}x{w} {tile:?}: relative error {e:e} > {:e}",
                bound(tile)
            );
        }
    }
}

#[test]
fn winograd_without_bias_and_tiny_images_matches_direct() {
    // Images smaller than one tile, and a single channel.
    for &(ci, co, h, w) in &[(1, 1, 1, 1), (3, 5, 2, 3), (4, 4, 5, 4)] {
        let c = Case::new(geom(2, ci, co, h, w, [1, 1, 1, 1]), 7);
        let exact = {
            let f = |v: &[f32]| v.iter().map(|&v| v as f64).collect::<Vec<f64>>();
            conv::conv2d_direct(&f(&c.x), &f(&c.w), None, &c.g)
        };
        for tile in [Tile::F2, Tile::F4] {
            let y = winograd::conv2d_isa(&c.x, &c.w, None, &c.g, tile, Isa::Portable);
            let e = rel_err(&y, &exact);
            assert!(e <= bound(tile), "{ci}->{co} @{h}x{w} {tile:?}: {e:e}");
        }
    }
}

/// The SIMD paths round exactly like the portable one (no FMA in the transforms, the same
/// GEMM), so they must agree bit for bit — in both task modes: on 2 threads, F(4,3) runs the
/// first two cases block after block with parallel phases (one block; three blocks) and the
/// last two with blocks in parallel (four images; two images of three blocks).
#[test]
fn simd_paths_match_portable_bit_for_bit() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let cases = [
        Case::new(geom(1, 40, 24, 37, 29, [1, 1, 1, 1]), 1),
        Case::new(geom(1, 64, 64, 100, 97, [1, 1, 1, 1]), 2),
        Case::new(geom(4, 16, 8, 45, 38, [0, 1, 1, 0]), 3),
        Case::new(geom(2, 64, 64, 100, 97, [1, 1, 1, 1]), 4),
    ];
    for isa in [Isa::Avx2, Isa::Avx512] {
        if !isa.available() {
            println!("skip: this CPU cannot run the {isa:?} path");
            continue;
        }
        for c in &cases {
            for tile in [Tile::F2, Tile::F4] {
                let (a, p) = pool.install(|| (c.wino(tile, isa), c.wino(tile, Isa::Portable)));
                let same = a.iter().zip(&p).all(|(a, p)| a.to_bits() == p.to_bits());
                assert!(same, "{isa:?} {tile:?} {:?} differs from portable", c.g);
            }
        }
    }
}

fn tensors(c: &Case) -> (Tensor, Tensor, Tensor) {
    let dev = candle_core::Device::Cpu;
    let g = c.g;
    (
        Tensor::from_slice(&c.x, (g.b, g.ci, g.h, g.w), &dev).unwrap(),
        Tensor::from_slice(&c.w, (g.co, g.ci, 3, 3), &dev).unwrap(),
        Tensor::from_slice(&c.b, g.co, &dev).unwrap(),
    )
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

#[test]
fn conv_algo_switch_picks_the_path() {
    assert_eq!(ConvAlgo::parse("direct"), Some(ConvAlgo::Direct));
    assert_eq!(ConvAlgo::parse(" Auto "), Some(ConvAlgo::Auto));
    assert_eq!(
        ConvAlgo::parse("winograd-f4"),
        Some(ConvAlgo::Winograd(Tile::F4))
    );
    assert_eq!(ConvAlgo::parse("winograd"), None);

    let c = Case::new(geom(1, 64, 64, 20, 20, [1, 1, 1, 1]), 3);
    let (x, w, b) = tensors(&c);
    let run = |algo| {
        with_conv_algo(algo, || {
            ops::conv2d(&x, &w, Some(&b), 1, Padding::same(1)).unwrap()
        })
    };
    let as_bits = |v: Vec<f32>| v.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    let direct = as_bits(conv::conv2d_direct(&c.x, &c.w, Some(&c.b), &c.g));
    assert_eq!(bits(&run(ConvAlgo::Direct)), direct);
    for tile in [Tile::F2, Tile::F4] {
        let wino = as_bits(winograd::conv2d(&c.x, &c.w, Some(&c.b), &c.g, tile));
        assert_ne!(
            wino, direct,
            "{tile:?} should round differently from direct"
        );
        assert_eq!(bits(&run(ConvAlgo::Winograd(tile))), wino);
    }
    // The override is scoped: back to the process default afterwards, also after a panic.
    let before = conv::conv_algo();
    let r = std::panic::catch_unwind(|| {
        with_conv_algo(ConvAlgo::Direct, || {
            panic!("deliberate panic inside with_conv_algo")
        })
    });
    assert!(r.is_err());
    assert_eq!(conv::conv_algo(), before);
    // f64 always takes the direct path (the gradient checks rely on it).
    let x64 = x.to_dtype(DType::F64).unwrap();
    let w64 = w.to_dtype(DType::F64).unwrap();
    let y64 = with_conv_algo(ConvAlgo::Winograd(Tile::F4), || {
        ops::conv2d(&x64, &w64, None, 1, Padding::same(1)).unwrap()
    });
    let r64 = reference::conv2d(&x64, &w64, None, 1, Padding::same(1)).unwrap();
    common::assert_close(&y64, &r64, 1e-12, "f64 conv under a winograd override");
}

/// Training: forward and input gradient (itself a stride-1 3×3 conv) through Winograd, the
/// weight gradient direct, all against the candle composite.
#[test]
fn winograd_training_gradients_match_reference() {
    for tile in [Tile::F2, Tile::F4] {
        let xs = common::rand(&[2, 48, 14, 11], 1, 1.0, DType::F32);
        let w = common::rand(&[40, 48, 3, 3], 2, 0.1, DType::F32);
        let b = common::rand(&[40], 3, 0.5, DType::F32);
        with_conv_algo(ConvAlgo::Winograd(tile), || {
            common::check_vs_reference(
                &|t| ops::conv2d(&t[0], &t[1], Some(&t[2]), 1, Padding::same(1)),
                &|t| reference::conv2d(&t[0], &t[1], Some(&t[2]), 1, Padding::same(1)),
                &[xs.clone(), w.clone(), b.clone()],
                1e-4,
                &format!("winograd {tile:?} 48->40 fwd+bwd"),
            )
        });
    }
}

/// GroupNorm's per-channel coefficients for a case's input (32 groups unless ci is smaller).
fn prenorm_params(ci: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let f = |v: Vec<f64>| v.into_iter().map(|v| v as f32 + 1.0).collect::<Vec<f32>>();
    let w = f(vals(ci, seed + 7, 0.5));
    let b = f(vals(ci, seed + 8, 0.5)).iter().map(|v| v - 1.0).collect();
    (w, b)
}

#[test]
fn group_norm_folded_into_the_winograd_packing_gives_the_bits_of_norm_then_conv() {
    // Odd sizes (junk tile columns, partial tiles), batch 2, both tiles, every ISA, with and
    // without the SiLU: the folded GroupNorm must equal group_norm → conv bit for bit.
    for (b, ci, co, h, w) in [(2, 64, 32, 13, 11), (1, 32, 48, 24, 24), (2, 96, 64, 7, 9)] {
        let case = Case::new(geom(b, ci, co, h, w, [1, 1, 1, 1]), 40 + ci as u64);
        let groups = 32.min(ci);
        let (nw, nb) = prenorm_params(ci, ci as u64);
        for silu in [true, false] {
            let coefs = imgseq_kernels::cpu::norm::group_norm_coefs(
                &case.x,
                ci,
                h * w,
                groups,
                &nw,
                &nb,
                1e-6,
                silu,
            );
            let normed = imgseq_kernels::cpu::norm::group_norm(
                &case.x,
                ci,
                h * w,
                groups,
                &nw,
                &nb,
                1e-6,
                silu,
            );
            for tile in [Tile::F2, Tile::F4] {
                for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512] {
                    if !isa.available() {
                        continue;
                    }
                    let want =
                        winograd::conv2d_isa(&normed, &case.w, Some(&case.b), &case.g, tile, isa);
                    let fold = winograd::Fold {
                        norm: Some(&coefs),
                        residual: None,
                    };
                    let got = winograd::conv2d_folded_isa(
                        &case.x,
                        fold,
                        &case.w,
                        Some(&case.b),
                        &case.g,
                        tile,
                        isa,
                    );
                    assert_eq!(got.len(), want.len());
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{b}x{ci}->{co} @{h}x{w} {tile:?} {isa:?} silu {silu}");
                }
            }
        }
    }
}

#[test]
fn group_norm_conv2d_op_equals_the_separate_ops_and_keeps_their_gradients() {
    use candle_core::{Device, Var};
    let dev = Device::Cpu;
    let (b, ci, co, h, w) = (2, 64, 32, 12, 10);
    let case = Case::new(geom(b, ci, co, h, w, [1, 1, 1, 1]), 77);
    let (nw, nb) = prenorm_params(ci, 3);
    let x = Tensor::from_vec(case.x.clone(), (b, ci, h, w), &dev).unwrap();
    let nw = Tensor::from_vec(nw, ci, &dev).unwrap();
    let nb = Tensor::from_vec(nb, ci, &dev).unwrap();
    let wt = Tensor::from_vec(case.w.clone(), (co, ci, 3, 3), &dev).unwrap();
    let bt = Tensor::from_vec(case.b.clone(), co, &dev).unwrap();
    let p = Padding::same(1);
    let res = Tensor::from_vec(
        vals(b * co * h * w, 91, 1.0)
            .into_iter()
            .map(|v| v as f32)
            .collect::<Vec<_>>(),
        (b, co, h, w),
        &dev,
    )
    .unwrap();
    // Winograd (auto, ≥ 32 channels) and the direct conv (forced) both take the fused op,
    // with and without the residual.
    for algo in [ConvAlgo::Auto, ConvAlgo::Direct] {
        for r in [None, Some(&res)] {
            with_conv_algo(algo, || {
                let two = ops::conv2d(
                    &ops::group_norm(&x, 32, &nw, &nb, 1e-6, true).unwrap(),
                    &wt,
                    Some(&bt),
                    1,
                    p,
                )
                .unwrap();
                let two = match r {
                    Some(r) => (r + two).unwrap(),
                    None => two,
                };
                let n = (32, &nw, &nb, 1e-6, true);
                let one = ops::group_norm_conv2d(&x, n, (&wt, Some(&bt)), r, 1, p).unwrap();
                let (a, e) = (
                    one.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                    two.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                );
                let same = a.iter().zip(&e).all(|(a, e)| a.to_bits() == e.to_bits());
                assert!(same, "{algo:?} residual {}", r.is_some());
            });
        }
    }
    // Under autograd (a Var among the inputs) it is the separate differentiable ops.
    let xv = Var::from_tensor(&x).unwrap();
    let y = ops::group_norm_conv2d(
        xv.as_tensor(),
        (32, &nw, &nb, 1e-6, true),
        (&wt, Some(&bt)),
        Some(&res),
        1,
        p,
    )
    .unwrap();
    let grads = y.sqr().unwrap().sum_all().unwrap().backward().unwrap();
    let gx = grads.get(xv.as_tensor()).expect("a gradient for x");
    assert_eq!(gx.dims(), &[b, ci, h, w]);
    assert!(
        gx.abs()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            > 0.0
    );
}
