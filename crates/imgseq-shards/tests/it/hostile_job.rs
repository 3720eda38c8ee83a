//! The dataset job against hostile folders and shards: resume integrity, edited manifests and
//! records, tampered shards, failed runs leaving nothing behind. A tiny fake tokenizer (a 2×2
//! grid of mean pixel values) stands in for a model.

use candle_core::Tensor;
use image::RgbImage;
use imgseq_core::image_io::PixelRange;
use imgseq_core::input::{Crop, InputSpec};
use imgseq_core::tokenizer::{Description, Encoded, OutputKind, OutputSpec, Tokenizer};
use imgseq_core::tokens::TokenGrid;
use imgseq_core::Result;
use imgseq_shards::job::{self, Options};
use imgseq_shards::manifest::{Manifest, TokenizerInfo};
use imgseq_shards::{ShardFormat, SourceOptions};
use std::path::{Path, PathBuf};

struct Fake;

impl Tokenizer for Fake {
    fn label(&self) -> String {
        "fake".into()
    }
    fn describe(&self) -> Description {
        let out = OutputSpec {
            kind: OutputKind::Codes,
            shape: vec![2, 2],
            codebook_size: Some(256),
            scales: None,
        };
        Description::basic("fake", "fake", self.input(), out)
    }
    fn input(&self) -> InputSpec {
        InputSpec {
            size: 4,
            crop: Crop::ShorterSide,
            channels: 3,
            range: PixelRange::ZeroOne,
        }
    }
    fn codebook_size(&self) -> Option<usize> {
        Some(256)
    }
    fn encode(&self, _: &Tensor) -> Result<Encoded> {
        unreachable!("encode_pictures is overridden")
    }
    fn encode_pictures(&self, imgs: &[RgbImage]) -> Result<Encoded> {
        let data = imgs
            .iter()
            .flat_map(|i| (0..4).map(move |k| i.as_raw()[k * 3] as i64))
            .collect();
        Ok(Encoded::Tokens(TokenGrid {
            n: imgs.len(),
            h: 2,
            w: 2,
            batched: true,
            data,
        }))
    }
    fn decode(&self, t: &TokenGrid) -> Result<Vec<RgbImage>> {
        Ok((0..t.n).map(|_| RgbImage::new(4, 4)).collect())
    }
}

fn info() -> TokenizerInfo {
    TokenizerInfo {
        family: "fake".into(),
        weights: "none".into(),
        weights_sha256: String::new(),
        config: serde_json::json!({}),
        n_codes: 256,
        size: 4,
        grid: [2, 2],
        crop: "shorter side".into(),
        upscale: false,
        precision: "f32".into(),
        latent: None,
        features: None,
        scales: None,
    }
}

fn options() -> Options {
    Options {
        upscale: true,
        pad: false,
        batch: 2,
        shard_size: 2,
        num_jobs: 1,
        job_index: 0,
        progress: false,
        format: ShardFormat::Wds,
        sources: SourceOptions::default(),
        dtype: Default::default(),
    }
}

/// A folder of `n` small PNGs.
fn images(dir: &Path, n: usize) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..n {
        RgbImage::from_pixel(6, 6, image::Rgb([i as u8 * 10, 1, 2]))
            .save(src.join(format!("{i}.png")))
            .unwrap();
    }
    src
}

fn tokenize(src: &Path, out: &Path) -> Result<job::Report> {
    job::tokenize(&Fake, &info(), &[src.to_path_buf()], out, &options())
}

#[test]
fn a_folder_without_run_json_is_not_resumed() {
    let d = tempfile::tempdir().unwrap();
    let src = images(d.path(), 3);
    let out = d.path().join("out");
    tokenize(&src, &out).unwrap();
    std::fs::remove_file(out.join("run.json")).unwrap();
    let e = tokenize(&src, &out).unwrap_err().to_string();
    assert!(
        e.contains("no run.json") && e.contains("new or empty folder"),
        "{e}"
    );
    // A folder of something else, too; an empty one is fine.
    let other = d.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "x").unwrap();
    assert!(tokenize(&src, &other).is_err());
    std::fs::remove_file(other.join("notes.txt")).unwrap();
    tokenize(&src, &other).unwrap();
}

