//! End-to-end tests of `imgseq vit ...`: embedding shapes, position interpolation, training on
//! a tiny learnable IDX dataset (with resume), eval, classify, plot-positions, and the one-line
//! errors for bad input.

use crate::common;
use common::{fails, ok};

use flate2::write::GzEncoder;
use image::{GrayImage, Luma, Rgb, RgbImage};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tiny_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/vit/tiny")
}

fn photo(dir: &Path, name: &str, w: u32, h: u32) -> PathBuf {
    let p = dir.join(name);
    RgbImage::from_fn(w, h, |x, y| {
        Rgb([(x * 7) as u8, (y * 5) as u8, ((x + y) * 3) as u8])
    })
    .save(&p)
    .unwrap();
    p
}

#[test]
fn embed_prints_65_token_and_position_shapes_and_dumps_npy() {
    let dir = tempfile::tempdir().unwrap();
    let img = photo(dir.path(), "a.png", 50, 40);
    let npy = dir.path().join("tokens.npy");
    let m = tiny_model();
    let out = ok(&[
        "vit",
        "embed",
        img.to_str().unwrap(),
        "--weights",
        m.to_str().unwrap(),
        "--npy",
        npy.to_str().unwrap(),
    ]);
    assert!(out.contains("token embeddings:    [1, 65, 32]"), "{out}");
    assert!(out.contains("position embeddings: [1, 65, 32]"), "{out}");
    let (shape, data) = imgseq_core::npy::read_npy_f32(&npy).unwrap();
    assert_eq!(shape, vec![1, 65, 32]);
    assert!(data.iter().all(|v| v.is_finite()));
}

#[test]
fn embed_at_48px_interpolates_positions_to_145_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let img = photo(dir.path(), "a.png", 64, 64);
    let m = tiny_model();
    let out = ok(&[
        "vit",
        "embed",
        img.to_str().unwrap(),
        "--weights",
        m.to_str().unwrap(),
        "--size",
        "48",
    ]);
    assert!(out.contains("[1, 145, 32]"), "{out}");
}

#[test]
fn swapping_two_patches_changes_the_tokens_beyond_the_swap() {
    // Position is encoded: the embedding of a patch depends on where it is.
    let dir = tempfile::tempdir().unwrap();
    let a = photo(dir.path(), "a.png", 32, 32);
    let mut img = image::open(&a).unwrap().to_rgb8();
    for y in 0..4 {
        for x in 0..4 {
            let (p, q) = (*img.get_pixel(x, y), *img.get_pixel(x + 28, y + 28));
            img.put_pixel(x, y, q);
            img.put_pixel(x + 28, y + 28, p);
        }
    }
    let b = dir.path().join("b.png");
    img.save(&b).unwrap();
    let m = tiny_model();
    let (na, nb) = (dir.path().join("a.npy"), dir.path().join("b.npy"));
    ok(&[
        "vit",
        "embed",
        a.to_str().unwrap(),
        "--weights",
        m.to_str().unwrap(),
        "--npy",
        na.to_str().unwrap(),
    ]);
    ok(&[
        "vit",
        "embed",
        b.to_str().unwrap(),
        "--weights",
        m.to_str().unwrap(),
        "--npy",
        nb.to_str().unwrap(),
    ]);
    let (_, ta) = imgseq_core::npy::read_npy_f32(&na).unwrap();
    let (_, tb) = imgseq_core::npy::read_npy_f32(&nb).unwrap();
    let tok = |t: &[f32], i: usize| t[i * 32..(i + 1) * 32].to_vec();
    // Token 1 (patch 0) of b holds the pixels of patch 63 of a, yet differs from a's token 64:
    // the position vectors differ.
    let diff: f32 = tok(&tb, 1)
        .iter()
        .zip(tok(&ta, 64))
        .map(|(x, y)| (x - y).abs())
        .sum();
    assert!(diff > 1e-3, "{diff}");
    // Untouched patches keep their tokens.
    let same: f32 = tok(&tb, 10)
        .iter()
        .zip(tok(&ta, 10))
        .map(|(x, y)| (x - y).abs())
        .sum();
    assert!(same < 1e-5, "{same}");
}

