//! One test binary for this crate; run one module with
//! `cargo test -p imgseq-vit --test it MODULE::`.

mod clip;
mod common;
mod dinov2;
mod fused;
mod hf_parity;
mod processor;
mod siglip;
mod tower_bf16;
mod towers_released;
