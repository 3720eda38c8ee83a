//! One test binary for this crate (linking one binary per file filled CI's disk); run one
//! module with `cargo test -p imgseq-train --test it MODULE::`.

mod gpt_common;
/// The GPT crate's own tiny models and layout (one definition for both crates' tests).
#[path = "../../../imgseq-gpt/tests/it/common/mod.rs"]
mod gpt_models;
mod gpt_train;
mod vit_train;
mod vqgan_gan;
