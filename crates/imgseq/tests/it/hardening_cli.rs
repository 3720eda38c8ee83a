//! Regression tests of issue #10's command-line groups: every careless or hostile use of a
//! command gives one `error:` line naming the file or flag, exit ≠ 0, no panic, no abort and no
//! partial output. One test per group, named after what it guards.

use crate::common;
use common::{fails, imgseq, ok};

use image::{Rgb, RgbImage};
use imgseq_core::npy;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/vqgan")
        .join(name)
}

fn vit_model() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/vit/tiny")
        .display()
        .to_string()
}

/// `--weights`, `--config` of the tiny f2 VQGAN (32 codes).
fn vq_model() -> Vec<String> {
    vec![
        "--weights".into(),
        fx("tiny.safetensors").display().to_string(),
        "--config".into(),
        fx("tiny_config.json").display().to_string(),
    ]
}

fn args<'a>(head: &[&'a str], model: &'a [String], tail: &[&'a str]) -> Vec<&'a str> {
    let mut v = head.to_vec();
    v.extend(model.iter().map(String::as_str));
    v.extend_from_slice(tail);
    v
}

fn picture(path: &Path, w: u32, h: u32) -> String {
    RgbImage::from_fn(w, h, |x, y| {
        Rgb([(x * 5) as u8, (y * 7) as u8, ((x * y) % 256) as u8])
    })
    .save(path)
    .unwrap();
    path.display().to_string()
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[cfg(unix)]
fn file_type(p: &Path) -> std::fs::FileType {
    std::fs::symlink_metadata(p).unwrap().file_type()
}

/// Group 1: `-o` naming a device node, a FIFO, a symlink or a folder is refused and the thing
/// is left as it was; an output that is one of the command's inputs is refused.
#[cfg(unix)]
#[test]
fn outputs_never_replace_devices_fifos_links_folders_or_inputs() {
    use std::os::unix::fs::FileTypeExt;
    let d = tempfile::tempdir().unwrap();
    let img = picture(&d.path().join("in.png"), 32, 32);
    let m = vq_model();
    let encode_to = |out: &str| {
        fails(&args(
            &["vq", "encode", &img],
            &m,
            &["--size", "32", "-o", out],
        ))
    };

    // The system's full device (left a character device).
    if Path::new("/dev/full").exists() {
        let e = encode_to("/dev/full");
        assert!(
            e.contains("/dev/full") && e.contains("character device"),
            "{e}"
        );
        assert!(file_type(Path::new("/dev/full")).is_char_device());
    }
    // A FIFO.
    let fifo = d.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        let e = encode_to(&s(&fifo));
        assert!(e.contains("fifo") && e.contains("FIFO"), "{e}");
        assert!(file_type(&fifo).is_fifo());
    } else {
        eprintln!("note: mkfifo unavailable, FIFO case skipped");
    }
    // A character device of our own (as root only).
    let node = d.path().join("node");
    let made = Command::new("mknod")
        .arg(&node)
        .args(["c", "1", "3"])
        .status();
    if made.is_ok_and(|s| s.success()) {
        let e = encode_to(&s(&node));
        assert!(e.contains("node") && e.contains("character device"), "{e}");
        assert!(file_type(&node).is_char_device());
    } else {
        eprintln!("note: not allowed to mknod (not root), device-node case skipped");
    }
    // A symlink: neither the link nor its target change.
    let target = d.path().join("target.npy");
    std::fs::write(&target, b"keep me").unwrap();
    let link = d.path().join("link.npy");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = encode_to(&s(&link));
    assert!(e.contains("link.npy") && e.contains("symbolic link"), "{e}");
    assert!(file_type(&link).is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
    // A folder.
    let dir_out = d.path().join("folder.npy");
    std::fs::create_dir(&dir_out).unwrap();
    let e = encode_to(&s(&dir_out));
    assert!(e.contains("folder.npy") && e.contains("folder"), "{e}");
    // An input as output.
    let before = std::fs::read(&img).unwrap();
    let e = encode_to(&img);
    assert!(e.contains("in.png") && e.contains("input"), "{e}");
    assert_eq!(std::fs::read(&img).unwrap(), before);
    // Also through another name of the same file (a hard link).
    let hard = d.path().join("hard.png");
    std::fs::hard_link(&img, &hard).unwrap();
    let e = encode_to(&s(&hard));
    assert!(e.contains("hard.png") && e.contains("same file"), "{e}");
    assert_eq!(std::fs::read(&img).unwrap(), before);
    let ckpt = d.path().join("last.ckpt");
    std::fs::copy(fx("tiny.ckpt"), &ckpt).unwrap();
    let before = std::fs::read(&ckpt).unwrap();
    let yaml = s(&fx("tiny_model.yaml"));
    let e = fails(&[
        "weights",
        "convert",
        &s(&ckpt),
        "--config",
        &yaml,
        "-o",
        &s(&ckpt),
    ]);
    assert!(e.contains("last.ckpt") && e.contains("input"), "{e}");
    assert_eq!(std::fs::read(&ckpt).unwrap(), before);
    // No temporary files were left anywhere.
    assert!(
        names(d.path()).iter().all(|n| !n.contains(".tmp-")),
        "{:?}",
        names(d.path())
    );
}

/// Group 3: forwards whose size comes from a file or a flag and would need terabytes are
/// refused before anything is allocated (they used to abort with "memory allocation failed").
#[test]
fn forward_passes_too_big_for_memory_are_refused_before_allocating() {
    let d = tempfile::tempdir().unwrap();
    let m = vq_model();
    // A (1000, 1000) token grid: attention over 10⁶ positions.
    let grid = d.path().join("grid.npy");
    npy::write_npy_i64(&grid, &[1000, 1000], &vec![0; 1_000_000]).unwrap();
    let png = d.path().join("big.png");
    let e = fails(&args(&["vq", "decode", &s(&grid)], &m, &["-o", &s(&png)]));
    assert!(
        e.contains("grid.npy") && e.contains("IMGSEQ_MAX_MEMORY_GB"),
        "{e}"
    );
    assert!(!png.exists());
    // vq encode --size 4096 --upscale.
    let img = picture(&d.path().join("small.png"), 40, 40);
    let out = d.path().join("t.npy");
    let e = fails(&args(
        &["vq", "encode", &img],
        &m,
        &["--size", "4096", "--upscale", "-o", &s(&out)],
    ));
    assert!(e.contains("--size 4096 needs about"), "{e}");
    // vit embed --size 16000.
    let vit = vit_model();
    let e = fails(&["vit", "embed", &img, "--weights", &vit, "--size", "16000"]);
    assert!(e.contains("--size 16000 needs about"), "{e}");
    // vit forward --interpolate-pos-encoding on a (1, 3, 2000, 2000) input.
    let x = d.path().join("x.npy");
    npy::write_npy_f32(&x, &[1, 3, 2000, 2000], &vec![0.0; 3 * 2000 * 2000]).unwrap();
    let logits = d.path().join("logits.npy");
    let e = fails(&[
        "vit",
        "forward",
        &s(&x),
        "--weights",
        &vit,
        "--interpolate-pos-encoding",
        "-o",
        &s(&logits),
    ]);
    assert!(
        e.contains("x.npy") && e.contains("2000x2000") && e.contains("memory"),
        "{e}"
    );
    assert!(!logits.exists() && !out.exists());
    // The cap is a setting: a lower one refuses even the tiny model's ordinary input.
    let o = Command::new(env!("CARGO_BIN_EXE_imgseq"))
        .args(args(
            &["vq", "encode", &img],
            &m,
            &["--size", "32", "-o", &s(&out)],
        ))
        .env("IMGSEQ_MAX_MEMORY_GB", "0.000001")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("IMGSEQ_MAX_MEMORY_GB"));
}

