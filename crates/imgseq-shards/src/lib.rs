//! Datasets as shards, the way training jobs read them (img2dataset / WebDataset conventions):
//!
//! * [`source`]: what to tokenize — image folders (recursive), `.txt` lists of paths,
//!   WebDataset `.tar` shards (`KEY.jpg|png|webp` + optional `KEY.json|txt|cls`) and Parquet
//!   files of images ([`parquet_source`]: img2dataset's and Hugging Face `datasets`' layouts,
//!   read through [`parquet_in`], every page header checked first by [`parquet_pages`]), listed once into an ordered index of samples ([`sample`])
//!   whose keys trace back to the source.
//! * [`plan`]: the deterministic split of that index into output shards of `shard_size`
//!   samples, and of the shards among the `N` jobs of a job array.
//! * [`wds`]: token shards as WebDataset `.tar` files (`KEY.tokens.npy` + `KEY.json` per
//!   sample), written deterministically and made visible only when complete (write, fsync,
//!   rename), and read back; [`parquet_out`]: the same as Parquet (one row per image);
//!   [`shard`]: either format behind one writer and reader. [`latents`]: latent shards (one
//!   float16 array per sample, a VAE's latents) in both formats, written by the same job.
//! * [`manifest`]: `manifest.json` — the tokenizer, every finished shard with its sample count
//!   and SHA-256, totals — and the merge of the per-job manifests of a job array.
//!
//! Nothing here knows a model: `imgseq_vqgan::tokenize` drives a tokenizer over these.

#[doc(hidden)]
pub mod fuzz;
pub mod job;
pub mod kind;
pub mod latents;
pub mod llamagen_codes;
pub mod manifest;
pub mod parquet_in;
pub mod parquet_out;
pub mod parquet_pages;
pub mod parquet_source;
pub mod plan;
pub mod rar_tokens;
pub mod sample;
pub mod shard;
pub mod source;
pub mod wds;

pub use imgseq_core::tokens::TokenGrid;
pub use manifest::{Manifest, ShardRecord, TokenizerInfo};
pub use plan::Plan;
pub use sample::{Location, Sample, SampleRef};
pub use shard::{Payload, ShardFormat, ShardKind, TokenShardWriter};
pub use source::SourceOptions;
