//! VQGAN ops (conv2d, group_norm + SiLU, nearest_codebook, max_inner_product) against the candle composites.

use crate::common;
use candle_core::{DType, Device, Tensor};
use common::*;
use imgseq_kernels::{ops, reference, Padding};

const TOL: f64 = 1e-4;

#[allow(clippy::too_many_arguments)]
fn conv_case(
    dt: DType,
    x: &[usize],
    co: usize,
    k: usize,
    stride: usize,
    pad: Padding,
    bias: bool,
    what: &str,
) {
    let xs = rand(x, 1, 1.0, dt);
    let w = rand(&[co, x[1], k, k], 2, 0.5, dt);
    let b = rand(&[co], 3, 0.5, dt);
    if bias {
        check_vs_reference(
            &|t| ops::conv2d(&t[0], &t[1], Some(&t[2]), stride, pad),
            &|t| reference::conv2d(&t[0], &t[1], Some(&t[2]), stride, pad),
            &[xs, w, b],
            TOL,
            what,
        );
    } else {
        check_vs_reference(
            &|t| ops::conv2d(&t[0], &t[1], None, stride, pad),
            &|t| reference::conv2d(&t[0], &t[1], None, stride, pad),
            &[xs, w],
            TOL,
            what,
        );
    }
}

#[test]
fn conv2d_matches_reference() {
    conv_case(
        DType::F32,
        &[2, 8, 12, 10],
        6,
        3,
        1,
        Padding::same(1),
        true,
        "3x3 s1 p1",
    );
    conv_case(
        DType::F32,
        &[2, 8, 12, 10],
        6,
        3,
        2,
        Padding::TAMING_DOWN,
        true,
        "3x3 s2 taming pad",
    );
    conv_case(
        DType::F32,
        &[1, 8, 11, 13],
        5,
        3,
        2,
        Padding::TAMING_DOWN,
        true,
        "3x3 s2 taming pad, odd",
    );
    conv_case(
        DType::F32,
        &[3, 16, 7, 9],
        12,
        1,
        1,
        Padding::same(0),
        true,
        "1x1",
    );
    conv_case(
        DType::F32,
        &[1, 3, 9, 9],
        16,
        3,
        1,
        Padding::same(1),
        false,
        "3x3 no bias, 3 in",
    );
    conv_case(
        DType::F64,
        &[1, 4, 6, 5],
        3,
        3,
        1,
        Padding::same(0),
        true,
        "3x3 s1 p0 f64",
    );
    conv_case(
        DType::F32,
        &[2, 4, 8, 8],
        4,
        4,
        4,
        Padding::same(0),
        true,
        "patchify 4x4 s4",
    );
    conv_case(
        DType::F32,
        &[1, 32, 20, 20],
        64,
        3,
        1,
        Padding::same(1),
        true,
        "3x3 32->64 @20",
    );
}

/// The weight gradient sums blocks of output pixels (a fixed range of them per thread):
/// images large enough for several blocks, a partial last block, blocks that straddle the
/// threads' ranges, for 3×3 stride 1, taming's stride-2 padding and 1×1.
#[test]
fn conv2d_weight_grad_spans_pixel_blocks() {
    conv_case(
        DType::F32,
        &[2, 16, 40, 36],
        8,
        3,
        1,
        Padding::same(1),
        true,
        "3x3 s1, 2 blocks per image",
    );
    conv_case(
        DType::F32,
        &[1, 4, 200, 160],
        6,
        3,
        2,
        Padding::TAMING_DOWN,
        true,
        "3x3 s2 taming pad, 3 blocks",
    );
    conv_case(
        DType::F32,
        &[3, 64, 48, 48],
        16,
        1,
        1,
        Padding::same(0),
        false,
        "1x1, 2 blocks per image, 3 images",
    );
}

