//! `imgseq vq tokenize` with Parquet: img2dataset's and Hugging Face `datasets`' Parquet files
//! as sources (the fixtures pyarrow wrote, `scripts/make_parquet_fixtures.py`) give the tokens
//! of `vq encode`; `--format parquet` shards hold what the WebDataset shards hold; damaged or
//! unreadable Parquet sources are one-line errors, damaged rows are listed and skipped.

use crate::common::{fails, ok};
use crate::tokenize::{args, encode_one, files, folder, model_args, picture, shard_tokens};
use imgseq_core::npy;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn pq_fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/parquet")
        .join(name)
}

fn errors(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("errors.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn tokens_from_img2dataset_and_hugging_face_parquet_equal_vq_encode() {
    let d = tempfile::tempdir().unwrap();
    let m = model_args();
    let (i2d, hf) = (pq_fx("img2dataset.parquet"), pq_fx("hf_datasets.parquet"));
    let out = d.path().join("out");
    let s = ok(&args(
        &[
            "vq",
            "tokenize",
            i2d.to_str().unwrap(),
            hf.to_str().unwrap(),
        ],
        &m,
        &[
            "--format",
            "parquet",
            "--shard-size",
            "3",
            "-o",
            out.to_str().unwrap(),
        ],
    ));
    assert!(s.contains("8 tokenized, 1 skipped"), "{s}");
    let got = shard_tokens(&out);
    let keys: Vec<&str> = got.iter().map(|(k, _, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "000000001",
            "000000004",
            "000000007",
            "hf_datasets-00000",
            "hf_datasets-00001",
            "hf_datasets-00002",
            "hf_datasets-00003",
            "hf_datasets-00004"
        ]
    );
    // Hugging Face rows hold lossless PNGs of picture(i): the same pixels saved here, encoded
    // by `vq encode`, give the same tokens (nothing of the Parquet reader is involved).
    for ((key, toks, j), (i, label)) in
        got[3..]
            .iter()
            .zip([(0, 0), (3, 3), (6, 1), (8, 4), (9, 2)])
    {
        let png = d.path().join(format!("p{i}.png"));
        picture(i).save(&png).unwrap();
        assert_eq!(toks, &encode_one(&png, &m, d.path()), "{key}");
        assert_eq!(j["label"], label, "{key}");
        assert_eq!(j["json"]["image.path"], format!("img_{i}.png"));
        assert_eq!(
            j["source"],
            format!("{}:{}", hf.display(), key[12..].parse::<usize>().unwrap())
        );
        assert_eq!(j["grid"], json!([16, 16]));
    }
    // img2dataset rows hold JPEGs: their bytes (checked against the file's own sha256 column
    // in imgseq-shards' tests) saved as .jpg files and encoded by `vq encode`.
    let idx = imgseq_shards::source::index(std::slice::from_ref(&i2d)).unwrap();
    let jpgs: Vec<PathBuf> = [0usize, 1, 3]
        .iter()
        .map(|&r| {
            let p = d.path().join(format!("{}.jpg", idx[r].key));
            std::fs::write(&p, idx[r].load().unwrap().image).unwrap();
            p
        })
        .collect();
    let npy_out = d.path().join("jpgs.npy");
    let mut cmd: Vec<&str> = vec!["vq", "encode"];
    cmd.extend(jpgs.iter().map(|p| p.to_str().unwrap()));
    ok(&args(&cmd, &m, &["-o", npy_out.to_str().unwrap()]));
    let (shape, all) = npy::read_npy_i64(&npy_out).unwrap();
    assert_eq!(shape, vec![3, 16, 16]);
    for (k, (key, toks, j)) in got[..3].iter().enumerate() {
        assert_eq!(toks[..], all[k * 256..(k + 1) * 256], "{key}");
        let n = key.trim_start_matches('0');
        assert_eq!(j["caption"], format!("picture number {n}"));
        assert_eq!(j["json"]["url"], format!("https://example.com/{n}.jpg"));
        assert_eq!(j["json"]["status"], "success");
        assert_eq!(j["original_size"], json!([40, 36]));
    }
    // The failed download is listed with img2dataset's own error message.
    let e = errors(&out);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0]["key"], "000000005");
    assert_eq!(e[0]["source"], format!("{}:2", i2d.display()));
    assert!(
        e[0]["reason"]
            .as_str()
            .unwrap()
            .ends_with("row 2: no image, jpg is null (HTTP Error 404: Not Found)"),
        "{e:?}"
    );
}

