//! What the parity modules share: fixture paths and the comparisons they make.

use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// `tests/fixtures/DIR/NAME`.
pub fn fixture(dir: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(dir)
        .join(name)
}

/// The tensors of `tests/fixtures/DIR/io.safetensors`.
pub fn io_of(dir: &str) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture(dir, "io.safetensors"), &Device::Cpu).unwrap()
}

/// max |a − b| / max |b|
pub fn rel_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    let d = (a - b).unwrap().abs().unwrap().max_all().unwrap();
    let m = b.abs().unwrap().max_all().unwrap();
    d.to_scalar::<f32>().unwrap() / m.to_scalar::<f32>().unwrap()
}

/// The values of an integer tensor.
pub fn as_i64(t: &Tensor) -> Vec<i64> {
    t.to_dtype(DType::I64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// PSNR (dB) of `a` against `b`, both in [−1, 1] (peak-to-peak 2).
pub fn psnr(a: &Tensor, b: &Tensor) -> f32 {
    let mse = (a - b).unwrap().sqr().unwrap().mean_all().unwrap();
    10.0 * (4.0 / mse.to_scalar::<f32>().unwrap().max(1e-20)).log10()
}

/// PSNR (dB) of `a` against `b`, both in [0, 1] (peak 1).
pub fn psnr_unit(a: &Tensor, b: &Tensor) -> f32 {
    let mse = (a - b).unwrap().sqr().unwrap().mean_all().unwrap();
    10.0 * (1.0 / mse.to_scalar::<f32>().unwrap().max(1e-20)).log10()
}
