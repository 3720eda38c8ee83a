//! taming-transformers VQGAN: image → 16×-smaller latent grid → nearest of `n_embed` codebook
//! entries → integer tokens in raster order, and back.
//!
//! * [`config`]: `ddconfig` / `embed_dim` / `n_embed`, taming's `model.yaml` and our JSON.
//! * [`model`]: Encoder, Decoder and [`VqModel`], named like taming's state dict.
//! * [`quantize`]: the nearest-entry quantizer with taming's loss and straight-through.
//! * [`ckpt`]: a restricted, non-executing reader for PyTorch / Lightning `.ckpt` files.
//! * [`load`]: loading a model from safetensors or `.ckpt` with strict key checks.
//! * [`train`]: training on an image folder (random crops, k-means codebook init, dead-code
//!   restarts, resumable checkpoints) and evaluation (PSNR, SSIM, codebook usage).

pub mod ckpt;
pub mod config;
pub mod load;
pub mod model;
pub mod quantize;
pub mod train;

pub use config::{DdConfig, VqConfig};
pub use load::{load_model, load_weights};
pub use model::VqModel;
pub use quantize::{Quantized, VectorQuantizer};
