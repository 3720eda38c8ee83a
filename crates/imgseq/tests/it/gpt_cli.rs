//! `imgseq gpt`: train (exact resume) → sample → complete → eval on synthetic token shards with
//! the tiny f2 VQGAN fixture (32 codes, 16×16 tokens), and the one-line errors of bad input.

use crate::common;
use common::{fails, ok};

use image::{Rgb, RgbImage};
use imgseq_core::npy;
use imgseq_shards::manifest::{shard_name, ShardRecord, FORMAT, MANIFEST};
use imgseq_shards::wds::{tokens_npy, ShardWriter};
use imgseq_shards::{Manifest, TokenizerInfo};
use serde_json::json;
use std::path::{Path, PathBuf};

const CLASSES: [&str; 3] = ["tee", "boot", "bag"];

fn vq() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/vqgan/tiny.safetensors")
        .display()
        .to_string()
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// `n` labelled 16×16 grids over `n_codes` codes in one shard with a manifest.
fn write_shards(dir: &Path, n: usize, n_codes: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let name = shard_name(0);
    let mut w = ShardWriter::create(dir.join(&name)).unwrap();
    for i in 0..n {
        let c = i % 3;
        let toks: Vec<i64> = (0..256)
            .map(|p| ((c * 7 + p / 16 + i % 2) % n_codes) as i64)
            .collect();
        let j = json!({"key": format!("{i:04}"), "label": c, "class": CLASSES[c]});
        w.append(&format!("{i:04}"), &tokens_npy(16, 16, &toks, n_codes), &j)
            .unwrap();
    }
    let f = w.finish().unwrap();
    let mut m = Manifest {
        format: FORMAT.into(),
        tokenizer: TokenizerInfo {
            family: "taming".into(),
            weights: vq(),
            weights_sha256: String::new(),
            config: json!({}),
            n_codes,
            size: 32,
            grid: [16, 16],
            crop: "center".into(),
            upscale: false,
            precision: "f32".into(),
            latent: None,
            features: None,
            scales: None,
        },
        inputs: vec!["synthetic".into()],
        input_samples: n,
        shard_size: n,
        num_shards: 1,
        job: None,
        shards: vec![ShardRecord {
            index: 0,
            name,
            samples: f.samples,
            errors: 0,
            first: 0,
            end: n,
            bytes: f.bytes,
            sha256: f.sha256,
        }],
        samples: 0,
        errors: 0,
    };
    m.recount();
    m.write(&dir.join(MANIFEST)).unwrap();
}

/// A tiny model's training command (`--n-head` as given: 2 is valid for `--n-embd 16`).
fn train_args<'a>(
    tokens: &'a str,
    out: &'a str,
    heads: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut v = vec![
        "gpt",
        "train",
        "--tokens",
        tokens,
        "--val",
        tokens,
        "-o",
        out,
        "--n-embd",
        "16",
        "--n-layer",
        "1",
        "--n-head",
        heads,
        "--steps",
        "6",
        "--batch-size",
        "4",
        "--warmup-steps",
        "2",
        "--eval-every",
        "2",
        "--checkpoint-every",
        "2",
        "--lr",
        "1e-2",
    ];
    v.extend_from_slice(extra);
    v
}

