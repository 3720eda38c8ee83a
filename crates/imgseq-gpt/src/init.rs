//! A fresh model's weights: GPT-2's initialisation, drawn from a seeded generator (training
//! starts from it; tests sample from it).

use candle_nn::VarMap;
use imgseq_core::run::{init_vars, Init};
use imgseq_core::Result;
use rand::SeedableRng;

use crate::config::GptConfig;

/// GPT-2's initialisation from a seeded generator: weights ~ N(0, std) (the residual
/// projections `c_proj` N(0, std/√(2·n_layer))), biases 0, LayerNorm weights 1.
pub fn init_weights(vars: &VarMap, cfg: &GptConfig, seed: u64) -> Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let std = cfg.initializer_range;
    let proj_std = std / ((2 * cfg.n_layer) as f64).sqrt();
    init_vars(vars, &mut rng, |name, _| {
        if name.contains(".ln_") && name.ends_with("weight") {
            Init::Fill(1.0)
        } else if name.ends_with("bias") {
            Init::Fill(0.0)
        } else if name.ends_with("c_proj.weight") {
            Init::Normal(proj_std)
        } else {
            Init::Normal(std)
        }
    })
}