#[test]
fn a_failed_run_that_started_the_folder_leaves_nothing() {
    let d = tempfile::tempdir().unwrap();
    let src = images(d.path(), 1);
    let out = d.path().join("out");
    let o = options();
    // A model that fails once the folder and run.json exist.
    struct NoCodes;
    impl Tokenizer for NoCodes {
        fn label(&self) -> String {
            "broken".into()
        }
        fn describe(&self) -> Description {
            Fake.describe()
        }
        fn input(&self) -> InputSpec {
            Fake.input()
        }
        fn codebook_size(&self) -> Option<usize> {
            Some(256)
        }
        fn encode(&self, _: &Tensor) -> Result<Encoded> {
            Err(imgseq_core::Error::invalid("the model failed"))
        }
    }
    let e = job::tokenize(&NoCodes, &info(), std::slice::from_ref(&src), &out, &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("the model failed"), "{e}");
    assert!(!out.exists(), "the failed run left {out:?}");
    job::tokenize(&Fake, &info(), std::slice::from_ref(&src), &out, &o).unwrap();
}

#[test]
fn a_record_naming_a_path_outside_the_folder_is_not_copied() {
    let d = tempfile::tempdir().unwrap();
    let src = images(d.path(), 3);
    let out = d.path().join("out");
    tokenize(&src, &out).unwrap();
    let rec = out.join("shard-000000.json");
    let text = std::fs::read_to_string(&rec).unwrap();
    std::fs::write(&rec, text.replace("shard-000000.tar", "../../etc/hostname")).unwrap();
    std::fs::remove_file(out.join("manifest.json")).unwrap();
    tokenize(&src, &out).unwrap();
    let m = Manifest::read(&out.join("manifest.json")).unwrap();
    assert_eq!(m.shards[0].name, "shard-000000.tar");
    // A manifest edited so is refused by its readers.
    let mp = out.join("manifest.json");
    let text = std::fs::read_to_string(&mp).unwrap();
    std::fs::write(&mp, text.replace("\"shard-000001.tar\"", "\"../x.tar\"")).unwrap();
    let e = job::stats(&out, true).unwrap_err().to_string();
    assert!(e.contains("not a file of the folder"), "{e}");
}

