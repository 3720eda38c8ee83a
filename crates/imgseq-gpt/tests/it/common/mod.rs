//! Tiny models for tests.
#![allow(dead_code)]

use imgseq_gpt::config::{GptConfig, SeqLayout};

pub const CLASSES: [&str; 3] = ["tee", "boot", "bag"];

pub fn layout(h: usize, w: usize, n_codes: usize) -> SeqLayout {
    SeqLayout {
        n_codes,
        class_names: CLASSES.iter().map(|s| s.to_string()).collect(),
        h,
        w,
    }
}

pub fn tiny_config(h: usize, w: usize, n_codes: usize) -> GptConfig {
    GptConfig::new_imgseq(
        &layout(h, w, n_codes),
        32,
        2,
        2,
        Some("weights/vq-test".into()),
    )
}
