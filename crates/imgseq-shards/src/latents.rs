//! Latent and feature shards: one float array per sample — a continuous-latent VAE's scaled
//! latent (C, h, w) or its (N, p²·C) patch tokens; a vision tower's (N, D) embeddings —
//! stored as float16 (default) or bfloat16 ([`FloatDtype`]), written by the same dataset job
//! as token shards.
//!
//! * WebDataset `.tar`: `KEY.latent.npy` (latents) or `KEY.features.npy` (features), `<f2`
//!   (or `<u2` holding bfloat16 bit patterns), C order, + `KEY.json` per sample
//!   ([`crate::wds::float_npy`]); [`crate::shard::read_float_shard`] reads either format.
//! * Parquet: one row per image with
//!
//! | column | type | |
//! |---|---|---|
//! | `key` | string | as the WebDataset shards' member names |
//! | `latent` or `features` | binary | the array's values, 2 bytes each, little-endian, C order (`numpy.frombuffer(b, "<f2")`; bfloat16: `"<u2"` bit patterns) |
//! | `shape` | list<int32> | the array's shape, e.g. [4, 32, 32], [256, 16] or [576, 1024] |
//! | `source` | string | where the image came from |
//! | `metadata` | string (JSON) | what a WebDataset shard's `KEY.json` holds |
//!
//! A bfloat16 Parquet shard says so in its footer's key-value metadata (`imgseq.dtype` =
//! `bfloat16`); without it the values are float16. snappy-compressed, row groups of
//! [`crate::parquet_out::ROW_GROUP_ROWS`] rows, written to a hidden temporary file, fsynced
//! and renamed into place when complete, as token shards are.

use crate::kind::{FloatDtype, ShardKind};
use crate::parquet_in::{Cell, ParquetFile};
use crate::wds::{Finished, HashingWriter};
use imgseq_core::npy::parse_npy;
use imgseq_core::{Error, Result};
use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, Int32Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use serde_json::Value;
use std::fs::File;
use std::io::{BufWriter, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::kind::{FEATURES_MEMBER, LATENT_MEMBER};

/// The Parquet footer key naming a float shard's storage type (absent: float16).
pub const DTYPE_KEY: &str = "imgseq.dtype";

/// Most values of one sample's latent (a 2048×2048 grid of 16 channels).
pub const MAX_LATENT_VALUES: usize = 1 << 26;

/// A sample of a latent shard, its values widened to f32.
#[derive(Debug, Clone, PartialEq)]
pub struct LatentSample {
    pub key: String,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
    pub json: Value,
}

/// The schema of a float shard whose arrays are in column `column` (`latent`, `features`).
fn schema(column: &str) -> String {
    format!(
        "message imgseq_{column} {{
   required binary key (STRING);
   required binary {column};
   required group shape (LIST) {{ repeated group list {{ required int32 element; }} }}
   required binary source (STRING);
   required binary metadata (STRING);
 }}"
    )
}

/// Checks a latent's shape against its value count: non-empty, at most
/// [`MAX_LATENT_VALUES`] values.
pub(crate) fn check_shape(key: &str, shape: &[usize], n: usize) -> std::result::Result<(), String> {
    let count = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    match count {
        Some(c) if c == n && c > 0 && c <= MAX_LATENT_VALUES && !shape.is_empty() => Ok(()),
        _ => Err(format!(
            "{key}: a latent of shape {shape:?} holding {n} values (non-empty, at most \
             {MAX_LATENT_VALUES})"
        )),
    }
}

struct Row {
    key: String,
    latent: Vec<u8>,
    shape: Vec<i32>,
    source: String,
    metadata: String,
}

/// Writes one Parquet latent shard; nothing is visible at `path` until
/// [`LatentParquetWriter::finish`].
pub struct LatentParquetWriter {
    path: PathBuf,
    tmp: PathBuf,
    writer: Option<SerializedFileWriter<HashingWriter<BufWriter<File>>>>,
    rows: Vec<Row>,
    samples: usize,
    dtype: FloatDtype,
}

