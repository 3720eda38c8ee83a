//! Absurd model configs (issue 10): refused by `VqConfig::validate` with a message naming the
//! field, before any model is built or any size computed from them overflows.

use imgseq_vqgan::config::{VqConfig, MAX_LEVELS};
use std::path::Path;

fn refused(mutate: impl FnOnce(&mut VqConfig)) -> String {
    let mut c = VqConfig::vqgan_imagenet_f16_1024();
    mutate(&mut c);
    let e = c.validate(Path::new("m.json")).unwrap_err().to_string();
    assert!(e.starts_with("m.json: "), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    e
}

#[test]
fn config_with_huge_fields_is_refused_naming_the_field() {
    let e = refused(|c| c.ddconfig.z_channels = 1_000_000_000);
    assert!(e.contains("`ddconfig.z_channels` is 1000000000"), "{e}");
    let e = refused(|c| c.n_embed = usize::MAX);
    assert!(e.contains("`n_embed`"), "{e}");
    let e = refused(|c| c.embed_dim = 1 << 40);
    assert!(e.contains("`embed_dim`"), "{e}");
    let e = refused(|c| c.ddconfig.ch = usize::MAX / 2);
    assert!(e.contains("`ddconfig.ch`"), "{e}");
    let e = refused(|c| c.ddconfig.ch_mult = vec![1, 1 << 40]);
    assert!(e.contains("`ddconfig.ch_mult[1]`"), "{e}");
    let e = refused(|c| c.ddconfig.num_res_blocks = 1 << 20);
    assert!(e.contains("`ddconfig.num_res_blocks`"), "{e}");
}

#[test]
fn config_whose_weights_exceed_the_budget_is_refused() {
    // Each field within its own limit, but 2^15 channels at every level: ~10^11 weights.
    let e = refused(|c| {
        c.ddconfig.ch = 1 << 15;
        c.ddconfig.ch_mult = vec![1, 2];
    });
    assert!(e.contains("weights") && e.contains("GiB"), "{e}");
    // The shipped presets are far inside it.
    let c = VqConfig::vqgan_imagenet_f16_1024();
    assert!(c.weight_count() < 200_000_000, "{}", c.weight_count());
    c.validate(Path::new("f16")).unwrap();
}

#[test]
fn ch_mult_of_64_levels_does_not_overflow_the_downsampling_factor() {
    let e = refused(|c| c.ddconfig.ch_mult = vec![1; 64]);
    assert!(e.contains("64 levels") && e.contains("at most 16"), "{e}");
    let mut c = VqConfig::vqgan_imagenet_f16_1024();
    for n in [64, 65, 200] {
        c.ddconfig.ch_mult = vec![1; n];
        assert_eq!(
            c.downsample_factor(),
            if n <= 64 { 1 << (n - 1) } else { usize::MAX }
        );
    }
    c.ddconfig.ch_mult = vec![1; MAX_LEVELS];
    c.validate(Path::new("ok")).unwrap();
    assert_eq!(c.downsample_factor(), 1 << 15);
}

#[test]
fn yaml_and_json_configs_are_validated_the_same_way() {
    let json = VqConfig::vqgan_imagenet_f16_1024()
        .to_json_string()
        .replace("\"z_channels\": 256", "\"z_channels\": 1000000000");
    let e = VqConfig::from_json_str(&json, Path::new("c.json"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("c.json: `ddconfig.z_channels`"), "{e}");
    let yaml = "model:\n  params:\n    embed_dim: 4\n    n_embed: 8\n    ddconfig:\n      \
                double_z: false\n      z_channels: 4\n      resolution: 32\n      in_channels: 3\n      \
                out_ch: 3\n      ch: 32\n      ch_mult: [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]\n      \
                num_res_blocks: 1\n      attn_resolutions: []\n      dropout: 0.0\n";
    let e = VqConfig::from_taming_yaml_str(yaml, Path::new("m.yaml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("20 levels"), "{e}");
}

#[test]
fn config_files_that_are_not_regular_are_not_read() {
    for p in ["/dev/zero", "/tmp"] {
        let e = VqConfig::from_file(p).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{p}: ")) && e.contains("not a regular file"),
            "{e}"
        );
    }
}
