//! What a family's loader is: the [`Family`] trait, the [`OpenOptions`] every family reads and
//! the [`Probe`] of a source it is asked about.

use crate::Opened;
use imgseq_core::Result;
use imgseq_kernels::PrecisionRequest;
use std::path::{Path, PathBuf};

/// How a model is opened; every field has the family's default when left as
/// [`OpenOptions::default`].
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// The model's config file (default: found beside the weights, or read off them).
    pub config: Option<PathBuf>,
    /// Input side in pixels (default: the family's rule for the model).
    pub size: Option<u32>,
    /// The arithmetic of the conv layers (families without a bf16 path refuse `bf16`).
    pub precision: PrecisionRequest,
    /// Run the encoder in bf16 too (tokens may differ from f32's; families that cannot, refuse).
    pub bf16_encoder: bool,
    /// Lightning checkpoints with EMA copies: run the raw weights instead.
    pub raw: bool,
}

/// What a family's loader looks at to say whether it reads a source.
pub struct Probe<'a> {
    /// The source as given (a file or a folder).
    pub source: &'a Path,
}

/// A family (or a group of families sharing one network) of tokenizers.
pub trait Family: Sync {
    /// Its registry name (`vq`, `open_magvit2`, `autoencoder_kl`).
    fn name(&self) -> &'static str;
    /// Whether the files are this family's (cheap: names and shapes, no weights read).
    fn claims(&self, p: &Probe) -> bool;
    /// The tokenizer of the files.
    fn open(&self, p: &Probe, o: &OpenOptions) -> Result<Opened>;
}

