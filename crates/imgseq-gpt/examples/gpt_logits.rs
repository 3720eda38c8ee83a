//! Writes a model's logits on seeded random sequences, for scripts/check_gpt_hf.py:
//!
//!     cargo run --release -p imgseq-gpt --example gpt_logits -- MODEL_DIR OUT.safetensors
//!
//! OUT holds `input_ids` (4, n_positions) int64 — class token (one of each class, the
//! unconditional token last) then codes — and `logits` (4, n_positions, vocab) float32.

use candle_core::{DType, Device, Tensor};
use imgseq_gpt::checkpoint::load;
use rand::{Rng, SeedableRng};
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, out] = args.as_slice() else {
        return Err("usage: gpt_logits MODEL_DIR OUT.safetensors".into());
    };
    let (cfg, model) = load(&PathBuf::from(dir), &Device::Cpu)?;
    let (n_codes, classes) = match cfg.layout() {
        Ok(l) => (
            l.n_codes,
            (0..l.n_classes())
                .map(|c| l.class_token(c))
                .chain([l.uncond_token()])
                .collect(),
        ),
        Err(_) => (cfg.vocab_size, vec![0u32]),
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let (b, t) = (4usize, cfg.n_positions);
    let ids: Vec<u32> = (0..b)
        .flat_map(|i| {
            let cls = classes[(i * 3) % classes.len()];
            let codes: Vec<u32> = (1..t)
                .map(|_| rng.random_range(0..n_codes as u32))
                .collect();
            std::iter::once(cls).chain(codes)
        })
        .collect();
    let ids = Tensor::from_vec(ids, (b, t), &Device::Cpu)?;
    let logits = model.forward(&ids, None)?;
    let tensors = [("input_ids", ids.to_dtype(DType::I64)?), ("logits", logits)];
    imgseq_core::weights::save_tensors(out, tensors.iter().map(|(k, v)| (*k, v)))?;
    eprintln!("wrote {out}: logits {:?}", tensors[1].1.dims());
    Ok(())
}
