//! Times the seed ViT training step (forward + backward + AdamW) and inference on random data.
//!
//! cargo run --release -p imgseq-vit --example vit_step_bench -- [train_batch] [infer_batch] [steps]

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use imgseq_core::optim::AdamW;
use imgseq_vit::init::init_weights;
use imgseq_vit::loss::cross_entropy_smoothed;
use imgseq_vit::{ViTConfig, ViTForImageClassification};
use std::time::Instant;

fn main() -> candle_core::Result<()> {
    imgseq_kernels::tune_allocator();
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("number"))
        .collect();
    let (tb, ib, steps) = (
        *args.first().unwrap_or(&128),
        *args.get(1).unwrap_or(&256),
        *args.get(2).unwrap_or(&20),
    );
    let dev = Device::Cpu;
    let cfg = ViTConfig::seed(3, &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]);
    let vars = VarMap::new();
    let model =
        ViTForImageClassification::new(&cfg, VarBuilder::from_varmap(&vars, DType::F32, &dev))?;
    init_weights(&vars, 0.02, 0).unwrap();
    let named = {
        let d = vars.data().lock().unwrap();
        d.iter()
            .map(|(k, v)| (k.clone(), v.clone(), v.as_tensor().rank() >= 2))
            .collect()
    };
    let mut opt = AdamW::new(named, 1e-3, 0.05)?;
    let x = Tensor::randn(0f32, 1., (tb, 3, 32, 32), &dev)?;
    let y = Tensor::from_vec((0..tb as u32).map(|i| i % 10).collect::<Vec<_>>(), tb, &dev)?;
    let step = |opt: &mut AdamW| -> candle_core::Result<()> {
        let loss = cross_entropy_smoothed(&model.forward(&x, false)?, &y, 0.1)?;
        opt.step(&loss.backward()?)
    };
    for _ in 0..3 {
        step(&mut opt)?;
    }
    let t0 = Instant::now();
    for _ in 0..steps {
        step(&mut opt)?;
    }
    let dt = t0.elapsed().as_secs_f64() / steps as f64;
    println!(
        "train step batch {tb}: {:.1} ms, {:.0} img/s",
        dt * 1e3,
        tb as f64 / dt
    );
    let xi = Tensor::randn(0f32, 1., (ib, 3, 32, 32), &dev)?;
    let _ = model.forward(&xi, false)?.detach();
    let t0 = Instant::now();
    for _ in 0..steps {
        let _ = model.forward(&xi, false)?.detach();
    }
    let dt = t0.elapsed().as_secs_f64() / steps as f64;
    println!(
        "inference batch {ib}: {:.1} ms, {:.0} img/s",
        dt * 1e3,
        ib as f64 / dt
    );
    Ok(())
}
