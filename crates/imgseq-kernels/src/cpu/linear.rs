//! Linear layer y = x·Wᵀ + b (PyTorch weight layout) with the bias folded into the GEMM's
//! destination, and its backward (dx = g·W, dW = gᵀ·x, db = Σ_rows g) straight on the buffers.

use super::gemm::{auto_parallelism, mm};
use super::Real;
use rayon::prelude::*;

/// x (rows × inp), w (out × inp), b (out) → (rows × out).
pub fn linear<T: Real>(x: &[T], w: &[T], b: Option<&[T]>, inp: usize, out: usize) -> Vec<T> {
    let rows = x.len().checked_div(inp).unwrap_or(0);
    let mut y = vec![T::ZERO; rows * out];
    if y.is_empty() {
        return y;
    }
    if let Some(b) = b {
        y.par_chunks_mut(out * 256)
            .for_each(|c| c.chunks_exact_mut(out).for_each(|r| r.copy_from_slice(b)));
    }
    if inp > 0 {
        // SAFETY: buffer sizes match the (m, n, k) and strides passed.
        unsafe {
            mm(
                rows,
                out,
                inp,
                y.as_mut_ptr(),
                (out, 1),
                b.is_some(),
                x.as_ptr(),
                (inp, 1),
                w.as_ptr(),
                (1, inp),
                auto_parallelism(rows, out, inp),
            )
        };
    }
    y
}

/// Backward of [`linear`]: (dx, dw, db) given dL/dy `g` (rows × out).
pub fn linear_bwd<T: Real>(
    x: &[T],
    w: &[T],
    g: &[T],
    inp: usize,
    out: usize,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let rows = g.len().checked_div(out).unwrap_or(0);
    let mut dx = vec![T::ZERO; x.len()];
    let mut dw = vec![T::ZERO; w.len()];
    if rows > 0 && inp > 0 && out > 0 {
        // SAFETY: buffer sizes match the (m, n, k) and strides passed.
        unsafe {
            mm(
                rows,
                inp,
                out,
                dx.as_mut_ptr(),
                (inp, 1),
                false,
                g.as_ptr(),
                (out, 1),
                w.as_ptr(),
                (inp, 1),
                auto_parallelism(rows, inp, out),
            );
            mm(
                out,
                inp,
                rows,
                dw.as_mut_ptr(),
                (inp, 1),
                false,
                g.as_ptr(),
                (1, out),
                x.as_ptr(),
                (inp, 1),
                auto_parallelism(out, inp, rows),
            );
        }
    }
    let chunk = super::chunk_len(rows, 64);
    let db = if out == 0 || rows == 0 {
        vec![T::ZERO; out]
    } else {
        g.par_chunks(chunk * out)
            .map(|c| {
                let mut s = vec![T::ZERO; out];
                for r in c.chunks_exact(out) {
                    for (s, v) in s.iter_mut().zip(r) {
                        *s += *v;
                    }
                }
                s
            })
            .reduce(
                || vec![T::ZERO; out],
                |mut a, b| {
                    for (a, b) in a.iter_mut().zip(&b) {
                        *a += *b;
                    }
                    a
                },
            )
    };
    (dx, dw, db)
}
