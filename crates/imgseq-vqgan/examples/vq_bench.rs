//! Times encode + decode of the full `vqgan_imagenet_f16_1024` layout with random weights.
//!
//! `cargo run --release -p imgseq-vqgan --example vq_bench -- [SIZE] [BATCH]` (default 384 1).
//! Needs ~300 MB for the weights plus the activations; prints the grid and the timings.

use candle_core::{DType, Device, Tensor};
use imgseq_core::AuditedWeights;
use imgseq_vqgan::{load, VqConfig};
use std::collections::HashMap;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("number"))
        .collect();
    imgseq_kernels::tune_allocator(); // as the imgseq binary does
    let size = args.first().copied().unwrap_or(384);
    let batch = args.get(1).copied().unwrap_or(1);
    let keys = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/vqgan/f16_1024_keys.txt"
    );
    let dev = Device::Cpu;
    let mut map = HashMap::new();
    for line in std::fs::read_to_string(keys)?.lines() {
        let (name, shape) = line.split_once(' ').expect("name shape");
        let shape: Vec<usize> = shape.split(',').map(|s| s.parse().expect("dim")).collect();
        let fan_in: usize = shape.iter().skip(1).product::<usize>().max(1);
        let t = if name.ends_with("norm.weight")
            || name.contains("norm1.w")
            || name.contains("norm2.w")
            || name.ends_with("norm_out.weight")
        {
            Tensor::ones(shape, DType::F32, &dev)?
        } else {
            (Tensor::randn(0f32, 1.0, shape, &dev)? * (1.0 / fan_in as f64).sqrt())?
        };
        map.insert(name.to_string(), t);
    }
    let cfg = VqConfig::vqgan_imagenet_f16_1024();
    let model = load::build(&cfg, &AuditedWeights::new("random", map), &dev)?;
    let x = Tensor::rand(-1f32, 1.0, (batch, 3, size, size), &dev)?;
    let t0 = Instant::now();
    let q = model.encode(&x)?;
    let t1 = Instant::now();
    let y = model.decode(&q.quantized)?;
    let t2 = Instant::now();
    println!(
        "{batch}x{size}x{size}: grid {:?}, out {:?}; encode {:.2}s, decode {:.2}s",
        q.indices.dims(),
        y.dims(),
        (t1 - t0).as_secs_f64(),
        (t2 - t1).as_secs_f64()
    );
    Ok(())
}
