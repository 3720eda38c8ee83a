//! The dataset commands (`vq tokenize | detokenize | stats | merge-manifests`) against hostile
//! flags and folders: sizes refused before allocating, outputs never over inputs, failed
//! commands leaving nothing, and `detokenize` reporting exactly what it wrote.

use crate::common::{fails, ok};
use crate::tokenize::{args, folder, model_args};
use imgseq_shards::manifest::{shard_name, ShardRecord, FORMAT, MANIFEST};
use imgseq_shards::wds::{tokens_npy, ShardWriter};
use imgseq_shards::{Manifest, TokenizerInfo};
use std::path::Path;

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// A shard folder of the tiny VQ (32 codes, 16×16 grids): shard `i` holds `keys[i]`, each
/// grid filled with `token`.
pub(crate) fn shard_folder(dir: &Path, shards: &[(&[&str], i64)]) {
    std::fs::create_dir_all(dir).unwrap();
    let mut records = Vec::new();
    for (i, (keys, token)) in shards.iter().enumerate() {
        let mut w = ShardWriter::create(dir.join(shard_name(i))).unwrap();
        for k in keys.iter() {
            let j = serde_json::json!({ "key": k });
            w.append(k, &tokens_npy(16, 16, &[*token; 256], 32), &j)
                .unwrap();
        }
        let f = w.finish().unwrap();
        records.push(ShardRecord {
            index: i,
            name: shard_name(i),
            samples: f.samples,
            errors: 0,
            first: 0,
            end: 0,
            bytes: f.bytes,
            sha256: f.sha256,
        });
    }
    let mut m = Manifest {
        format: FORMAT.into(),
        tokenizer: TokenizerInfo {
            family: "taming".into(),
            weights: "tiny".into(),
            weights_sha256: String::new(),
            config: serde_json::json!({}),
            n_codes: 32,
            size: 32,
            grid: [16, 16],
            crop: "centre".into(),
            upscale: false,
            precision: "f32".into(),
            latent: None,
            features: None,
            scales: None,
        },
        inputs: vec!["synthetic".into()],
        input_samples: 0,
        shard_size: 1,
        num_shards: shards.len(),
        job: None,
        shards: records,
        samples: 0,
        errors: 0,
    };
    m.recount();
    m.write(&dir.join(MANIFEST)).unwrap();
}

fn vq_only() -> Vec<String> {
    model_args()[..6].to_vec()
}

#[test]
fn tokenize_refuses_batch_and_job_counts_too_big_before_reading_anything() {
    let d = tempfile::tempdir().unwrap();
    folder(&d.path().join("src"), 2);
    let (src, out) = (s(&d.path().join("src")), s(&d.path().join("out")));
    let m = model_args();
    let e = fails(&args(
        &["vq", "tokenize", &src],
        &m,
        &["-o", &out, "--batch-size", "100000000"],
    ));
    assert!(e.contains("--batch-size 100000000"), "{e}");
    let e = fails(&args(
        &["vq", "tokenize", &src],
        &m,
        &["-o", &out, "--num-shards", "1000000000000000000"],
    ));
    assert!(
        e.contains("--num-shards 1000000000000000000 must be between 1 and"),
        "{e}"
    );
    assert!(!Path::new(&out).exists());
}

#[test]
fn stats_plot_never_replaces_the_folders_manifest_or_shards() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("tok");
    shard_folder(&dir, &[(&["a", "b"], 3)]);
    let manifest = dir.join(MANIFEST);
    let before = std::fs::read(&manifest).unwrap();
    for target in [manifest.clone(), dir.join(shard_name(0))] {
        let e = fails(&["vq", "stats", &s(&dir), "--plot", &s(&target)]);
        assert!(e.contains("input"), "{e}");
    }
    assert_eq!(std::fs::read(&manifest).unwrap(), before);
    let plot = d.path().join("plot.png");
    ok(&["vq", "stats", &s(&dir), "--plot", &s(&plot)]);
    assert!(plot.is_file());
}

#[test]
fn detokenize_failure_leaves_no_output_folder() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("tok");
    // The first shard decodes, the second holds a token outside the 32 codes.
    shard_folder(&dir, &[(&["a", "b"], 3), (&["c"], 40)]);
    let out = d.path().join("pngs");
    let v = vq_only();
    let e = fails(&args(
        &["vq", "detokenize", &s(&dir)],
        &v,
        &["-o", &s(&out), "--batch-size", "1"],
    ));
    assert!(e.contains("outside the codebook"), "{e}");
    assert!(
        !out.exists(),
        "left {:?}",
        std::fs::read_dir(&out).map(|r| r.count())
    );
}

#[test]
fn detokenize_reports_exactly_what_it_wrote() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("tok");
    // Keys repeated in a shard, and two keys that map to one file name.
    shard_folder(&dir, &[(&["a", "a", "x/y", "x__y"], 3)]);
    let out = d.path().join("pngs");
    let v = vq_only();
    let stdout = ok(&args(
        &["vq", "detokenize", &s(&dir)],
        &v,
        &["-o", &s(&out)],
    ));
    assert!(stdout.contains("wrote 4 images"), "{stdout}");
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["a.png", "a_2.png", "x__y.png", "x__y_2.png"]);
}

#[test]
fn stats_and_detokenize_refuse_a_tampered_shard_unless_no_verify() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("tok");
    shard_folder(&dir, &[(&["a"], 3)]);
    let p = dir.join(shard_name(0));
    let mut b = std::fs::read(&p).unwrap();
    // The same size, one letter of a JSON record changed: a valid shard, not the one recorded.
    let at = b.windows(7).position(|w| w == b"{\"key\":").unwrap() + 2;
    b[at] = b'K';
    std::fs::write(&p, &b).unwrap();
    let e = fails(&["vq", "stats", &s(&dir)]);
    assert!(e.contains("SHA-256 differs"), "{e}");
    ok(&["vq", "stats", &s(&dir), "--no-verify"]);
}
