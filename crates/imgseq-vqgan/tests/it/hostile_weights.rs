//! Hostile weight files through `load::inspect` / `load_weights` (issue 10).

use candle_core::Device;
use imgseq_vqgan::load::{self, WeightsFormat};
use std::path::PathBuf;

fn torch_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../imgseq-torch/tests/fixtures")
        .join(name)
}

fn one_line(e: impl std::fmt::Display, path: &std::path::Path) -> String {
    let e = e.to_string();
    assert!(e.starts_with(&path.display().to_string()), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    e
}

#[test]
fn inspect_of_a_bare_pickle_says_so_like_convert() {
    let d = tempfile::tempdir().unwrap();
    for name in ["old.ckpt", "old.pt", "weights.safetensors", "noext"] {
        let p = d.path().join(name);
        std::fs::write(&p, b"\x80\x02}q\x00.").unwrap();
        assert_eq!(load::weights_format(&p).unwrap(), WeightsFormat::BarePickle);
        let e = one_line(load::inspect(&p).unwrap_err(), &p);
        assert!(
            e.contains("a bare pickle") && !e.contains("not a valid safetensors"),
            "{e}"
        );
        let cfg = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/vqgan/tiny_config.json");
        let out = d.path().join("o.safetensors");
        let c = load::convert_checkpoint(&p, Some(&cfg), &out, Default::default()).unwrap_err();
        assert_eq!(one_line(c, &p), e);
        let e2 = one_line(load::load_weights(&p, &Device::Cpu).err().unwrap(), &p);
        assert_eq!(e, e2);
    }
}

#[test]
fn inspect_of_tensor_sizes_that_overflow_is_an_error_not_zero_parameters() {
    let p = torch_fixture("huge_shape.ckpt");
    let e = one_line(load::inspect(&p).unwrap_err(), &p);
    assert!(e.contains("impossible size"), "{e}");
}

#[test]
fn inspect_of_devices_and_fifos_is_refused_without_reading() {
    for p in ["/dev/zero", "/dev/null"] {
        let p = std::path::Path::new(p);
        let e = one_line(load::inspect(p).unwrap_err(), p);
        assert!(e.ends_with("not a regular file"), "{e}");
        assert!(load::load_weights(p, &Device::Cpu).is_err());
    }
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("w.safetensors");
    if std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success())
    {
        let e = one_line(load::inspect(&fifo).unwrap_err(), &fifo);
        assert!(e.ends_with("not a regular file"), "{e}");
    }
}

#[test]
fn stride_zero_checkpoint_is_refused_before_the_model_sees_it() {
    let p = torch_fixture("stride0_3gib.ckpt");
    let e = one_line(load::load_weights(&p, &Device::Cpu).err().unwrap(), &p);
    assert!(e.contains("tensor `w`"), "{e}");
}
