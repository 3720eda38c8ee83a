//! `imgseq vae tokenize`: whole datasets → latent shards through the dataset job of `vq
//! tokenize` — float16 arrays equal to `vae encode`'s (up to float16 rounding) in both
//! formats, the latent settings in the manifest, job arrays exact, resumable after SIGKILL,
//! and token readers refusing a latent folder with one line.

use crate::common::{fails, ok};
use crate::tokenize::{
    folder, job_array_parts_merge_into_what_one_process_writes,
    killed_runs_resume_to_the_uninterrupted_result, JobCmd,
};
use imgseq_core::npy;
use imgseq_shards::shard::read_float_shard;
use imgseq_shards::Manifest;
use std::path::{Path, PathBuf};

fn fx(name: &str) -> String {
    let p: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/kl")
        .join(name);
    p.display().to_string()
}

fn model(size: &str) -> Vec<String> {
    ["--weights", &fx("sd"), "--size", size]
        .map(String::from)
        .to_vec()
}

fn vae_job() -> JobCmd {
    JobCmd {
        head: &["vae", "tokenize"],
        model: model("32"),
        other: model("16"),
    }
}

#[test]
fn latent_job_array_parts_merge_into_exactly_what_one_process_writes() {
    job_array_parts_merge_into_what_one_process_writes(&vae_job(), "wds", "tar");
    job_array_parts_merge_into_what_one_process_writes(&vae_job(), "parquet", "parquet");
}

#[test]
fn a_latent_run_killed_at_random_moments_resumes_to_the_uninterrupted_result() {
    killed_runs_resume_to_the_uninterrupted_result(&vae_job(), "wds");
    killed_runs_resume_to_the_uninterrupted_result(&vae_job(), "parquet");
}

/// (key, shape, values) of every sample of a latent folder.
fn latents(dir: &Path) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let m = Manifest::read_latents(&dir.join("manifest.json")).unwrap();
    m.shard_paths(dir)
        .iter()
        .flat_map(|p| read_float_shard(p, m.kind()).unwrap())
        .map(|s| (s.key, s.shape, s.values))
        .collect()
}

#[test]
fn latent_shards_equal_vae_encode_in_both_formats_with_and_without_patches() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("imgs");
    let paths = folder(&src, 3);
    let s = |p: &Path| p.display().to_string();
    for (patch, shape) in [(None, vec![4usize, 8, 8]), (Some("2"), vec![16, 16])] {
        let enc = d.path().join("enc.npy");
        let mut a: Vec<String> = vec!["vae".into(), "encode".into()];
        a.extend(paths.iter().map(|p| s(p)));
        a.extend(model("32"));
        if let Some(p) = patch {
            a.extend(["--patch".into(), p.into()]);
        }
        a.extend(["-o".into(), s(&enc)]);
        ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
        let (eshape, want) = npy::read_npy_f32(&enc).unwrap();
        assert_eq!(eshape[1..], shape[..]);
        let per = want.len() / paths.len();
        for format in ["wds", "parquet"] {
            let out = d
                .path()
                .join(format!("{format}-{}", patch.unwrap_or("map")));
            let mut a: Vec<String> = vec!["vae".into(), "tokenize".into(), s(&src)];
            a.extend(model("32"));
            if let Some(p) = patch {
                a.extend(["--patch".into(), p.into()]);
            }
            a.extend(["--format", format, "--shard-size", "2", "-o"].map(String::from));
            a.push(s(&out));
            ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
            let got = latents(&out);
            let mut keys: Vec<&str> = got.iter().map(|(k, _, _)| k.as_str()).collect();
            keys.sort_unstable();
            assert_eq!(keys, ["even/000", "even/002", "odd/001"], "{format}");
            for (key, sh, v) in &got {
                // Picture i is `vae encode`'s i-th.
                let i: usize = key[key.len() - 3..].parse().unwrap();
                assert_eq!(sh, &shape, "{format}");
                for (g, w) in v.iter().zip(&want[i * per..(i + 1) * per]) {
                    // float16: 11 significant bits.
                    assert!(
                        (g - w).abs() <= w.abs() / 1024.0 + 1e-7,
                        "{format}: {g} vs {w}"
                    );
                }
            }
            let m = Manifest::read_latents(&out.join("manifest.json")).unwrap();
            let l = m.tokenizer.latent.as_ref().unwrap();
            assert_eq!(m.format, "imgseq-latents/1");
            assert_eq!((l.dtype.as_str(), &l.shape), ("float16", &shape));
            assert_eq!(l.scaling_factor, 0.18215);
            assert_eq!(l.patch, patch.map(|p| p.parse().unwrap()));
            assert_eq!(m.samples, 3);
        }
    }
    // `vae stats`: a patch sequence is a permutation of the map, so its per-channel
    // statistics are the map's (channel k / p² of a token).
    let stats = |dir: &str| {
        let out = ok(&["vae", "stats", &s(&d.path().join(dir))]);
        assert!(out.contains("samples: 3 in 2 shards"), "{out}");
        out.lines()
            .filter(|l| l.trim_start().starts_with("channel"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let (map, seq) = (stats("wds-map"), stats("parquet-2"));
    assert_eq!(map.len(), 4);
    assert_eq!(map, seq);
    // Token readers refuse a latent folder with one line.
    let e = fails(&["vq", "stats", &s(&d.path().join("wds-map"))]);
    assert!(e.contains("holds latent shards"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
}

#[test]
fn latent_shards_in_bfloat16_hold_the_float16_sets_values_within_bfloat16_rounding() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("imgs");
    folder(&src, 3);
    let s = |p: &Path| p.display().to_string();
    let write = |format: &str, dtype: &str| {
        let out = d.path().join(format!("{format}-{dtype}"));
        let mut a: Vec<String> = vec!["vae".into(), "tokenize".into(), s(&src)];
        a.extend(model("32"));
        a.extend(["--format", format, "--dtype", dtype, "-o"].map(String::from));
        a.push(s(&out));
        ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
        out
    };
    let f16 = latents(&write("wds", "float16"));
    for format in ["wds", "parquet"] {
        let out = write(format, "bfloat16");
        let m = Manifest::read_latents(&out.join("manifest.json")).unwrap();
        assert_eq!(m.tokenizer.latent.as_ref().unwrap().dtype, "bfloat16");
        let bf16 = latents(&out);
        assert_eq!(bf16.len(), 3);
        for ((k1, s1, v1), (k2, s2, v2)) in f16.iter().zip(&bf16) {
            assert_eq!((k1, s1), (k2, s2));
            for (a, b) in v1.iter().zip(v2) {
                // Both round the same float32: within bfloat16's 2⁻⁸ plus float16's 2⁻¹¹.
                assert!(
                    (a - b).abs() <= a.abs() / 200.0 + 1e-6,
                    "{format}: {a} vs {b}"
                );
                assert_eq!(b.to_bits() & 0xFFFF, 0, "not a bfloat16 value: {b}");
            }
        }
        let said = ok(&["vae", "stats", &s(&out)]);
        assert!(said.contains("samples: 3"), "{said}");
    }
}