fn write_idx(dir: &Path, prefix: &str, images: &[u8], labels: &[u8], n: usize, gz: bool) {
    let mut img = vec![0, 0, 8, 3];
    img.extend((n as u32).to_be_bytes());
    img.extend(28u32.to_be_bytes());
    img.extend(28u32.to_be_bytes());
    img.extend(images);
    let mut lbl = vec![0, 0, 8, 1];
    lbl.extend((labels.len() as u32).to_be_bytes());
    lbl.extend(labels);
    for (name, bytes) in [
        (format!("{prefix}-images-idx3-ubyte"), img),
        (format!("{prefix}-labels-idx1-ubyte"), lbl),
    ] {
        if gz {
            let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(&bytes).unwrap();
            std::fs::write(dir.join(format!("{name}.gz")), e.finish().unwrap()).unwrap();
        } else {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
}

/// A learnable toy set in Fashion-MNIST's exact IDX format: class 0 = bright images,
/// class 1 = dark images (the CLS token's first, near-uniform attention already sees it; a
/// tiny ViT needs thousands of steps for positional tasks).
fn toy_fashion(dir: &Path, n_train: usize, n_test: usize) {
    for (prefix, n) in [("train", n_train), ("t10k", n_test)] {
        let mut images = Vec::new();
        let mut labels = Vec::new();
        for i in 0..n {
            let c = (i % 2) as u8;
            for y in 0..28 {
                for x in 0..28 {
                    let on = c == 0 && (x + y) % 7 != 0;
                    images.push(if on {
                        200 + ((x * y + i) % 50) as u8
                    } else {
                        ((x + y + i) % 30) as u8
                    });
                }
            }
            labels.push(c);
        }
        write_idx(dir, prefix, &images, &labels, n, true);
    }
}

#[test]
fn train_resume_eval_classify_and_plot_on_a_toy_idx_set() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    toy_fashion(&data, 256, 64);
    let run = dir.path().join("run");
    let (d, r) = (data.to_str().unwrap(), run.to_str().unwrap());
    let common = [
        "--data",
        d,
        "-o",
        r,
        "--batch-size",
        "32",
        "--lr",
        "5e-3",
        "--warmup-epochs",
        "0.5",
        "--erase-prob",
        "0",
        "--no-flip",
    ];
    let mut args = vec!["vit", "train", "--epochs", "1"];
    args.extend(common);
    ok(&args);
    for f in [
        "config.json",
        "model.safetensors",
        "training.json",
        "optimizer.safetensors",
        "state.json",
    ] {
        assert!(run.join(f).exists(), "{f} missing");
    }
    // Resume for two more epochs: continues at epoch 1, ends with 3 epochs of history.
    let mut args = vec!["vit", "train", "--epochs", "3", "--resume"];
    args.extend(common);
    ok(&args);
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("state.json")).unwrap()).unwrap();
    assert_eq!(state["epochs_done"], 3);
    assert_eq!(state["test_accuracy"].as_array().unwrap().len(), 3);
    let acc = state["test_accuracy"][2].as_f64().unwrap();
    assert!(acc > 0.9, "toy task not learned: {acc}");

    let out = ok(&["vit", "eval", "--data", d, "--weights", r]);
    assert!(
        out.contains("accuracy:") && out.contains("confusion matrix"),
        "{out}"
    );

    let img = dir.path().join("bright.png");
    GrayImage::from_fn(28, 28, |x, y| {
        Luma([if (x + y) % 7 != 0 { 220 } else { 10 }])
    })
    .save(&img)
    .unwrap();
    let out = ok(&[
        "vit",
        "classify",
        img.to_str().unwrap(),
        "--weights",
        r,
        "-k",
        "1",
    ]);
    assert!(out.contains("bright.png: T-shirt/top"), "{out}");

    let png = dir.path().join("pos.png");
    let out = ok(&[
        "vit",
        "plot-positions",
        "--weights",
        r,
        "-o",
        png.to_str().unwrap(),
    ]);
    assert!(out.contains("neighbouring patches"), "{out}");
    let p = image::open(&png).unwrap();
    assert!(p.width() > 300 && p.width() == p.height());
}

#[test]
fn teacher_takes_widths_with_commas_or_spaces_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    toy_fashion(&data, 64, 32);
    let d = data.to_str().unwrap();
    let run = dir.path().join("t");
    let r = run.to_str().unwrap();
    let base = ["vit", "teacher", "--data", d, "-o", r, "--epochs", "1"];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    let out = ok(&with(&["--widths", "4,8,8"]));
    assert!(out.contains("soft_labels.npy"), "{out}");
    for f in [
        "teacher.safetensors",
        "teacher_state.json",
        "soft_labels.npy",
        "teacher.json",
    ] {
        assert!(run.join(f).exists(), "{f} missing");
    }
    // The finished run resumes to the same end; the space-separated form parses the same.
    ok(&with(&["--widths", "4", "8", "8", "--resume"]));
    let err = fails(&with(&["--widths", "4,8"]));
    assert!(err.contains("three stage widths"), "{err}");
    // A new run into the finished folder is refused in one line (no "training ..." line first).
    let err = fails(&with(&["--widths", "4,8,8"]));
    assert!(err.contains("already holds a training run"), "{err}");
}

#[test]
fn missing_weights_folder_is_one_line_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let img = photo(dir.path(), "a.png", 32, 32);
    let e = fails(&[
        "vit",
        "classify",
        img.to_str().unwrap(),
        "--weights",
        "/nonexistent-w",
    ]);
    assert!(e.contains("/nonexistent-w"), "{e}");
}

#[test]
fn missing_image_is_one_line_naming_the_file() {
    let m = tiny_model();
    let e = fails(&[
        "vit",
        "embed",
        "/nonexistent/cat.png",
        "--weights",
        m.to_str().unwrap(),
    ]);
    assert!(e.contains("/nonexistent/cat.png"), "{e}");
}