#[test]
fn parquet_shards_hold_what_webdataset_shards_hold() {
    let d = tempfile::tempdir().unwrap();
    let m = model_args();
    let src = d.path().join("imgs");
    folder(&src, 5);
    let run = |format: &str| {
        let out = d.path().join(format);
        ok(&args(
            &["vq", "tokenize", src.to_str().unwrap()],
            &m,
            &[
                "--shard-size",
                "2",
                "--format",
                format,
                "-o",
                out.to_str().unwrap(),
            ],
        ));
        out
    };
    let (wds, pq) = (run("wds"), run("parquet"));
    assert_eq!(shard_tokens(&wds), shard_tokens(&pq));
    let names: Vec<String> = files(&pq)
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.ends_with(".parquet"))
        .collect();
    assert_eq!(
        names,
        [
            "shard-000000.parquet",
            "shard-000001.parquet",
            "shard-000002.parquet"
        ]
    );
    // The manifest lists every shard with its rows, size and SHA-256.
    let man = imgseq_shards::Manifest::read(&pq.join("manifest.json")).unwrap();
    assert_eq!(man.samples, 5);
    for r in &man.shards {
        let p = pq.join(&r.name);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), r.bytes);
        assert_eq!(imgseq_shards::wds::sha256_file(&p).unwrap(), r.sha256);
        assert_eq!(
            imgseq_shards::shard::read_shard(&p).unwrap().len(),
            r.samples
        );
    }
    // stats and detokenize read Parquet shard folders as they read tar ones.
    let stats = |dir: &Path| ok(&["vq", "stats", dir.to_str().unwrap()]);
    assert_eq!(stats(&wds), stats(&pq));
    let pics = d.path().join("pics");
    ok(&args(
        &["vq", "detokenize", pq.to_str().unwrap()],
        &m[..6],
        &["--limit", "1", "-o", pics.to_str().unwrap()],
    ));
    assert_eq!(files(&pics)[0].0, "even__000.png");
}

#[test]
fn damaged_and_unreadable_parquet_sources_are_one_line_errors_or_listed_rows() {
    let d = tempfile::tempdir().unwrap();
    let m = model_args();
    let hf = pq_fx("hf_datasets.parquet");
    let bytes = std::fs::read(&hf).unwrap();
    let tok = |src: &Path, extra: &[&str]| {
        let out = d.path().join("o").join(src.file_name().unwrap());
        let mut tail = extra.to_vec();
        tail.extend(["-o", out.to_str().unwrap()]);
        (
            args(&["vq", "tokenize", src.to_str().unwrap()], &m, &tail)
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
            out,
        )
    };
    let run_fails = |src: &Path, extra: &[&str]| {
        let (a, _) = tok(src, extra);
        fails(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    // Truncated (the regression this guards: no panic, one line naming the file).
    let cut = d.path().join("cut.parquet");
    for keep in [bytes.len() / 2, bytes.len() - 3] {
        std::fs::write(&cut, &bytes[..keep]).unwrap();
        let e = run_fails(&cut, &[]);
        assert!(
            e.contains(&format!("{}: not a readable Parquet file", cut.display())),
            "{e}"
        );
    }
    // A codec imgseq does not read, and a column that is not there.
    let e = run_fails(&pq_fx("zstd.parquet"), &[]);
    assert!(
        e.contains("zstd.parquet: column url is compressed with ZSTD"),
        "{e}"
    );
    let e = run_fails(&hf, &["--image-column", "photo"]);
    assert!(
        e.contains("hf_datasets.parquet: no column photo (--image-column)"),
        "{e}"
    );
    let e = run_fails(&hf, &["--image-column", "label"]);
    assert!(e.contains("column label holds no image bytes"), "{e}");
    // Damage inside the first row group's pages (the first image's bytes): what cannot be
    // read or decoded of that row group is listed and skipped, the other row groups tokenized.
    let bad = d.path().join("bad.parquet");
    let mut damaged = bytes.clone();
    let at = damaged.windows(4).position(|w| w == b"IDAT").unwrap();
    for b in &mut damaged[at..at + 40] {
        *b ^= 0xa5;
    }
    std::fs::write(&bad, &damaged).unwrap();
    let (a, out) = tok(&bad, &[]);
    let s = ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let e = errors(&out);
    let keys: Vec<&str> = e.iter().map(|v| v["key"].as_str().unwrap()).collect();
    assert!(
        keys == ["bad-00000"] || keys == ["bad-00000", "bad-00001"],
        "{keys:?}"
    );
    assert!(
        s.contains(&format!("{} tokenized, {} skipped", 5 - e.len(), e.len())),
        "{s}"
    );
    for v in &e {
        let r = v["reason"].as_str().unwrap();
        assert!(r.contains("bad.parquet") && !r.contains('\n'), "{r}");
    }
}
