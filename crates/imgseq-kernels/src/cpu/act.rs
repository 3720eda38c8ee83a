//! Element-wise activations (GELU-erf, GELU-tanh, quick GELU, SiLU) and the row softmax,
//! forward and backward.

use super::{chunk_len, Real};
use crate::multiversion;
use rayon::prelude::*;

const FRAC_1_SQRT_2: f64 = std::f64::consts::FRAC_1_SQRT_2;
/// 1/√(2π)
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// erfc(z) for z ≥ 0 (Numerical Recipes `erfcc`, relative error < 1.2e-7 everywhere).
#[inline(always)]
fn erfc_pos<T: Real>(z: T) -> T {
    let t = T::ONE / (T::ONE + T::c(0.5) * z);
    let mut p = T::c(0.17087277);
    p = p * t + T::c(-0.82215223);
    p = p * t + T::c(1.48851587);
    p = p * t + T::c(-1.13520398);
    p = p * t + T::c(0.27886807);
    p = p * t + T::c(-0.18628806);
    p = p * t + T::c(0.09678418);
    p = p * t + T::c(0.37409196);
    p = p * t + T::c(1.00002368);
    p = p * t + T::c(-1.26551223);
    t * (p - z * z).exp()
}

/// Φ(x), the standard normal CDF.
#[inline(always)]
fn phi<T: Real>(x: T) -> T {
    let e = erfc_pos(x.absv() * T::c(FRAC_1_SQRT_2));
    let h = T::c(0.5) * e;
    if x < T::ZERO {
        h
    } else {
        T::ONE - h
    }
}

#[inline(always)]
fn gelu1<T: Real>(x: T) -> T {
    x * phi(x)
}

#[inline(always)]
fn gelu_grad1<T: Real>(x: T) -> T {
    phi(x) + x * T::c(INV_SQRT_2PI) * (T::c(-0.5) * x * x).exp()
}

#[inline(always)]
fn sigmoid<T: Real>(x: T) -> T {
    T::ONE / (T::ONE + (-x).exp())
}

multiversion! {
    fn gelu_chunk<T>(x: &[T], y: &mut [T]) {
        for (y, x) in y.iter_mut().zip(x) {
            *y = gelu1(*x);
        }
    }
}

multiversion! {
    fn gelu_bwd_chunk<T>(x: &[T], g: &[T], dx: &mut [T]) {
        for ((d, x), g) in dx.iter_mut().zip(x).zip(g) {
            *d = *g * gelu_grad1(*x);
        }
    }
}

/// √(2/π), GELU-tanh's inner scale.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// GELU-tanh's cubic coefficient.
const GELU_TANH_C: f64 = 0.044_715;
/// Quick GELU's sigmoid scale (OpenAI's CLIP).
const QUICK_GELU_K: f64 = 1.702;

/// tanh(u) = 1 − 2 / (e^{2u} + 1): exact limits ±1 (the exp is clamped), no libm call.
#[inline(always)]
fn tanh<T: Real>(u: T) -> T {
    T::ONE - T::c(2.0) / ((u + u).exp() + T::ONE)
}

multiversion! {
    fn gelu_tanh_chunk<T>(x: &[T], y: &mut [T]) {
        for (y, x) in y.iter_mut().zip(x) {
            let u = T::c(SQRT_2_OVER_PI) * (*x + T::c(GELU_TANH_C) * *x * *x * *x);
            *y = T::c(0.5) * *x * (T::ONE + tanh(u));
        }
    }
}

multiversion! {
    fn gelu_tanh_bwd_chunk<T>(x: &[T], g: &[T], dx: &mut [T]) {
        for ((d, x), g) in dx.iter_mut().zip(x).zip(g) {
            let x2 = *x * *x;
            let u = T::c(SQRT_2_OVER_PI) * (*x + T::c(GELU_TANH_C) * x2 * *x);
            let t = tanh(u);
            let du = T::c(SQRT_2_OVER_PI) * (T::ONE + T::c(3.0 * GELU_TANH_C) * x2);
            let grad = T::c(0.5) * (T::ONE + t) + T::c(0.5) * *x * (T::ONE - t * t) * du;
            *d = *g * grad;
        }
    }
}

multiversion! {
    fn quick_gelu_chunk<T>(x: &[T], y: &mut [T]) {
        for (y, x) in y.iter_mut().zip(x) {
            *y = *x * sigmoid(T::c(QUICK_GELU_K) * *x);
        }
    }
}

multiversion! {
    fn quick_gelu_bwd_chunk<T>(x: &[T], g: &[T], dx: &mut [T]) {
        for ((d, x), g) in dx.iter_mut().zip(x).zip(g) {
            let s = sigmoid(T::c(QUICK_GELU_K) * *x);
            *d = *g * s * (T::ONE + T::c(QUICK_GELU_K) * *x * (T::ONE - s));
        }
    }
}

multiversion! {
    fn silu_chunk<T>(x: &[T], y: &mut [T]) {
        for (y, x) in y.iter_mut().zip(x) {
            *y = *x * sigmoid(*x);
        }
    }
}

