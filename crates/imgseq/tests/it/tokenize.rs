//! `imgseq vq tokenize`: whole datasets → token shards that plain tools read, equal to
//! `vq encode`, resumable after SIGKILL, split exactly by job arrays, bad images listed; the
//! job-array and kill tests run for both output formats (WebDataset tar and Parquet). The
//! helpers are shared with `tokenize_parquet`.

use crate::common;

use common::{fails, imgseq, ok};
use image::{Rgb, RgbImage};
use imgseq_core::npy;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

pub(crate) fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/vqgan")
        .join(name)
}

pub(crate) fn model_args() -> Vec<String> {
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

pub(crate) fn args<'a>(head: &[&'a str], m: &'a [String], tail: &[&'a str]) -> Vec<&'a str> {
    let mut v = head.to_vec();
    v.extend(m.iter().map(String::as_str));
    v.extend_from_slice(tail);
    v
}

/// Picture `i`: different content per index, 40×36 (cropped to 32²).
pub(crate) fn picture(i: u32) -> RgbImage {
    RgbImage::from_fn(40, 36, |x, y| {
        let check = if ((x + i) / 5 + y / 5).is_multiple_of(2) {
            210
        } else {
            30
        };
        Rgb([
            ((x * 7 + i * 13) % 256) as u8,
            check,
            ((x * y + i * 31) % 256) as u8,
        ])
    })
}

/// `n` pictures in `dir/sub/NNN.png` (two subfolders), paths in order.
pub(crate) fn folder(dir: &Path, n: u32) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let sub = dir.join(if i.is_multiple_of(2) { "even" } else { "odd" });
            std::fs::create_dir_all(&sub).unwrap();
            let p = sub.join(format!("{i:03}.png"));
            picture(i).save(&p).unwrap();
            p
        })
        .collect()
}

/// All files of a folder with their bytes, sorted by name.
pub(crate) fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// key → tokens of every shard (either format) of a finished folder.
pub(crate) fn shard_tokens(dir: &Path) -> Vec<(String, Vec<i64>, serde_json::Value)> {
    let m = imgseq_shards::Manifest::read(&dir.join("manifest.json")).unwrap();
    m.shard_paths(dir)
        .iter()
        .flat_map(|p| imgseq_shards::shard::read_shard(p).unwrap())
        .map(|s| (s.key, s.tokens, s.json))
        .collect()
}

pub(crate) fn encode_one(p: &Path, m: &[String], dir: &Path) -> Vec<i64> {
    let out = dir.join("one.npy");
    ok(&args(
        &["vq", "encode", p.to_str().unwrap()],
        m,
        &["-o", out.to_str().unwrap()],
    ));
    npy::read_npy_i64(&out).unwrap().1
}

#[test]
fn tokens_equal_vq_encode_for_folders_lists_and_webdataset_tars() {
    let d = tempfile::tempdir().unwrap();
    let m = model_args();
    let imgs = folder(&d.path().join("imgs"), 5);
    // Folder source.
    let out = d.path().join("from_folder");
    ok(&args(
        &["vq", "tokenize", d.path().join("imgs").to_str().unwrap()],
        &m,
        &["--shard-size", "2", "-o", out.to_str().unwrap()],
    ));
    let got = shard_tokens(&out);
    assert_eq!(got.len(), 5);
    // Folder order is sorted paths: even/000, even/002, even/004, odd/001, odd/003.
    let mut sorted = imgs.clone();
    sorted.sort();
    for ((key, toks, json), p) in got.iter().zip(&sorted) {
        assert_eq!(toks, &encode_one(p, &m, d.path()), "{key}");
        assert_eq!(json["source"], p.display().to_string());
        assert_eq!(json["grid"], serde_json::json!([16, 16]));
    }
    assert_eq!(got[0].0, "even/000");
    // A .txt list, in its own order.
    let list = d.path().join("list.txt");
    std::fs::write(&list, "imgs/odd/003.png\n# comment\nimgs/even/000.png\n").unwrap();
    let out = d.path().join("from_list");
    ok(&args(
        &["vq", "tokenize", list.to_str().unwrap()],
        &m,
        &["-o", out.to_str().unwrap()],
    ));
    let got = shard_tokens(&out);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1, encode_one(&imgs[3], &m, d.path()));
    // A WebDataset tar as img2dataset writes it: KEY.png + KEY.json + KEY.cls; a key with a
    // text file only (no image) is not a sample.
    let tar_path = d.path().join("data-000.tar");
    {
        let mut b = tar::Builder::new(std::fs::File::create(&tar_path).unwrap());
        let mut add = |name: &str, data: &[u8]| {
            let mut h = tar::Header::new_ustar();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, name, data).unwrap();
        };
        for i in [1u32, 4] {
            let mut png = Vec::new();
            picture(i)
                .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
                .unwrap();
            add(&format!("00000{i}.png"), &png);
            add(
                &format!("00000{i}.json"),
                format!("{{\"url\": \"http://x/{i}\"}}").as_bytes(),
            );
            add(&format!("00000{i}.cls"), format!("{i}").as_bytes());
        }
        add("000009.txt", b"a caption without an image");
        b.finish().unwrap();
    }
    let out = d.path().join("from_tar");
    ok(&args(
        &["vq", "tokenize", tar_path.to_str().unwrap()],
        &m,
        &["-o", out.to_str().unwrap()],
    ));
    let got = shard_tokens(&out);
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].0, "000004");
    assert_eq!(got[1].1, encode_one(&imgs[4], &m, d.path()));
    assert_eq!(got[1].2["label"], 4);
    assert_eq!(got[1].2["json"]["url"], "http://x/4");
}

