//! The one wrapper around the `gemm` crate's strided matrix product, used by every kernel.

use super::{threads, Real};
use gemm::Parallelism;

/// dst (m×n) = [dst +] lhs (m×k) · rhs (k×n), every operand with explicit (row, col) strides.
///
/// # Safety
/// Each pointer must cover its operand's strided range.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn mm<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_st: (usize, usize),
    accumulate: bool,
    lhs: *const T,
    lhs_st: (usize, usize),
    rhs: *const T,
    rhs_st: (usize, usize),
    par: Parallelism,
) {
    mm_scaled(
        m,
        n,
        k,
        dst,
        dst_st,
        accumulate,
        lhs,
        lhs_st,
        rhs,
        rhs_st,
        T::ONE,
        par,
    )
}

/// dst (m×n) = [dst +] scale · lhs (m×k) · rhs (k×n), strides as (row, col).
///
/// # Safety
/// Each pointer must cover its operand's strided range.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn mm_scaled<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    (dst_rs, dst_cs): (usize, usize),
    accumulate: bool,
    lhs: *const T,
    (lhs_rs, lhs_cs): (usize, usize),
    rhs: *const T,
    (rhs_rs, rhs_cs): (usize, usize),
    scale: T,
    par: Parallelism,
) {
    gemm::gemm(
        m,
        n,
        k,
        dst,
        dst_cs as isize,
        dst_rs as isize,
        accumulate,
        lhs,
        lhs_cs as isize,
        lhs_rs as isize,
        rhs,
        rhs_cs as isize,
        rhs_rs as isize,
        if accumulate { T::ONE } else { T::ZERO },
        scale,
        false,
        false,
        false,
        par,
    )
}

/// All threads for products of at least 2^16 multiply-adds, one thread below.
pub(crate) fn auto_parallelism(m: usize, n: usize, k: usize) -> Parallelism {
    if m * n * k >= 1 << 16 {
        Parallelism::Rayon(threads())
    } else {
        Parallelism::None
    }
}
