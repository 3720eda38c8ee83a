//! The Hub client against the loopback mock: downloads into a fresh cache in huggingface_hub's
//! layout, offline use, gated and missing models, and every hostile answer leaving nothing
//! half-written in the cache.

use imgseq_hub::mock::{Hostile, MockFile, MockHub, MockRepo};
use imgseq_hub::{Cache, Hub, HubSource};
use std::collections::BTreeMap;
use std::path::Path;

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

fn repo(token: Option<&str>) -> MockRepo {
    let mut files = BTreeMap::new();
    files.insert(
        "vae/config.json".to_string(),
        MockFile {
            bytes: br#"{"latent_channels": 4}"#.to_vec(),
            lfs: false,
        },
    );
    files.insert(
        "vae/diffusion_pytorch_model.safetensors".to_string(),
        MockFile {
            bytes: (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect(),
            lfs: true,
        },
    );
    files.insert(
        "README.md".to_string(),
        MockFile {
            bytes: b"# model".to_vec(),
            lfs: false,
        },
    );
    MockRepo {
        commit: COMMIT.into(),
        files,
        token: token.map(str::to_string),
    }
}

fn hub(url: &str, cache: &Path, token: Option<&str>) -> Hub {
    let mut h = Hub::new(
        url,
        Cache {
            root: cache.to_path_buf(),
        },
        false,
        token.map(str::to_string),
        1 << 30,
    );
    h.progress = false;
    h
}

fn all(names: &[String], file: Option<&str>) -> Vec<String> {
    match file {
        Some(f) => vec![f.to_string()],
        None => names.to_vec(),
    }
}

fn src(s: &str) -> HubSource {
    HubSource::parse(s).unwrap()
}

#[test]
fn a_folder_downloads_into_huggingface_hubs_layout_and_then_loads_offline() {
    let mock = MockHub::start(vec![("org/vae".into(), repo(None))]);
    let d = tempfile::tempdir().unwrap();
    let h = hub(&mock.url, d.path(), None);
    let snap = h.snapshot(&src("hf:org/vae/vae"), &all).unwrap();
    assert_eq!(snap.commit, COMMIT);
    assert_eq!(
        snap.path,
        d.path()
            .join(format!("models--org--vae/snapshots/{COMMIT}/vae"))
    );
    let want = &repo(None).files["vae/diffusion_pytorch_model.safetensors"];
    assert_eq!(
        std::fs::read(snap.path.join("diffusion_pytorch_model.safetensors")).unwrap(),
        want.bytes
    );
    // The link is relative into blobs/, named by the ETag (LFS: the SHA-256).
    let link = std::fs::read_link(snap.path.join("diffusion_pytorch_model.safetensors")).unwrap();
    assert_eq!(link, Path::new("../../../blobs").join(want.etag()));
    assert_eq!(
        std::fs::read_to_string(d.path().join("models--org--vae/refs/main")).unwrap(),
        COMMIT
    );
    // Only the source's folder was fetched, not the README.
    assert!(!snap.path.parent().unwrap().join("README.md").exists());
    // Again: nothing downloaded twice.
    let cdn = mock.count("GET /cdn/");
    h.snapshot(&src("hf:org/vae/vae"), &all).unwrap();
    assert_eq!(mock.count("GET /cdn/"), cdn);
    // Offline: the cache alone, no request at all.
    let before = mock.log.lock().unwrap().len();
    let mut off = hub(&mock.url, d.path(), None);
    off.offline = true;
    let again = off.snapshot(&src("hf:org/vae/vae"), &all).unwrap();
    assert_eq!(again.path, snap.path);
    assert_eq!(mock.log.lock().unwrap().len(), before);
    // Offline without the file: one line naming it, the cache and why.
    let e = off
        .snapshot(&src("hf:org/vae/other"), &all)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("hf:org/vae") && e.contains("HF_HUB_OFFLINE") && e.contains("not in the cache"),
        "{e}"
    );
}

#[test]
fn gated_missing_and_unreachable_models_are_one_line_errors_without_the_token() {
    let mock = MockHub::start(vec![("org/gated".into(), repo(Some("s3cret-token")))]);
    let d = tempfile::tempdir().unwrap();
    let e = hub(&mock.url, d.path(), None)
        .snapshot(&src("hf:org/gated"), &all)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("gated") && e.contains("HF_TOKEN") && e.contains("org/gated"),
        "{e}"
    );
    let e = hub(&mock.url, d.path(), Some("wrong"))
        .snapshot(&src("hf:org/gated"), &all)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("with the token given") && !e.contains("wrong"),
        "{e}"
    );
    let ok = hub(&mock.url, d.path(), Some("s3cret-token"));
    assert!(!format!("{ok:?}").contains("s3cret"));
    ok.snapshot(&src("hf:org/gated/vae"), &all).unwrap();
    for (s, part) in [
        ("hf:org/nothing", "not found"),
        ("hf:org/gated@v9", "not found"),
        ("hf:org/gated/nope", "no file or folder"),
    ] {
        let e = ok.snapshot(&src(s), &all).unwrap_err().to_string();
        assert!(e.contains(part) && e.lines().count() == 1, "{s}: {e}");
    }
    // Nothing listens on this port: unreachable, and not in the cache.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let e = hub(&url, d.path(), None)
        .snapshot(&src("hf:org/other"), &all)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot reach") && e.contains("not in the cache"),
        "{e}"
    );
    // What is in the cache loads even so.
    hub(&url, d.path(), None)
        .snapshot(&src("hf:org/gated/vae"), &all)
        .unwrap();
}

