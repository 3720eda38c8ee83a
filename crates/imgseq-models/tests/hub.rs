//! Every family's fixture served by the loopback mock of the Hub and opened as `hf:ORG/NAME`:
//! the same tokens (or latents) and description as the local files, the source recorded with
//! its resolved commit, and then the same with `HF_HUB_OFFLINE=1` and no request at all.
//!
//! One test in its own binary: it sets the Hub's environment variables for the process.

use image::{Rgb, RgbImage};
use imgseq_core::tokenizer::Tokenizer;
use imgseq_hub::mock::{MockFile, MockHub, MockRepo};
use imgseq_models::{open, OpenOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const COMMIT: &str = "c0ffee0123456789abcdef0123456789abcdef01";

fn fx(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(p)
}

/// A mock repository holding the files of a fixture folder (weights through LFS).
fn mirror(dir: &Path) -> MockRepo {
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if !p.is_file() {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        let lfs = [".safetensors", ".ckpt", ".pt"]
            .iter()
            .any(|x| name.ends_with(x));
        files.insert(
            name,
            MockFile {
                bytes: std::fs::read(&p).unwrap(),
                lfs,
            },
        );
    }
    MockRepo {
        commit: COMMIT.into(),
        files,
        token: None,
    }
}

fn picture() -> RgbImage {
    RgbImage::from_fn(40, 36, |x, y| {
        Rgb([(x * 6) as u8, (y * 7) as u8, ((x + y) * 3) as u8])
    })
}

#[test]
fn every_family_opens_from_the_hub_as_from_its_files_and_then_offline() {
    // (repo, fixture folder, source in the repo, the local source, input size)
    let cases: Vec<(&str, &str, &str, PathBuf, Option<u32>)> = vec![
        (
            "taming",
            "vqgan",
            "tiny.safetensors",
            fx("vqgan/tiny.safetensors"),
            None,
        ),
        (
            "llamagen",
            "llamagen",
            "vq_tiny.pt",
            fx("llamagen/vq_tiny.pt"),
            None,
        ),
        ("diffusers-vq", "diffusers/vq", "", fx("diffusers/vq"), None),
        ("janus", "janus", "", fx("janus"), None),
        ("ibq", "ibq", "ibq_tiny.ckpt", fx("ibq/ibq_tiny.ckpt"), None),
        (
            "open-magvit2",
            "lfq",
            "tiny.ckpt",
            fx("lfq/tiny.ckpt"),
            None,
        ),
        ("sd-vae", "kl/sd", "", fx("kl/sd"), Some(32)),
    ];
    // IBQ's released repositories hold the checkpoint only; here, the tiny one under the
    // released name.
    let ibq_release = MockRepo {
        commit: COMMIT.into(),
        files: BTreeMap::from([(
            "imagenet256_1024.ckpt".to_string(),
            MockFile {
                bytes: std::fs::read(fx("ibq/ibq_tiny.ckpt")).unwrap(),
                lfs: true,
            },
        )]),
        token: None,
    };
    let mock = MockHub::start(
        cases
            .iter()
            .map(|(repo, dir, ..)| (format!("org/{repo}"), mirror(&fx(dir))))
            .chain([("TencentARC/IBQ-Tokenizer-1024".to_string(), ibq_release)])
            .collect(),
    );
    let cache = tempfile::tempdir().unwrap();
    std::env::set_var("HF_ENDPOINT", &mock.url);
    std::env::set_var("HF_HUB_CACHE", cache.path());
    std::env::remove_var("HF_HUB_OFFLINE");
    std::env::remove_var("HF_TOKEN");
    let pic = picture();
    let run = |offline: bool| {
        for (repo, _, file, local, size) in &cases {
            let o = OpenOptions {
                size: size.or(Some(32)),
                ..OpenOptions::default()
            };
            let hf = if file.is_empty() {
                format!("hf:org/{repo}")
            } else {
                format!("hf:org/{repo}/{file}")
            };
            let t = open(Path::new(&hf), &o).unwrap_or_else(|e| panic!("{hf}: {e}"));
            let want = open(local, &o).unwrap();
            let x = [want.input().square(&pic).unwrap()];
            assert_eq!(
                t.encode_pictures(&x).unwrap(),
                want.encode_pictures(&x).unwrap(),
                "{hf} (offline: {offline})"
            );
            let (a, b) = (
                t.describe_with_weights().unwrap(),
                want.describe_with_weights().unwrap(),
            );
            let recorded = a.weights.as_ref().unwrap().source.clone();
            assert!(
                recorded.starts_with(&format!("hf:org/{repo}@{COMMIT}")),
                "{recorded}"
            );
            assert_eq!(a.weights.unwrap().sha256, b.weights.unwrap().sha256, "{hf}");
            assert_eq!((a.family, a.config), (b.family, b.config), "{hf}");
        }
    };
    run(false);
    catalogue_names_bring_their_published_config(&pic);
    // Only the files a model needs were fetched (the fixtures' io.safetensors never).
    assert_eq!(
        mock.count("io.safetensors"),
        0,
        "{:?}",
        mock.log.lock().unwrap()
    );
    let before = mock.log.lock().unwrap().len();
    std::env::set_var("HF_HUB_OFFLINE", "1");
    run(true);
    assert_eq!(
        mock.log.lock().unwrap().len(),
        before,
        "offline made requests"
    );
    // A plain ORG/NAME is the Hub too where no such local path exists.
    let t = open(
        Path::new("org/taming/tiny.safetensors"),
        &OpenOptions::default(),
    )
    .unwrap();
    assert!(t.source.to_string_lossy().starts_with("hf:org/taming@"));
    // Offline, what is not in the cache: one line naming it and HF_HUB_OFFLINE.
    let e = open(Path::new("hf:org/absent"), &OpenOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("hf:org/absent") && e.contains("HF_HUB_OFFLINE"),
        "{e}"
    );
}

/// A catalogue name whose checkpoint ships without a config is read with the family's
/// published one (here it does not fit the tiny weights served under the released name, and
/// the error says so); a `--config` given wins; a name published outside the Hub says where to
/// get it.
fn catalogue_names_bring_their_published_config(pic: &RgbImage) {
    let e = open(Path::new("ibq-1024"), &OpenOptions::default())
        .err()
        .expect("the released architecture does not fit the tiny weights")
        .to_string();
    assert!(e.contains("imagenet256_1024.ckpt"), "{e}");
    assert!(!e.contains("pass --config"), "the preset was not used: {e}");
    let o = OpenOptions {
        config: Some(fx("ibq/ibq_tiny_model.yaml")),
        size: Some(32),
        ..OpenOptions::default()
    };
    let t = open(Path::new("ibq-1024"), &o).unwrap();
    let want = open(&fx("ibq/ibq_tiny.ckpt"), &o).unwrap();
    let x = [want.input().square(pic).unwrap()];
    assert_eq!(
        t.encode_pictures(&x).unwrap(),
        want.encode_pictures(&x).unwrap()
    );
    let e = open(Path::new("taming-f16-1024"), &OpenOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("heibox.uni-heidelberg.de") && e.contains("--config f16_1024"),
        "{e}"
    );
}