#[test]
fn readers_with_a_manifest_refuse_a_shard_whose_sha256_differs() {
    let d = tempfile::tempdir().unwrap();
    let src = images(d.path(), 3);
    let out = d.path().join("out");
    tokenize(&src, &out).unwrap();
    assert_eq!(job::stats(&out, true).unwrap().1.samples, 3);
    // Same size, one byte changed (inside a JSON record's padding).
    let p = out.join("shard-000000.tar");
    let mut b = std::fs::read(&p).unwrap();
    let at = b.len() - 1100;
    b[at] ^= 1;
    std::fs::write(&p, &b).unwrap();
    let e = job::stats(&out, true).unwrap_err().to_string();
    assert!(
        e.contains("shard-000000.tar") && e.contains("SHA-256 differs"),
        "{e}"
    );
    let e = job::detokenize(&Fake, &out, 10, 2, true, |_, _| Ok(()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("SHA-256 differs"), "{e}");
    // --no-verify reads it anyway.
    assert!(job::stats(&out, false).is_ok());
}

#[test]
fn manifests_with_absurd_codebooks_grids_or_job_counts_are_refused_before_allocating() {
    let d = tempfile::tempdir().unwrap();
    let src = images(d.path(), 2);
    let out = d.path().join("out");
    tokenize(&src, &out).unwrap();
    let mp = out.join("manifest.json");
    let good = std::fs::read_to_string(&mp).unwrap();
    let edit = |from: &str, to: &str| {
        assert!(good.contains(from), "{from}");
        std::fs::write(&mp, good.replacen(from, to, 1)).unwrap();
        job::stats(&out, false).unwrap_err().to_string()
    };
    let e = edit("\"n_codes\": 256", "\"n_codes\": 1000000000000");
    assert!(e.contains("n_codes 1000000000000"), "{e}");
    let e = edit(
        "\"grid\": [\n      2,\n      2\n    ]",
        "\"grid\": [4096, 4096]",
    );
    assert!(e.contains("4096x4096 token grid"), "{e}");
    let e = edit("\"grid\": [\n      2,\n      2\n    ]", "\"grid\": [0, 0]");
    assert!(e.contains("0x0 token grid"), "{e}");
    // merge-manifests: a part claiming an array of 10^18 jobs.
    std::fs::write(&mp, &good).unwrap();
    let part = good.replacen(
        "\"shards\"",
        "\"job\": {\"index\": 0, \"count\": 1000000000000000000},\n  \"shards\"",
        1,
    );
    std::fs::write(out.join("manifest-0000-of-0002.json"), part).unwrap();
    let e = imgseq_shards::manifest::merge(&out)
        .unwrap_err()
        .to_string();
    assert!(e.contains("1000000000000000000 jobs"), "{e}");
}

/// `vq merge-manifests` aborted (a 10^12-shard list, 8 TB) on parts that claim 10^12 shards:
/// the parts' shards are checked against what they list, and the claim is a one-line error.
#[test]
fn merge_refuses_parts_claiming_a_trillion_shards_without_allocating_them() {
    let d = tempfile::tempdir().unwrap();
    let src = images(d.path(), 2);
    let out = d.path().join("out");
    tokenize(&src, &out).unwrap();
    let good = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&good).unwrap();
    let shards = v["num_shards"].as_u64().unwrap();
    let part = good
        .replacen(
            &format!("\"num_shards\": {shards}"),
            "\"num_shards\": 1000000000000",
            1,
        )
        .replacen(
            "\"shards\"",
            "\"job\": {\"index\": 0, \"count\": 1},\n  \"shards\"",
            1,
        );
    assert!(part.contains("1000000000000"));
    std::fs::write(out.join("manifest-0000-of-0001.json"), part).unwrap();
    let e = imgseq_shards::manifest::merge(&out)
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected 1000000000000"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn a_token_shard_whose_grid_wraps_or_is_empty_is_refused() {
    use imgseq_shards::wds::ShardWriter;
    let d = tempfile::tempdir().unwrap();
    for (h, w, what) in [
        (0usize, 5usize, "0x5"),
        (1 << 32, 1 << 32, "4294967296x4294967296"),
    ] {
        let p = d.path().join(format!("s{h}.tar"));
        let mut sw = ShardWriter::create(&p).unwrap();
        // An npy header claiming the shape, no data: h·w wraps to 0 in 64 bits.
        let npy = imgseq_core::npy::npy_header("<u2", &[h, w]);
        sw.append("a", &npy, &serde_json::Value::Null).unwrap();
        sw.finish().unwrap();
        let e = imgseq_shards::shard::read_shard(&p)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("s{h}.tar")), "{e}");
        assert!(e.contains(what) || e.contains("too large"), "{e}");
    }
}

#[test]
fn tokenize_lists_tar_members_with_path_like_keys_in_errors_jsonl_and_goes_on() {
    let d = tempfile::tempdir().unwrap();
    let mut png = Vec::new();
    RgbImage::from_pixel(6, 6, image::Rgb([9, 1, 2]))
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    let tar = d.path().join("in.tar");
    let mut b = tar::Builder::new(std::fs::File::create(&tar).unwrap());
    for name in ["../../x.png", "good.png", "/abs.png", "good.png"] {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_size(png.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        b.append(&h, png.as_slice()).unwrap();
    }
    b.finish().unwrap();
    let out = d.path().join("out");
    let r = tokenize(&tar, &out).unwrap();
    assert_eq!((r.samples, r.errors), (2, 2));
    let errors = std::fs::read_to_string(out.join("errors.jsonl")).unwrap();
    assert!(
        errors.contains("../../x") && errors.contains("/abs"),
        "{errors}"
    );
    let keys: Vec<String> = (0..2)
        .flat_map(|s| {
            imgseq_shards::shard::read_shard(&out.join(format!("shard-{s:06}.tar"))).unwrap()
        })
        .map(|s| s.key)
        .collect();
    assert_eq!(keys, ["good", "good_2"]);
}