multiversion! {
    fn silu_bwd_chunk<T>(x: &[T], g: &[T], dx: &mut [T]) {
        for ((d, x), g) in dx.iter_mut().zip(x).zip(g) {
            let s = sigmoid(*x);
            *d = *g * s * (T::ONE + *x * (T::ONE - s));
        }
    }
}

const EW_MIN: usize = 8192;

fn unary<T: Real>(x: &[T], f: fn(&[T], &mut [T])) -> Vec<T> {
    let mut y = vec![T::ZERO; x.len()];
    let c = chunk_len(x.len(), EW_MIN);
    y.par_chunks_mut(c)
        .zip(x.par_chunks(c))
        .for_each(|(y, x)| f(x, y));
    y
}

fn binary<T: Real>(x: &[T], g: &[T], f: fn(&[T], &[T], &mut [T])) -> Vec<T> {
    let mut y = vec![T::ZERO; x.len()];
    let c = chunk_len(x.len(), EW_MIN);
    y.par_chunks_mut(c)
        .zip(x.par_chunks(c).zip(g.par_chunks(c)))
        .for_each(|(y, (x, g))| f(x, g, y));
    y
}

/// GELU (erf form): x·Φ(x).
pub fn gelu<T: Real>(x: &[T]) -> Vec<T> {
    unary(x, gelu_chunk::<T>)
}
/// dL/dx of GELU given x and dL/dy.
pub fn gelu_bwd<T: Real>(x: &[T], g: &[T]) -> Vec<T> {
    binary(x, g, gelu_bwd_chunk::<T>)
}
/// GELU, tanh form (PyTorch's `gelu(approximate="tanh")`, SigLIP's `gelu_pytorch_tanh`):
/// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
pub fn gelu_tanh<T: Real>(x: &[T]) -> Vec<T> {
    unary(x, gelu_tanh_chunk::<T>)
}
/// dL/dx of GELU-tanh given x and dL/dy.
pub fn gelu_tanh_bwd<T: Real>(x: &[T], g: &[T]) -> Vec<T> {
    binary(x, g, gelu_tanh_bwd_chunk::<T>)
}
/// Quick GELU (OpenAI's CLIP): x·σ(1.702·x).
pub fn quick_gelu<T: Real>(x: &[T]) -> Vec<T> {
    unary(x, quick_gelu_chunk::<T>)
}
/// dL/dx of quick GELU given x and dL/dy.
pub fn quick_gelu_bwd<T: Real>(x: &[T], g: &[T]) -> Vec<T> {
    binary(x, g, quick_gelu_bwd_chunk::<T>)
}
/// SiLU: x·σ(x).
pub fn silu<T: Real>(x: &[T]) -> Vec<T> {
    unary(x, silu_chunk::<T>)
}
/// dL/dx of SiLU given x and dL/dy.
pub fn silu_bwd<T: Real>(x: &[T], g: &[T]) -> Vec<T> {
    binary(x, g, silu_bwd_chunk::<T>)
}

multiversion! {
    fn softmax_rows<T>(x: &[T], y: &mut [T], d: usize) {
        for (x, y) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)) {
            let m = super::max(x);
            for (y, x) in y.iter_mut().zip(x) {
                *y = (*x - m).exp();
            }
            let inv = T::ONE / super::sum(y);
            for y in y.iter_mut() {
                *y *= inv;
            }
        }
    }
}

multiversion! {
    fn softmax_bwd_rows<T>(y: &[T], g: &[T], dx: &mut [T], d: usize) {
        for ((y, g), dx) in y.chunks_exact(d).zip(g.chunks_exact(d)).zip(dx.chunks_exact_mut(d)) {
            let s = super::dot(y, g);
            for ((dx, y), g) in dx.iter_mut().zip(y).zip(g) {
                *dx = *y * (*g - s);
            }
        }
    }
}

/// Numerically stable softmax over rows of length `d`.
pub fn softmax<T: Real>(x: &[T], d: usize) -> Vec<T> {
    let mut y = vec![T::ZERO; x.len()];
    if d == 0 {
        return y;
    }
    let c = chunk_len(x.len() / d, EW_MIN.div_ceil(d)) * d;
    y.par_chunks_mut(c)
        .zip(x.par_chunks(c))
        .for_each(|(y, x)| softmax_rows(x, y, d));
    y
}

/// dL/dx of the row softmax given its output y and dL/dy: y·(g − Σ g·y).
pub fn softmax_bwd<T: Real>(y: &[T], g: &[T], d: usize) -> Vec<T> {
    let mut dx = vec![T::ZERO; y.len()];
    if d == 0 {
        return dx;
    }
    let c = chunk_len(y.len() / d, EW_MIN.div_ceil(d)) * d;
    dx.par_chunks_mut(c)
        .zip(y.par_chunks(c).zip(g.par_chunks(c)))
        .for_each(|(dx, (y, g))| softmax_bwd_rows(y, g, dx, d));
    dx
}
