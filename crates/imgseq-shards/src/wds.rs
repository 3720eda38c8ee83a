//! Token shards as WebDataset `.tar` files: per sample `KEY.tokens.npy` (uint16 when the
//! codebook has ≤ 65,536 entries, else int32; shape (h, w)) and `KEY.json` (source, crop,
//! label/caption/metadata). Plain Python reads them with `tarfile` + `numpy` or `webdataset`.
//!
//! A shard is written to a hidden temporary file, fsynced, and renamed into place: a shard
//! that exists is complete, and it is never rewritten. Member headers carry no time, owner or
//! host, so the same samples give the same bytes.

use imgseq_core::npy::{npy_header, parse_npy};
use imgseq_core::{Error, Result};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// A token grid in a shard.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenSample {
    pub key: String,
    pub h: usize,
    pub w: usize,
    pub tokens: Vec<i64>,
    pub json: Value,
}

/// `.npy` bytes of an (h, w) token grid in the codebook's storage dtype
/// ([`imgseq_core::tokens::TokenDtype`]: uint16 up to 65,536 codes, else int32).
pub fn tokens_npy(h: usize, w: usize, tokens: &[i64], n_codes: usize) -> Vec<u8> {
    let dtype = imgseq_core::tokens::TokenDtype::for_codebook(n_codes);
    let mut out = npy_header(dtype.npy_descr(), &[h, w]);
    out.extend_from_slice(&dtype.le_bytes(tokens));
    out
}

/// `.npy` bytes of a float array of `shape` stored as float16 (`<f2`; round to nearest).
pub fn latent_npy(shape: &[usize], values: &[f32]) -> Vec<u8> {
    float_npy(shape, values, crate::kind::FloatDtype::F16)
}

/// `.npy` bytes of a float array of `shape` stored as `dtype` (`<f2`, or bfloat16's bit
/// patterns as `<u2`; round to nearest even).
pub fn float_npy(shape: &[usize], values: &[f32], dtype: crate::kind::FloatDtype) -> Vec<u8> {
    let mut out = npy_header(dtype.npy_descr(), shape);
    out.extend_from_slice(&dtype.le_bytes(values));
    out
}

/// Float16 little-endian bytes of `values`.
pub fn f16_bytes(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * 2);
    for &v in values {
        out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes());
    }
    out
}

/// Writes one shard; nothing is visible at `path` until [`ShardWriter::finish`].
pub struct ShardWriter {
    path: PathBuf,
    tmp: PathBuf,
    builder: Option<tar::Builder<HashingWriter<BufWriter<File>>>>,
    samples: usize,
}

/// Passes bytes on, hashing and counting them.
pub(crate) struct HashingWriter<W> {
    pub(crate) inner: W,
    pub(crate) hash: Sha256,
    pub(crate) len: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl HashingWriter<BufWriter<File>> {
    /// Starts a shard at `path`: checks that nothing but a regular file sits at its name (never
    /// rename over a link, device, FIFO or folder), and opens the temporary file beside it that
    /// [`Self::commit`] renames into place. Returns the temporary path and its writer. The one
    /// opening step of every shard writer.
    pub(crate) fn create(path: &Path) -> Result<(PathBuf, Self)> {
        imgseq_core::fsutil::check_output(path)?;
        let tmp = imgseq_core::fsutil::temp_path(path)?;
        let f = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        let sink = HashingWriter {
            inner: BufWriter::new(f),
            hash: Sha256::new(),
            len: 0,
        };
        Ok((tmp, sink))
    }

    /// Completes a shard written to `tmp`: flushes, fsyncs, renames it to `path` (so a shard
    /// that exists is whole) and says what it holds. The one commit step of both formats.
    pub(crate) fn commit(self, tmp: &Path, path: &Path, samples: usize) -> Result<Finished> {
        let res = (|| -> std::io::Result<Finished> {
            let HashingWriter { inner, hash, len } = self;
            let f = inner.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
            drop(f);
            std::fs::rename(tmp, path)?;
            Ok(Finished {
                samples,
                bytes: len,
                sha256: hex(&hash.finalize()),
            })
        })();
        res.map_err(|e| Error::io(path, e))
    }
}

/// What a finished shard holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub samples: usize,
    pub bytes: u64,
    pub sha256: String,
}

impl ShardWriter {
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let (tmp, hw) = HashingWriter::create(&path)?;
        let mut builder = tar::Builder::new(hw);
        builder.mode(tar::HeaderMode::Deterministic);
        Ok(Self {
            path,
            tmp,
            builder: Some(builder),
            samples: 0,
        })
    }

    fn member(&mut self, name: &str, data: &[u8]) -> Result<()> {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        h.set_entry_type(tar::EntryType::Regular);
        let b = self.builder.as_mut().expect("not finished");
        b.append_data(&mut h, name, data)
            .map_err(|e| Error::io(&self.tmp, e))
    }

    /// Appends a sample: `KEY.tokens.npy` then `KEY.json`.
    pub fn append(&mut self, key: &str, npy: &[u8], json: &Value) -> Result<()> {
        self.append_as(key, "tokens.npy", npy, json)
    }

    /// Appends a sample: `KEY.EXT` (`tokens.npy`, `latent.npy`) then `KEY.json`.
    pub fn append_as(&mut self, key: &str, ext: &str, npy: &[u8], json: &Value) -> Result<()> {
        self.member(&format!("{key}.{ext}"), npy)?;
        let j = serde_json::to_vec(json).expect("JSON values serialise");
        self.member(&format!("{key}.json"), &j)?;
        self.samples += 1;
        Ok(())
    }

    /// Closes the archive, fsyncs and renames it into place; returns what it holds.
    pub fn finish(mut self) -> Result<Finished> {
        let b = self.builder.take().expect("finish once");
        let hw = b.into_inner().map_err(|e| Error::io(&self.tmp, e))?;
        hw.commit(&self.tmp, &self.path, self.samples)
    }
}

