//! One test binary for this crate (linking one binary per file filled CI's disk).
//! Each module was a separate `tests/*.rs` file; run one with `cargo test -p imgseq-vqgan --test it MODULE::`.

mod bf16;
mod chameleon;
mod common;
mod cosmos;
mod dcae;
mod diffusers;
mod emu3;
mod hostile_configs;
mod hostile_fuzz_corpus;
mod hostile_weights;
mod ibq;
mod janus;
mod kl;
mod llamagen;
mod maskgit;
mod parity;
mod titok;
mod var;
mod winograd_accuracy;
