//! Named architectures: what `--config small` and `--config f16_1024` mean.

use crate::config::{DdConfig, VqConfig};
use crate::family::Variant;

/// The names [`preset`] knows.
pub const PRESETS: &[&str] = &[
    "photo",
    "small",
    "f16_1024",
    "fmnist_f4",
    "fmnist_f2",
    "ibq_1024",
    "ibq_8192",
    "ibq_16384",
    "ibq_262144",
];

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
/// - `ibq_1024`, `ibq_8192`, `ibq_16384`, `ibq_262144`: IBQ's released ImageNet 256² tokenizers
///   (TencentARC/SEED-Voken `configs/IBQ/gpu/imagenet_ibqgan_N.yaml`; their Hub checkpoints
///   carry no config): taming's encoder and decoder at ch 128, `ch_mult` [1, 1, 2, 2, 4], 4
///   ResnetBlocks per level, attention at 16², N codes of 256 values searched by inner product.
pub fn preset(name: &str) -> Option<VqConfig> {
    if let Some(n) = name.strip_prefix("ibq_") {
        return match n {
            "1024" | "8192" | "16384" | "262144" => Some(ibq_imagenet_256(n.parse().ok()?)),
            _ => None,
        };
    }
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

/// A config argument that names a preset rather than a file: `Some` when `path` does not
/// exist and its text is one of [`PRESETS`] (`--config ibq_16384` beside a checkpoint that
/// ships without its config).
pub fn named(path: &std::path::Path) -> Option<VqConfig> {
    if path.exists() {
        return None;
    }
    preset(path.to_str()?)
}

/// IBQ's released ImageNet 256² architecture with `n_embed` codes: taming's f16 layout with 4
/// ResnetBlocks per level.
fn ibq_imagenet_256(n_embed: usize) -> VqConfig {
    let mut c = VqConfig::vqgan_imagenet_f16_1024();
    c.ddconfig.num_res_blocks = 4;
    c.n_embed = n_embed;
    c.variant = Variant {
        family: crate::family::Family::Ibq,
        distance: crate::family::Distance::InnerProduct,
        ..Variant::default()
    };
    c
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
        assert!(preset("ibq_4096").is_none());
        for name in PRESETS {
            assert!(preset(name).is_some(), "{name}");
        }
    }

    /// The `ibq_N` presets are what IBQ's published yaml says (its `model:` section as
    /// released, training-only fields dropped), read by the same reader as a user's file.
    #[test]
    fn ibq_presets_equal_the_published_yaml() {
        for n in [1024, 8192, 16384, 262144] {
            let yaml = format!(
                "model:\n  class_path: src.IBQ.models.ibqgan.IBQ\n  init_args:\n    ddconfig:\n      \
                 double_z: False\n      z_channels: 256\n      resolution: 256\n      \
                 in_channels: 3\n      out_ch: 3\n      ch: 128\n      ch_mult: [ 1,1,2,2,4]\n      \
                 num_res_blocks: 4\n      attn_resolutions: [16]\n      dropout: 0.0\n    \
                 n_embed: {n}\n    embed_dim: 256\n    l2_normalize: False\n    beta: 0.25\n    \
                 use_ema: True\n"
            );
            let published = crate::ibq::yaml_config_str(&yaml, Path::new("ibq.yaml")).unwrap();
            assert_eq!(preset(&format!("ibq_{n}")).unwrap(), published, "{n}");
        }
    }

    #[test]
    fn a_config_argument_names_a_preset_only_where_no_such_file_exists() {
        assert_eq!(named(Path::new("ibq_16384")).unwrap().n_embed, 16384);
        assert!(named(Path::new("no_such_preset")).is_none());
    }
}
