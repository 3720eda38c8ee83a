//! Shared foundations of imgseq: errors, audited weight loading, image I/O, token files
//! (`.npy`), datasets and image-quality metrics.

pub mod error;
pub mod weights;

pub use error::{Error, Result};
pub use weights::AuditedWeights;