impl LatentParquetWriter {
    /// A float16 latent shard.
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        Self::create_kind(
            path,
            ShardKind::Latents {
                dtype: FloatDtype::F16,
            },
        )
    }

    /// A shard of `kind` (latents or features, and their storage type).
    pub fn create_kind(path: impl AsRef<Path>, kind: ShardKind) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let (Some((_, column)), Some(dtype)) = (kind.float_member(), kind.dtype()) else {
            return Err(Error::invalid(format!(
                "{}: a float shard holds latents or features, not tokens",
                path.display()
            )));
        };
        let (tmp, sink) = HashingWriter::create(&path)?;
        let schema = Arc::new(parse_message_type(&schema(column)).expect("the schema parses"));
        // float16 files stay as they always were; bfloat16 ones say so in the footer.
        let kv = (dtype != FloatDtype::F16)
            .then(|| vec![KeyValue::new(DTYPE_KEY.into(), dtype.name().to_string())]);
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_created_by("imgseq".into())
            .set_key_value_metadata(kv)
            .build();
        let writer = SerializedFileWriter::new(sink, schema, Arc::new(props))
            .map_err(|e| Error::format(&tmp, e.to_string()))?;
        Ok(Self {
            path,
            tmp,
            writer: Some(writer),
            rows: Vec::new(),
            samples: 0,
            dtype,
        })
    }

    /// Appends a sample: its latent of `shape` and JSON record (`source` is taken from it).
    pub fn append(
        &mut self,
        key: &str,
        shape: &[usize],
        values: &[f32],
        json: &Value,
    ) -> Result<()> {
        check_shape(key, shape, values.len()).map_err(Error::invalid)?;
        self.rows.push(Row {
            key: key.to_string(),
            latent: self.dtype.le_bytes(values),
            shape: shape.iter().map(|&d| d as i32).collect(),
            source: json
                .get("source")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            metadata: serde_json::to_string(json).expect("JSON values serialise"),
        });
        self.samples += 1;
        if self.rows.len() >= crate::parquet_out::ROW_GROUP_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the buffered rows as a row group.
    fn flush(&mut self) -> Result<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.rows);
        let w = self.writer.as_mut().expect("not finished");
        let res = (|| -> parquet::errors::Result<()> {
            let mut rg = w.next_row_group()?;
            let bytes = |f: fn(&Row) -> &[u8]| -> Vec<ByteArray> {
                rows.iter()
                    .map(|r| ByteArray::from(f(r).to_vec()))
                    .collect()
            };
            // Columns in schema order.
            let cols: [fn(&Row) -> &[u8]; 2] = [|r| r.key.as_bytes(), |r| &r.latent];
            for f in cols {
                let mut col = rg.next_column()?.expect("key, latent");
                col.typed::<ByteArrayType>()
                    .write_batch(&bytes(f), None, None)?;
                col.close()?;
            }
            let mut col = rg.next_column()?.expect("shape");
            let (mut vals, mut defs, mut reps) = (Vec::new(), Vec::new(), Vec::new());
            for r in &rows {
                vals.extend_from_slice(&r.shape);
                defs.extend(std::iter::repeat_n(1i16, r.shape.len()));
                reps.push(0i16);
                reps.extend(std::iter::repeat_n(1i16, r.shape.len() - 1));
            }
            col.typed::<Int32Type>()
                .write_batch(&vals, Some(&defs), Some(&reps))?;
            col.close()?;
            let cols: [fn(&Row) -> &[u8]; 2] = [|r| r.source.as_bytes(), |r| r.metadata.as_bytes()];
            for f in cols {
                let mut col = rg.next_column()?.expect("source, metadata");
                col.typed::<ByteArrayType>()
                    .write_batch(&bytes(f), None, None)?;
                col.close()?;
            }
            rg.close()?;
            Ok(())
        })();
        res.map_err(|e| Error::format(&self.tmp, format!("cannot write Parquet: {e}")))
    }

    /// Writes the last row group and the footer, fsyncs and renames the file into place.
    pub fn finish(mut self) -> Result<Finished> {
        self.flush()?;
        let w = self.writer.take().expect("finish once");
        let sink = w
            .into_inner()
            .map_err(|e| Error::format(&self.tmp, format!("cannot write Parquet: {e}")))?;
        sink.commit(&self.tmp, &self.path, self.samples)
    }
}

