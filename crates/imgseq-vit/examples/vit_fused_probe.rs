//! The fused engine's training step on the seed model, from a fixed seed: prints the loss of
//! every step (full precision), a checksum of the final parameters and the img/s of the timed
//! steps — the numbers a change to the engine must keep (loss to float tolerance) and not slow.
//!
//! cargo run --release -p imgseq-vit --example vit_fused_probe -- [batch] [steps]

use imgseq_vit::fused::{FlatAdamW, FusedViT, ParamLayout, Targets};
use imgseq_vit::init::init_flat;
use imgseq_vit::ViTConfig;
use std::time::Instant;

fn main() -> imgseq_core::Result<()> {
    imgseq_kernels::tune_allocator();
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .map_or(default, |a| a.parse().expect("a number"))
    };
    let (batch, steps) = (arg(1, 128), arg(2, 6));
    let cfg = ViTConfig::seed(3, &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]);
    let layout = ParamLayout::new(&cfg);
    let mut params = init_flat(&layout, 0.02, 0);
    let mut grads = vec![0f32; layout.len()];
    let px = cfg.num_channels * cfg.image_size * cfg.image_size;
    let x: Vec<f32> = (0..batch * px)
        .map(|i| ((i as f32 * 0.618_034).fract() - 0.5) * 2.0)
        .collect();
    let y: Vec<u32> = (0..batch as u32).map(|i| (i * 7 + 3) % 10).collect();
    let mut net = FusedViT::new(&cfg)?;
    let mut opt = FlatAdamW::new(&layout, 1e-3, 0.05);
    let mut timed = 0.0;
    for s in 0..steps {
        let t0 = Instant::now();
        let loss = net.forward_backward(&params, &mut grads, &x, Targets::Labels(&y), 0.1)?;
        opt.update(&mut params, &grads)?;
        if s >= 2 {
            timed += t0.elapsed().as_secs_f64();
        }
        println!("step {s}: loss {loss:.9}");
    }
    let check: f64 = params.iter().map(|&v| v as f64).sum();
    println!("param sum {check:.9}");
    let logits = net.logits(&params, &x[..8 * px])?;
    println!("logits[0..4] {:?}", &logits[..4]);
    if steps > 2 {
        let per = timed / (steps - 2) as f64;
        println!(
            "train step batch {batch}: {:.1} ms, {:.0} img/s",
            per * 1e3,
            batch as f64 / per
        );
    }
    Ok(())
}
