//! Shared foundations of imgseq: errors, audited weight loading, atomic file output, image I/O,
//! token files (`.npy`), datasets and image-quality metrics.

pub mod budget;
pub mod catmull_rom;
pub mod codes;
pub mod data;
pub mod error;
pub mod eval;
pub mod frechet;
pub mod fsutil;
pub mod image_io;
pub mod input;
pub mod latent_patch;
pub mod metrics;
pub mod npy;
pub mod optim;
pub mod pillow;
pub mod progress;
pub mod resample;
pub mod run;
pub mod safetensors_header;
pub mod shipped;
pub mod tokenizer;
pub mod tokens;
pub mod weights;

pub use error::{Error, Result};
pub use weights::AuditedWeights;
