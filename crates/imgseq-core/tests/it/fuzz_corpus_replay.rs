//! Replays the committed fuzz corpora of the core parsers (`fuzz/corpus/{npy,idx,cifar,
//! image_header}`) through the functions the fuzz targets call, so that every input a fuzz
//! run kept (including past findings) is re-checked in the normal test suite, without nightly.

use std::path::{Path, PathBuf};

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    assert!(!v.is_empty(), "{}: empty corpus", dir.display());
    v
}

fn replay(target: &str, f: impl Fn(&[u8])) {
    for p in corpus(target) {
        let bytes = std::fs::read(&p).unwrap();
        f(&bytes);
    }
}

#[test]
fn npy_corpus_replays_without_panic() {
    replay("npy", imgseq_core::npy::fuzz_npy_bytes);
}

#[test]
fn idx_corpus_replays_without_panic() {
    replay("idx", imgseq_core::data::idx::fuzz_idx_bytes);
}

#[test]
fn cifar_corpus_replays_without_panic() {
    replay("cifar", imgseq_core::data::cifar::fuzz_cifar_bytes);
}

/// The same steps as `fuzz/fuzz_targets/image_header.rs` (the image readers take a path).
#[test]
fn image_header_corpus_replays_without_panic() {
    use imgseq_core::image_io::{check_min_size, image_dimensions, load_dynamic};
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("img");
    replay("image_header", |bytes| {
        std::fs::write(&p, bytes).unwrap();
        if let Ok((w, h)) = image_dimensions(&p) {
            let _ = check_min_size(&p, w, h, 16, false);
            let _ = load_dynamic(&p);
        }
    });
}
