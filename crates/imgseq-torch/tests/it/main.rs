//! One test binary for this crate (linking one binary per file filled CI's disk).
//! Each module was a separate `tests/*.rs` file; run one with `cargo test -p imgseq-torch --test it MODULE::`.

mod checkpoint;
mod fuzz_corpus_replay;
mod hostile_checkpoints;
mod torchscript;