#[test]
fn conv2d_finite_diff() {
    for (stride, pad, k) in [
        (1, Padding::same(1), 3),
        (2, Padding::TAMING_DOWN, 3),
        (1, Padding::same(0), 1),
    ] {
        let x = rand(&[2, 3, 5, 6], 4, 1.0, DType::F64);
        let w = rand(&[4, 3, k, k], 5, 0.5, DType::F64);
        let b = rand(&[4], 6, 0.5, DType::F64);
        check_finite_diff(
            &|t| ops::conv2d(&t[0], &t[1], Some(&t[2]), stride, pad),
            &[x, w, b],
            1e-6,
            1e-6,
            40,
            &format!("conv2d s{stride} {pad:?}"),
        );
    }
}

#[test]
fn upsample_nearest2x_matches_reference() {
    for (dt, shape) in [
        (DType::F32, [2, 3, 5, 7]),
        (DType::F32, [1, 64, 16, 16]),
        (DType::F64, [1, 2, 3, 1]),
    ] {
        check_vs_reference(
            &|t| ops::upsample_nearest2x(&t[0]),
            &|t| reference::upsample_nearest2x(&t[0]),
            &[rand(&shape, 5, 1.0, dt)],
            TOL,
            &format!("upsample 2x {shape:?} {dt:?}"),
        );
    }
    let x = rand(&[2, 3, 4, 4], 6, 1.0, DType::F32);
    assert!(ops::upsample_nearest2x(&x.flatten_all().unwrap()).is_err());
}

#[test]
fn group_norm_matches_reference() {
    for (silu, dt) in [(true, DType::F32), (false, DType::F32), (true, DType::F64)] {
        let x = (rand(&[2, 64, 9, 7], 10, 2.0, dt) + 0.3).unwrap();
        let w = rand(&[64], 11, 1.0, dt);
        let b = rand(&[64], 12, 1.0, dt);
        check_vs_reference(
            &|t| ops::group_norm(&t[0], 32, &t[1], &t[2], 1e-6, silu),
            &|t| reference::group_norm(&t[0], 32, &t[1], &t[2], 1e-6, silu),
            &[x, w, b],
            TOL,
            &format!("group_norm silu={silu} {dt:?}"),
        );
    }
}

#[test]
fn group_norm_finite_diff() {
    for silu in [true, false] {
        let x = rand(&[2, 6, 3, 2], 13, 1.5, DType::F64);
        let w = rand(&[6], 14, 1.0, DType::F64);
        let b = rand(&[6], 15, 1.0, DType::F64);
        check_finite_diff(
            &|t| ops::group_norm(&t[0], 3, &t[1], &t[2], 1e-6, silu),
            &[x, w, b],
            1e-6,
            1e-6,
            40,
            &format!("group_norm silu={silu}"),
        );
    }
}

#[test]
fn nearest_codebook_matches_reference() {
    let z = rand(&[300, 16], 20, 1.0, DType::F32);
    let e = rand(&[100, 16], 21, 1.0, DType::F32);
    let a = ops::nearest_codebook(&z, &e).unwrap();
    let b = reference::nearest_codebook(&z, &e).unwrap();
    assert_eq!(a.dtype(), DType::U32);
    assert_eq!(a.to_vec1::<u32>().unwrap(), b.to_vec1::<u32>().unwrap());
    // Ties go to the lowest index: duplicate rows in the codebook.
    let e = Tensor::new(
        &[[1f32, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]],
        &Device::Cpu,
    )
    .unwrap();
    let z = Tensor::new(&[[0.9f32, 0.1], [0.1, 0.9], [0.5, 0.5]], &Device::Cpu).unwrap();
    assert_eq!(
        ops::nearest_codebook(&z, &e)
            .unwrap()
            .to_vec1::<u32>()
            .unwrap(),
        vec![0, 1, 0]
    );
}

#[test]
fn max_inner_product_matches_reference_across_codebook_chunks() {
    // More entries than one codebook chunk (8,192), so the running best crosses chunks.
    let z = rand(&[40, 8], 24, 1.0, DType::F32);
    let e = rand(&[20_000, 8], 25, 1.0, DType::F32);
    let a = ops::max_inner_product(&z, &e).unwrap();
    let b = reference::max_inner_product(&z, &e).unwrap();
    assert_eq!(a.to_vec1::<u32>().unwrap(), b.to_vec1::<u32>().unwrap());
    let a = ops::nearest_codebook(&z, &e).unwrap();
    let b = reference::nearest_codebook(&z, &e).unwrap();
    assert_eq!(a.to_vec1::<u32>().unwrap(), b.to_vec1::<u32>().unwrap());
}

