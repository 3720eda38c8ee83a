//! The ViT training-step row of `scripts/bench.py`: one step (forward, backward, AdamW) on
//! weights and inputs the script wrote, on either engine; prints one JSON line with the mean
//! time per step and the peak RSS.
//!
//!   vit_train_bench DIR BATCH STEPS [fused|autograd]
//!       DIR: config.json, model.safetensors, inputs.safetensors (x (n, c, s, s), y (n))
//!
//! cargo build --release -p imgseq-vit --example vit_train_bench
//! Not a test: timings are only meaningful as ratios against PyTorch measured in the same run.

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use imgseq_core::optim::AdamW;
use imgseq_vit::checkpoint::load_tensors;
use imgseq_vit::fused::{decays, FlatAdamW, FusedViT, ParamLayout, Targets};
use imgseq_vit::loss::cross_entropy_smoothed;
use imgseq_vit::{ViTConfig, ViTForImageClassification};
use std::path::Path;
use std::time::Instant;

/// Peak resident set of this process (VmHWM).
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Mean milliseconds of `f` over `reps` calls after `warmup` calls.
fn time(
    warmup: usize,
    reps: usize,
    mut f: impl FnMut() -> imgseq_core::Result<()>,
) -> imgseq_core::Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    let t0 = Instant::now();
    for _ in 0..reps {
        f()?;
    }
    Ok(t0.elapsed().as_secs_f64() * 1e3 / reps as f64)
}

fn main() -> imgseq_core::Result<()> {
    imgseq_kernels::tune_allocator();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = Path::new(args.first().map(String::as_str).unwrap_or("."));
    let num = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (batch, steps) = (num(1, 128), num(2, 10));
    let engine = args.get(3).map(String::as_str).unwrap_or("fused");
    let dev = Device::Cpu;
    let cfg = ViTConfig::load(dir.join("config.json"))?;
    let init = load_tensors(dir.join("model.safetensors"), &dev)?;
    let inp = load_tensors(dir.join("inputs.safetensors"), &dev)?;
    let x = inp["x"].narrow(0, 0, batch)?;
    let y = inp["y"].narrow(0, 0, batch)?.to_dtype(DType::U32)?;
    let (lr, wd) = (1e-3, 0.05);
    let ms = match engine {
        "fused" => {
            let layout = ParamLayout::new(&cfg);
            let mut params = layout.from_tensors(&init, "")?;
            let mut grads = vec![0f32; layout.len()];
            let mut net = FusedViT::new(&cfg)?;
            let mut opt = FlatAdamW::new(&layout, lr, wd);
            let (xv, yv) = (x.flatten_all()?.to_vec1::<f32>()?, y.to_vec1::<u32>()?);
            time(2, steps, || {
                net.forward_backward(&params, &mut grads, &xv, Targets::Labels(&yv), 0.0)?;
                opt.update(&mut params, &grads)
            })?
        }
        "autograd" => {
            let vars = VarMap::new();
            let model = ViTForImageClassification::new(
                &cfg,
                VarBuilder::from_varmap(&vars, DType::F32, &dev),
            )?;
            let named = {
                let d = vars.data().lock().expect("poisoned");
                let mut v: Vec<_> = d
                    .iter()
                    .map(|(k, var)| (k.clone(), var.clone(), decays(k, var.as_tensor().rank())))
                    .collect();
                v.sort_by(|a, b| a.0.cmp(&b.0));
                v
            };
            for (k, var, _) in &named {
                var.set(&init[k])?;
            }
            let mut opt = AdamW::new(named, lr, wd)?;
            time(2, steps, || {
                let loss = cross_entropy_smoothed(&model.forward(&x, false)?, &y, 0.0)?;
                Ok(opt.step(&loss.backward()?)?)
            })?
        }
        other => {
            return Err(imgseq_core::Error::invalid(format!(
                "unknown engine `{other}` (fused, autograd)"
            )))
        }
    };
    println!(
        "{{\"ms\": {ms:.3}, \"peak_rss_mb\": {:.1}, \"img_per_s\": {:.1}}}",
        peak_rss_mb(),
        batch as f64 / ms * 1e3
    );
    Ok(())
}