#[test]
fn bad_images_are_skipped_and_listed_and_all_bad_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let m = model_args();
    let src = d.path().join("imgs");
    folder(&src, 3);
    std::fs::write(src.join("even/broken.png"), b"\x89PNG\r\n\x1a\nnot really").unwrap();
    RgbImage::new(8, 8).save(src.join("odd/tiny.png")).unwrap();
    let out = d.path().join("out");
    let s = ok(&args(
        &["vq", "tokenize", src.to_str().unwrap()],
        &m,
        &["-o", out.to_str().unwrap()],
    ));
    assert!(s.contains("3 tokenized, 2 skipped"), "{s}");
    let errs = std::fs::read_to_string(out.join("errors.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = errs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["key"], "even/broken");
    assert!(
        lines[1]["reason"]
            .as_str()
            .unwrap()
            .contains("smaller than"),
        "{errs}"
    );
    // Nothing readable at all: exit ≠ 0.
    let bad = d.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("x.png"), b"garbage").unwrap();
    let e = fails(&args(
        &["vq", "tokenize", bad.to_str().unwrap()],
        &m,
        &["-o", d.path().join("o2").to_str().unwrap()],
    ));
    assert!(e.contains("no image could be read"), "{e}");
}

/// A dataset job's command: `vq tokenize` or `vae tokenize`, the model flags, and the same
/// flags with another setting (a folder of one run refuses it).
pub(crate) struct JobCmd {
    pub head: &'static [&'static str],
    pub model: Vec<String>,
    pub other: Vec<String>,
}

/// `vq tokenize` with the tiny taming VQGAN.
fn vq_job() -> JobCmd {
    let mut other = model_args();
    other[7] = "16".into(); // --size
    JobCmd {
        head: &["vq", "tokenize"],
        model: model_args(),
        other,
    }
}

/// How many samples a finished folder's shards hold (token or latent shards).
pub(crate) fn shard_samples(dir: &Path) -> usize {
    let m = imgseq_shards::Manifest::read_any(&dir.join("manifest.json")).unwrap();
    m.shard_paths(dir)
        .iter()
        .map(|p| imgseq_shards::shard::count_samples(p, m.kind()).unwrap())
        .sum()
}

#[test]
fn job_array_parts_merge_into_exactly_what_one_process_writes() {
    job_array_parts_merge_into_what_one_process_writes(&vq_job(), "wds", "tar");
}

#[test]
fn job_array_parts_merge_into_exactly_what_one_process_writes_as_parquet() {
    job_array_parts_merge_into_what_one_process_writes(&vq_job(), "parquet", "parquet");
}

