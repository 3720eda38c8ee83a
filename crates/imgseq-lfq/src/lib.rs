//! Open-MAGVIT2's lookup-free quantization (LFQ) tokenizer, read from its own Lightning
//! `.ckpt` and yaml config: image → 16×-smaller latent of `z_channels` values → the sign of
//! each value as one bit → the bits as an integer token (2^18 codes for the released models),
//! and back.
//!
//! * [`config`]: the model settings from the LightningCLI yaml (`model.init_args`), or read
//!   off the weights' shapes when no yaml is given; the input-size and memory rules.
//! * [`quantize`]: LFQ itself — signs → bits → index with bit `i` worth `2^i` (their
//!   `2 ** arange(dim)`), indices → ±1 codes, and the factorised form ([9, 9]: two indices of
//!   2^9) the autoregressive model uses.
//! * [`model`]: the encoder and decoder of `improved_model.py` (bias-free res blocks, strided
//!   conv downsampling, adaptive GroupNorm conditioned on the quantized latent, depth-to-space
//!   upsampling), named like their state dict.
//! * [`load`]: the checkpoint (read by `imgseq-torch`, no code executed), the choice between
//!   the EMA copies (`model_ema.*`) and the raw weights, audited key by key.
//! * [`tokenizer`]: [`LfqTokenizer`], an [`imgseq_core::tokenizer::Tokenizer`].

pub mod config;
pub mod load;
pub mod model;
pub mod quantize;
pub mod tokenizer;

pub use config::LfqConfig;
pub use load::{is_lfq_checkpoint, load_model, WeightSet};
pub use model::LfqModel;
pub use quantize::Lfq;
pub use tokenizer::LfqTokenizer;

/// The family's name as users see it.
pub const FAMILY: &str = "Open-MAGVIT2 LFQ";
/// The family's registry name (manifests, descriptions).
pub const NAME: &str = "open_magvit2";
