//! One test binary for this crate (linking one binary per file filled CI's disk); run one
//! module with `cargo test -p imgseq-train --test it MODULE::`.

mod gpt_common;
mod gpt_train;
mod vit_train;
mod vqgan_gan;
