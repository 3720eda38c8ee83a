//! ViT ops (layer_norm, gelu, softmax, attention, linear) against the candle composites.

use crate::common;
use candle_core::{DType, Result, Tensor};
use common::*;
use imgseq_kernels::{ops, reference};

const TOL: f64 = 1e-4;

#[test]
fn layer_norm_matches_reference() {
    for (dt, shape) in [
        (DType::F32, vec![4, 65, 48]),
        (DType::F64, vec![3, 5, 7]),
        (DType::F32, vec![2, 1, 3]),
    ] {
        let d = *shape.last().unwrap();
        let x = (rand(&shape, 1, 2.0, dt) + 0.5).unwrap();
        let w = rand(&[d], 2, 1.0, dt);
        let b = rand(&[d], 3, 1.0, dt);
        check_vs_reference(
            &|t| ops::layer_norm(&t[0], &t[1], &t[2], 1e-5),
            &|t| reference::layer_norm(&t[0], &t[1], &t[2], 1e-5),
            &[x, w, b],
            TOL,
            &format!("layer_norm {shape:?} {dt:?}"),
        );
    }
}

#[test]
fn layer_norm_finite_diff() {
    let x = rand(&[3, 2, 6], 4, 1.5, DType::F64);
    let w = rand(&[6], 5, 1.0, DType::F64);
    let b = rand(&[6], 6, 1.0, DType::F64);
    check_finite_diff(
        &|t| ops::layer_norm(&t[0], &t[1], &t[2], 1e-12),
        &[x, w, b],
        1e-6,
        1e-6,
        64,
        "layer_norm",
    );
}

#[test]
fn layer_norm_non_contiguous_input() {
    let x = rand(&[6, 5], 8, 1.0, DType::F32).t().unwrap();
    let w = rand(&[6], 9, 1.0, DType::F32);
    let b = rand(&[6], 10, 1.0, DType::F32);
    let y = ops::layer_norm(&x, &w, &b, 1e-6).unwrap();
    let r = reference::layer_norm(&x, &w, &b, 1e-6).unwrap();
    assert_close(&y, &r, TOL, "layer_norm transposed input");
}

#[test]
fn gelu_matches_reference() {
    for (dt, shape) in [(DType::F32, vec![8, 65, 192]), (DType::F64, vec![5, 7])] {
        let x = rand(&shape, 11, 6.0, dt);
        check_vs_reference(
            &|t| ops::gelu(&t[0]),
            &|t| reference::gelu(&t[0]),
            &[x],
            TOL,
            &format!("gelu {dt:?}"),
        );
    }
    // Tails: relative accuracy per element, not only normwise. (candle's f64 gelu_erf loses
    // digits to 1 + erf(x) cancellation below about -5, so the far tail uses x·Φ(x) values.)
    let x = Tensor::new(
        &[-5f32, -3.0, -1e-3, 0.0, 1e-3, 3.0, 5.0, 12.0],
        &candle_core::Device::Cpu,
    )
    .unwrap();
    let a = to_vec(&ops::gelu(&x).unwrap());
    let b = to_vec(&reference::gelu(&x.to_dtype(DType::F64).unwrap()).unwrap());
    let x = Tensor::new(&[-8f32, -12.0], &candle_core::Device::Cpu).unwrap();
    let a: Vec<f64> = a
        .into_iter()
        .chain(to_vec(&ops::gelu(&x).unwrap()))
        .collect();
    let b: Vec<f64> = b
        .into_iter()
        .chain([
            -8.0 * 6.220_960_574_271_785e-16,
            -12.0 * 1.776_482_112_077_68e-33,
        ])
        .collect();
    for (a, b) in a.iter().zip(&b) {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs() + 1e-30,
            "gelu tail: {a} vs {b}"
        );
    }
}

#[test]
fn gelu_finite_diff() {
    let x = rand(&[40], 12, 4.0, DType::F64);
    check_finite_diff(&|t| ops::gelu(&t[0]), &[x], 1e-6, 1e-5, 40, "gelu");
}

#[test]
fn silu_matches_reference_and_finite_diff() {
    let x = rand(&[3, 1000], 13, 8.0, DType::F32);
    check_vs_reference(
        &|t| ops::silu(&t[0]),
        &|t| reference::silu(&t[0]),
        &[x],
        TOL,
        "silu",
    );
    let x = rand(&[30], 14, 4.0, DType::F64);
    check_finite_diff(&|t| ops::silu(&t[0]), &[x], 1e-6, 1e-6, 30, "silu");
}

#[test]
fn gelu_tanh_and_quick_gelu_match_candles_composites_and_finite_diff() {
    type Op = fn(&Tensor) -> candle_core::Result<Tensor>;
    let cases: [(&str, Op, Op); 2] = [
        ("gelu_tanh", ops::gelu_tanh, reference::gelu_tanh),
        ("quick_gelu", ops::quick_gelu, reference::quick_gelu),
    ];
    for (name, ours, theirs) in cases {
        let x = rand(&[3, 1000], 15, 12.0, DType::F32);
        check_vs_reference(&|t| ours(&t[0]), &|t| theirs(&t[0]), &[x], TOL, name);
        let x = rand(&[30], 16, 4.0, DType::F64);
        check_finite_diff(&|t| ours(&t[0]), &[x], 1e-6, 1e-6, 30, name);
    }
}

