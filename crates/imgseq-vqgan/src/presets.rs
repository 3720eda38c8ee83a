//! Named architectures: what `--config small` and `--config f16_1024` mean.

use crate::config::{DdConfig, VqConfig};

/// The names [`preset`] knows.
pub const PRESETS: &[&str] = &["small", "f16_1024"];

/// A named architecture: `small` (the shipped default: taming layout, f16, 1024 codes of
/// 64 values, ch 32, `num_res_blocks` 0 — the encoder only has its strided convs before the
/// middle block, the decoder one ResnetBlock per level —, attention only in the middle
/// blocks; ~10 MB of f32 weights) or `f16_1024` (taming's `vqgan_imagenet_f16_1024`).
///
/// Why so small: training cost on a 2-core CPU is dominated by the full-resolution 3×3 convs;
/// `num_res_blocks` 1 → 0 halves them (7 → 3 per crop) and so doubles the steps a run gets.
pub fn preset(name: &str) -> Option<VqConfig> {
    match name {
        "small" => Some(VqConfig {
            ddconfig: DdConfig {
                ch: 32,
                ch_mult: vec![1, 1, 2, 2, 4],
                num_res_blocks: 0,
                attn_resolutions: vec![],
                z_channels: 64,
                double_z: false,
                resolution: 256,
                in_channels: 3,
                out_ch: 3,
                dropout: 0.0,
            },
            embed_dim: 64,
            n_embed: 1024,
            beta: 0.25,
            legacy: true,
        }),
        "f16_1024" => Some(VqConfig::vqgan_imagenet_f16_1024()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn presets() {
        let s = preset("small").unwrap();
        s.validate(Path::new("small")).unwrap();
        assert_eq!((s.downsample_factor(), s.n_embed), (16, 1024));
        assert_eq!(
            preset("f16_1024").unwrap(),
            VqConfig::vqgan_imagenet_f16_1024()
        );
        assert!(preset("big").is_none());
        for name in PRESETS {
            assert!(preset(name).is_some(), "{name}");
        }
    }
}
