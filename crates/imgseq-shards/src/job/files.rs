//! The files a tokenize run keeps in its output folder besides the shards: each finished
//! shard's record (rebuilt from the shard when a kill lost it), the errors lists, the job's
//! manifest names, and the half-written temporaries a killed run leaves, which a new run of
//! the same job removes; and how a run's float payloads are stored ([`stored_as`]).

use crate::kind::FloatDtype;
use crate::manifest::{
    errors_name, job_manifest_name, record_name, Manifest, ShardRecord, TokenizerInfo, MANIFEST,
};
use crate::{wds, Plan, ShardFormat, ShardKind};
use imgseq_core::fsutil::{
    read_json, read_regular_file, temp_target, write_bytes_atomic, write_json, MAX_JSON_BYTES,
};
use imgseq_core::{Error, Result};
use std::path::Path;

/// The record of shard `s` if its file exists (finished): from its `.json`, or rebuilt from
/// the file when the record is missing (a kill between the two renames).
pub fn finished_record(
    out: &Path,
    plan: &Plan,
    s: usize,
    format: ShardFormat,
    kind: ShardKind,
) -> Result<Option<ShardRecord>> {
    let path = out.join(format.shard_name(s));
    if !path.is_file() {
        return Ok(None);
    }
    let range = plan.samples_of(s);
    let rec_path = out.join(record_name(s));
    if rec_path.is_file() {
        let r: ShardRecord = read_json(&rec_path, "shard record")?;
        let len = std::fs::metadata(&path)
            .map_err(|e| Error::io(&path, e))?
            .len();
        let same = r.index == s && r.name == format.shard_name(s);
        if same && r.first == range.start && r.end == range.end && r.bytes == len {
            return Ok(Some(r));
        }
    }
    let samples = crate::shard::count_samples(&path, kind)?;
    let errors_path = out.join(errors_name(s));
    let errors = read_regular_file(&errors_path, MAX_JSON_BYTES, "an errors list")
        .map(|t| {
            t.split(|&b| b == b'\n')
                .filter(|l| !l.trim_ascii().is_empty())
                .count()
        })
        .unwrap_or(0);
    let rec = ShardRecord {
        index: s,
        name: format.shard_name(s),
        samples,
        errors,
        first: range.start,
        end: range.end,
        bytes: std::fs::metadata(&path)
            .map_err(|e| Error::io(&path, e))?
            .len(),
        sha256: wds::sha256_file(&path)?,
    };
    write_json(&rec_path, &rec)?;
    Ok(Some(rec))
}

/// Removes what a killed run of this job left half-written (`.shard-000012.tar.tmp-PID`,
/// `.errors.jsonl.tmp-PID`, ...): only temporaries ([`temp_target`]) of this job's shards and
/// of its manifest and errors list, which no other job of the array writes.
pub fn remove_stale_temporaries(
    out: &Path,
    plan: &Plan,
    num_jobs: usize,
    job_index: usize,
) -> Result<()> {
    let mine: std::collections::HashSet<String> =
        plan.my_shards().map(|s| format!("shard-{s:06}.")).collect();
    let (manifest, errors) = job_files(num_jobs, job_index);
    for e in std::fs::read_dir(out).map_err(|e| Error::io(out, e))? {
        let name = e.map_err(|e| Error::io(out, e))?.file_name();
        let name = name.to_string_lossy();
        let Some(target) = temp_target(&name) else {
            continue;
        };
        // `shard-000012.` is 13 bytes; `get` is None off a character boundary.
        let of_my_shard = target.get(..13).is_some_and(|p| mine.contains(p));
        // `run.json` is shared by every job of an array: its temporary goes only once the
        // process that wrote it is gone (a run killed while writing it left it behind).
        let orphan_run_file = target == "run.json" && !writer_alive(&name);
        if of_my_shard || target == manifest || target == errors || orphan_run_file {
            let p = out.join(&*name);
            std::fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
        }
    }
    Ok(())
}

