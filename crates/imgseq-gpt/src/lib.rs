//! A decoder-only transformer over image token sequences: the "language model" half of
//! token-based image generation, in Hugging Face's GPT-2 layout.
//!
//! A sequence is `[class token] + h·w image tokens` in raster order. The vocabulary is the VQ
//! codebook entries `0..n_codes`, then one token per class (`n_codes + c`), then one
//! "unconditional" class token (`n_codes + n_classes`) used for classifier-free guidance.
//!
//! * [`config`]: [`GptConfig`] — HF `GPT2Config` fields plus imgseq's own (`imgseq_*`).
//! * [`model`]: [`Gpt2LMHeadModel`], named as `transformers.GPT2LMHeadModel` (a folder we write
//!   loads there unchanged), with a KV cache for generation.
//! * [`checkpoint`]: loading (strict: every key, every shape) and saving model folders.
//! * [`data`]: token sequences from token shards (`manifest.json` + WebDataset tars) or
//!   `.npy` token files.
//! * [`sample`]: temperature / top-k / top-p sampling with classifier-free guidance, seeded.
//! * [`grid`]: labelled sample grids (a tiny built-in bitmap font).
//! * [`init`]: a fresh model's weights (GPT-2's initialisation, seeded).
//!
//! Training it (AdamW + warm-up/cosine with exact resume, held-out bits per token, the job the
//! command line starts) is the `imgseq-train` crate's (`imgseq_train::gpt`).

pub mod checkpoint;
pub mod config;
pub mod data;
pub mod grid;
pub mod init;
pub mod model;
pub mod sample;

pub use config::GptConfig;
pub use model::Gpt2LMHeadModel;