pub(crate) fn job_array_parts_merge_into_what_one_process_writes(
    job: &JobCmd,
    format: &str,
    ext: &str,
) {
    let d = tempfile::tempdir().unwrap();
    let m = job.model.clone();
    let head = job.head;
    let src = d.path().join("imgs");
    folder(&src, 7);
    let single = d.path().join("single");
    ok(&args(
        &[head, &[src.to_str().unwrap()]].concat(),
        &m,
        &[
            "--shard-size",
            "2",
            "--format",
            format,
            "-o",
            single.to_str().unwrap(),
        ],
    ));
    let arr = d.path().join("array");
    for i in ["0", "1", "2"] {
        ok(&args(
            &[head, &[src.to_str().unwrap()]].concat(),
            &m,
            &[
                "--shard-size",
                "2",
                "--format",
                format,
                "--num-shards",
                "3",
                "--shard-index",
                i,
                "-o",
                arr.to_str().unwrap(),
            ],
        ));
        if i == "1" {
            // Not all jobs done: merging refuses.
            let e = fails(&["vq", "merge-manifests", arr.to_str().unwrap()]);
            assert!(e.contains("job 2 of 3 has no manifest"), "{e}");
        }
    }
    ok(&["vq", "merge-manifests", arr.to_str().unwrap()]);
    let shards = |dir: &Path| -> Vec<(String, Vec<u8>)> {
        files(dir)
            .into_iter()
            .filter(|(n, _)| n.starts_with("shard-"))
            .collect()
    };
    assert_eq!(shards(&single), shards(&arr));
    assert_eq!(
        shards(&single)
            .iter()
            .filter(|(n, _)| n.ends_with(&format!(".{ext}")))
            .count(),
        4
    );
    let ms = imgseq_shards::Manifest::read_any(&single.join("manifest.json")).unwrap();
    let ma = imgseq_shards::Manifest::read_any(&arr.join("manifest.json")).unwrap();
    assert_eq!(ms, ma);
    assert!(ms
        .shards
        .iter()
        .all(|s| s.name.ends_with(&format!(".{ext}"))));
    assert_eq!(shard_samples(&single), 7);
    // Another tokenizer setting into the same folder is refused.
    let m2 = job.other.clone();
    let e = fails(&args(
        &[head, &[src.to_str().unwrap()]].concat(),
        &m2,
        &["--format", format, "-o", single.to_str().unwrap()],
    ));
    assert!(e.contains("run.json") && e.contains("new folder"), "{e}");
    // So is the other output format.
    let other = if format == "wds" { "parquet" } else { "wds" };
    let e = fails(&args(
        &[head, &[src.to_str().unwrap()]].concat(),
        &m,
        &[
            "--shard-size",
            "2",
            "--format",
            other,
            "-o",
            single.to_str().unwrap(),
        ],
    ));
    assert!(e.contains("run.json") && e.contains("format"), "{e}");
}

#[test]
fn a_run_killed_at_random_moments_resumes_to_the_uninterrupted_result() {
    killed_runs_resume_to_the_uninterrupted_result(&vq_job(), "wds");
}

#[test]
fn a_run_killed_at_random_moments_resumes_to_the_uninterrupted_result_as_parquet() {
    killed_runs_resume_to_the_uninterrupted_result(&vq_job(), "parquet");
}

pub(crate) fn killed_runs_resume_to_the_uninterrupted_result(job: &JobCmd, format: &str) {
    let d = tempfile::tempdir().unwrap();
    let m = job.model.clone();
    let src = d.path().join("imgs");
    folder(&src, 60);
    let full = d.path().join("full");
    let cmd = |out: &Path| -> Vec<String> {
        let mut v: Vec<String> = job.head.iter().map(|h| h.to_string()).collect();
        v.push(src.display().to_string());
        v.extend(m.iter().cloned());
        v.extend(
            [
                "--shard-size",
                "4",
                "--batch-size",
                "3",
                "--format",
                format,
                "-o",
            ]
            .map(String::from),
        );
        v.push(out.display().to_string());
        v
    };
    let full_args = cmd(&full);
    ok(&full_args.iter().map(String::as_str).collect::<Vec<_>>());
    // Time an uninterrupted run, then kill runs at pseudo-random points within it.
    let killed = d.path().join("killed");
    let kargs = cmd(&killed);
    let t0 = std::time::Instant::now();
    ok(&cmd(&d.path().join("timing"))
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>());
    let total = t0.elapsed().as_millis().max(20) as u64;
    let mut seed = 12345u64;
    let mut kills = 0;
    for _ in 0..6 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let at = 5 + (seed >> 33) % total;
        let mut child = Command::new(env!("CARGO_BIN_EXE_imgseq"))
            .args(&kargs)
            .env("IMGSEQ_WEIGHTS_DIR", "/nonexistent-imgseq-weights")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(at));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        child.wait().unwrap();
    }
    eprintln!("{format}: {kills} of 6 runs killed mid-way (run time {total} ms)");
    ok(&kargs.iter().map(String::as_str).collect::<Vec<_>>());
    let strip = |v: Vec<(String, Vec<u8>)>| -> Vec<(String, Vec<u8>)> {
        v.into_iter()
            .filter(|(n, _)| n != "manifest.json" && n != "run.json")
            .collect()
    };
    let (a, b) = (strip(files(&full)), strip(files(&killed)));
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&a), names(&b));
    let differ: Vec<&String> = a
        .iter()
        .zip(&b)
        .filter(|(x, y)| x.1 != y.1)
        .map(|(x, _)| &x.0)
        .collect();
    assert!(
        differ.is_empty(),
        "files that differ after kill + resume: {differ:?}"
    );
    let mf = imgseq_shards::Manifest::read_any(&full.join("manifest.json")).unwrap();
    let mk = imgseq_shards::Manifest::read_any(&killed.join("manifest.json")).unwrap();
    assert_eq!(mf.shards, mk.shards);
    assert_eq!(mk.samples, 60);
    // No temporary files are left behind.
    assert!(files(&killed).iter().all(|(n, _)| !n.starts_with('.')));
}

