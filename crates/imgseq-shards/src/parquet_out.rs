//! Token shards as Parquet files: one row per image with
//!
//! | column | type | |
//! |---|---|---|
//! | `key` | string | as the WebDataset shards' member names |
//! | `tokens` | list<uint16> (list<int32> when the codebook has > 65,536 codes) | the (h, w) grid, row-major |
//! | `height`, `width` | int32 | the token grid |
//! | `source` | string | where the image came from |
//! | `metadata` | string (JSON) | what a WebDataset shard's `KEY.json` holds: source, original size, crop, grid, label/caption/metadata |
//!
//! snappy-compressed (pyarrow's default codec), row groups of [`ROW_GROUP_ROWS`] rows. Written
//! as the tar shards are: to a hidden temporary file, fsynced, renamed into place when
//! complete; the same samples give the same bytes. `pyarrow.parquet.read_table` reads them.

use crate::parquet_in::{Cell, ParquetFile};
use crate::wds::{Finished, HashingWriter, TokenSample};
use imgseq_core::tokens::TokenDtype;
use imgseq_core::{Error, Result};
use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, Int32Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use serde_json::Value;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Rows per row group: memory holds at most this many rows of a shard being written.
pub const ROW_GROUP_ROWS: usize = 4096;

/// The schema for tokens stored as `dtype` ([`TokenDtype::for_codebook`]).
fn schema(dtype: TokenDtype) -> String {
    let element = match dtype {
        TokenDtype::I32 => "required int32 element;",
        TokenDtype::U16 => "required int32 element (INTEGER(16,false));",
    };
    format!(
        "message imgseq_tokens {{
           required binary key (STRING);
           required group tokens (LIST) {{ repeated group list {{ {element} }} }}
           required int32 height;
           required int32 width;
           required binary source (STRING);
           required binary metadata (STRING);
         }}"
    )
}

struct Row {
    key: String,
    h: usize,
    w: usize,
    tokens: Vec<i32>,
    source: String,
    metadata: String,
}

/// Writes one Parquet shard; nothing is visible at `path` until [`ShardWriter::finish`].
pub struct ShardWriter {
    path: PathBuf,
    tmp: PathBuf,
    writer: Option<SerializedFileWriter<HashingWriter<BufWriter<File>>>>,
    n_codes: usize,
    rows: Vec<Row>,
    group_rows: usize,
    samples: usize,
}

impl ShardWriter {
    /// A shard for the tokens of a codebook of `n_codes` entries.
    pub fn create(path: impl AsRef<Path>, n_codes: usize) -> Result<Self> {
        Self::with_row_groups(path, n_codes, ROW_GROUP_ROWS)
    }

