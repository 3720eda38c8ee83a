//! A fresh model's weights: mostly HF's initialisation, drawn from a seeded generator, for
//! candle's variables ([`init_weights`]) and for [`crate::fused`]'s flat parameter array
//! ([`init_flat`]), value for value the same.

use candle_core::Tensor;
use candle_nn::VarMap;
use imgseq_core::run::normal;
use imgseq_core::Result;
use rand::SeedableRng;

use crate::fused::ParamLayout;

/// The initial value of parameter `name` (`n` values): mostly HF's rule — LayerNorm weights
/// 1, biases 0, everything else ~ N(0, std²) truncated at 2σ — drawn from `rng`.
fn init_values(name: &str, n: usize, std: f64, rng: &mut rand::rngs::StdRng) -> Vec<f32> {
    if name.contains("layernorm") && name.ends_with("weight") {
        vec![1.0; n]
    } else if name.ends_with("bias") {
        vec![0.0; n]
    } else {
        (0..n)
            .map(|_| (normal(rng).clamp(-2.0, 2.0) * std) as f32)
            .collect()
    }
}

/// Mostly-HF initialisation: weights ~ N(0, 0.02) (truncated at 2σ), biases 0, norms 1/0,
/// CLS token and positions ~ N(0, 0.02), drawn from a seeded RNG so runs are reproducible.
/// Parameters are drawn in name order ([`init_flat`] gives the same values).
pub fn init_weights(vars: &VarMap, std: f64, seed: u64) -> Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let data = vars.data().lock().expect("poisoned");
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    for name in names {
        let var = &data[name];
        let shape = var.as_tensor().shape().clone();
        let vals = init_values(name, shape.elem_count(), std, &mut rng);
        var.set(&Tensor::from_vec(vals, shape, var.as_tensor().device())?)?;
    }
    Ok(())
}

/// [`init_weights`] for a flat parameter array laid out by `layout`: the same values.
pub fn init_flat(layout: &ParamLayout, std: f64, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut flat = vec![0f32; layout.len()];
    let mut specs: Vec<_> = layout.specs.iter().collect();
    specs.sort_by(|a, b| a.name.cmp(&b.name));
    for s in specs {
        flat[s.range()].copy_from_slice(&init_values(&s.name, s.len(), std, &mut rng));
    }
    flat
}
