//! Vision Transformer with HF transformers' `ViTForImageClassification` layout: an image
//! becomes 65 continuous tokens (CLS + 64 patch embeddings, learned positions added), a
//! pre-LN encoder reads them and the CLS output is classified.
//!
//! - [`config`]: `ViTConfig` with HF field names, the seed preset, the input-size rule.
//! - [`model`]: the network, top to bottom (`Embeddings::forward` = patch → CLS → positions).
//! - [`fused`]: the same network's forward and backward by hand on flat f32 arrays (the
//!   default training engine on the CPU).
//! - [`loss`]: cross-entropy with label smoothing, hard or soft targets, on candle tensors
//!   (the autograd engine's loss, the reference of [`fused`]'s).
//! - [`init`]: a fresh model's weights (HF's initialisation, seeded), as variables or flat.
//! - [`checkpoint`]: strict loading / saving in HF's folder layout.
//! - [`data`]: datasets on disk → u8 sets on the model's canvas → normalised batches.
//! - [`run`]: a training run's folder: `TrainConfig` (`training.json`), run files, progress.
//! - [`eval`]: evaluation over an image set: accuracy, per-class accuracy, confusion matrix.
//! - [`inference`]: a trained [`Classifier`]: image preprocessing, tokens, top-k labels.
//! - [`judge`]: a classifier judging pictures other models made (reconstructions, samples):
//!   accuracy and CLS-feature Fréchet distances, for `vq eval --judge` and `gpt judge`.
//! - [`precision`]: f32 or bf16 linear layers (`--precision`), with `auto`'s agreement check.
//!
//! Training it (the loop on either engine, the CNN teacher, the jobs the command line starts)
//! is the `imgseq-train` crate's (`imgseq_train::vit`).

pub mod agreement;
pub mod checkpoint;
pub mod clip;
pub mod config;
pub mod data;
pub mod dinov2;
pub mod eval;
pub mod fused;
pub mod inference;
pub mod init;
pub mod interpolate;
pub mod judge;
pub mod loss;
pub mod model;
pub mod position_plot;
pub mod precision;
pub mod processor;
pub mod run;
pub mod siglip;
pub mod tokenizer;
pub mod tower;
pub mod tower_load;

pub use config::ViTConfig;
pub use inference::Classifier;
pub use model::{Embeddings, ViTForImageClassification, ViTModel};