    /// [`ShardWriter::create`] with `group_rows` rows per row group.
    pub fn with_row_groups(
        path: impl AsRef<Path>,
        n_codes: usize,
        group_rows: usize,
    ) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let (tmp, sink) = HashingWriter::create(&path)?;
        let dtype = TokenDtype::for_codebook(n_codes);
        let schema = Arc::new(parse_message_type(&schema(dtype)).expect("the schema parses"));
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_created_by("imgseq".into())
            .build();
        let writer = SerializedFileWriter::new(sink, schema, Arc::new(props))
            .map_err(|e| Error::format(&tmp, e.to_string()))?;
        Ok(Self {
            path,
            tmp,
            writer: Some(writer),
            n_codes,
            rows: Vec::new(),
            group_rows: group_rows.max(1),
            samples: 0,
        })
    }

    /// Appends a sample: an (h, w) token grid and its JSON record (`source` is taken from it).
    pub fn append(
        &mut self,
        key: &str,
        h: usize,
        w: usize,
        tokens: &[i64],
        json: &Value,
    ) -> Result<()> {
        if h == 0 || w == 0 || tokens.len() != h * w {
            return Err(Error::invalid(format!(
                "{key}: {} tokens for a {h}x{w} grid",
                tokens.len()
            )));
        }
        let max = (self.n_codes.min(i32::MAX as usize) as i64) - 1;
        if let Some(t) = tokens.iter().find(|&&t| !(0..=max).contains(&t)) {
            return Err(Error::invalid(format!(
                "{key}: token {t} is outside the codebook of {}",
                self.n_codes
            )));
        }
        self.rows.push(Row {
            key: key.to_string(),
            h,
            w,
            tokens: tokens.iter().map(|&t| t as i32).collect(),
            source: json
                .get("source")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            metadata: serde_json::to_string(json).expect("JSON values serialise"),
        });
        self.samples += 1;
        if self.rows.len() >= self.group_rows {
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
            let strings = |f: fn(&Row) -> &str| -> Vec<ByteArray> {
                rows.iter().map(|r| ByteArray::from(f(r))).collect()
            };
            let ints =
                |f: fn(&Row) -> usize| -> Vec<i32> { rows.iter().map(|r| f(r) as i32).collect() };
            // Columns in schema order.
            let mut col = rg.next_column()?.expect("key");
            col.typed::<ByteArrayType>()
                .write_batch(&strings(|r| &r.key), None, None)?;
            col.close()?;
            let mut col = rg.next_column()?.expect("tokens");
            let n: usize = rows.iter().map(|r| r.tokens.len()).sum();
            let (mut vals, mut defs, mut reps) = (
                Vec::with_capacity(n),
                Vec::with_capacity(n),
                Vec::with_capacity(n),
            );
            for r in &rows {
                vals.extend_from_slice(&r.tokens);
                defs.extend(std::iter::repeat_n(1i16, r.tokens.len()));
                reps.push(0i16);
                reps.extend(std::iter::repeat_n(1i16, r.tokens.len() - 1));
            }
            col.typed::<Int32Type>()
                .write_batch(&vals, Some(&defs), Some(&reps))?;
            col.close()?;
            let sides: [fn(&Row) -> usize; 2] = [|r| r.h, |r| r.w];
            for f in sides {
                let mut col = rg.next_column()?.expect("height, width");
                col.typed::<Int32Type>().write_batch(&ints(f), None, None)?;
                col.close()?;
            }
            let text: [fn(&Row) -> &str; 2] = [|r| &r.source, |r| &r.metadata];
            for f in text {
                let mut col = rg.next_column()?.expect("source, metadata");
                col.typed::<ByteArrayType>()
                    .write_batch(&strings(f), None, None)?;
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

impl Drop for ShardWriter {
    fn drop(&mut self) {
        if self.writer.is_some() {
            // Not finished: leave nothing behind.
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Every sample of a Parquet token shard, in order.
pub fn read_shard(path: &Path) -> Result<Vec<TokenSample>> {
    let f = ParquetFile::open(path)?;
    f.check_codecs()?;
    let col = |name: &str| {
        f.leaf(&[name]).ok_or_else(|| {
            Error::format(path, format!("no {name} column: not an imgseq token shard"))
        })
    };
    let tokens_leaf = f
        .leaf(&["tokens", "list", "element"])
        .or_else(|| f.leaf(&["tokens", "list", "item"]))
        .ok_or_else(|| {
            Error::format(
                path,
                "no tokens column (a list of integers): not an imgseq token shard",
            )
        })?;
    // Keys are at most 200 bytes and metadata a small JSON object: longer values are cut
    // (and then refused by the checks below) rather than copied whole.
    let keys = f.whole_column(col("key")?, 4097)?;
    let hs = f.whole_column(col("height")?, 64)?;
    let ws = f.whole_column(col("width")?, 64)?;
    let metas = f.whole_column(col("metadata")?, 1 << 20)?;
    let lists = f.whole_int_lists(tokens_leaf)?;
    let mut out = Vec::with_capacity(keys.len());
    for (row, ((((key, h), w), meta), list)) in keys
        .into_iter()
        .zip(hs)
        .zip(ws)
        .zip(metas)
        .zip(lists)
        .enumerate()
    {
        let bad = |msg: String| Error::format(path, format!("row {row}: {msg}"));
        let key = match key {
            Cell::Bytes(b) => String::from_utf8_lossy(&b).into_owned(),
            other => return Err(bad(format!("key {other:?} is not a string"))),
        };
        if key.len() > 4096 {
            return Err(bad("a key longer than 4096 bytes".into()));
        }
        let dim = |c: Cell| match c {
            Cell::Int(v) if v > 0 => Ok(v as usize),
            other => Err(bad(format!(
                "{key}: grid side {other:?} is not a positive integer"
            ))),
        };
        let (h, w) = (dim(h)?, dim(w)?);
        let tokens = list.unwrap_or_default();
        if h.checked_mul(w) != Some(tokens.len()) {
            return Err(bad(format!(
                "{key}: {} tokens for a {h}x{w} grid",
                tokens.len()
            )));
        }
        if let Some(t) = tokens.iter().find(|&&t| t < 0) {
            return Err(bad(format!("{key}: negative token {t}")));
        }
        let json = match meta {
            Cell::Bytes(b) => serde_json::from_slice(&b)
                .map_err(|e| bad(format!("{key}: metadata is not JSON: {e}")))?,
            _ => Value::Null,
        };
        out.push(TokenSample {
            key,
            h,
            w,
            tokens,
            json,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wds::sha256_file;

    fn write(path: &Path, n_codes: usize, group_rows: usize, n: usize) -> Finished {
        let mut w = ShardWriter::with_row_groups(path, n_codes, group_rows).unwrap();
        for i in 0..n {
            let toks: Vec<i64> = (0..6).map(|k| ((i * 7 + k * 3) % n_codes) as i64).collect();
            let j = serde_json::json!({"source": format!("src/{i}.png"), "label": i});
            w.append(&format!("dir/k{i}"), 2, 3, &toks, &j).unwrap();
        }
        w.finish().unwrap()
    }

    #[test]
    fn a_parquet_shard_reads_back_and_is_byte_deterministic() {
        let d = tempfile::tempdir().unwrap();
        for (n_codes, max) in [(1024usize, 1023i64), (70_000, 69_999)] {
            let (p1, p2) = (d.path().join("a.parquet"), d.path().join("b.parquet"));
            // Row groups of 2: three groups for 5 rows.
            let (f1, f2) = (write(&p1, n_codes, 2, 5), write(&p2, n_codes, 2, 5));
            assert_eq!(f1, f2);
            assert_eq!(f1.samples, 5);
            assert_eq!(std::fs::read(&p1).unwrap(), std::fs::read(&p2).unwrap());
            assert_eq!(sha256_file(&p1).unwrap(), f1.sha256);
            assert_eq!(std::fs::metadata(&p1).unwrap().len(), f1.bytes);
            assert_eq!(ParquetFile::open(&p1).unwrap().meta.num_row_groups(), 3);
            let s = read_shard(&p1).unwrap();
            assert_eq!(s.len(), 5);
            assert_eq!((s[4].key.as_str(), s[4].h, s[4].w), ("dir/k4", 2, 3));
            assert_eq!(
                s[4].tokens,
                (0..6)
                    .map(|k| ((28 + k * 3) % n_codes) as i64)
                    .collect::<Vec<_>>()
            );
            assert_eq!(s[3].json["label"], 3);
            assert_eq!(s[3].json["source"], "src/3.png");
            // The largest code fits; one past it does not.
            let mut w = ShardWriter::create(d.path().join("c.parquet"), n_codes).unwrap();
            w.append("a", 1, 1, &[max], &Value::Null).unwrap();
            let e = w.append("b", 1, 1, &[max + 1], &Value::Null).unwrap_err();
            assert!(e.to_string().contains("outside the codebook"), "{e}");
            let e = w.append("c", 2, 2, &[1, 2, 3], &Value::Null).unwrap_err();
            assert!(e.to_string().contains("3 tokens for a 2x2 grid"), "{e}");
            drop(w);
        }
        // Unfinished writers left nothing: only the two finished shards.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_parquet_file_that_is_not_a_token_shard_is_refused_by_name() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.parquet");
        write(&p, 16, 10, 2);
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 20]).unwrap();
        let e = read_shard(&p).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: not a readable Parquet file", p.display())),
            "{e}"
        );
        let fx = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/parquet/img2dataset.parquet");
        let e = read_shard(&fx).unwrap_err().to_string();
        assert!(e.contains("img2dataset.parquet: no tokens column"), "{e}");
    }
}