#[test]
fn nearest_codebook_real_shape_and_f64_input() {
    let z = rand(&[576, 256], 22, 1.0, DType::F32);
    let e = rand(&[1024, 256], 23, 0.01, DType::F32);
    let a = ops::nearest_codebook(&z, &e)
        .unwrap()
        .to_vec1::<u32>()
        .unwrap();
    let b = reference::nearest_codebook(&z, &e)
        .unwrap()
        .to_vec1::<u32>()
        .unwrap();
    assert_eq!(a, b);
    let z = rand(&[40, 8], 24, 1.0, DType::F64);
    let e = rand(&[33, 8], 25, 1.0, DType::F64);
    let a = ops::nearest_codebook(&z, &e)
        .unwrap()
        .to_vec1::<u32>()
        .unwrap();
    let b = reference::nearest_codebook(&z, &e)
        .unwrap()
        .to_vec1::<u32>()
        .unwrap();
    assert_eq!(a, b);
}

#[test]
fn bad_shapes_are_errors_not_panics() {
    let x = rand(&[1, 8, 4, 4], 30, 1.0, DType::F32);
    let short = rand(&[4], 31, 1.0, DType::F32);
    assert!(ops::group_norm(&x, 4, &short, &short, 1e-6, true).is_err());
    let w = rand(&[3, 5, 3, 3], 32, 1.0, DType::F32);
    assert!(ops::conv2d(&x, &w, None, 1, Padding::same(1)).is_err());
    let w = rand(&[3, 8, 3, 3], 33, 1.0, DType::F32);
    assert!(ops::conv2d(&x, &w, Some(&short), 1, Padding::same(1)).is_err());
    let lw = rand(&[5, 3], 34, 1.0, DType::F32);
    assert!(ops::linear(&x, &lw, None).is_err());
    let three = rand(&[3], 35, 1.0, DType::F32);
    assert!(ops::layer_norm(&x, &three, &three, 1e-5).is_err());
}

#[test]
fn depthwise_conv2d_matches_candles_grouped_convolution() {
    // DC-AE's kernels (3×3 and 5×5, "same" padding), a plane narrower than the kernel's
    // reach, and an unpadded 3×3; values and gradients against the candle composite.
    for (x, k, pad) in [
        ([2, 6, 9, 11], 3, 1),
        ([1, 4, 7, 5], 5, 2),
        ([2, 3, 2, 3], 5, 2),
        ([1, 2, 6, 6], 3, 0),
    ] {
        let xs = rand(&x, 11, 1.0, DType::F32);
        let w = rand(&[x[1], 1, k, k], 12, 0.5, DType::F32);
        let b = rand(&[x[1]], 13, 0.5, DType::F32);
        check_vs_reference(
            &|t| ops::depthwise_conv2d(&t[0], &t[1], Some(&t[2]), pad),
            &|t| {
                let y = reference::depthwise_conv2d(&t[0], &t[1], pad)?;
                y.broadcast_add(&t[2].reshape((1, t[2].elem_count(), 1, 1))?)
            },
            &[xs, w, b],
            TOL,
            &format!("depthwise {x:?} k{k} p{pad}"),
        );
    }
}

#[test]
fn depthwise_conv2d_finite_diff() {
    let x = rand(&[2, 3, 5, 6], 14, 1.0, DType::F64);
    let w = rand(&[3, 1, 3, 3], 15, 0.5, DType::F64);
    check_finite_diff(
        &|t| ops::depthwise_conv2d(&t[0], &t[1], None, 1),
        &[x, w],
        1e-6,
        1e-6,
        40,
        "depthwise conv2d",
    );
}