/// Whether the process whose pid ends the temporary's name (`.run.json.tmp-4242`) is still
/// running (on Linux, `/proc/PID`; elsewhere assumed alive, so nothing shared is removed).
fn writer_alive(temp_name: &str) -> bool {
    let Some((_, pid)) = temp_name.rsplit_once(".tmp-") else {
        return true;
    };
    // `temp_target` already checked that `pid` is digits; this process's own entry exists.
    !cfg!(target_os = "linux") || Path::new("/proc").join(pid).exists()
}

/// `errors.jsonl` (at `path`): the skipped samples of every shard of the manifest, in shard
/// order.
pub fn write_errors_list(path: &Path, out: &Path, m: &Manifest) -> Result<()> {
    let mut all = String::new();
    for s in &m.shards {
        if s.errors > 0 {
            let p = out.join(errors_name(s.index));
            let text = read_regular_file(&p, MAX_JSON_BYTES, "an errors list")?;
            all.push_str(&String::from_utf8_lossy(&text));
        }
    }
    write_bytes_atomic(path, all.as_bytes())
}

/// The files a job writes last, once its shards are done: its manifest and its errors list
/// (`manifest.json` + `errors.jsonl` for a single process, `manifest-0002-of-0008.json` +
/// `errors-0002-of-0008.jsonl` for job 2 of an array of 8).
pub fn job_files(num_jobs: usize, job_index: usize) -> (String, String) {
    if num_jobs > 1 {
        (
            job_manifest_name(job_index, num_jobs),
            format!("errors-{job_index:04}-of-{num_jobs:04}.jsonl"),
        )
    } else {
        (MANIFEST.into(), "errors.jsonl".into())
    }
}

/// The shard kind and manifest account of a run: `enc_kind` with its floats stored as
/// `dtype` (refused for token shards), recorded in `info`'s latent or feature block.
pub fn stored_as(
    enc_kind: ShardKind,
    info: &TokenizerInfo,
    dtype: FloatDtype,
) -> Result<(ShardKind, TokenizerInfo)> {
    let kind = enc_kind.with_dtype(dtype);
    let mut info = info.clone();
    match kind {
        ShardKind::Tokens { .. } if dtype != FloatDtype::F16 => {
            return Err(Error::setting(
                "dtype",
                dtype.name(),
                "applies to latent and feature shards; token shards store integer codes",
            ))
        }
        ShardKind::Tokens { .. } => {}
        ShardKind::Latents { dtype } => {
            if let Some(l) = info.latent.as_mut() {
                l.dtype = dtype.name().into();
            }
        }
        ShardKind::Features { dtype } => {
            if let Some(f) = info.features.as_mut() {
                f.dtype = dtype.name().into();
            }
        }
    }
    Ok((kind, info))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_temporaries_of_this_job_go_others_and_odd_names_stay() {
        let d = tempfile::tempdir().unwrap();
        let plan = Plan::new(4, 1, 2, 0).unwrap(); // job 0 of 2: shards 0 and 2
        let names = [
            (".shard-000000.tar.tmp-17", false),
            (".shard-000002.errors.jsonl.tmp-3", false),
            (".manifest-0000-of-0002.json.tmp-9", false),
            (".shard-000001.tar.tmp-17", true),
            (".manifest-0001-of-0002.json.tmp-9", true),
            ("shard-000000.tar", true),
            (".ßhärd-000000.tar.tmp-1", true),
            (".é.tmp-1", true),
            (".shard-000000.tar.tmp-x", true),
            // run.json's temporary: removed once its writer is gone (no pid 4294967290 runs),
            // kept while it may still be written (pid 1 always runs).
            (".run.json.tmp-4294967290", !cfg!(target_os = "linux")),
            (".run.json.tmp-1", true),
        ];
        for (n, _) in names {
            std::fs::write(d.path().join(n), b"x").unwrap();
        }
        remove_stale_temporaries(d.path(), &plan, 2, 0).unwrap();
        for (n, kept) in names {
            assert_eq!(d.path().join(n).exists(), kept, "{n}");
        }
    }
}
