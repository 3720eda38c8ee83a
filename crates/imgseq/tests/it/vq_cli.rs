//! End-to-end tests of `imgseq vq ...` and `imgseq weights ...` on the tiny random-weight
//! VQGAN fixture (f = 2: a 32×32 crop gives a 16×16 token grid; each token covers 2×2 pixels).

use crate::common;
use common::{fails, ok};

use image::{Rgb, RgbImage};
use imgseq_core::npy;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/vqgan")
        .join(name)
}

fn model_args() -> Vec<String> {
    vec![
        "--weights".into(),
        fx("tiny.safetensors").display().to_string(),
        "--config".into(),
        fx("tiny_config.json").display().to_string(),
        // Pinned: `auto` is decided by a speed measurement in each process, and these tests
        // compare the outputs of separate runs (bf16 has its own tests in imgseq-vqgan).
        "--precision".into(),
        "f32".into(),
        "--size".into(),
        "32".into(),
    ]
}

fn with_model<'a>(head: &[&'a str], tail: &[&'a str], m: &'a [String]) -> Vec<&'a str> {
    let mut v: Vec<&str> = head.to_vec();
    v.extend(m.iter().map(|s| s.as_str()));
    v.extend_from_slice(tail);
    v
}

/// A 48×40 test picture with structure at several scales.
fn picture(path: &Path, w: u32, h: u32) {
    let img = RgbImage::from_fn(w, h, |x, y| {
        let check = if (x / 6 + y / 6) % 2 == 0 { 200 } else { 40 };
        Rgb([(x * 5) as u8, check, ((x * y) % 256) as u8])
    });
    img.save(path).unwrap();
}

fn read_png(p: &Path) -> RgbImage {
    image::open(p).unwrap().to_rgb8()
}

#[test]
fn roundtrip_writes_tokens_recon_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("in.png");
    picture(&img, 48, 40);
    let out = dir.path().join("rt");
    let m = model_args();
    let o = dir.path().join("rt").display().to_string();
    let stdout = ok(&with_model(
        &["vq", "roundtrip", img.to_str().unwrap()],
        &["-o", &o],
        &m,
    ));
    assert!(stdout.contains("tokens: 256 (16x16 grid"), "{stdout}");
    assert!(
        stdout.contains("PSNR: ") && stdout.contains("SSIM: "),
        "{stdout}"
    );
    assert!(
        stdout.contains("codebook entries used: ") && stdout.contains(" of 32"),
        "{stdout}"
    );
    let (shape, toks) = npy::read_npy_i64(out.join("tokens.npy")).unwrap();
    assert_eq!(shape, vec![16, 16]);
    assert!(toks.iter().all(|&t| (0..32).contains(&t)));
    assert_eq!(read_png(&out.join("recon.png")).dimensions(), (32, 32));
    assert_eq!(
        read_png(&out.join("side_by_side.png")).dimensions(),
        (68, 32)
    );
    // encode → decode gives the roundtrip's reconstruction.
    let tok = dir.path().join("t.npy");
    ok(&with_model(
        &["vq", "encode", img.to_str().unwrap()],
        &["-o", tok.to_str().unwrap()],
        &m,
    ));
    assert_eq!(npy::read_npy_i64(&tok).unwrap().1, toks);
    let png = dir.path().join("d.png");
    ok(&with_model(
        &["vq", "decode", tok.to_str().unwrap()],
        &["-o", png.to_str().unwrap()],
        &m[..6],
    ));
    assert_eq!(read_png(&png), read_png(&out.join("recon.png")));
}

/// `--bf16-encoder` is an opt-in that says on stderr how many of the check picture's tokens
/// the bf16 encoder keeps; its tokens are valid codes and its run writes every output.
#[test]
fn bf16_encoder_opt_in_says_how_many_tokens_agree_with_f32() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("in.png");
    picture(&img, 48, 40);
    let o = dir.path().join("rt");
    let m = model_args();
    let mut args = vec!["vq", "roundtrip", img.to_str().unwrap()];
    args.extend(m.iter().map(|s| s.as_str()));
    args.extend(["--bf16-encoder", "-o", o.to_str().unwrap()]);
    let out = common::imgseq(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The tiny model is f = 2: the 16 × 16-token check picture is 32² pixels.
    let said = err
        .lines()
        .find(|l| l.starts_with("encoder: bf16 (--bf16-encoder): "))
        .unwrap_or_else(|| panic!("no agreement line in: {err}"));
    let equal: usize = said.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(said.contains("of 256 tokens") && equal <= 256, "{said}");
    let (shape, toks) = npy::read_npy_i64(o.join("tokens.npy")).unwrap();
    assert_eq!(shape, vec![16, 16]);
    assert!(toks.iter().all(|&t| (0..32).contains(&t)));
    assert!(o.join("recon.png").is_file() && o.join("side_by_side.png").is_file());
}

