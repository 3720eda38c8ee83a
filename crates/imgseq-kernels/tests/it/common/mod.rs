//! Shared helpers: deterministic random tensors, relative comparisons, autograd and
//! finite-difference gradient checks.
#![allow(dead_code)]

use candle_core::{DType, Device, Result, Tensor, Var};

/// Deterministic pseudo-random values in [-scale, scale).
pub fn rand(shape: &[usize], seed: u64, scale: f64, dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let v: Vec<f64> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
        })
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

pub fn to_vec(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap()
}

/// max |a − b| / max |b| (normwise relative error).
pub fn rel_err(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.dims(), b.dims(), "shape mismatch");
    let (a, b) = (to_vec(a), to_vec(b));
    let num = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    let den = b.iter().map(|y| y.abs()).fold(0.0, f64::max).max(1e-30);
    num / den
}

#[track_caller]
pub fn assert_close(a: &Tensor, b: &Tensor, tol: f64, what: &str) {
    let e = rel_err(a, b);
    assert!(e <= tol, "{what}: relative error {e:e} > {tol:e}");
}

type Op<'a> = &'a dyn Fn(&[Tensor]) -> Result<Tensor>;

/// Compares the fast op against the reference composite: forward output and the gradient of
/// Σ y·r for every input, via candle's autograd.
pub fn check_vs_reference(fast: Op, reference: Op, inputs: &[Tensor], tol: f64, what: &str) {
    let vars: Vec<Var> = inputs
        .iter()
        .map(|t| Var::from_tensor(t).unwrap())
        .collect();
    let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let yf = fast(&ts).unwrap();
    let yr = reference(&ts).unwrap();
    assert_close(&yf, &yr, tol, &format!("{what} forward"));
    let r = rand(yf.dims(), 99, 1.0, yf.dtype());
    let gf = (yf * &r).unwrap().sum_all().unwrap().backward().unwrap();
    let gr = (yr * &r).unwrap().sum_all().unwrap().backward().unwrap();
    for (i, t) in ts.iter().enumerate() {
        let a = gf
            .get(t)
            .unwrap_or_else(|| panic!("{what}: no fast grad for input {i}"));
        let b = gr
            .get(t)
            .unwrap_or_else(|| panic!("{what}: no reference grad for input {i}"));
        assert_close(a, b, tol, &format!("{what} grad of input {i}"));
    }
}

/// Central finite differences (f64) of L = Σ op(inputs)·r against the op's own backward, on
/// up to `max_elems` elements of every input.
pub fn check_finite_diff(
    op: Op,
    inputs: &[Tensor],
    h: f64,
    tol: f64,
    max_elems: usize,
    what: &str,
) {
    let inputs: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.to_dtype(DType::F64).unwrap())
        .collect();
    let vars: Vec<Var> = inputs
        .iter()
        .map(|t| Var::from_tensor(t).unwrap())
        .collect();
    let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let y = op(&ts).unwrap();
    let r = rand(y.dims(), 7, 1.0, DType::F64);
    let loss = |xs: &[Tensor]| -> f64 {
        (op(xs).unwrap() * &r)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f64>()
            .unwrap()
    };
    let grads = (y * &r).unwrap().sum_all().unwrap().backward().unwrap();
    for (i, t) in ts.iter().enumerate() {
        let g = to_vec(
            grads
                .get(t)
                .unwrap_or_else(|| panic!("{what}: no grad for input {i}")),
        );
        let base = to_vec(&inputs[i]);
        let n = base.len();
        let step = (n / max_elems).max(1);
        let gmax = g.iter().map(|v| v.abs()).fold(0.0, f64::max).max(1e-12);
        for e in (0..n).step_by(step) {
            let mut xs = inputs.clone();
            let mut p = base.clone();
            p[e] += h;
            xs[i] = Tensor::from_vec(p.clone(), inputs[i].dims(), &Device::Cpu).unwrap();
            let lp = loss(&xs);
            p[e] -= 2.0 * h;
            xs[i] = Tensor::from_vec(p, inputs[i].dims(), &Device::Cpu).unwrap();
            let lm = loss(&xs);
            let fd = (lp - lm) / (2.0 * h);
            let err = (fd - g[e]).abs() / gmax;
            assert!(
                err <= tol,
                "{what}: input {i} elem {e}: fd {fd} vs analytic {} (rel {err:e})",
                g[e]
            );
        }
    }
}
