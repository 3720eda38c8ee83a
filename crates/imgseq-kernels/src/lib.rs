//! CPU kernels for imgseq, hidden behind a few small tensor ops.
//!
//! Model code calls only the functions in [`ops`] (`conv2d`, `group_norm`, `layer_norm`,
//! `gelu`, `attention`, `nearest_codebook`, ...). On the CPU these dispatch to our own kernels
//! (plugged into candle as `CustomOp`s with their backward passes); on other devices they use
//! candle's built-in ops, so the same model code runs on CUDA.
//!
//! [`reference`] keeps the plain candle composites: they are the non-CPU path and the
//! numerical reference the kernels are tested against.

pub mod check_cache;
pub mod cpu;
pub mod custom;
mod fused;
pub mod ops;
mod padding;
pub mod precision;
pub mod reference;
pub mod runtime;

pub use padding::Padding;
pub use precision::{Precision, PrecisionChoice, PrecisionRequest};
pub use runtime::{settle_thread_count, tune_allocator};
