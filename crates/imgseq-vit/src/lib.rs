//! Vision Transformer with HF transformers' `ViTForImageClassification` layout: an image
//! becomes 65 continuous tokens (CLS + 64 patch embeddings, learned positions added), a
//! pre-LN encoder reads them and the CLS output is classified.
//!
//! - [`config`]: `ViTConfig` with HF field names, the seed preset.
//! - [`model`]: the network, top to bottom (`Embeddings::forward` = patch → CLS → positions).
//! - [`checkpoint`]: strict loading / saving in HF's folder layout.
//! - [`train`]: AdamW training with warmup + cosine, evaluation, confusion matrix.
//! - [`plot`]: the position-embedding similarity picture.

pub mod checkpoint;
pub mod config;
pub mod interpolate;
pub mod model;

pub use config::ViTConfig;
pub use model::{Embeddings, ViTForImageClassification, ViTModel};
pub mod data;
pub mod train;