impl Drop for LatentParquetWriter {
    fn drop(&mut self) {
        if self.writer.is_some() {
            // Not finished: leave nothing behind.
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Every sample of a float16 Parquet latent shard, in order
/// ([`crate::shard::read_latent_shard`] reads either format).
pub fn read_parquet(path: &Path) -> Result<Vec<LatentSample>> {
    read_parquet_kind(
        path,
        ShardKind::Latents {
            dtype: FloatDtype::F16,
        },
    )
}

/// Every sample of a Parquet latent or feature shard of `kind`, in order; its footer's
/// storage type must be the kind's.
pub fn read_parquet_kind(path: &Path, kind: ShardKind) -> Result<Vec<LatentSample>> {
    let (Some((_, column)), Some(dtype)) = (kind.float_member(), kind.dtype()) else {
        return Err(Error::format(
            path,
            "read as a float shard of no float kind",
        ));
    };
    let f = ParquetFile::open(path)?;
    f.check_codecs()?;
    let stored = f.key_value(DTYPE_KEY);
    let stored = stored.as_deref().unwrap_or("float16");
    if stored != dtype.name() {
        return Err(Error::format(
            path,
            format!(
                "holds {stored} values, the manifest says {} (the shard is of another set)",
                dtype.name()
            ),
        ));
    }
    let col = |name: &[&str]| {
        f.leaf(name).ok_or_else(|| {
            Error::format(
                path,
                format!("no {} column: not an imgseq {column} shard", name[0]),
            )
        })
    };
    // Keys as the token shards' reader takes them; a latent whole (its length is checked
    // against its shape below, and all of them together against the memory budget).
    let keys = f.whole_column(col(&["key"])?, 4097)?;
    let latents = f.whole_column(col(&[column])?, usize::MAX)?;
    let shapes = f.whole_int_lists(col(&["shape", "list", "element"])?)?;
    let metas = f.whole_column(col(&["metadata"])?, 1 << 20)?;
    let mut out = Vec::with_capacity(keys.len());
    for (row, (((key, latent), shape), meta)) in keys
        .into_iter()
        .zip(latents)
        .zip(shapes)
        .zip(metas)
        .enumerate()
    {
        let bad = |msg: String| Error::format(path, format!("row {row}: {msg}"));
        let (Cell::Bytes(key), Cell::Bytes(bytes)) = (key, latent) else {
            return Err(bad("key or latent is not a byte string".into()));
        };
        let key = String::from_utf8_lossy(&key).into_owned();
        let shape: Vec<usize> = shape
            .unwrap_or_default()
            .into_iter()
            .map(|d| usize::try_from(d).unwrap_or(0))
            .collect();
        check_shape(&key, &shape, bytes.len() / 2).map_err(bad)?;
        let json = match meta {
            Cell::Bytes(b) => serde_json::from_slice(&b)
                .map_err(|e| bad(format!("{key}: metadata is not JSON: {e}")))?,
            _ => Value::Null,
        };
        let values = dtype.widen(&bytes);
        out.push(LatentSample {
            key,
            shape,
            values,
            json,
        });
    }
    Ok(out)
}

/// Every sample of a float16 tar latent shard, in order.
pub fn read_tar(path: &Path) -> Result<Vec<LatentSample>> {
    read_tar_kind(
        path,
        ShardKind::Latents {
            dtype: FloatDtype::F16,
        },
    )
}

/// Every sample of a tar latent or feature shard of `kind`, in order; each array must be of
/// the kind's storage type.
pub fn read_tar_kind(path: &Path, kind: ShardKind) -> Result<Vec<LatentSample>> {
    let (Some((member, _)), Some(dtype)) = (kind.float_member(), kind.dtype()) else {
        return Err(Error::format(
            path,
            "read as a float shard of no float kind",
        ));
    };
    let (f, _) = imgseq_core::fsutil::open_regular_file(path)?;
    let mut ar = tar::Archive::new(f);
    let bad = |e: std::io::Error| Error::format(path, format!("not a readable tar: {e}"));
    let mut out: Vec<LatentSample> = Vec::new();
    for entry in ar.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let name = entry.path().map_err(bad)?.to_string_lossy().into_owned();
        let Some((key, ext)) = crate::source::split_member(&name) else {
            continue;
        };
        let key = key.to_string();
        let mut data = Vec::new();
        entry
            .by_ref()
            .take(2 * MAX_LATENT_VALUES as u64 + 4096)
            .read_to_end(&mut data)
            .map_err(bad)?;
        match ext {
            _ if ext == member => {
                let a = parse_npy(Path::new(&name), &data)
                    .map_err(|e| Error::format(path, e.to_string()))?;
                if a.descr != dtype.npy_descr() {
                    return Err(Error::format(
                        path,
                        format!(
                            "{name} holds {} values, not {} ({})",
                            a.descr,
                            dtype.npy_descr(),
                            dtype.name()
                        ),
                    ));
                }
                let values: Vec<f32> = match (dtype, &a.data) {
                    (FloatDtype::F16, imgseq_core::npy::NpyData::F32(v)) => v.clone(),
                    (FloatDtype::Bf16, imgseq_core::npy::NpyData::I64(v)) => v
                        .iter()
                        .map(|&b| half::bf16::from_bits(b as u16).to_f32())
                        .collect(),
                    _ => {
                        return Err(Error::format(
                            path,
                            format!("{name}: not a {} array", dtype.name()),
                        ))
                    }
                };
                check_shape(&key, &a.shape, values.len()).map_err(|m| Error::format(path, m))?;
                out.push(LatentSample {
                    key,
                    shape: a.shape,
                    values,
                    json: Value::Null,
                });
            }
            "json" => {
                let v: Value = serde_json::from_slice(&data)
                    .map_err(|e| Error::format(path, format!("{name}: {e}")))?;
                match out.last_mut() {
                    Some(s) if s.key == key => s.json = v,
                    _ => {
                        return Err(Error::format(
                            path,
                            format!("{name} does not follow its {key}.{member}"),
                        ))
                    }
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::read_latent_shard;
    use crate::wds::{latent_npy, sha256_file, ShardWriter};

    fn values(i: usize, n: usize) -> Vec<f32> {
        (0..n).map(|k| (k as f32 - 7.0) * 0.37 + i as f32).collect()
    }

    #[test]
    fn latent_shards_of_both_formats_read_back_as_float16_and_are_byte_deterministic() {
        let d = tempfile::tempdir().unwrap();
        let write = |name: &str| {
            let p = d.path().join(name);
            let fin = if name.ends_with(".parquet") {
                let mut w = LatentParquetWriter::create(&p).unwrap();
                for i in 0..3 {
                    let j = serde_json::json!({"source": format!("s/{i}.png"), "i": i});
                    w.append(&format!("k{i}"), &[4, 2, 3], &values(i, 24), &j)
                        .unwrap();
                }
                w.finish().unwrap()
            } else {
                let mut w = ShardWriter::create(&p).unwrap();
                for i in 0..3 {
                    let j = serde_json::json!({"source": format!("s/{i}.png"), "i": i});
                    let npy = latent_npy(&[4, 2, 3], &values(i, 24));
                    w.append_as(&format!("k{i}"), LATENT_MEMBER, &npy, &j)
                        .unwrap();
                }
                w.finish().unwrap()
            };
            (p, fin)
        };
        for ext in ["tar", "parquet"] {
            let (p1, f1) = write(&format!("a.{ext}"));
            let (p2, f2) = write(&format!("b.{ext}"));
            assert_eq!(f1, f2);
            assert_eq!(std::fs::read(&p1).unwrap(), std::fs::read(&p2).unwrap());
            assert_eq!(sha256_file(&p1).unwrap(), f1.sha256);
            let s = read_latent_shard(&p1).unwrap();
            assert_eq!(s.len(), 3, "{ext}");
            assert_eq!(
                (s[2].key.as_str(), s[2].shape.clone()),
                ("k2", vec![4, 2, 3])
            );
            assert_eq!(s[1].json["i"], 1);
            for (a, b) in s[2].values.iter().zip(values(2, 24)) {
                // float16 keeps 11 significant bits.
                assert!((a - b).abs() <= b.abs() / 1024.0, "{ext}: {a} vs {b}");
                assert_eq!(*a, half::f16::from_f32(b).to_f32());
            }
        }
    }

    #[test]
    fn feature_shards_in_bfloat16_read_back_exactly_and_refuse_another_dtype() {
        use crate::shard::{read_float_shard, FloatDtype, ShardFormat, TokenShardWriter};
        use crate::Payload;
        let d = tempfile::tempdir().unwrap();
        for (format, dtype) in [
            (ShardFormat::Wds, FloatDtype::Bf16),
            (ShardFormat::Parquet, FloatDtype::Bf16),
            (ShardFormat::Wds, FloatDtype::F16),
            (ShardFormat::Parquet, FloatDtype::F16),
        ] {
            let kind = ShardKind::Features { dtype };
            let p = d.path().join(format!("{}.{}", dtype.name(), format.ext()));
            let mut w = TokenShardWriter::create_kind(&p, format, kind).unwrap();
            for i in 0..2 {
                let j = serde_json::json!({"source": format!("s/{i}.png")});
                let payload = Payload::Latent {
                    shape: vec![6, 4],
                    values: values(i, 24),
                };
                w.append_payload(&format!("k{i}"), &payload, &j).unwrap();
            }
            w.finish().unwrap();
            let s = read_float_shard(&p, kind).unwrap();
            assert_eq!(s.len(), 2);
            assert_eq!((s[1].key.as_str(), &s[1].shape[..]), ("k1", &[6, 4][..]));
            for (a, b) in s[1].values.iter().zip(values(1, 24)) {
                let want = match dtype {
                    FloatDtype::Bf16 => half::bf16::from_f32(b).to_f32(),
                    FloatDtype::F16 => half::f16::from_f32(b).to_f32(),
                };
                assert_eq!(*a, want, "{p:?}");
            }
            // Read as the other dtype or kind: refused with one line naming the shard.
            let other = match dtype {
                FloatDtype::Bf16 => FloatDtype::F16,
                FloatDtype::F16 => FloatDtype::Bf16,
            };
            let e = read_float_shard(&p, ShardKind::Features { dtype: other }).unwrap_err();
            assert!(e.to_string().contains(&p.display().to_string()), "{e}");
            assert_eq!(e.to_string().lines().count(), 1, "{e}");
            // Nor is a feature shard read as latents.
            let e = read_float_shard(&p, ShardKind::Latents { dtype }).unwrap_err();
            let want = match format {
                ShardFormat::Wds => "k0.json does not follow its k0.latent.npy",
                ShardFormat::Parquet => "no latent column",
            };
            assert!(e.to_string().contains(want), "{e}");
        }
    }

    #[test]
    fn a_latent_whose_shape_does_not_hold_its_values_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let mut w = LatentParquetWriter::create(d.path().join("s.parquet")).unwrap();
        let e = w
            .append("k", &[4, 2, 2], &values(0, 24), &Value::Null)
            .unwrap_err();
        assert!(
            e.to_string().contains("shape [4, 2, 2] holding 24 values"),
            "{e}"
        );
        drop(w);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }
}
