//! Causal (decoder) attention: the kernel against the masked candle composite, its backward
//! against finite differences, and the mask itself (a query never sees later keys).

use crate::common;
use candle_core::{DType, IndexOp, Tensor};
use common::*;
use imgseq_kernels::{ops, reference};

const TOL: f64 = 1e-4;

fn qkv(shape: &[usize], dt: DType) -> Vec<Tensor> {
    vec![
        rand(shape, 51, 1.0, dt),
        rand(shape, 52, 1.0, dt),
        rand(shape, 53, 1.0, dt),
    ]
}

#[test]
fn causal_attention_matches_masked_reference() {
    for (dt, shape, scale) in [
        // GPT-like: 65 positions (class token + 8×8 image tokens), 4 heads of 16.
        (DType::F32, vec![3, 4, 65, 16], 16f64.powf(-0.5)),
        (DType::F64, vec![2, 3, 5, 4], 0.7),
        (DType::F32, vec![1, 1, 1, 8], 1.0),
        // One head: multi-threaded GEMM plan.
        (DType::F32, vec![1, 1, 40, 32], 32f64.powf(-0.5)),
    ] {
        check_vs_reference(
            &|t| ops::causal_attention(&t[0], &t[1], &t[2], scale),
            &|t| reference::causal_attention(&t[0], &t[1], &t[2], scale),
            &qkv(&shape, dt),
            TOL,
            &format!("causal attention {shape:?} {dt:?}"),
        );
    }
}

#[test]
fn causal_attention_on_head_split_views() {
    // GPT-2's c_attn output (b, n, 3·h·d) split into q, k, v and viewed (b, h, n, d).
    let (b, n, h, d) = (2, 7, 2, 4);
    let qkv = rand(&[b, n, 3 * h * d], 54, 1.0, DType::F32);
    let split = |t: &Tensor, i: usize| -> candle_core::Result<Tensor> {
        t.narrow(2, i * h * d, h * d)?
            .reshape((b, n, h, d))?
            .transpose(1, 2)
    };
    check_vs_reference(
        &|t| ops::causal_attention(&split(&t[0], 0)?, &split(&t[0], 1)?, &split(&t[0], 2)?, 0.5),
        &|t| {
            reference::causal_attention(
                &split(&t[0], 0)?,
                &split(&t[0], 1)?,
                &split(&t[0], 2)?,
                0.5,
            )
        },
        &[qkv],
        TOL,
        "causal attention on head-split views",
    );
}

#[test]
fn causal_attention_finite_diff() {
    check_finite_diff(
        &|t| ops::causal_attention(&t[0], &t[1], &t[2], 0.8),
        &qkv(&[1, 2, 6, 3], DType::F64),
        1e-6,
        1e-6,
        36,
        "causal attention",
    );
}

/// Output i depends on keys/values 0..=i only: changing the last position's k and v leaves
/// every earlier output unchanged, and the first output is v_0 exactly.
#[test]
fn causal_attention_ignores_later_positions() {
    let t = qkv(&[1, 2, 6, 4], DType::F32);
    let y = ops::causal_attention(&t[0], &t[1], &t[2], 0.5).unwrap();
    let bump = |x: &Tensor| -> Tensor {
        let last = (x.narrow(2, 5, 1).unwrap() + 3.0).unwrap();
        Tensor::cat(&[x.narrow(2, 0, 5).unwrap(), last], 2).unwrap()
    };
    let y2 = ops::causal_attention(&t[0], &bump(&t[1]), &bump(&t[2]), 0.5).unwrap();
    assert_close(
        &y.narrow(2, 0, 5).unwrap(),
        &y2.narrow(2, 0, 5).unwrap(),
        0.0,
        "outputs before the changed position",
    );
    assert!(rel_err(&y.narrow(2, 5, 1).unwrap(), &y2.narrow(2, 5, 1).unwrap()) > 1e-3);
    assert_close(
        &y.i((.., .., 0..1, ..)).unwrap(),
        &t[2].i((.., .., 0..1, ..)).unwrap(),
        1e-6,
        "first output is v_0",
    );
    // Without the mask the first output does depend on later keys.
    let full = ops::attention(&t[0], &t[1], &t[2], 0.5).unwrap();
    assert!(rel_err(&full.narrow(2, 0, 1).unwrap(), &y.narrow(2, 0, 1).unwrap()) > 1e-3);
}
