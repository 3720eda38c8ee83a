//! One test binary for this crate (linking one binary per file filled CI's disk).
//! Each module was a separate `tests/*.rs` file; run one with `cargo test -p imgseq --test it MODULE::`.

mod common;
mod feature_shards;
mod gpt_cli;
mod hardening_cli;
mod hostile_dataset_cli;
mod hostile_parsers;
mod hub_cli;
mod memory_bounds;
mod plugins;
mod tokenize;
mod tokenize_parquet;
mod vae_cli;
mod vae_tokenize;
mod vit_cli;
mod vq_cli;
mod vq_families;
mod vq_gray;
mod vq_lfq;
mod vq_train;
