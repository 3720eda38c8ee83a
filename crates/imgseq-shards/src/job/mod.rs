//! The dataset job, generic over the tokenizer ([`imgseq_core::tokenizer::Tokenizer`]): whole
//! datasets → resumable token shards ([`tokenize()`]), and back: the code statistics of a
//! shard folder ([`stats()`]) and its pictures ([`detokenize()`]). A job array's manifests are
//! joined by [`crate::manifest::merge`].
//!
//! * [`tokenize`]: the run (sources indexed, shards planned, decoding beside encoding).
//! * [`files`]: what a run leaves in its folder — finished shards and their records, stale
//!   temporaries of a killed run, the errors list, the job's manifest names.
//! * [`read`]: reading a finished folder back (stats, detokenize).
//! * [`latent_stats`]: a latent shard folder's per-channel statistics.

pub mod files;
pub mod latent_stats;
pub mod read;
pub mod tokenize;

pub use read::{detokenize, stats, CodeStats};
pub use tokenize::{run, tokenize, Options, Report, SampleEncoder, Through};