#[test]
fn several_images_are_one_batched_token_file() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.png"), dir.path().join("b.png"));
    picture(&a, 48, 40);
    picture(&b, 40, 64);
    let m = model_args();
    let both = dir.path().join("ab.npy");
    let single = dir.path().join("b.npy");
    let (ap, bp) = (a.to_str().unwrap(), b.to_str().unwrap());
    ok(&with_model(
        &["vq", "encode", ap, bp, bp],
        &["-o", both.to_str().unwrap()],
        &m,
    ));
    ok(&with_model(
        &["vq", "encode", bp],
        &["-o", single.to_str().unwrap()],
        &m,
    ));
    let (shape, t) = npy::read_npy_i64(&both).unwrap();
    assert_eq!(shape, vec![3, 16, 16]);
    let (_, tb) = npy::read_npy_i64(&single).unwrap();
    assert_eq!(
        &t[256..512],
        &tb[..],
        "image in a batch of 3 (2 + 1) == image alone"
    );
    assert_eq!(&t[512..], &tb[..]);
    let png = dir.path().join("out.png");
    ok(&with_model(
        &["vq", "decode", both.to_str().unwrap()],
        &["-o", png.to_str().unwrap()],
        &m[..6],
    ));
    for i in 0..3 {
        assert!(dir.path().join(format!("out_{i:03}.png")).is_file());
    }
    // Images 1 and 2 hold the same tokens but are decoded in different batches (2 + 1).
    assert_eq!(
        read_png(&dir.path().join("out_001.png")),
        read_png(&dir.path().join("out_002.png"))
    );
}

/// The point of discrete tokens: position matters. Swapping two cells of the grid changes
/// the decoded image mostly around those two cells.
#[test]
fn edit_swap_changes_pixels_where_tokens_moved() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("in.png");
    picture(&img, 48, 40);
    let m = model_args();
    let tok = dir.path().join("t.npy");
    ok(&with_model(
        &["vq", "encode", img.to_str().unwrap()],
        &["-o", tok.to_str().unwrap()],
        &m,
    ));
    let (_, t) = npy::read_npy_i64(&tok).unwrap();
    // Two far-apart cells holding different codes.
    let (p, q) = [
        ((2, 3), (12, 11)),
        ((3, 2), (11, 12)),
        ((2, 12), (12, 3)),
        ((4, 4), (13, 13)),
    ]
    .into_iter()
    .find(|&((r1, c1), (r2, c2))| t[r1 * 16 + c1] != t[r2 * 16 + c2])
    .expect("some pair of cells differs");
    let swap = format!("{},{}:{},{}", p.0, p.1, q.0, q.1);
    let edited = dir.path().join("e.npy");
    ok(&[
        "vq",
        "edit",
        tok.to_str().unwrap(),
        "--swap",
        &swap,
        "-o",
        edited.to_str().unwrap(),
    ]);
    let (_, e) = npy::read_npy_i64(&edited).unwrap();
    let moved: Vec<usize> = (0..256).filter(|&i| t[i] != e[i]).collect();
    assert_eq!(moved, {
        let mut v = vec![p.0 * 16 + p.1, q.0 * 16 + q.1];
        v.sort();
        v
    });
    let (a, b) = (dir.path().join("a.png"), dir.path().join("b.png"));
    ok(&with_model(
        &["vq", "decode", tok.to_str().unwrap()],
        &["-o", a.to_str().unwrap()],
        &m[..6],
    ));
    ok(&with_model(
        &["vq", "decode", edited.to_str().unwrap()],
        &["-o", b.to_str().unwrap()],
        &m[..6],
    ));
    let (a, b) = (read_png(&a), read_png(&b));
    // Per-cell mean absolute pixel change (each cell is 2×2 pixels).
    let mut cell = [[0f64; 16]; 16];
    for (x, y, pa) in a.enumerate_pixels() {
        let pb = b.get_pixel(x, y);
        let d: f64 = (0..3)
            .map(|k| (pa.0[k] as f64 - pb.0[k] as f64).abs())
            .sum();
        cell[y as usize / 2][x as usize / 2] += d / 4.0;
    }
    let dist = |r: usize, c: usize, s: (usize, usize)| r.abs_diff(s.0).max(c.abs_diff(s.1));
    let (mut near, mut nn, mut far, mut nf) = (0.0, 0, 0.0, 0);
    let mut best = (0.0, (0, 0));
    for (r, row) in cell.iter().enumerate() {
        for (c, &v) in row.iter().enumerate() {
            let d = dist(r, c, p).min(dist(r, c, q));
            if d <= 1 {
                near += v;
                nn += 1;
            } else if d >= 4 {
                far += v;
                nf += 1;
            }
            if v > best.0 {
                best = (v, (r, c));
            }
        }
    }
    let (near, far) = (near / nn as f64, far / nf as f64);
    assert!(near > 0.0, "the swap changed nothing");
    assert!(
        near > 2.0 * far,
        "change near the swapped cells {near:.1} vs far {far:.1}"
    );
    let (r, c) = best.1;
    assert!(
        dist(r, c, p).min(dist(r, c, q)) <= 1,
        "largest change at cell {:?}",
        best.1
    );
    // Swapping back restores the original tokens exactly.
    let back = dir.path().join("back.npy");
    ok(&[
        "vq",
        "edit",
        edited.to_str().unwrap(),
        "--swap",
        &swap,
        "-o",
        back.to_str().unwrap(),
    ]);
    assert_eq!(npy::read_npy_i64(&back).unwrap().1, t);
}