/// Each hostile answer is a one-line error and leaves no blob (and, but for a truncated body
/// kept to resume, no partial file); the next honest answer completes the download.
#[test]
fn hostile_answers_leave_nothing_half_written_in_the_cache() {
    let mock = MockHub::start(vec![("org/vae".into(), repo(None))]);
    let d = tempfile::tempdir().unwrap();
    let mut h = hub(&mock.url, d.path(), None);
    let blobs = d.path().join("models--org--vae/blobs");
    let cases = [
        (
            Hostile {
                overlong: true,
                ..Hostile::default()
            },
            "more than the",
        ),
        (
            Hostile {
                wrong_hash: true,
                ..Hostile::default()
            },
            "do not have the hash",
        ),
        (
            Hostile {
                redirect_loop: true,
                ..Hostile::default()
            },
            "redirects",
        ),
        (
            Hostile {
                bad_names: true,
                ..Hostile::default()
            },
            "could leave the cache",
        ),
    ];
    for (hostile, part) in cases {
        mock.set_hostile(hostile);
        let e = h
            .snapshot(&src("hf:org/vae/vae"), &all)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(part) && e.lines().count() == 1,
            "{hostile:?}: {e}"
        );
        // Complete, verified blobs of other files may stay; the bad one never enters.
        let weights = repo(None).files["vae/diffusion_pytorch_model.safetensors"].etag();
        let left: Vec<String> = std::fs::read_dir(&blobs)
            .map(|r| {
                r.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            left.iter()
                .all(|n| !n.ends_with(".incomplete") && *n != weights),
            "{hostile:?} left {left:?}"
        );
    }
    mock.set_hostile(Hostile {
        huge: true,
        ..Hostile::default()
    });
    let e = h
        .snapshot(&src("hf:org/vae/vae"), &all)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("5000000000 bytes") && e.contains("IMGSEQ_HUB_MAX_GB"),
        "{e}"
    );
    // A body cut halfway: the partial file stays, and the next run resumes it with a Range.
    mock.set_hostile(Hostile {
        truncated: true,
        ..Hostile::default()
    });
    let e = h
        .snapshot(&src("hf:org/vae/vae"), &all)
        .unwrap_err()
        .to_string();
    assert!(e.contains("resume"), "{e}");
    mock.set_hostile(Hostile::default());
    h.progress = false;
    let snap = h.snapshot(&src("hf:org/vae/vae"), &all).unwrap();
    let want = &repo(None).files["vae/diffusion_pytorch_model.safetensors"].bytes;
    assert_eq!(
        &std::fs::read(snap.path.join("diffusion_pytorch_model.safetensors")).unwrap(),
        want
    );
    let names: Vec<String> = std::fs::read_dir(&blobs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.ends_with(".incomplete")),
        "{names:?}"
    );
}

/// Processes of a job array asking for one blob at once download it once (the lock).
#[test]
fn concurrent_downloads_of_one_blob_fetch_it_once() {
    let mock = MockHub::start(vec![("org/vae".into(), repo(None))]);
    let d = tempfile::tempdir().unwrap();
    let ts: Vec<_> = (0..4)
        .map(|_| {
            let (url, root) = (mock.url.clone(), d.path().to_path_buf());
            std::thread::spawn(move || {
                hub(&url, &root, None)
                    .snapshot(
                        &src("hf:org/vae/vae/diffusion_pytorch_model.safetensors"),
                        &all,
                    )
                    .unwrap()
            })
        })
        .collect();
    for t in ts {
        t.join().unwrap();
    }
    assert_eq!(mock.count("GET /cdn/"), 1);
}

/// The `hub_listing` fuzz target's corpus, replayed through the same function (no panic).
#[test]
fn hub_listing_fuzz_corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/hub_listing");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        imgseq_hub::hub::fuzz_listing(&std::fs::read(e.path()).unwrap());
        n += 1;
    }
    assert!(n >= 5, "{n} inputs in {}", dir.display());
}