#[test]
fn softmax_matches_reference() {
    for (dt, shape) in [
        (DType::F32, vec![4, 4, 65, 65]),
        (DType::F64, vec![3, 9]),
        (DType::F32, vec![5, 1]),
    ] {
        let x = rand(&shape, 15, 10.0, dt);
        check_vs_reference(
            &|t| ops::softmax_last_dim(&t[0]),
            &|t| reference::softmax_last_dim(&t[0]),
            &[x],
            TOL,
            &format!("softmax {shape:?}"),
        );
    }
}

#[test]
fn softmax_finite_diff() {
    let x = rand(&[3, 7], 16, 3.0, DType::F64);
    check_finite_diff(
        &|t| ops::softmax_last_dim(&t[0]),
        &[x],
        1e-6,
        1e-6,
        21,
        "softmax",
    );
}

fn attn_inputs(shape: &[usize], dt: DType) -> Vec<Tensor> {
    vec![
        rand(shape, 21, 1.0, dt),
        rand(shape, 22, 1.0, dt),
        rand(shape, 23, 1.0, dt),
    ]
}

#[test]
fn attention_matches_reference() {
    for (dt, shape, scale) in [
        (DType::F32, vec![2, 4, 65, 12], 12f64.powf(-0.5)),
        (DType::F64, vec![2, 3, 5, 4], 0.7),
        (DType::F32, vec![1, 1, 17, 9], 2.0),
        // VQGAN-like: one big spatial head.
        (DType::F32, vec![1, 1, 100, 64], 64f64.powf(-0.5)),
    ] {
        check_vs_reference(
            &|t| ops::attention(&t[0], &t[1], &t[2], scale),
            &|t| reference::attention(&t[0], &t[1], &t[2], scale),
            &attn_inputs(&shape, dt),
            TOL,
            &format!("attention {shape:?} {dt:?}"),
        );
    }
}

#[test]
fn attention_strided_views() {
    // The ViT layout: one (b, n, 3, h, d) projection split into q, k, v and transposed.
    let (b, n, h, d) = (2, 9, 3, 4);
    let qkv = rand(&[b, n, 3, h, d], 30, 1.0, DType::F32);
    let split = |t: &[Tensor]| -> Result<(Tensor, Tensor, Tensor)> {
        let p = t[0].permute((2, 0, 3, 1, 4))?; // (3, b, h, n, d)
        Ok((p.get(0)?, p.get(1)?, p.get(2)?))
    };
    check_vs_reference(
        &|t| {
            let (q, k, v) = split(t)?;
            ops::attention(&q, &k, &v, 0.5)
        },
        &|t| {
            let (q, k, v) = split(t)?;
            reference::attention(&q, &k, &v, 0.5)
        },
        &[qkv],
        TOL,
        "attention on strided views",
    );
}

#[test]
fn attention_channel_major_views() {
    // The VQGAN layout: (b, c, h·w) feature maps seen as (b, 1, h·w, c) — d has stride h·w.
    let (b, c, hw) = (2, 6, 10);
    let x = [
        rand(&[b, c, hw], 31, 1.0, DType::F32),
        rand(&[b, c, hw], 32, 1.0, DType::F32),
        rand(&[b, c, hw], 33, 1.0, DType::F32),
    ];
    let seq = |t: &Tensor| t.transpose(1, 2)?.unsqueeze(1);
    check_vs_reference(
        &|t| ops::attention(&seq(&t[0])?, &seq(&t[1])?, &seq(&t[2])?, 0.4),
        &|t| reference::attention(&seq(&t[0])?, &seq(&t[1])?, &seq(&t[2])?, 0.4),
        &x,
        TOL,
        "attention on channel-major views",
    );
    check_finite_diff(
        &|t| ops::attention(&seq(&t[0])?, &seq(&t[1])?, &seq(&t[2])?, 0.4),
        &[
            rand(&[1, 3, 4], 34, 1.0, DType::F64),
            rand(&[1, 3, 4], 35, 1.0, DType::F64),
            rand(&[1, 3, 4], 36, 1.0, DType::F64),
        ],
        1e-6,
        1e-6,
        12,
        "attention channel-major",
    );
}

#[test]
fn attention_finite_diff() {
    check_finite_diff(
        &|t| ops::attention(&t[0], &t[1], &t[2], 0.8),
        &attn_inputs(&[1, 2, 5, 3], DType::F64),
        1e-6,
        1e-6,
        30,
        "attention",
    );
}

#[test]
fn linear_matches_reference() {
    let x = rand(&[4, 65, 48], 40, 1.0, DType::F32);
    let w = rand(&[192, 48], 41, 0.2, DType::F32);
    let b = rand(&[192], 42, 0.2, DType::F32);
    check_vs_reference(
        &|t| ops::linear(&t[0], &t[1], Some(&t[2])),
        &|t| reference::linear(&t[0], &t[1], Some(&t[2])),
        &[x, w, b],
        TOL,
        "linear",
    );
    let x = rand(&[2, 3, 5], 43, 1.0, DType::F64);
    let w = rand(&[4, 5], 44, 1.0, DType::F64);
    let b = rand(&[4], 45, 1.0, DType::F64);
    check_finite_diff(
        &|t| ops::linear(&t[0], &t[1], Some(&t[2])),
        &[x.clone(), w.clone(), b],
        1e-6,
        1e-6,
        30,
        "linear",
    );
    check_finite_diff(
        &|t| ops::linear(&t[0], &t[1], None),
        &[x, w],
        1e-6,
        1e-6,
        30,
        "linear no bias",
    );
}
