//! Weights of a fresh run.

use crate::CODEBOOK;
use candle_core::Tensor;
use candle_nn::VarMap;
use imgseq_core::data::augment::mix_seed;
use imgseq_core::Result;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// PyTorch-like initialisation from a seeded generator: conv kernels
/// U(−1/√fan_in, 1/√fan_in) (torch's default `kaiming_uniform_(a=√5)`), biases 0, GroupNorm
/// weight 1 / bias 0, codebook U(−1/n_embed, 1/n_embed) (taming).
pub fn init_weights(vars: &VarMap, seed: u64) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(mix_seed(&[seed, 0x1417]));
    let data = vars.data().lock().expect("poisoned");
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    for name in names {
        let var = &data[name];
        let shape = var.as_tensor().shape().clone();
        let dims = shape.dims().to_vec();
        let n = shape.elem_count();
        let vals: Vec<f32> = if name == CODEBOOK {
            let b = 1.0 / dims[0] as f32;
            (0..n).map(|_| rng.random_range(-b..=b)).collect()
        } else if dims.len() == 4 {
            let b = 1.0 / ((dims[1] * dims[2] * dims[3]) as f32).sqrt();
            (0..n).map(|_| rng.random_range(-b..=b)).collect()
        } else if name.ends_with(".weight") {
            vec![1.0; n] // GroupNorm scale
        } else {
            vec![0.0; n]
        };
        var.set(&Tensor::from_vec(vals, shape, var.as_tensor().device())?)?;
    }
    Ok(())
}