/// Writes Fashion-MNIST-format IDX files (plain, not gzipped): `n_train` / `n_test` images,
/// alternately bright (class 0) and dark (class 1).
fn toy_idx(dir: &Path, n_train: usize, n_test: usize) {
    for (prefix, n) in [("train", n_train), ("t10k", n_test)] {
        let mut img = vec![0, 0, 8, 3];
        img.extend((n as u32).to_be_bytes());
        img.extend(28u32.to_be_bytes());
        img.extend(28u32.to_be_bytes());
        let mut lbl = vec![0, 0, 8, 1];
        lbl.extend((n as u32).to_be_bytes());
        for i in 0..n {
            img.extend(std::iter::repeat_n(
                if i % 2 == 0 { 220u8 } else { 20 },
                28 * 28,
            ));
            lbl.push((i % 2) as u8);
        }
        std::fs::write(dir.join(format!("{prefix}-images-idx3-ubyte")), img).unwrap();
        std::fs::write(dir.join(format!("{prefix}-labels-idx1-ubyte")), lbl).unwrap();
    }
}

/// Group 5: `--batch-size 0` (from the command line or a resumed training.json) and absurd
/// `--threads` are errors, not a division by zero or a hang.
#[test]
fn zero_batch_and_absurd_thread_counts_are_refused_not_panics() {
    let d = tempfile::tempdir().unwrap();
    toy_idx(d.path(), 16, 8);
    let data = s(d.path());
    let run = d.path().join("run");
    let e = fails(&[
        "vit",
        "train",
        "--data",
        &data,
        "-o",
        &s(&run),
        "--batch-size",
        "0",
    ]);
    assert!(e.contains("--batch-size 0 must be positive"), "{e}");
    assert!(!run.exists());
    ok(&[
        "vit",
        "train",
        "--data",
        &data,
        "-o",
        &s(&run),
        "--batch-size",
        "8",
        "--epochs",
        "1",
    ]);
    let tj = run.join("training.json");
    let text = std::fs::read_to_string(&tj).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["batch_size"] = 0.into();
    std::fs::write(&tj, v.to_string()).unwrap();
    let e = fails(&[
        "vit",
        "train",
        "--data",
        &data,
        "-o",
        &s(&run),
        "--resume",
        "--epochs",
        "2",
    ]);
    assert!(
        e.contains("training.json") && e.contains("batch_size 0"),
        "{e}"
    );
    for n in ["0", "100000"] {
        let e = fails(&["--threads", n, "vq", "eval", &data]);
        assert!(
            e.contains(&format!("--threads {n} must be between 1 and")),
            "{e}"
        );
    }
}

