//! One test binary for this crate (linking one binary per file filled CI's disk).
//! Each module was a separate `tests/*.rs` file; run one with `cargo test -p imgseq-kernels --test it MODULE::`.

mod bf16_ops;
mod causal_attention;
mod common;
mod vit_ops;
mod vq_ops;
mod winograd;
