//! `imgseq tokenize --model TOWER`: whole datasets → feature shards (a vision tower's (N, D)
//! embeddings per sample) through the dataset job of token and latent shards — equal to
//! `imgseq encode` of each picture up to float16 (or bfloat16) rounding in both formats, the
//! layer choice in the manifest, job arrays exact, resumable after SIGKILL, and a resume
//! with another --layer or --dtype refused.

use crate::common::{fails, ok};
use crate::tokenize::{
    folder, job_array_parts_merge_into_what_one_process_writes,
    killed_runs_resume_to_the_uninterrupted_result, model_args, JobCmd,
};
use imgseq_core::npy;
use imgseq_shards::shard::read_float_shard;
use imgseq_shards::Manifest;
use std::path::{Path, PathBuf};

fn tower(name: &str) -> String {
    let p: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name);
    p.display().to_string()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// LLaVA's choice on the tiny CLIP tower; `other`: the last layer instead.
fn clip_job() -> JobCmd {
    JobCmd {
        head: &["tokenize"],
        model: strings(&[
            "--model",
            &tower("clip/vision"),
            "--layer",
            "-2",
            "--patches-only",
        ]),
        other: strings(&[
            "--model",
            &tower("clip/vision"),
            "--layer",
            "-1",
            "--patches-only",
        ]),
    }
}

/// (key, shape, values) of every sample of a feature folder.
fn features(dir: &Path) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let m = Manifest::read_features(&dir.join("manifest.json")).unwrap();
    m.shard_paths(dir)
        .iter()
        .flat_map(|p| read_float_shard(p, m.kind()).unwrap())
        .map(|s| (s.key, s.shape, s.values))
        .collect()
}

/// (model, options, shape per picture, output recorded, patches_only recorded)
type Case<'a> = (&'a str, &'a [&'a str], [usize; 2], &'a str, bool);