impl Drop for ShardWriter {
    fn drop(&mut self) {
        if self.builder.is_some() {
            // Not finished: leave nothing behind.
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let (mut f, _) = imgseq_core::fsutil::open_regular_file(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// Every sample of a WebDataset token shard, in order ([`crate::shard::read_shard`] reads
/// either format).
pub fn read_tar(path: &Path) -> Result<Vec<TokenSample>> {
    let mut out = Vec::new();
    for_each_in_tar(path, |s| {
        out.push(s);
        Ok(())
    })?;
    Ok(out)
}

/// Hands every sample of a WebDataset token shard to `f`, in order, holding one sample (and
/// one member of at most 64 MiB) at a time, so that memory does not grow with the shard.
pub fn for_each_in_tar(path: &Path, mut f: impl FnMut(TokenSample) -> Result<()>) -> Result<()> {
    let (file, _) = imgseq_core::fsutil::open_regular_file(path)?;
    let mut ar = tar::Archive::new(file);
    let bad = |e: std::io::Error| Error::format(path, format!("not a readable tar: {e}"));
    let mut pending: Option<TokenSample> = None;
    for entry in ar.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let name = entry.path().map_err(bad)?.to_string_lossy().into_owned();
        let Some((key, ext)) = crate::source::split_member(&name) else {
            continue;
        };
        let key = key.to_string();
        if !matches!(ext, "tokens.npy" | "json") {
            continue;
        }
        let mut data = Vec::new();
        entry
            .by_ref()
            .take(64 << 20)
            .read_to_end(&mut data)
            .map_err(bad)?;
        if ext == "json" {
            let v: Value = serde_json::from_slice(&data)
                .map_err(|e| Error::format(path, format!("{name}: {e}")))?;
            match pending.as_mut() {
                Some(s) if s.key == key => s.json = v,
                _ => {
                    return Err(Error::format(
                        path,
                        format!("{name} does not follow its {key}.tokens.npy"),
                    ))
                }
            }
            continue;
        }
        let a =
            parse_npy(Path::new(&name), &data).map_err(|e| Error::format(path, e.to_string()))?;
        drop(data);
        let (h, w) = match a.shape.as_slice() {
            [h, w] => (*h, *w),
            s => {
                return Err(Error::format(
                    path,
                    format!("{name}: tokens of shape {s:?}, expected (h, w)"),
                ))
            }
        };
        let tokens = a
            .as_i64()
            .map(<[i64]>::to_vec)
            .ok_or_else(|| Error::format(path, format!("{name}: tokens are not integers")))?;
        if let Some(s) = pending.replace(TokenSample {
            key,
            h,
            w,
            tokens,
            json: Value::Null,
        }) {
            f(s)?;
        }
    }
    match pending {
        Some(s) => f(s),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_reads_back_and_is_byte_deterministic() {
        let d = tempfile::tempdir().unwrap();
        let write = |name: &str| {
            let p = d.path().join(name);
            let mut w = ShardWriter::create(&p).unwrap();
            for (i, key) in ["a", "dir/b"].iter().enumerate() {
                let toks = vec![i as i64, 1023, 7, 0, 5, 6];
                let j = serde_json::json!({"source": key, "i": i});
                w.append(key, &tokens_npy(2, 3, &toks, 1024), &j).unwrap();
            }
            (p, w.finish().unwrap())
        };
        let (p1, f1) = write("s1.tar");
        let (p2, f2) = write("s2.tar");
        assert_eq!(f1, f2);
        assert_eq!(f1.samples, 2);
        assert_eq!(std::fs::read(&p1).unwrap(), std::fs::read(&p2).unwrap());
        assert_eq!(sha256_file(&p1).unwrap(), f1.sha256);
        let s = read_tar(&p1).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!((s[1].key.as_str(), s[1].h, s[1].w), ("dir/b", 2, 3));
        assert_eq!(s[1].tokens, vec![1, 1023, 7, 0, 5, 6]);
        assert_eq!(s[1].json["i"], 1);
        // Nothing but the two shards: no temporary files left.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
    }

    #[test]
    fn an_unfinished_shard_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.tar");
        let mut w = ShardWriter::create(&p).unwrap();
        w.append("a", &tokens_npy(1, 1, &[3], 16), &Value::Null)
            .unwrap();
        drop(w);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }
}