#[test]
fn corrupt_image_is_one_line_and_no_npy_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.png");
    std::fs::write(&bad, b"\x89PNG\r\n\x1a\nthis is not a png").unwrap();
    let npy = dir.path().join("t.npy");
    let m = tiny_model();
    let e = fails(&[
        "vit",
        "embed",
        bad.to_str().unwrap(),
        "--weights",
        m.to_str().unwrap(),
        "--npy",
        npy.to_str().unwrap(),
    ]);
    assert!(e.contains("bad.png"), "{e}");
    assert!(!npy.exists());
}

#[test]
fn wrong_idx_magic_is_one_line_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    toy_fashion(dir.path(), 8, 8);
    // A labels file that carries the images magic (0x0803).
    std::fs::remove_file(dir.path().join("t10k-labels-idx1-ubyte.gz")).unwrap();
    std::fs::write(
        dir.path().join("t10k-labels-idx1-ubyte"),
        [0u8, 0, 8, 3, 0, 0, 0, 8],
    )
    .unwrap();
    let run = dir.path().join("run");
    let e = fails(&[
        "vit",
        "train",
        "--data",
        dir.path().to_str().unwrap(),
        "-o",
        run.to_str().unwrap(),
        "--batch-size",
        "4",
    ]);
    assert!(e.contains("t10k-labels-idx1-ubyte"), "{e}");
}

#[test]
fn image_label_count_mismatch_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    toy_fashion(dir.path(), 8, 8);
    let mut lbl = vec![0u8, 0, 8, 1, 0, 0, 0, 5];
    lbl.extend([0u8; 5]);
    std::fs::remove_file(dir.path().join("train-labels-idx1-ubyte.gz")).unwrap();
    std::fs::write(dir.path().join("train-labels-idx1-ubyte"), lbl).unwrap();
    let run = dir.path().join("run");
    let e = fails(&[
        "vit",
        "train",
        "--data",
        dir.path().to_str().unwrap(),
        "-o",
        run.to_str().unwrap(),
        "--batch-size",
        "4",
    ]);
    assert!(e.contains("train-"), "{e}");
}

#[test]
fn weights_that_do_not_match_the_config_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        tiny_model().join("model.safetensors"),
        dir.path().join("model.safetensors"),
    )
    .unwrap();
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tiny_model().join("config.json")).unwrap())
            .unwrap();
    cfg["intermediate_size"] = 128.into();
    std::fs::write(dir.path().join("config.json"), cfg.to_string()).unwrap();
    let img = photo(dir.path(), "a.png", 32, 32);
    let e = fails(&[
        "vit",
        "classify",
        img.to_str().unwrap(),
        "--weights",
        dir.path().to_str().unwrap(),
    ]);
    assert!(
        e.contains("model.safetensors") && e.contains("intermediate.dense.weight"),
        "{e}"
    );
}

#[test]
fn forward_on_npy_writes_logits_and_rejects_wrong_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    imgseq_core::npy::write_npy_f32(&x, &[2, 3, 32, 32], &vec![0.1; 2 * 3 * 32 * 32]).unwrap();
    let o = dir.path().join("logits.npy");
    let m = tiny_model();
    ok(&[
        "vit",
        "forward",
        x.to_str().unwrap(),
        "--weights",
        m.to_str().unwrap(),
        "-o",
        o.to_str().unwrap(),
    ]);
    let (shape, _) = imgseq_core::npy::read_npy_f32(&o).unwrap();
    assert_eq!(shape, vec![2, 5]);
    let bad = dir.path().join("bad.npy");
    imgseq_core::npy::write_npy_f32(&bad, &[2, 1, 32, 32], &vec![0.1; 2 * 32 * 32]).unwrap();
    let o2 = dir.path().join("l2.npy");
    let e = fails(&[
        "vit",
        "forward",
        bad.to_str().unwrap(),
        "--weights",
        m.to_str().unwrap(),
        "-o",
        o2.to_str().unwrap(),
    ]);
    assert!(e.contains("bad.npy"), "{e}");
    assert!(!o2.exists());
}

/// Guards the committed default: `imgseq vit eval` without `--weights` finds
/// `weights/vit-fashion-mnist` and still classifies real Fashion-MNIST test images well.
/// Skipped (with a note) where the Debian package dataset-fashion-mnist is not installed.
#[test]
fn shipped_default_vit_classifies_real_fashion_mnist() {
    if !Path::new("/usr/share/datasets/fashion-mnist").is_dir() {
        eprintln!("skipped: install the Debian package dataset-fashion-mnist to run this test");
        return;
    }
    let o = Command::new(env!("CARGO_BIN_EXE_imgseq"))
        .args(["vit", "eval", "--limit", "2000"])
        .env_remove("IMGSEQ_WEIGHTS_DIR")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    let acc: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("accuracy: "))
        .and_then(|v| v.trim_end_matches('%').parse().ok())
        .unwrap_or_else(|| panic!("no accuracy line in {out}"));
    assert!(
        acc > 80.0,
        "shipped model accuracy {acc}% on the first 2000 test images"
    );
}
