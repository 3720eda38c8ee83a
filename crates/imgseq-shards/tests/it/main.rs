//! One test binary for this crate (linking one binary per file fills CI's disk); run one module
//! with `cargo test -p imgseq-shards --test it MODULE::`.

mod fuzz_corpus_replay;
mod hostile_job;
mod hostile_sources;
