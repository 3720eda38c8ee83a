//! Named architectures: what `--config small` and `--config f16_1024` mean.

use crate::config::{DdConfig, VqConfig};
use crate::family::Variant;

/// The names [`preset`] knows.
pub const PRESETS: &[&str] = &["photo", "small", "f16_1024", "fmnist_f4", "fmnist_f2"];

/// A named architecture:
/// - `small` (the shipped default, `vq train`'s default): taming layout, f16, 1,024 codes of
///   64 values, ch 32, `ch_mult` [1, 1, 2, 2, 4], `num_res_blocks` 0 — the encoder only has
///   its strided convs before the middle block, the decoder one ResnetBlock per level —,
///   attention only in the middle blocks; 1.7 M parameters, 6.7 MB of f32. Training cost on
///   a 2-core CPU is dominated by the full-resolution 3×3 convs, and `num_res_blocks` 0
///   halves them — but taming's own code cannot build such a model.
/// - `photo`: the same levels with one ResnetBlock per level (so taming's code builds it),
///   and 1,024 codes of **8** values searched **l2-normalised** (LlamaGen's
///   `codebook_l2_norm`: low-dimensional unit codes keep the whole codebook in use); 3.2 M
///   parameters, 13 MB. `weights convert --fold-l2-norm --taming-yaml` turns a trained one
///   into a plain taming model. Trained here for 2,000 steps (38 min) it stayed near 15 dB
///   on the held-out photos, so it is not the shipped model yet (weights/vqgan/README.md).
/// - `f16_1024`: taming's `vqgan_imagenet_f16_1024`.
pub fn preset(name: &str) -> Option<VqConfig> {
    match name {
        "photo" => {
            let mut c = preset("small")?;
            c.ddconfig.num_res_blocks = 1;
            c.embed_dim = 8;
            c.variant.l2_norm = true;
            Some(c)
        }
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
            variant: Variant::default(),
        }),
        "f16_1024" => Some(VqConfig::vqgan_imagenet_f16_1024()),
        "fmnist_f4" => Some(fmnist(vec![1, 1, 2], 512)),
        "fmnist_f2" => Some(fmnist(vec![1, 2], 512)),
        _ => None,
    }
}

/// The Fashion-MNIST tokenizers: 32×32 gray (1 channel in and out), taming layout at small
/// size (ch 32, one ResnetBlock per level so taming's PyTorch code builds it, no attention,
/// 512 codes of 32 values), f4 (`ch_mult` [1, 1, 2]: 8×8 = 64 tokens) or f2 ([1, 2]:
/// 16×16 = 256 tokens). [1, 1, 2] rather than [1, 2, 2]: the same loss per step in a short
/// comparison and 1.3× the images per second (weights/vq-fashion-mnist/README.md).
fn fmnist(ch_mult: Vec<usize>, n_embed: usize) -> VqConfig {
    VqConfig {
        ddconfig: DdConfig {
            ch: 32,
            ch_mult,
            num_res_blocks: 1,
            attn_resolutions: vec![],
            z_channels: 32,
            double_z: false,
            resolution: 32,
            in_channels: 1,
            out_ch: 1,
            dropout: 0.0,
        },
        embed_dim: 32,
        n_embed,
        beta: 0.25,
        legacy: true,
        variant: Variant::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn presets() {
        for name in ["photo", "small"] {
            let s = preset(name).unwrap();
            s.validate(Path::new(name)).unwrap();
            assert_eq!((s.downsample_factor(), s.n_embed), (16, 1024), "{name}");
        }
        let p = preset("photo").unwrap();
        assert!(p.variant.l2_norm && p.ddconfig.num_res_blocks >= 1);
        assert_eq!(p.variant.family, crate::family::Family::Taming);
        assert_eq!(
            preset("f16_1024").unwrap(),
            VqConfig::vqgan_imagenet_f16_1024()
        );
        for (name, f, tokens) in [("fmnist_f4", 4, 8), ("fmnist_f2", 2, 16)] {
            let c = preset(name).unwrap();
            c.validate(Path::new(name)).unwrap();
            let d = &c.ddconfig;
            assert_eq!(
                (d.in_channels, d.out_ch, d.resolution),
                (1, 1, 32),
                "{name}"
            );
            // taming's Encoder/Decoder only size their levels right with ResnetBlocks.
            assert!(d.num_res_blocks >= 1, "{name}");
            assert_eq!((c.downsample_factor(), 32 / f), (f, tokens), "{name}");
        }
        assert!(preset("big").is_none());
        for name in PRESETS {
            assert!(preset(name).is_some(), "{name}");
        }
    }
}