#[test]
fn bad_inputs_fail_with_one_line_and_leave_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("in.png");
    picture(&img, 48, 40);
    let small = dir.path().join("small.png");
    picture(&small, 20, 24);
    let m = model_args();
    let out = dir.path().join("out.npy");
    let o = out.to_str().unwrap();
    let tok = dir.path().join("t.npy");
    ok(&with_model(
        &["vq", "encode", img.to_str().unwrap()],
        &["-o", tok.to_str().unwrap()],
        &m,
    ));
    let t = tok.to_str().unwrap();

    let e = fails(&with_model(
        &["vq", "encode", small.to_str().unwrap()],
        &["-o", o],
        &m,
    ));
    assert!(e.contains("small.png") && e.contains("smaller than"), "{e}");
    // The size rule is the model's own (VqConfig::check_input_size): the tiny model is f2.
    let mut m30 = m.clone();
    m30[7] = "31".into(); // --size
    let e = fails(&with_model(
        &["vq", "encode", img.to_str().unwrap()],
        &["-o", o],
        &m30,
    ));
    assert!(
        e.contains("--size 31") && e.contains("multiple of 2,"),
        "{e}"
    );
    let e = fails(&with_model(
        &["vq", "encode", "missing.png"],
        &["-o", o],
        &m,
    ));
    assert!(e.contains("missing.png"), "{e}");
    // Out-of-range token.
    let (shape, mut v) = npy::read_npy_i64(&tok).unwrap();
    v[2 * 16 + 3] = 32;
    let bad = dir.path().join("bad.npy");
    npy::write_npy_i64(&bad, &shape, &v).unwrap();
    let png = dir.path().join("out.png");
    let e = fails(&with_model(
        &["vq", "decode", bad.to_str().unwrap()],
        &["-o", png.to_str().unwrap()],
        &m[..6],
    ));
    assert!(
        e.contains("bad.npy") && e.contains("token 32") && e.contains("n_embed = 32"),
        "{e}"
    );
    // Float tokens, wrong rank.
    let f = dir.path().join("f.npy");
    npy::write_npy_f32(&f, &[16, 16], &vec![1.0; 256]).unwrap();
    let e = fails(&with_model(
        &["vq", "decode", f.to_str().unwrap()],
        &["-o", png.to_str().unwrap()],
        &m[..6],
    ));
    assert!(e.contains("f.npy") && e.contains("integer"), "{e}");
    let r1 = dir.path().join("r1.npy");
    npy::write_npy_i64(&r1, &[256], &v).unwrap();
    let e = fails(&[
        "vq",
        "edit",
        r1.to_str().unwrap(),
        "--swap",
        "0,0:1,1",
        "-o",
        o,
    ]);
    assert!(e.contains("r1.npy") && e.contains("shape"), "{e}");
    // Swap outside the grid, malformed swap.
    let e = fails(&["vq", "edit", t, "--swap", "0,0:16,2", "-o", o]);
    assert!(e.contains("(16, 2)") && e.contains("16x16"), "{e}");
    let e = fails(&["vq", "edit", t, "--swap", "0,0-1,1", "-o", o]);
    assert!(e.contains("R1,C1:R2,C2"), "{e}");
    // No weights anywhere.
    let e = fails(&["vq", "decode", t, "-o", png.to_str().unwrap()]);
    assert!(
        e.contains("default VQGAN weights") && e.contains("--weights"),
        "{e}"
    );
    // A malicious checkpoint as weights.
    let evil = fx("evil.ckpt").display().to_string();
    let cfg = fx("tiny_config.json").display().to_string();
    let e = fails(&[
        "vq",
        "decode",
        t,
        "--weights",
        &evil,
        "--config",
        &cfg,
        "-o",
        png.to_str().unwrap(),
    ]);
    assert!(e.contains("os.system"), "{e}");
    assert!(!out.exists() && !png.exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("tmp") || n.starts_with("out"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn weights_inspect_and_convert() {
    let dir = tempfile::tempdir().unwrap();
    let s = ok(&["weights", "inspect", fx("tiny.ckpt").to_str().unwrap()]);
    assert!(
        s.contains("quantize.embedding.weight") && s.contains("[32, 8]"),
        "{s}"
    );
    assert!(s.contains("epoch: 3") && s.contains("154 tensors"), "{s}");
    let out = dir.path().join("w").join("model.safetensors");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let yaml = fx("tiny_model.yaml").display().to_string();
    ok(&[
        "weights",
        "convert",
        fx("tiny.ckpt").to_str().unwrap(),
        "--config",
        &yaml,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(out.parent().unwrap().join("config.json").is_file());
    let s = ok(&["weights", "inspect", out.to_str().unwrap()]);
    assert!(
        s.contains("151 tensors") && !s.lines().any(|l| l.starts_with("loss.")),
        "{s}"
    );
    // The converted weights are the default when IMGSEQ_WEIGHTS_DIR points at them.
    let img = dir.path().join("in.png");
    picture(&img, 32, 32);
    let o = Command::new(env!("CARGO_BIN_EXE_imgseq"))
        .args(["vq", "encode", img.to_str().unwrap(), "--size", "32", "-o"])
        .arg(dir.path().join("t.npy"))
        .env("IMGSEQ_WEIGHTS_DIR", dir.path())
        .output()
        .unwrap();
    assert!(
        !o.status.success(),
        "weights dir layout is <dir>/vqgan/model.safetensors"
    );
    std::fs::rename(dir.path().join("w"), dir.path().join("vqgan")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_imgseq"))
        .args(["vq", "encode", img.to_str().unwrap(), "--size", "32", "-o"])
        .arg(dir.path().join("t.npy"))
        .env("IMGSEQ_WEIGHTS_DIR", dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let e = fails(&["weights", "inspect", fx("evil.ckpt").to_str().unwrap()]);
    assert!(e.contains("evil.ckpt") && e.contains("os.system"), "{e}");
}

/// The README's main job: the shipped default VQGAN (found without --weights) turns the
/// sample photo (assets/coffee.png, never seen in training) into 576 tokens and back, at the
/// quality recorded in the README (17.75 dB / SSIM 0.537 when shipped; guards against a broken
/// or swapped default model).
#[test]
fn shipped_default_vqgan_rebuilds_the_sample_photo() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("coffee");
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/coffee.png");
    let o = Command::new(env!("CARGO_BIN_EXE_imgseq"))
        .args(["vq", "roundtrip", sample.to_str().unwrap(), "-o"])
        .arg(&out)
        .env_remove("IMGSEQ_WEIGHTS_DIR")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = String::from_utf8(o.stdout).unwrap();
    assert!(s.contains("weights/vqgan/model.safetensors"), "{s}");
    assert!(s.contains("tokens: 576 (24x24 grid"), "{s}");
    let figure = |key: &str| -> f64 {
        s.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no `{key}` line in {s}"))
    };
    let (psnr, ssim) = (figure("PSNR: "), figure("SSIM: "));
    assert!(psnr > 17.0 && ssim > 0.50, "PSNR {psnr} / SSIM {ssim}");
    let toks = npy::read_npy_i64(out.join("tokens.npy")).unwrap();
    assert_eq!(toks.0, vec![24, 24]);
    assert!(toks.1.iter().all(|&t| (0..1024).contains(&t)));
    let rec = read_png(&out.join("recon.png"));
    assert_eq!(rec.dimensions(), (384, 384));
    assert_eq!(read_png(&out.join("side_by_side.png")).height(), 384);
}