/// Group 6: nonsense that used to exit 0 — no epochs, an empty test set, a truncated JPEG,
/// `--resume` with nothing to resume, training over an existing run, bad numbers — is refused
/// with the setting or file named.
#[test]
fn nonsense_options_empty_sets_and_truncated_images_fail() {
    let d = tempfile::tempdir().unwrap();
    toy_idx(d.path(), 16, 0);
    let data = s(d.path());
    let run = d.path().join("run");
    let r = s(&run);
    let vit_train = |extra: &[&str]| {
        let mut a = vec![
            "vit",
            "train",
            "--data",
            &data,
            "-o",
            &r,
            "--batch-size",
            "8",
        ];
        a.extend_from_slice(extra);
        fails(&a)
    };
    for (flag, value, msg) in [
        ("--epochs", "0", "--epochs 0 must be positive"),
        ("--lr", "-1", "--lr -1 must be a positive number"),
        ("--lr", "NaN", "--lr NaN must be a positive number"),
        (
            "--label-smoothing",
            "2",
            "--label-smoothing 2 must be in [0, 1)",
        ),
        (
            "--erase-prob",
            "1.5",
            "--erase-prob 1.5 must be a probability",
        ),
    ] {
        let e = vit_train(&[flag, value]);
        assert!(e.contains(msg), "{flag} {value}: {e}");
    }
    let e = vit_train(&["--resume"]);
    assert!(e.contains("run") && e.contains("no run to resume"), "{e}");
    assert!(!run.exists());
    // vit train with an empty test set, vit eval on 0 test images.
    let e = vit_train(&[]);
    assert!(e.contains("test set has no images"), "{e}");
    let full = d.path().join("full");
    std::fs::create_dir(&full).unwrap();
    toy_idx(&full, 16, 4);
    let model = s(&full.join("run"));
    ok(&[
        "vit",
        "train",
        "--data",
        &s(&full),
        "-o",
        &model,
        "--batch-size",
        "8",
        "--epochs",
        "1",
    ]);
    let e = fails(&["vit", "eval", "--data", &data, "--weights", &model]);
    assert!(e.contains(&data) && e.contains("no images"), "{e}");
    // A config.json with layer_norm_eps -1.
    let bad = d.path().join("badvit");
    std::fs::create_dir(&bad).unwrap();
    let vit = PathBuf::from(vit_model());
    std::fs::copy(vit.join("model.safetensors"), bad.join("model.safetensors")).unwrap();
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(vit.join("config.json")).unwrap()).unwrap();
    cfg["layer_norm_eps"] = (-1).into();
    std::fs::write(bad.join("config.json"), cfg.to_string()).unwrap();
    let img = picture(&d.path().join("a.png"), 32, 32);
    let e = fails(&["vit", "classify", &img, "--weights", &s(&bad)]);
    assert!(
        e.contains("config.json") && e.contains("layer_norm_eps -1"),
        "{e}"
    );
    let e = fails(&[
        "vit",
        "classify",
        &img,
        "--weights",
        &vit_model(),
        "-k",
        "0",
    ]);
    assert!(e.contains("--top-k 0 must be positive"), "{e}");

    // VQGAN: --batch-size 0 for encode, decode and eval.
    let m = vq_model();
    let tok = d.path().join("t.npy");
    ok(&args(
        &["vq", "encode", &img],
        &m,
        &["--size", "32", "-o", &s(&tok)],
    ));
    let png = d.path().join("o.png");
    let x = s(&d.path().join("x.npy"));
    std::fs::create_dir_all(d.path().join("imgs")).unwrap();
    picture(&d.path().join("imgs/b.png"), 32, 32);
    let imgs = s(&d.path().join("imgs"));
    for a in [
        args(
            &["vq", "encode", &img],
            &m,
            &["--size", "32", "--batch-size", "0", "-o", &x],
        ),
        args(
            &["vq", "decode", &s(&tok)],
            &m,
            &["--batch-size", "0", "-o", &s(&png)],
        ),
        args(
            &["vq", "eval", &imgs],
            &m,
            &["--size", "32", "--batch-size", "0"],
        ),
    ] {
        let e = fails(&a);
        assert!(e.contains("--batch-size 0 must be positive"), "{a:?}: {e}");
    }
    // A truncated JPEG is an error naming it.
    let jpg = d.path().join("full.jpg");
    RgbImage::from_fn(64, 64, |x, y| Rgb([(x * 4) as u8, (y * 4) as u8, 9]))
        .save(&jpg)
        .unwrap();
    let bytes = std::fs::read(&jpg).unwrap();
    let cut = d.path().join("cut.jpg");
    std::fs::write(&cut, &bytes[..bytes.len() * 3 / 4]).unwrap();
    let c = s(&d.path().join("c.npy"));
    let e = fails(&args(
        &["vq", "encode", &s(&cut)],
        &m,
        &["--size", "32", "-o", &c],
    ));
    assert!(e.contains("cut.jpg") && e.contains("truncated"), "{e}");
    ok(&args(
        &["vq", "encode", &s(&jpg)],
        &m,
        &["--size", "32", "-o", &c],
    ));
    // vq edit writing tokens -1 or beyond the codebook.
    let neg = d.path().join("neg.npy");
    npy::write_npy_i64(&neg, &[2, 2], &[0, -1, 3, 4]).unwrap();
    let edited = s(&d.path().join("e.npy"));
    let e = fails(&["vq", "edit", &s(&neg), "--swap", "0,0:1,1", "-o", &edited]);
    assert!(e.contains("neg.npy") && e.contains("token -1"), "{e}");
    let big = d.path().join("big.npy");
    npy::write_npy_i64(&big, &[2, 2], &[0, 1024, 3, 4]).unwrap();
    let cfg = s(&fx("tiny_config.json"));
    let e = fails(&[
        "vq",
        "edit",
        &s(&big),
        "--swap",
        "0,0:1,1",
        "--config",
        &cfg,
        "-o",
        &edited,
    ]);
    assert!(e.contains("big.npy") && e.contains("token 1024"), "{e}");
    // vq train: --resume without a run, an existing run without --resume, bad numbers.
    let vr = d.path().join("vr");
    let vq_train = |extra: &[&str]| {
        let mut a = vec![
            "vq",
            "train",
            "--data",
            &imgs,
            "--config",
            &cfg,
            "--out",
            vr.to_str().unwrap(),
            "--crop",
            "16",
            "--resize",
            "32",
            "--batch-size",
            "2",
            "--kmeans-rows",
            "16",
            "--ae-warmup",
            "0",
            "--extra-scales",
            "none",
            "--steps",
            "1",
        ];
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    fn as_str(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    let e = fails(&as_str(&vq_train(&["--resume"])));
    assert!(e.contains("vr") && e.contains("no run to resume"), "{e}");
    for (flag, value) in [("--lr", "-1"), ("--lr", "NaN"), ("--beta1", "1.5")] {
        let e = fails(&as_str(&vq_train(&[flag, value])));
        assert!(e.contains(&format!("{flag} {value}")), "{e}");
    }
    assert!(!vr.exists());
    ok(&as_str(&vq_train(&[])));
    let e = fails(&as_str(&vq_train(&[])));
    assert!(
        e.contains("already holds a training run") && e.contains("--overwrite"),
        "{e}"
    );
    ok(&as_str(&vq_train(&["--overwrite"])));
}

/// Group 7: a command that fails leaves none of its outputs behind: `vq roundtrip` whose
/// `recon.png` cannot be written, `vit embed --npy a --pos-npy bad/x`, a diverging
/// `vit train`.
#[test]
fn failed_commands_leave_no_partial_output() {
    let d = tempfile::tempdir().unwrap();
    let img = picture(&d.path().join("in.png"), 32, 32);
    let m = vq_model();
    let out = d.path().join("rt");
    std::fs::create_dir_all(out.join("recon.png")).unwrap();
    let e = fails(&args(
        &["vq", "roundtrip", &img],
        &m,
        &["--size", "32", "-o", &s(&out)],
    ));
    assert!(e.contains("recon.png"), "{e}");
    assert_eq!(names(&out), vec!["recon.png"]);

    let a = d.path().join("a.npy");
    // A second output that cannot be written (a file stands where its folder would be).
    std::fs::write(d.path().join("bad"), b"a file").unwrap();
    let e = fails(&[
        "vit",
        "embed",
        &img,
        "--weights",
        &vit_model(),
        "--npy",
        &s(&a),
        "--pos-npy",
        &s(&d.path().join("bad/x.npy")),
    ]);
    assert!(e.contains("bad/x.npy"), "{e}");
    assert!(!a.exists());

    toy_idx(d.path(), 32, 8);
    let run = d.path().join("run");
    // (Progress lines come first on stderr; the error is the last line.)
    let o = imgseq(&[
        "vit",
        "train",
        "--data",
        &s(d.path()),
        "-o",
        &s(&run),
        "--batch-size",
        "8",
        "--lr",
        "1e30",
        "--epochs",
        "1",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let last = err.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: ") && last.contains("diverged"),
        "{err}"
    );
    assert!(!run.exists(), "{:?}", names(&run));
    assert!(names(d.path()).iter().all(|n| !n.contains(".tmp-")));
}

/// Group 8 (command-line messages): messages name the file or flag; output images are
/// encoded as their extension says; a folder dataset keeps its class names.
#[test]
fn messages_name_the_file_and_outputs_follow_their_extension() {
    let d = tempfile::tempdir().unwrap();
    let img = picture(&d.path().join("x.png"), 32, 32);
    let e = fails(&[
        "vit",
        "embed",
        &img,
        "--weights",
        &vit_model(),
        "--size",
        "0",
    ]);
    assert!(e.contains("--size 0 must be positive"), "{e}");
    let m = vq_model();
    // One image is a set of one (the coffee figure is `vq eval assets/coffee.png`).
    let out = ok(&args(&["vq", "eval", &img], &m, &["--size", "32"]));
    assert!(out.contains("images: 1 at 32x32"), "{out}");
    let tok = d.path().join("t.npy");
    ok(&args(
        &["vq", "encode", &img],
        &m,
        &["--size", "32", "-o", &s(&tok)],
    ));
    for (ext, magic) in [
        ("jpg", &b"\xff\xd8"[..]),
        ("png", b"\x89PNG"),
        ("bmp", b"BM"),
        ("webp", b"RIFF"),
    ] {
        let o = d.path().join(format!("o.{ext}"));
        ok(&args(&["vq", "decode", &s(&tok)], &m, &["-o", &s(&o)]));
        assert!(std::fs::read(&o).unwrap().starts_with(magic), "{ext}");
    }
    let e = fails(&args(
        &["vq", "decode", &s(&tok)],
        &m,
        &["-o", &s(&d.path().join("o.tif"))],
    ));
    assert!(e.contains("o.tif") && e.contains("`.tif`"), "{e}");

    // A folder dataset with classes a/b is labelled a/b, not with Fashion-MNIST names; a test
    // folder whose classes the model does not know is an error naming the class.
    let ds = d.path().join("ds");
    for split in ["train", "test"] {
        for (c, v) in [("a", 30u8), ("b", 220)] {
            std::fs::create_dir_all(ds.join(split).join(c)).unwrap();
            for i in 0..4 {
                RgbImage::from_pixel(20, 20, Rgb([v, v, v]))
                    .save(ds.join(split).join(c).join(format!("{i}.png")))
                    .unwrap();
            }
        }
    }
    let run = d.path().join("run");
    ok(&[
        "vit",
        "train",
        "--dataset",
        "folder",
        "--data",
        &s(&ds),
        "-o",
        &s(&run),
        "--epochs",
        "1",
        "--batch-size",
        "4",
    ]);
    let cfg = std::fs::read_to_string(run.join("config.json")).unwrap();
    assert!(
        cfg.contains("\"0\": \"a\"") && cfg.contains("\"1\": \"b\""),
        "{cfg}"
    );
    let (ds_s, run_s) = (s(&ds), s(&run));
    let eval = |extra: &[&'static str]| {
        let mut v = vec!["vit", "eval", "--dataset", "folder"];
        v.extend(["--data", ds_s.as_str(), "--weights", run_s.as_str()]);
        v.extend(extra);
        v
    };
    let out = ok(&eval(&[]));
    assert!(
        out.contains(" a ") && out.contains(" b ") && !out.contains("T-shirt"),
        "{out}"
    );
    // `--split train` scores the training images (one more there than in test/).
    RgbImage::from_pixel(20, 20, Rgb([30, 30, 30]))
        .save(ds.join("train/a/extra.png"))
        .unwrap();
    assert!(ok(&eval(&["--split", "train"])).contains("train images: 9"));
    assert!(ok(&eval(&["--split", "test"])).contains("test images: 8"));
    std::fs::rename(ds.join("test/b"), ds.join("test/c")).unwrap();
    let e = fails(&eval(&[]));
    assert!(e.contains("class folder `c`"), "{e}");
}
