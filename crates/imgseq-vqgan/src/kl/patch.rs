//! Latents as patch sequences: the rule is [`imgseq_core::latent_patch`]'s (FLUX's order).

pub use imgseq_core::latent_patch::{check_patch, patchify, unpatchify};
