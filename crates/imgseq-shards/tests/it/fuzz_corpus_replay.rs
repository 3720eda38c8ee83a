//! Replays the committed fuzz corpora of the dataset readers (`fuzz/corpus/{parquet_source,
//! tar_source,token_shard}`) through the functions the fuzz targets call, so that every input
//! a fuzz run kept is re-checked in the normal test suite, without nightly.

use std::path::{Path, PathBuf};

fn replay(target: &str, f: impl Fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    assert!(!v.is_empty(), "{}: empty corpus", dir.display());
    for p in v {
        f(&std::fs::read(&p).unwrap());
    }
}

#[test]
fn parquet_source_corpus_replays_without_panic() {
    replay("parquet_source", imgseq_shards::fuzz::fuzz_parquet_source);
}

#[test]
fn tar_source_corpus_replays_without_panic() {
    replay("tar_source", imgseq_shards::fuzz::fuzz_tar_source);
}

#[test]
fn token_shard_corpus_replays_without_panic() {
    replay("token_shard", imgseq_shards::fuzz::fuzz_token_shard);
}
