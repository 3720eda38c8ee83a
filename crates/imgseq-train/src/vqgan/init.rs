//! Weights of a fresh run.

use candle_nn::VarMap;
use imgseq_core::data::augment::mix_seed;
use imgseq_core::run::{init_vars, Init};
use imgseq_core::Result;
use imgseq_vqgan::CODEBOOK;
use rand::rngs::StdRng;
use rand::SeedableRng;

/// PyTorch-like initialisation from a seeded generator: conv kernels
/// U(−1/√fan_in, 1/√fan_in) (torch's default `kaiming_uniform_(a=√5)`), biases 0, GroupNorm
/// weight 1 / bias 0, codebook U(−1/n_embed, 1/n_embed) (taming).
pub fn init_weights(vars: &VarMap, seed: u64) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(mix_seed(&[seed, 0x1417]));
    init_vars(vars, &mut rng, |name, dims| {
        if name == CODEBOOK {
            Init::Uniform(1.0 / dims[0] as f32)
        } else if dims.len() == 4 {
            Init::Uniform(1.0 / ((dims[1] * dims[2] * dims[3]) as f32).sqrt())
        } else if name.ends_with(".weight") {
            Init::Fill(1.0) // GroupNorm scale
        } else {
            Init::Fill(0.0)
        }
    })
}
