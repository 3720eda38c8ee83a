//! A finished token shard folder read back: its code statistics and its pictures.

use crate::manifest::{Manifest, MANIFEST};
use crate::shard;
use image::RgbImage;
use imgseq_core::codes::first_out_of_range;
use imgseq_core::tokenizer::Tokenizer;
use imgseq_core::tokens::TokenGrid;
use imgseq_core::{Error, Result};
use std::path::{Path, PathBuf};

/// The manifest of a finished folder (after a job array, once merged).
pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    let p = dir.join(MANIFEST);
    if std::fs::symlink_metadata(&p).is_err() {
        return Err(Error::format(
            dir,
            format!(
                "no manifest.json (not a finished token shard folder; after a job array run \
                 `imgseq vq merge-manifests {}`)",
                dir.display()
            ),
        ));
    }
    Manifest::read(&p)
}

/// How often each code occurs in a folder's shards.
#[derive(Debug, Clone)]
pub struct CodeStats {
    pub samples: usize,
    /// Occurrences of code `i`, for every code of the tokenizer.
    pub counts: Vec<u64>,
}

/// The error of a sample whose token `v` is outside a codebook of `n` codes.
fn outside(shard: &Path, key: &str, v: i64, n: usize) -> Error {
    Error::format(
        shard,
        format!("{key} has token {v}, outside the codebook of {n}"),
    )
}

/// The shards of the manifest `m` of `dir`, in order, each checked against its record first
/// when `verify` ([`crate::ShardRecord::verify`]).
fn shards<'a>(
    m: &'a Manifest,
    dir: &'a Path,
    verify: bool,
) -> impl Iterator<Item = Result<PathBuf>> + 'a {
    m.shards.iter().map(move |s| {
        if verify {
            s.verify(dir)?;
        }
        Ok(dir.join(&s.name))
    })
}

/// The manifest of the folder `dir` and its code counts (every token must be in the
/// tokenizer's codebook); with `verify`, every shard's size and SHA-256 are checked against
/// the manifest first.
pub fn stats(dir: &Path, verify: bool) -> Result<(Manifest, CodeStats)> {
    let m = read_manifest(dir)?;
    let n = m.tokenizer.n_codes;
    imgseq_core::budget::check_memory(n as u128 * 8).map_err(|e| {
        Error::resource_limit(format!(
            "{}: counting {n} codes {e}",
            dir.join(MANIFEST).display()
        ))
    })?;
    let mut counts = vec![0u64; n];
    let mut samples = 0usize;
    for p in shards(&m, dir, verify) {
        let p = p?;
        // One sample at a time: memory does not grow with the shard's size.
        shard::for_each_sample(&p, |s| {
            samples += 1;
            if let Some((_, v)) = first_out_of_range(&s.tokens, n) {
                return Err(outside(&p, &s.key, v, n));
            }
            for &t in &s.tokens {
                counts[t as usize] += 1;
            }
            Ok(())
        })?;
    }
    Ok((m, CodeStats { samples, counts }))
}

/// Decodes at most `limit` samples of the folder `dir` with `tok`, `batch` at a time, handing
/// each picture with its key to `sink`; the number decoded. Every sample must have the
/// manifest's grid; with `verify`, every shard is checked against the manifest first.
pub fn detokenize<T: Tokenizer>(
    tok: &T,
    dir: &Path,
    limit: usize,
    batch: usize,
    verify: bool,
    mut sink: impl FnMut(&str, &RgbImage) -> Result<()>,
) -> Result<usize> {
    let m = read_manifest(dir)?;
    let [gh, gw] = m.tokenizer.grid;
    let n_codes = tok.codebook_size().unwrap_or(0);
    if n_codes != m.tokenizer.n_codes {
        return Err(Error::format(
            dir,
            format!(
                "tokens of a {}-code tokenizer, the model has {n_codes} codes",
                m.tokenizer.n_codes
            ),
        ));
    }
    let mut done = 0usize;
    for p in shards(&m, dir, verify) {
        let p = p?;
        let samples = shard::read_shard(&p)?;
        for chunk in samples.chunks(batch.max(1)) {
            let chunk = &chunk[..chunk.len().min(limit - done)];
            if chunk.is_empty() {
                return Ok(done);
            }
            let (h, w) = (gh, gw);
            let mut data = Vec::with_capacity(chunk.len() * h * w);
            for s in chunk {
                if (s.h, s.w) != (h, w) {
                    return Err(Error::format(
                        &p,
                        format!(
                            "{} has a {}x{} grid, the manifest's is {h}x{w}",
                            s.key, s.h, s.w
                        ),
                    ));
                }
                if let Some((_, v)) = first_out_of_range(&s.tokens, n_codes) {
                    return Err(outside(&p, &s.key, v, n_codes));
                }
                data.extend_from_slice(&s.tokens);
            }
            let grid = TokenGrid {
                n: chunk.len(),
                h,
                w,
                batched: true,
                data,
            };
            for (s, img) in chunk.iter().zip(tok.decode(&grid)?) {
                sink(&s.key, &img)?;
            }
            done += chunk.len();
        }
    }
    Ok(done)
}