#[test]
fn detokenize_and_stats_read_a_shard_folder() {
    let d = tempfile::tempdir().unwrap();
    let m = model_args();
    let src = d.path().join("imgs");
    folder(&src, 3);
    let out = d.path().join("out");
    ok(&args(
        &["vq", "tokenize", src.to_str().unwrap()],
        &m,
        &["-o", out.to_str().unwrap()],
    ));
    let pics = d.path().join("pics");
    ok(&args(
        &["vq", "detokenize", out.to_str().unwrap()],
        &m[..6],
        &["--limit", "2", "-o", pics.to_str().unwrap()],
    ));
    let names: Vec<String> = files(&pics).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["even__000.png", "even__002.png"]);
    let plot = d.path().join("codes.png");
    let s = ok(&[
        "vq",
        "stats",
        out.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(
        s.contains("samples: 3") && s.contains("codebook usage:"),
        "{s}"
    );
    assert_eq!(image::open(&plot).unwrap().width(), 800);
    let e = fails(&["vq", "stats", src.to_str().unwrap()]);
    assert!(e.contains("no manifest.json"), "{e}");
    let _ = imgseq(&["--help"]);
}

/// The bytes of token shards, shard records and `vq roundtrip` outputs, pinned: the tokenizer
/// layer and the dataset job's place in the crates must not change one byte of them (taming
/// and LlamaGen models, WebDataset and Parquet, a too-small image listed as an error).
#[test]
fn shards_and_roundtrip_are_byte_identical_to_pinned() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let d = tempfile::tempdir().unwrap();
    let imgs = d.path().join("imgs");
    std::fs::create_dir_all(&imgs).unwrap();
    for (from, to) in [
        ("assets/coffee.png", "a.png"),
        ("tests/fixtures/llamagen/photo.png", "b.png"),
        ("assets/fmnist-t10k-00001.png", "c.png"),
    ] {
        std::fs::copy(repo.join(from), imgs.join(to)).unwrap();
    }
    let s = |p: &str| repo.join(p).display().to_string();
    let taming = [
        "--weights".to_string(),
        s("tests/fixtures/vqgan/tiny.safetensors"),
        "--config".into(),
        s("tests/fixtures/vqgan/tiny_config.json"),
    ];
    let llamagen = [
        "--weights".to_string(),
        s("tests/fixtures/llamagen/vq_tiny.pt"),
    ];
    let run = |head: &[&str], model: &[String], tail: &[&str]| {
        let mut a: Vec<&str> = head.to_vec();
        a.extend(model.iter().map(String::as_str));
        a.extend_from_slice(&["--precision", "f32"]);
        a.extend_from_slice(tail);
        let o = Command::new(env!("CARGO_BIN_EXE_imgseq"))
            .args(&a)
            .current_dir(d.path())
            .env("IMGSEQ_WEIGHTS_DIR", "/nonexistent-imgseq-weights")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{a:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let tok = [
        "vq",
        "tokenize",
        "imgs",
        "--size",
        "32",
        "--shard-size",
        "2",
    ];
    run(&tok, &taming, &["-o", "tw"]);
    run(&tok, &taming, &["--format", "parquet", "-o", "tp"]);
    run(&tok, &llamagen, &["-o", "lw"]);
    run(&tok, &taming, &["--pad", "-o", "tpad"]);
    let shipped = [
        "--weights".to_string(),
        s("weights/vqgan/model.safetensors"),
    ];
    run(
        &["vq", "roundtrip", &s("assets/coffee.png")],
        &shipped,
        &["-o", "rt"],
    );
    run(
        &["vq", "roundtrip", "imgs/b.png", "--size", "32"],
        &llamagen,
        &["-o", "rtl"],
    );
    let pinned = [
        (
            "lw/shard-000000.json",
            "0cd2fa21af8f914c2b543c8effe23f0117eb4c9d59d9fa9cbdf90f39cd385b76",
        ),
        (
            "lw/shard-000000.tar",
            "1f6733c47e780c6a46508c70878f14b9f6970e84facd42a397bf26b42599f905",
        ),
        (
            "lw/shard-000001.errors.jsonl",
            "8cbdbdac921df1d39792f6042dfd70c92e06fc5536c749616eb5694ce11ea3d3",
        ),
        (
            "lw/shard-000001.tar",
            "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef",
        ),
        (
            "rt/recon.png",
            "f57855708733e050885c29ef43f14a4db9467257ccc2331d005657deb060ae45",
        ),
        (
            "rt/side_by_side.png",
            "450ea3250cbe98c6a906188424adde9db95815b643ac024e457553336e96c0ad",
        ),
        (
            "rt/tokens.npy",
            "65351f1becf01530eed6e39298d2b3c0aac32fd181ff7870b92787f5db3c2211",
        ),
        (
            "rtl/recon.png",
            "d0b447da39e66998e9c9f64f2a64908287819c9c85801be214380b51fbab24e6",
        ),
        (
            "rtl/side_by_side.png",
            "ccbda6a27ae6401695ffa04a8768c55ce8751603b2eacf42ebb183d70e2f22a9",
        ),
        (
            "rtl/tokens.npy",
            "a4aa15974a9bc70344a34fd804d8c73a4cef05bc0293093dff352e5cc14c62b0",
        ),
        (
            "tp/shard-000000.json",
            "5900b7b35e17bb2ed9ce8c066c8b8545d991b9ac9d5fab67ea535df5ea91408a",
        ),
        (
            "tp/shard-000000.parquet",
            "de73abe19e0f813dbd828885871594439532fef40bf978e8064f1246323b4153",
        ),
        (
            "tp/shard-000001.json",
            "0c36658908a424d13c7ba9e602d947ec031862e2489f0f6514072ba76bb7ffbd",
        ),
        (
            "tp/shard-000001.parquet",
            "6355ff929231b13b5cd34052a6fc9b5d2a9fba5e07d351b3736d523121bc28fa",
        ),
        (
            "tpad/shard-000000.tar",
            "5d28f2b8742c0371dc0a3da223769d9e4ec120f05c4acccb68f001d69acb1d3a",
        ),
        (
            "tpad/shard-000001.json",
            "e42f00ddc3bc82f9561851afb2b7ada5c59d73172e2d9de8583939b6b8533e14",
        ),
        (
            "tpad/shard-000001.tar",
            "aea4a34109d893646462a83db2e90cf68e84e02efae63b8043718c5509ccad61",
        ),
        (
            "tw/errors.jsonl",
            "8cbdbdac921df1d39792f6042dfd70c92e06fc5536c749616eb5694ce11ea3d3",
        ),
        (
            "tw/shard-000000.json",
            "230e39e64db2cf886e4d6173609d0a0287736bbcb36fbe36daab0475c89b21b1",
        ),
        (
            "tw/shard-000000.tar",
            "5d28f2b8742c0371dc0a3da223769d9e4ec120f05c4acccb68f001d69acb1d3a",
        ),
        (
            "tw/shard-000001.json",
            "9419226e8c2fcf6cd2befd3c0029c9323df3b1509bdeeff7694bf7f053c6f7a2",
        ),
    ];
    let changed: Vec<String> = pinned
        .iter()
        .filter_map(|(f, want)| {
            let got = imgseq_shards::wds::sha256_file(&d.path().join(f)).unwrap();
            (got != *want).then(|| format!("{f}: {got}"))
        })
        .collect();
    assert!(changed.is_empty(), "changed:\n{}", changed.join("\n"));
}
