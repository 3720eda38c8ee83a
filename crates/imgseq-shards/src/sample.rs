//! A sample of the index: its key, where it came from, and where its image and metadata
//! bytes are ([`Location`]: a file, bytes in memory, a tar member, or a value or row of a
//! Parquet file), read when the sample is processed ([`SampleRef::load`]).

use crate::parquet_in::{ParquetCell, ParquetRow};
use imgseq_core::fsutil::open_regular_file;
use imgseq_core::{Error, Result};
use serde_json::{Map, Value};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Largest image file or tar member read (bigger ones are skipped as errors).
pub const MAX_IMAGE_BYTES: u64 = 256 << 20;
/// Largest metadata member read.
pub const MAX_META_BYTES: u64 = 4 << 20;
/// Longest key (bytes): output member and file names are made of it.
pub const MAX_KEY_BYTES: usize = 200;

/// Why `key` cannot name a sample's outputs, if it cannot: longer than [`MAX_KEY_BYTES`],
/// absolute, or with an empty, `.` or `..` part (a tar member named `../../x.png`).
pub fn key_problem(key: &str) -> Option<String> {
    if key.len() > MAX_KEY_BYTES {
        return Some(format!(
            "the key is {} bytes long, more than {MAX_KEY_BYTES}",
            key.len()
        ));
    }
    let path_like = key.is_empty()
        || key.contains('\\')
        || key.contains('\0')
        || key
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..");
    path_like.then(|| {
        format!("the key {key:?} is not a relative name (absolute, or with an empty, . or .. part)")
    })
}

/// Where a file's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    File(PathBuf),
    /// Bytes held in memory: an IDX image re-encoded as PNG, or its label as text.
    Inline(Arc<Vec<u8>>),
    /// The data of a tar member: `size` bytes at `offset` of `tar`.
    TarMember {
        tar: PathBuf,
        offset: u64,
        size: u64,
    },
    /// A value of a Parquet file: image bytes, a caption or a label.
    ParquetCell(ParquetCell),
    /// The scalar columns of a Parquet row, read as a JSON object.
    ParquetRow(ParquetRow),
    /// A sample the index refused (a key that cannot name an output); reading it fails with
    /// the reason, so that it is skipped and listed like any unreadable sample.
    Refused(String),
}

impl Location {
    /// Reads the bytes (at most `limit`; more is an error naming the place).
    pub fn read(&self, limit: u64) -> Result<Vec<u8>> {
        match self {
            Location::File(p) => {
                let (f, len) = open_regular_file(p)?;
                if len > limit {
                    return Err(Error::format(
                        p,
                        format!("{len} bytes, more than the {limit}-byte limit"),
                    ));
                }
                let mut v = Vec::with_capacity(len as usize);
                f.take(limit + 1)
                    .read_to_end(&mut v)
                    .map_err(|e| Error::io(p, e))?;
                Ok(v)
            }
            Location::Inline(bytes) => Ok(bytes.as_ref().clone()),
            Location::TarMember { tar, offset, size } => {
                if *size > limit {
                    return Err(Error::format(
                        tar,
                        format!("member at byte {offset} has {size} bytes, more than the {limit}-byte limit"),
                    ));
                }
                let (mut f, _) = open_regular_file(tar)?;
                f.seek(SeekFrom::Start(*offset))
                    .map_err(|e| Error::io(tar, e))?;
                let mut v = vec![0u8; *size as usize];
                f.read_exact(&mut v).map_err(|e| Error::io(tar, e))?;
                Ok(v)
            }
            Location::ParquetCell(c) => c.read(limit),
            Location::ParquetRow(r) => r.read_json(),
            Location::Refused(why) => Err(Error::invalid(why.clone())),
        }
    }
}

/// One sample of the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleRef {
    /// Unique in the index; the output shard's member names (`KEY.tokens.npy`).
    pub key: String,
    /// Where it came from, for people: `photos/a.jpg` or `data-000.tar:000012.jpg`.
    pub source: String,
    pub image: Location,
    /// Metadata members by extension (`json`, `txt`, `cls`).
    pub meta: Vec<(String, Location)>,
}

/// A sample with its bytes read.
#[derive(Debug, Clone)]
pub struct Sample {
    pub key: String,
    pub source: String,
    pub image: Vec<u8>,
    /// `{"json": {...}, "caption": "...", "label": ...}`, whichever the source had.
    pub meta: Map<String, Value>,
}

impl SampleRef {
    /// Reads the image bytes and the metadata.
    pub fn load(&self) -> Result<Sample> {
        let image = self.image.read(MAX_IMAGE_BYTES)?;
        let mut meta = Map::new();
        for (ext, loc) in &self.meta {
            let bytes = loc.read(MAX_META_BYTES)?;
            let text = String::from_utf8_lossy(&bytes).trim().to_string();
            match ext.as_str() {
                "json" => {
                    let v: Value = serde_json::from_slice(&bytes).map_err(|e| {
                        Error::format(
                            Path::new(&self.source),
                            format!("{}.json is not valid JSON: {e}", self.key),
                        )
                    })?;
                    meta.insert("json".into(), v);
                }
                "txt" => {
                    meta.insert("caption".into(), Value::String(text));
                }
                "class" => {
                    meta.insert("class".into(), Value::String(text));
                }
                // A null label (a Parquet row without one): no label.
                "cls" if text.is_empty() => {}
                _ => {
                    let label = text
                        .parse::<i64>()
                        .map(Value::from)
                        .unwrap_or(Value::String(text));
                    meta.insert("label".into(), label);
                }
            }
        }
        Ok(Sample {
            key: self.key.clone(),
            source: self.source.clone(),
            image,
            meta,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn sample_types_and_the_parquet_adapter_keep_their_former_paths() {
        let samples: fn(&Path, Option<&str>) -> imgseq_core::Result<Vec<crate::source::SampleRef>> =
            crate::parquet_in::samples;
        let _ = samples;
        let loc: crate::source::Location = super::Location::Inline(Default::default());
        assert_eq!(loc.read(crate::source::MAX_META_BYTES).unwrap(), b"");
        let s = crate::source::SampleRef {
            key: "k".into(),
            source: "s".into(),
            image: loc,
            meta: Vec::new(),
        };
        let loaded: crate::Sample = s.load().unwrap();
        assert_eq!((loaded.key.as_str(), loaded.image.len()), ("k", 0));
    }
}