fn run(a: &[String]) -> String {
    ok(&a.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn feature_shards_equal_single_image_encode_for_clip_siglip_and_dinov2_in_both_formats() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("imgs");
    let paths = folder(&src, 3);
    let s = |p: &Path| p.display().to_string();
    let cases: [Case; 4] = [
        // 32² input, 8² patches: 16 patches (+ CLS).
        (
            "clip/vision",
            &["--layer", "-2", "--patches-only"],
            [16, 32],
            "hidden_states[-2]",
            true,
        ),
        ("clip/vision", &[], [17, 32], "last_hidden_state", false),
        ("siglip/vision", &[], [16, 32], "last_hidden_state", false),
        // 40² input: 25 patches + CLS + 2 registers.
        (
            "dinov2/registers",
            &["--size", "40", "--upscale"],
            [28, 32],
            "last_hidden_state",
            false,
        ),
    ];
    for (i, (name, opts, shape, output, patches_only)) in cases.into_iter().enumerate() {
        let enc = d.path().join(format!("enc{i}.npy"));
        let mut a = strings(&["encode"]);
        a.extend(paths.iter().map(|p| s(p)));
        a.extend(strings(&["--model", &tower(name)]));
        a.extend(strings(opts));
        a.extend(strings(&["-o", &s(&enc)]));
        run(&a);
        let (eshape, want) = npy::read_npy_f32(&enc).unwrap();
        assert_eq!(eshape, [3, shape[0], shape[1]], "{name} {opts:?}");
        let per = want.len() / paths.len();
        for (format, dtype) in [
            ("wds", "float16"),
            ("parquet", "float16"),
            ("wds", "bfloat16"),
            ("parquet", "bfloat16"),
        ] {
            let out = d.path().join(format!("{format}-{dtype}-{i}"));
            let mut a = strings(&["tokenize", &s(&src), "--model", &tower(name)]);
            a.extend(strings(opts));
            a.extend(strings(&[
                "--format",
                format,
                "--dtype",
                dtype,
                "--shard-size",
                "2",
                "--batch-size",
                "2",
                "-o",
                &s(&out),
            ]));
            let said = run(&a);
            assert!(said.contains("features each"), "{said}");
            let got = features(&out);
            let mut keys: Vec<&str> = got.iter().map(|(k, _, _)| k.as_str()).collect();
            keys.sort_unstable();
            assert_eq!(keys, ["even/000", "even/002", "odd/001"], "{format}");
            // float16 keeps 11 significant bits, bfloat16 8.
            let rel = if dtype == "float16" {
                1.0 / 1024.0
            } else {
                1.0 / 128.0
            };
            let mut worst = 0f32;
            for (key, sh, v) in &got {
                // Picture k is `encode`'s k-th.
                let k: usize = key[key.len() - 3..].parse().unwrap();
                assert_eq!(sh, &shape, "{name} {format}");
                for (g, w) in v.iter().zip(&want[k * per..(k + 1) * per]) {
                    let err = (g - w).abs() - w.abs() * rel;
                    worst = worst.max(err);
                    assert!(err <= 1e-6, "{name} {format} {dtype}: {g} vs {w}");
                }
            }
            let m = Manifest::read_features(&out.join("manifest.json")).unwrap();
            let f = m.tokenizer.features.as_ref().unwrap();
            assert_eq!(m.format, "imgseq-features/1");
            assert_eq!((f.dtype.as_str(), &f.shape[..]), (dtype, &shape[..]));
            assert_eq!(f.output.as_deref(), Some(output));
            assert_eq!(f.patches_only, Some(patches_only));
            assert_eq!(m.tokenizer.grid, shape);
            assert_eq!(m.samples, 3);
        }
    }
    // Token readers refuse a feature folder with one line.
    let e = fails(&["vq", "stats", &s(&d.path().join("wds-float16-0"))]);
    assert!(e.contains("holds feature shards"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
}

#[test]
fn feature_job_array_parts_merge_into_exactly_what_one_process_writes() {
    job_array_parts_merge_into_what_one_process_writes(&clip_job(), "wds", "tar");
    job_array_parts_merge_into_what_one_process_writes(&clip_job(), "parquet", "parquet");
}

#[test]
fn a_feature_run_killed_at_random_moments_resumes_to_the_uninterrupted_result() {
    killed_runs_resume_to_the_uninterrupted_result(&clip_job(), "wds");
    killed_runs_resume_to_the_uninterrupted_result(&clip_job(), "parquet");
}

#[test]
fn resuming_a_feature_run_with_another_layer_or_dtype_is_refused_naming_the_setting() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("imgs");
    folder(&src, 3);
    let out = d.path().join("out").display().to_string();
    let src = src.display().to_string();
    let job = clip_job();
    let mut first = strings(&["tokenize", &src]);
    first.extend(job.model.clone());
    first.extend(strings(&["-o", &out]));
    run(&first);
    let before = std::fs::read(Path::new(&out).join("manifest.json")).unwrap();
    for (change, names) in [
        (&["--layer", "-1"][..], "layer"),
        (&["--dtype", "bfloat16"][..], "dtype"),
        (&["--pooled"][..], "tokenizer.config"),
    ] {
        let mut a = strings(&["tokenize", &src, "--model", &tower("clip/vision")]);
        if change[0] != "--pooled" {
            a.extend(strings(&["--patches-only"]));
            if change[0] != "--layer" {
                a.extend(strings(&["--layer", "-2"]));
            }
        }
        a.extend(strings(change));
        a.extend(strings(&["-o", &out]));
        let e = fails(&a.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(
            e.contains("run.json") && e.contains(names) && e.contains("new folder"),
            "{change:?}: {e}"
        );
        assert_eq!(e.trim().lines().count(), 1, "{e}");
    }
    // Nothing of the finished run changed.
    let after = std::fs::read(Path::new(&out).join("manifest.json")).unwrap();
    assert_eq!(before, after);
    // Token shards take no --dtype.
    let mut a = strings(&["tokenize", &src]);
    a.extend(model_args());
    a.extend(strings(&[
        "--dtype",
        "bfloat16",
        "-o",
        &d.path().join("tok").display().to_string(),
    ]));
    let e = fails(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(e.contains("dtype") && e.contains("token shards"), "{e}");
    assert!(!d.path().join("tok").exists());
}
