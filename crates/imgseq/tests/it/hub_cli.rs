//! The CLI with Hub models, against the loopback mock of the Hub (the environment of the
//! child process points it there): `--model hf:...` encodes as the local files do, a dataset's
//! manifest records the repository at its commit, offline use, catalogue names.

use imgseq_hub::mock::{MockFile, MockHub, MockRepo};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const COMMIT: &str = "feed0123456789abcdef0123456789abcdef0123";

fn fx(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(p)
}

fn run(args: &[&str], mock: &str, cache: &Path, offline: bool) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_imgseq"));
    c.args(args)
        .env("IMGSEQ_WEIGHTS_DIR", "/nonexistent-imgseq-weights")
        .env("HF_ENDPOINT", mock)
        .env("HF_HUB_CACHE", cache)
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE");
    if offline {
        c.env("HF_HUB_OFFLINE", "1");
    }
    c.output().unwrap()
}

fn ok(o: std::process::Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn hub_models_encode_tokenize_and_work_offline_as_local_files_do() {
    let mut files = BTreeMap::new();
    for (name, local, lfs) in [
        ("tiny.safetensors", "vqgan/tiny.safetensors", true),
        ("tiny_config.json", "vqgan/tiny_config.json", false),
    ] {
        files.insert(
            name.to_string(),
            MockFile {
                bytes: std::fs::read(fx(local)).unwrap(),
                lfs,
            },
        );
    }
    let mock = MockHub::start(vec![(
        "org/taming".into(),
        MockRepo {
            commit: COMMIT.into(),
            files,
            token: None,
        },
    )]);
    let d = tempfile::tempdir().unwrap();
    let (cache, pic) = (d.path().join("cache"), d.path().join("p.png"));
    image::RgbImage::from_fn(40, 36, |x, y| image::Rgb([(x * 6) as u8, (y * 7) as u8, 9]))
        .save(&pic)
        .unwrap();
    let (a, b) = (d.path().join("a.npy"), d.path().join("b.npy"));
    let p = pic.to_str().unwrap();
    let hf = "hf:org/taming/tiny.safetensors";
    let local = fx("vqgan/tiny.safetensors");
    let common = ["--size", "32", "--precision", "f32", "-o"];
    let mut args = vec!["encode", p, "--model", hf];
    args.extend(common);
    args.push(a.to_str().unwrap());
    ok(run(&args, &mock.url, &cache, false));
    let mut args = vec!["encode", p, "--model", local.to_str().unwrap()];
    args.extend(common);
    args.push(b.to_str().unwrap());
    ok(run(&args, &mock.url, &cache, false));
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    // The dataset job's manifest records the repository at the commit, and the weights' hash.
    let out = d.path().join("tok");
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::copy(&pic, src.join("p.png")).unwrap();
    let args = [
        "tokenize",
        src.to_str().unwrap(),
        "--model",
        hf,
        "--size",
        "32",
        "--precision",
        "f32",
        "-o",
        out.to_str().unwrap(),
    ];
    ok(run(&args, &mock.url, &cache, false));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(
        m["tokenizer"]["weights"],
        format!("hf:org/taming@{COMMIT}/tiny.safetensors")
    );
    assert_eq!(m["tokenizer"]["weights_sha256"].as_str().unwrap().len(), 64);
    // Offline: from the cache, no request.
    let before = mock.log.lock().unwrap().len();
    let c = d.path().join("c.npy");
    let mut args = vec!["encode", p, "--model", hf];
    args.extend(common);
    args.push(c.to_str().unwrap());
    ok(run(&args, &mock.url, &cache, true));
    assert_eq!(std::fs::read(&c).unwrap(), std::fs::read(&b).unwrap());
    assert_eq!(mock.log.lock().unwrap().len(), before);
    // A catalogue name not in the cache, offline: one line naming its source and why.
    let o = run(
        &["inspect", "--model", "sd-vae-ft-mse"],
        &mock.url,
        &cache,
        true,
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(
        e.contains("hf:stabilityai/sd-vae-ft-mse") && e.contains("HF_HUB_OFFLINE"),
        "{e}"
    );
    // A name published outside the Hub: one line saying where to download it and what to pass.
    let o = run(
        &["inspect", "--model", "taming-f16-1024"],
        &mock.url,
        &cache,
        true,
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(
        e.contains("heibox.uni-heidelberg.de") && e.contains("--config f16_1024"),
        "{e}"
    );
    // The catalogue lists every entry.
    let list = ok(run(&["models"], &mock.url, &cache, true));
    for e in imgseq_models_names() {
        assert!(list.contains(e), "{e} missing from {list}");
    }
}

fn imgseq_models_names() -> Vec<&'static str> {
    vec![
        "llamagen-vq16",
        "sd-vae-ft-mse",
        "flux-vae",
        "open-magvit2-256",
        "janus-pro-1b",
        "ibq-16384",
        "taming-f16-1024",
    ]
}
