//! One test binary for this crate (linking one binary per file filled CI's disk).
//! Each module was a separate `tests/*.rs` file; run one with `cargo test -p imgseq-gpt --test it MODULE::`.

mod common;
mod fuzz_corpus_replay;
mod generate;
mod hf_parity;
