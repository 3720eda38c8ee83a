//! Hostile inputs to the parsers through the CLI (issue 10, parser and resource-bound
//! groups): each is one `error: ` line naming the file and the problem, exit ≠ 0, no abort.

use crate::common;
use common::fails;

use std::path::{Path, PathBuf};

fn torch_fx(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../imgseq-torch/tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

fn vq_fx(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/vqgan")
        .join(name)
        .display()
        .to_string()
}

fn coffee() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../assets/coffee.png")
        .display()
        .to_string()
}

/// The tiny model's config with `key`'s JSON value replaced.
fn config_with(dir: &Path, key: &str, value: &str) -> PathBuf {
    let text = std::fs::read_to_string(vq_fx("tiny_config.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let new: serde_json::Value = serde_json::from_str(value).unwrap();
    match key.strip_prefix("ddconfig.") {
        Some(k) => v["ddconfig"][k] = new,
        None => v[key] = new,
    }
    let p = dir.join(format!("{}.json", key.replace('.', "_")));
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

#[test]
fn pickle_nested_200000_deep_is_an_error_not_a_stack_overflow() {
    let p = torch_fx("nested_lists.ckpt");
    let e = fails(&["weights", "inspect", &p]);
    assert!(e.contains(&p) && e.contains("levels deep"), "{e}");
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("o.safetensors");
    let cfg = vq_fx("tiny_config.json");
    let e = fails(&[
        "weights",
        "convert",
        &p,
        "--config",
        &cfg,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(e.contains("levels deep"), "{e}");
    assert!(!out.exists());
}

#[test]
fn stride_zero_tensor_of_12_gib_is_refused_before_allocating() {
    let p = torch_fx("stride0_3gib.ckpt");
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("t.npy");
    let cfg = vq_fx("tiny_config.json");
    let img = coffee();
    let e = fails(&[
        "vq",
        "encode",
        &img,
        "--weights",
        &p,
        "--config",
        &cfg,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(e.contains(&p) && e.contains("tensor `w`"), "{e}");
    assert!(!out.exists());
}

#[test]
fn absurd_model_configs_name_the_field() {
    let d = tempfile::tempdir().unwrap();
    let img = coffee();
    let w = vq_fx("tiny.safetensors");
    let out = d.path().join("t.npy");
    for (key, value, want) in [
        (
            "ddconfig.z_channels",
            "1000000000",
            "`ddconfig.z_channels` is 1000000000",
        ),
        (
            "ddconfig.ch_mult",
            &format!("{:?}", vec![1; 64]),
            "64 levels",
        ),
        ("n_embed", "1000000000000", "`n_embed`"),
        ("ddconfig.ch", "65536", "weights"),
    ] {
        let cfg = config_with(d.path(), key, value);
        let cfg = cfg.to_str().unwrap();
        let e = fails(&[
            "vq",
            "encode",
            &img,
            "--weights",
            &w,
            "--config",
            cfg,
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(e.contains(cfg) && e.contains(want), "{key}: {e}");
        assert!(!e.contains("9223372036854775808"), "{e}");
        let run = d.path().join("run");
        let e = fails(&[
            "vq",
            "train",
            "--data",
            d.path().to_str().unwrap(),
            "--out",
            run.to_str().unwrap(),
            "--config",
            cfg,
        ]);
        assert!(e.contains(want), "train {key}: {e}");
    }
}

#[test]
fn weights_inspect_never_reads_devices_or_fifos() {
    for p in ["/dev/zero", "/dev/null"] {
        let e = fails(&["weights", "inspect", p]);
        assert!(e.contains(p) && e.contains("not a regular file"), "{e}");
    }
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("w.ckpt");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if made {
        let e = fails(&["weights", "inspect", fifo.to_str().unwrap()]);
        assert!(e.contains("not a regular file"), "{e}");
    }
}

#[test]
fn weights_inspect_of_a_bare_pickle_says_what_convert_says() {
    let p = torch_fx("bare_pickle.ckpt");
    let e = fails(&["weights", "inspect", &p]);
    assert!(
        e.contains("a bare pickle") && !e.contains("safetensors"),
        "{e}"
    );
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("o.safetensors");
    let cfg = vq_fx("tiny_config.json");
    let c = fails(&[
        "weights",
        "convert",
        &p,
        "--config",
        &cfg,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(e, c);
}

#[test]
fn weights_inspect_of_overflowing_shapes_is_an_error_not_0_parameters() {
    let p = torch_fx("huge_shape.ckpt");
    let e = fails(&["weights", "inspect", &p]);
    assert!(e.contains(&p) && e.contains("impossible size"), "{e}");
}
