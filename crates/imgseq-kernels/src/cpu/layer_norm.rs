//! The one `LayerNorm` layer of the transformers here (the ViT's and the GPT's): weight and
//! bias over the last dimension, run by [`crate::ops::layer_norm`].

use candle_core::{Module, Result, Tensor};

/// LayerNorm over the last dimension: (x − mean)/√(var + eps)·weight + bias.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    pub weight: Tensor,
    pub bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    pub fn new(weight: Tensor, bias: Tensor, eps: f64) -> Self {
        Self { weight, bias, eps }
    }

    pub fn eps(&self) -> f64 {
        self.eps
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        crate::ops::layer_norm(x, &self.weight, &self.bias, self.eps)
    }
}