#[test]
fn gpt_train_resume_sample_complete_eval_end_to_end() {
    let d = tempfile::tempdir().unwrap();
    let tokens = d.path().join("tok");
    write_shards(&tokens, 12, 32);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    let (ts, sa, sb) = (s(&tokens), s(&a), s(&b));
    ok(&train_args(&ts, &sa, "2", &[]));
    ok(&train_args(&ts, &sb, "2", &["--stop-at", "3"]));
    assert!(std::fs::read_to_string(b.join("state.json"))
        .unwrap()
        .contains("\"step\": 3"));
    ok(&["gpt", "train", "-o", &sb, "--resume"]);
    for f in ["model.safetensors", "optimizer.safetensors"] {
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f}"
        );
    }
    let log = std::fs::read_to_string(a.join("eval.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 3);
    assert!(log.contains("val_bits_per_token"));

    // Sample: a labelled grid and the tokens.
    let grid = d.path().join("grid.png");
    ok(&[
        "gpt",
        "sample",
        "--weights",
        &sa,
        "--class",
        "boot",
        "--class",
        "0",
        "-n",
        "2",
        "-o",
        &s(&grid),
        "--top-k",
        "8",
        "--seed",
        "3",
    ]);
    let img = image::open(&grid).unwrap();
    assert!(img.width() > 2 * 32 * 2 && img.height() > 2 * 32 * 2);
    let (shape, toks) = npy::read_npy_i64(grid.with_extension("npy")).unwrap();
    assert_eq!(shape, [4, 16, 16]);
    assert!(toks.iter().all(|&t| (0..32).contains(&t)));
    // Same seed, same tokens.
    let grid2 = d.path().join("grid2.png");
    ok(&[
        "gpt",
        "sample",
        "--weights",
        &sa,
        "--class",
        "boot",
        "--class",
        "0",
        "-n",
        "2",
        "-o",
        &s(&grid2),
        "--top-k",
        "8",
        "--seed",
        "3",
        "--batch",
        "1",
    ]);
    assert_eq!(
        npy::read_npy_i64(grid2.with_extension("npy")).unwrap().1,
        toks
    );

    // Complete: original | kept | 2 completions.
    let photo = d.path().join("photo.png");
    RgbImage::from_fn(32, 32, |x, y| Rgb([(x * 8) as u8, (y * 8) as u8, 90]))
        .save(&photo)
        .unwrap();
    let out = d.path().join("comp.png");
    ok(&[
        "gpt",
        "complete",
        &s(&photo),
        "--weights",
        &sa,
        "--keep-rows",
        "6",
        "-n",
        "2",
        "-o",
        &s(&out),
        "--scale",
        "1",
    ]);
    let c = image::open(&out).unwrap();
    assert!(c.width() >= 4 * 32 && c.height() >= 32);

    // Eval: bits per token as JSON.
    let j: serde_json::Value =
        serde_json::from_str(&ok(&["gpt", "eval", "--weights", &sa, "--tokens", &ts])).unwrap();
    let bpt = j["bits_per_token"].as_f64().unwrap();
    assert!(bpt > 0.0 && bpt < 5.0, "{bpt}");
    assert_eq!(j["sequences"], 12);
}

#[test]
fn gpt_bad_inputs_are_one_line_errors() {
    let d = tempfile::tempdir().unwrap();
    let tokens = d.path().join("tok");
    write_shards(&tokens, 8, 64);
    let run = d.path().join("run");
    let (ts, sr) = (s(&tokens), s(&run));
    ok(&train_args(&ts, &sr, "2", &[]));
    let g = s(&d.path().join("g.png"));
    // No default model shipped in the test environment.
    let e = fails(&["gpt", "sample", "-o", &g]);
    assert!(e.contains("gpt-fashion-mnist"), "{e}");
    let e = fails(&[
        "gpt",
        "sample",
        "--weights",
        &s(&d.path().join("nope")),
        "-o",
        &g,
    ]);
    assert!(e.contains("no such file or folder"), "{e}");
    // The run's tokens come from a 64-code tokenizer; the fixture VQ has 32.
    let e = fails(&["gpt", "sample", "--weights", &sr, "--vq", &vq(), "-o", &g]);
    assert!(
        e.contains("has 32 codes but the GPT was trained on 64"),
        "{e}"
    );
    let e = fails(&[
        "gpt",
        "sample",
        "--weights",
        &sr,
        "--class",
        "sock",
        "-o",
        &g,
    ]);
    assert!(
        e.contains("--class sock is not a class of the model (classes: tee, boot, bag)"),
        "{e}"
    );
    let e = fails(&["gpt", "sample", "--weights", &sr, "--class", "3", "-o", &g]);
    assert!(e.contains("--class 3 is out of range"), "{e}");
    let e = fails(&[
        "gpt",
        "sample",
        "--weights",
        &sr,
        "-o",
        &s(&sr_file(&d.path().join("a_file")).join("g.png")),
    ]);
    assert!(
        e.contains("not a folder") || e.contains("Not a directory"),
        "{e}"
    );
    let e = fails(&[
        "gpt",
        "sample",
        "--weights",
        &sr,
        "-o",
        &g,
        "--top-p",
        "1.5",
    ]);
    assert!(e.contains("--top-p 1.5 must be in (0, 1]"), "{e}");
    let e = fails(&[
        "gpt",
        "complete",
        &s(&d.path().join("x.png")),
        "--weights",
        &sr,
        "--keep-rows",
        "17",
        "-o",
        &g,
    ]);
    assert!(
        e.contains("--keep-rows 17 is more than the 16 token rows"),
        "{e}"
    );
    assert!(!Path::new(&g).exists());
    // Training: a run is never overwritten; resume needs one; tokens are required.
    let e = fails(&train_args(&ts, &sr, "2", &[]));
    assert!(e.contains("already holds a training run"), "{e}");
    let e = fails(&["gpt", "train", "-o", &s(&d.path().join("r2")), "--resume"]);
    assert!(e.contains("no run to resume"), "{e}");
    let e = fails(&["gpt", "train", "-o", &s(&d.path().join("r3"))]);
    assert!(e.contains("--tokens is required"), "{e}");
    let r4 = s(&d.path().join("r4"));
    let e = fails(&train_args(&ts, &r4, "3", &[]));
    assert!(e.contains("--n-head 3 must divide n_embd 16"), "{e}");
    let e = fails(&[
        "gpt",
        "eval",
        "--weights",
        &sr,
        "--tokens",
        &s(&PathBuf::from("/nonexistent/tok")),
    ]);
    assert!(e.contains("/nonexistent/tok"), "{e}");
}

#[test]
fn gpt_absurd_scales_counts_widths_and_outputs_over_inputs_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let tokens = d.path().join("tok");
    write_shards(&tokens, 8, 32);
    let run = d.path().join("run");
    let (ts, sr) = (s(&tokens), s(&run));
    ok(&train_args(&ts, &sr, "2", &[]));
    let g = s(&d.path().join("g.png"));
    let vq = vq();
    let sample = |extra: &[&str]| {
        let mut a = vec!["gpt", "sample", "--weights", &sr, "--vq", &vq, "-o", &g];
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    for (extra, want) in [
        (vec!["--scale", "0"], "--scale 0 must be between 1 and 64"),
        (
            vec!["--scale", "4294967295"],
            "--scale 4294967295 must be between 1 and 64",
        ),
        (
            vec!["--scale", "64", "-n", "1000"],
            "more than 65535 a side",
        ),
        (vec!["-n", "100000000"], "3 row(s) of 100000000 picture(s)"),
    ] {
        let a = sample(&extra);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let e = fails(&a);
        assert!(e.contains(want), "{extra:?}: {e}");
        assert!(!Path::new(&g).exists());
    }
    let e = fails(&[
        "gpt",
        "eval",
        "--weights",
        &sr,
        "--tokens",
        &ts,
        "--batch",
        "100000000",
    ]);
    assert!(
        e.contains("--batch 100000000") && e.contains("memory"),
        "{e}"
    );
    // `gpt eval --json` never replaces a token input (here: the shard it reads).
    let shard = tokens.join(shard_name(0));
    let before = std::fs::read(&shard).unwrap();
    let e = fails(&[
        "gpt",
        "eval",
        "--weights",
        &sr,
        "--tokens",
        &ts,
        "--json",
        &s(&shard),
    ]);
    assert!(
        e.contains("is also an input") || e.contains("same file as the input"),
        "{e}"
    );
    assert_eq!(std::fs::read(&shard).unwrap(), before);
    // A model too wide for memory is refused before anything is allocated.
    let wide = s(&d.path().join("wide"));
    let mut a = train_args(&ts, &wide, "2", &[]);
    let at = a.iter().position(|&x| x == "16").unwrap();
    a[at] = "65536";
    let e = fails(&a);
    assert!(
        e.contains("parameters") && e.contains("IMGSEQ_MAX_MEMORY_GB"),
        "{e}"
    );
    assert!(!Path::new(&wide).exists());
}

/// A file at `p` (a path that cannot be a folder to write into).
fn sr_file(p: &std::path::Path) -> std::path::PathBuf {
    std::fs::write(p, b"x").unwrap();
    p.to_path_buf()
}
