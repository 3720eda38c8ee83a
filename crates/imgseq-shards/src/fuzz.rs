//! Bodies of the fuzz targets of the dataset readers (`fuzz/fuzz_targets/`), shared with the
//! corpus replay tests. The readers take paths, so each input goes through one temporary file
//! per input (removed after it).

use crate::source::index;
use std::path::PathBuf;

/// A temporary file named `imgseq-fuzz-<pid>-<n>.<ext>` holding `data` (`n` counts the files
/// made by this process, so that threads replaying corpora side by side never share one).
fn temp(data: &[u8], ext: &str) -> Option<PathBuf> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("imgseq-fuzz-{}-{n}.{ext}", std::process::id());
    let p = std::env::temp_dir().join(name);
    std::fs::write(&p, data).ok().map(|_| p)
}

/// Lists `data` as a source of `ext` and reads its first 64 samples (errors are fine; panics,
/// aborts and hangs are findings).
fn source(data: &[u8], ext: &str) {
    let Some(p) = temp(data, ext) else {
        return;
    };
    if let Ok(idx) = index(std::slice::from_ref(&p)) {
        for s in idx.iter().take(64) {
            let _ = s.load();
        }
    }
    let _ = std::fs::remove_file(&p);
}

/// Bytes as a Parquet source: the footer, the image column, every page header of the chunks
/// read, the values.
#[doc(hidden)]
pub fn fuzz_parquet_source(data: &[u8]) {
    source(data, "parquet");
}

/// Bytes as a WebDataset `.tar` source: members, keys, the key rule, the members' bytes.
#[doc(hidden)]
pub fn fuzz_tar_source(data: &[u8]) {
    source(data, "tar");
}

/// Bytes as token shards and their manifest: a `.tar` shard (`.npy` + JSON members), a
/// Parquet shard, a `manifest.json` (checked as every reader checks it), and a shard record.
#[doc(hidden)]
pub fn fuzz_token_shard(data: &[u8]) {
    for ext in ["tar", "parquet"] {
        if let Some(p) = temp(data, ext) {
            let _ = crate::shard::read_shard(&p);
            let _ = std::fs::remove_file(&p);
        }
    }
    if let Some(p) = temp(data, "json") {
        let _ = crate::manifest::Manifest::read(&p);
        let _ = imgseq_core::fsutil::read_json::<crate::ShardRecord>(&p, "shard record");
        let _ = std::fs::remove_file(&p);
    }
    let _ = imgseq_core::npy::parse_npy("fuzz.npy", data);
}
