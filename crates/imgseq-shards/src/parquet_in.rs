//! Parquet files of images, read: the footer, single values and whole columns. Which column
//! holds the images, the metadata and the keys, in img2dataset's and Hugging Face `datasets`'
//! layouts, is [`crate::parquet_source`]'s business.
//!
//! Values are read when a sample is processed, through a small pool of open column cursors
//! that move forward through a row group: samples taken in order decode each page about once
//! per thread, and memory holds a page per cursor, not the file. The pool is bounded by bytes
//! too (what [`crate::parquet_pages::check_chunk`] says each cursor holds, at most a quarter of
//! the memory budget), and a value is copied out at most up to what its reader wants. Codecs: uncompressed, snappy
//! (pyarrow's default) and gzip; another is refused when the file is listed. A file that
//! cannot be listed (truncated, corrupt footer, missing column) is an error naming it; a value
//! that cannot be read (a corrupt page, a null image) fails only its sample.

use crate::parquet_pages::ChunkMemory;
/// The source adapter's entry point, also at its former path.
pub use crate::parquet_source::samples;
use imgseq_core::{Error, Result};
use parquet::basic::{Compression, ConvertedType, LogicalType, Type as PhysicalType};
use parquet::column::reader::{get_column_reader, ColumnReader};
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use parquet::file::serialized_reader::SerializedPageReader;
use parquet::schema::types::{ColumnDescPtr, ColumnDescriptor};
use serde_json::{Map, Value};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A Parquet file of images, its footer read once when it is listed.
pub struct ParquetFile {
    pub path: PathBuf,
    /// Unique per listing (the cursor pool tells files apart by it, not by path).
    id: u64,
    pub(crate) meta: ParquetMetaData,
    /// First row (in the file) of every row group.
    pub(crate) group_start: Vec<usize>,
    /// The file's length when listed, and the (row group, leaf) chunks whose page headers
    /// passed [`crate::parquet_pages::check_chunk`], with what reading each holds.
    len: u64,
    checked: Mutex<Vec<((usize, usize), ChunkMemory)>>,
}

impl std::fmt::Debug for ParquetFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ParquetFile({})", self.path.display())
    }
}

impl Drop for ParquetFile {
    /// The pooled cursors of a file no sample refers to any more go with it (with the pages
    /// they hold).
    fn drop(&mut self) {
        let mut pool = CURSORS.lock().unwrap_or_else(|e| e.into_inner());
        pool.retain(|c| c.file_id != self.id);
    }
}

impl PartialEq for ParquetFile {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl Eq for ParquetFile {}

/// One value of a Parquet file: leaf column `leaf` of row `row` (row `row - start of group`
/// within row group `group`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParquetCell {
    pub file: Arc<ParquetFile>,
    pub group: usize,
    pub row: usize,
    pub leaf: usize,
    /// The image cell of img2dataset files: the `error_message` column, quoted when the image
    /// is null (a failed download).
    pub why_null: Option<usize>,
}

/// The scalar columns of one row, read as a JSON object (`name` → leaf column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParquetRow {
    pub file: Arc<ParquetFile>,
    pub group: usize,
    pub row: usize,
    pub fields: Arc<Vec<(String, usize)>>,
}

/// A value as read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Bytes(Vec<u8>),
}

impl Cell {
    /// Bytes of a byte array (0 for the others).
    pub(crate) fn len(&self) -> usize {
        match self {
            Cell::Bytes(b) => b.len(),
            _ => 0,
        }
    }

    fn to_json(&self, text: bool) -> Value {
        match self {
            Cell::Null => Value::Null,
            Cell::Bool(b) => Value::Bool(*b),
            Cell::Int(i) => Value::from(*i),
            Cell::UInt(u) => Value::from(*u),
            Cell::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Cell::Bytes(b) if text => Value::String(String::from_utf8_lossy(b).into_owned()),
            Cell::Bytes(_) => Value::Null,
        }
    }

    /// The value as the bytes of a WebDataset member (`KEY.txt`, `KEY.cls`): text as is,
    /// numbers in decimal, null as nothing.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        match self {
            Cell::Null => Vec::new(),
            Cell::Bytes(b) => b,
            other => other.to_json(true).to_string().into_bytes(),
        }
    }
}

fn pq_msg(e: &ParquetError) -> String {
    e.to_string().replace('\n', " ")
}

/// Runs `f`, turning a panic inside the Parquet reader (hostile bytes it did not expect) into
/// an error like any other.
/// The panic's text and backtrace note are not printed (the error says what failed, once).
pub(crate) fn guarded<T>(
    f: impl FnOnce() -> std::result::Result<T, String>,
) -> std::result::Result<T, String> {
    quiet_panics();
    QUIET.with(|q| q.set(q.get() + 1));
    let r = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(q.get() - 1));
    r.unwrap_or_else(|p| {
        let what = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or("unknown");
        Err(format!(
            "the Parquet reader failed ({})",
            what.replace('\n', " ")
        ))
    })
}

thread_local! {
    /// Depth of [`guarded`] calls on this thread: a panic inside one is not printed.
    static QUIET: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Installs, once, a panic hook that stays silent inside [`guarded`] and prints as before
/// everywhere else.
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(|q| q.get()) == 0 {
                previous(info);
            }
        }));
    });
}

impl ParquetFile {
    /// Reads the footer; the error names the file.
    pub fn open(path: &Path) -> Result<Self> {
        let (f, len) = imgseq_core::fsutil::open_regular_file(path)?;
        let meta = guarded(|| {
            ParquetMetaDataReader::new()
                .parse_and_finish(&f)
                .map_err(|e| pq_msg(&e))
        })
        .map_err(|e| Error::format(path, format!("not a readable Parquet file: {e}")))?;
        let mut group_start = Vec::with_capacity(meta.num_row_groups());
        let mut rows = 0usize;
        for (g, rg) in meta.row_groups().iter().enumerate() {
            let n = usize::try_from(rg.num_rows()).map_err(|_| {
                Error::format(path, format!("row group {g} has {} rows", rg.num_rows()))
            })?;
            group_start.push(rows);
            rows = rows
                .checked_add(n)
                .filter(|&r| r as u64 <= len)
                .ok_or_else(|| {
                    Error::format(
                        path,
                        format!(
                            "row group {g} declares {n} rows: more rows than the file has bytes \
                             ({len})"
                        ),
                    )
                })?;
            if rg.num_columns() != meta.file_metadata().schema_descr().num_columns() {
                return Err(Error::format(
                    path,
                    format!(
                        "row group {g} has {} columns, the schema {}",
                        rg.num_columns(),
                        meta.file_metadata().schema_descr().num_columns()
                    ),
                ));
            }
        }
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        Ok(Self {
            path: path.to_path_buf(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            meta,
            group_start,
            len,
            checked: Mutex::new(Vec::new()),
        })
    }

    /// The value of `key` in the footer's key-value metadata.
    pub fn key_value(&self, key: &str) -> Option<String> {
        self.meta
            .file_metadata()
            .key_value_metadata()?
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone())
    }

    pub fn num_rows(&self) -> usize {
        let last = self.meta.row_groups().last();
        self.group_start.last().copied().unwrap_or(0) + last.map_or(0, |rg| rg.num_rows() as usize)
    }

    pub(crate) fn column(&self, leaf: usize) -> ColumnDescPtr {
        self.meta.file_metadata().schema_descr().column(leaf)
    }

    /// The leaf column at `path` (`["tokens", "list", "element"]`).
    pub(crate) fn leaf(&self, path: &[&str]) -> Option<usize> {
        let schema = self.meta.file_metadata().schema_descr();
        schema.columns().iter().position(|c| {
            c.path().parts().len() == path.len()
                && c.path().parts().iter().zip(path).all(|(a, b)| a == b)
        })
    }

    /// Every list of a leaf column inside one list (repetition level 1) of integers, row group
    /// by row group: `None` for a null list.
    pub(crate) fn whole_int_lists(&self, leaf: usize) -> Result<Vec<Option<Vec<i64>>>> {
        let descr = self.column(leaf);
        let (max_def, max_rep) = (descr.max_def_level(), descr.max_rep_level());
        if max_rep != 1 {
            return Err(Error::format(
                &self.path,
                format!("column {} is not a list", self.leaf_name(leaf)),
            ));
        }
        let mut out: Vec<Option<Vec<i64>>> = Vec::new();
        for g in 0..self.meta.num_row_groups() {
            let n = self.meta.row_group(g).num_rows() as usize;
            let lists = guarded(|| {
                let mut c = self.cursor(g, leaf)?;
                let unsigned = c.unsigned;
                let (mut defs, mut reps) = (Vec::new(), Vec::new());
                let mut vals: Vec<i64> = Vec::new();
                let mut got = 0usize;
                while got < n {
                    let records = match &mut c.reader {
                        ColumnReader::Int32ColumnReader(r) => {
                            let mut v: Vec<i32> = Vec::new();
                            let (k, _, _) = r
                                .read_records(n - got, Some(&mut defs), Some(&mut reps), &mut v)
                                .map_err(|e| pq_msg(&e))?;
                            vals.extend(v.into_iter().map(|x| {
                                if unsigned {
                                    x as u32 as i64
                                } else {
                                    x as i64
                                }
                            }));
                            k
                        }
                        ColumnReader::Int64ColumnReader(r) => {
                            let (k, _, _) = r
                                .read_records(n - got, Some(&mut defs), Some(&mut reps), &mut vals)
                                .map_err(|e| pq_msg(&e))?;
                            k
                        }
                        _ => return Err("not a list of integers".to_string()),
                    };
                    if records == 0 {
                        return Err(format!("{got} of the row group's {n} rows present"));
                    }
                    got += records;
                }
                if defs.len() != reps.len() {
                    return Err("definition and repetition levels differ in number".into());
                }
                let mut lists: Vec<Option<Vec<i64>>> = Vec::new();
                let mut vals = vals.into_iter();
                for (&d, &r) in defs.iter().zip(&reps) {
                    if r == 0 {
                        // A new row: null list (def 0 of an optional list), empty, or values.
                        lists.push((d > 0 || max_def == 0).then(Vec::new));
                    }
                    let Some(Some(list)) = lists.last_mut() else {
                        return Err("a list continues a null or absent row".into());
                    };
                    if d == max_def {
                        list.push(vals.next().ok_or("a list value is missing")?);
                    }
                }
                if lists.len() != n {
                    return Err(format!("{} lists for {n} rows", lists.len()));
                }
                Ok(lists)
            })
            .map_err(|e| {
                Error::format(
                    &self.path,
                    format!(
                        "column {} of row group {g} cannot be read: {e}",
                        self.leaf_name(leaf)
                    ),
                )
            })?;
            out.extend(lists);
        }
        Ok(out)
    }

    /// `a.b.c`: a leaf column's path.
    fn leaf_name(&self, leaf: usize) -> String {
        self.column(leaf).path().parts().join(".")
    }

    /// Refuses codecs other than uncompressed, snappy and gzip.
    pub(crate) fn check_codecs(&self) -> Result<()> {
        for rg in self.meta.row_groups() {
            for (leaf, c) in rg.columns().iter().enumerate() {
                match c.compression() {
                    Compression::UNCOMPRESSED | Compression::SNAPPY | Compression::GZIP(_) => {}
                    other => {
                        let codec = format!("{other:?}");
                        let codec = codec.split('(').next().unwrap_or(&codec).to_string();
                        return Err(Error::format(
                            &self.path,
                            format!(
                                "column {} is compressed with {codec}; imgseq reads uncompressed, \
                                 snappy and gzip Parquet (rewrite it, e.g. pyarrow's \
                                 write_table(..., compression=\"snappy\"))",
                                self.leaf_name(leaf)
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// A cursor at the start of leaf `leaf` of row group `group`.
    fn cursor(&self, group: usize, leaf: usize) -> std::result::Result<Cursor, String> {
        let rg = self.meta.row_group(group);
        let (mut f, _) =
            imgseq_core::fsutil::open_regular_file(&self.path).map_err(|e| e.to_string())?;
        let descr = self.meta.file_metadata().schema_descr().column(leaf);
        let done = |c: &Vec<((usize, usize), ChunkMemory)>| {
            c.iter().find(|(k, _)| *k == (group, leaf)).map(|(_, m)| *m)
        };
        let known = done(&self.checked.lock().unwrap_or_else(|e| e.into_inner()));
        let memory = match known {
            Some(m) => m,
            None => {
                let m = crate::parquet_pages::check_chunk(
                    &mut f,
                    self.len,
                    rg.column(leaf),
                    descr.physical_type(),
                    descr.type_length(),
                )?;
                let mut c = self.checked.lock().unwrap_or_else(|e| e.into_inner());
                if done(&c).is_none() {
                    c.push(((group, leaf), m));
                }
                m
            }
        };
        let bounded = crate::parquet_pages::Bounded {
            file: f,
            end: memory.readable_end,
        };
        let pages = SerializedPageReader::new(
            Arc::new(bounded),
            rg.column(leaf),
            rg.num_rows() as usize,
            None,
        )
        .map_err(|e| pq_msg(&e))?;
        let unsigned = matches!(
            descr.logical_type_ref(),
            Some(LogicalType::Integer(t)) if !t.is_signed
        ) || matches!(
            descr.converted_type(),
            ConvertedType::UINT_8
                | ConvertedType::UINT_16
                | ConvertedType::UINT_32
                | ConvertedType::UINT_64
        );
        Ok(Cursor {
            file_id: self.id,
            group,
            leaf,
            bytes: memory.cursor,
            next: 0,
            max_def: descr.max_def_level(),
            unsigned,
            reader: get_column_reader(descr, Box::new(pages)),
        })
    }

    /// The value of leaf `leaf` at row `row` of row group `group`; bytes beyond `limit` are
    /// not copied (a longer value comes back cut at `limit`).
    fn value(
        &self,
        group: usize,
        row: usize,
        leaf: usize,
        limit: usize,
    ) -> std::result::Result<Cell, String> {
        guarded(|| {
            let mut c = match take_cursor(self.id, group, leaf, row) {
                Some(c) => c,
                None => self.cursor(group, leaf)?,
            };
            let v = c.read_at(row, limit).map_err(|e| pq_msg(&e))?;
            put_cursor(c);
            Ok(v)
        })
    }

    /// Every value of a flat leaf column, row group by row group, each cut at `limit` bytes
    /// (a longer one comes back with `limit` bytes); the values together must fit the memory
    /// budget (a dictionary can repeat one long value in every row).
    pub(crate) fn whole_column(&self, leaf: usize, limit: usize) -> Result<Vec<Cell>> {
        let mut out = Vec::new();
        let mut total = 0u128;
        for g in 0..self.meta.num_row_groups() {
            let n = self.meta.row_group(g).num_rows() as usize;
            let vals = guarded(|| {
                let mut c = self.cursor(g, leaf)?;
                (0..n)
                    .map(|r| {
                        let v = c.read_at(r, limit).map_err(|e| pq_msg(&e))?;
                        total += 48 + v.len() as u128;
                        imgseq_core::budget::check_memory(total)
                            .map_err(|e| format!("its values up to row {r} {e}"))?;
                        Ok(v)
                    })
                    .collect::<std::result::Result<Vec<_>, _>>()
            })
            .map_err(|e| {
                Error::format(
                    &self.path,
                    format!(
                        "column {} of row group {g} cannot be read: {e}",
                        self.leaf_name(leaf)
                    ),
                )
            })?;
            out.extend(vals);
        }
        Ok(out)
    }
}

impl ParquetCell {
    /// The bytes of the value (at most `limit`): image bytes, or a caption/label as text.
    pub fn read(&self, limit: u64) -> Result<Vec<u8>> {
        let f = &self.file;
        let name = f.leaf_name(self.leaf);
        let local = self.row - f.group_start[self.group];
        let cut = usize::try_from(limit)
            .unwrap_or(usize::MAX)
            .saturating_add(1);
        let v = f
            .value(self.group, local, self.leaf, cut)
            .map_err(|e| Error::format(&f.path, format!("row {}: column {name}: {e}", self.row)))?;
        if v == Cell::Null && self.why_null.is_some() {
            let why = self
                .why_null
                .and_then(|l| f.value(self.group, local, l, 4096).ok())
                .filter(|c| *c != Cell::Null)
                .map(|c| format!(" ({})", String::from_utf8_lossy(&c.into_bytes())))
                .unwrap_or_default();
            return Err(Error::format(
                &f.path,
                format!("row {}: no image, {name} is null{why}", self.row),
            ));
        }
        let b = v.into_bytes();
        if b.len() as u64 > limit {
            return Err(Error::format(
                &f.path,
                format!(
                    "row {}: {name} has {} bytes, more than the {limit}-byte limit",
                    self.row,
                    b.len()
                ),
            ));
        }
        Ok(b)
    }
}

impl ParquetRow {
    /// The row's scalar columns as the bytes of a JSON object.
    pub fn read_json(&self) -> Result<Vec<u8>> {
        let f = &self.file;
        let local = self.row - f.group_start[self.group];
        let mut m = Map::new();
        for (name, leaf) in self.fields.iter() {
            let v = f
                .value(self.group, local, *leaf, MAX_META_BYTES)
                .map_err(|e| {
                    Error::format(&f.path, format!("row {}: column {name}: {e}", self.row))
                })?;
            m.insert(name.clone(), v.to_json(true));
        }
        Ok(serde_json::to_vec(&Value::Object(m)).expect("JSON values serialise"))
    }
}

/// Most bytes of one metadata value copied into a sample's JSON (a longer one is cut).
const MAX_META_BYTES: usize = 1 << 20;

/// A reader positioned in one column chunk.
struct Cursor {
    file_id: u64,
    group: usize,
    leaf: usize,
    /// What it holds at most ([`ChunkMemory::cursor`]).
    bytes: u64,
    /// The row the reader is at.
    next: usize,
    max_def: i16,
    unsigned: bool,
    reader: ColumnReader,
}

impl Cursor {
    /// Moves to `row` (≥ `next`) and reads its value, a byte array cut at `limit` bytes.
    fn read_at(&mut self, row: usize, limit: usize) -> parquet::errors::Result<Cell> {
        let skip = row - self.next;
        let max_def = self.max_def;
        let unsigned = self.unsigned;
        macro_rules! one {
            ($r:expr, $conv:expr) => {{
                if skip > 0 && $r.skip_records(skip)? < skip {
                    return Err(ParquetError::General(
                        "the column ends before this row".into(),
                    ));
                }
                let mut defs = Vec::new();
                let mut vals = Vec::new();
                let (records, _, _) = $r.read_records(1, Some(&mut defs), None, &mut vals)?;
                if records != 1 {
                    return Err(ParquetError::General(
                        "the column ends before this row".into(),
                    ));
                }
                if max_def > 0 && defs.first().is_none_or(|&d| d < max_def) {
                    Cell::Null
                } else {
                    match vals.pop() {
                        Some(v) => $conv(v),
                        None => return Err(ParquetError::General("a value is missing".into())),
                    }
                }
            }};
        }
        let cell = match &mut self.reader {
            ColumnReader::BoolColumnReader(r) => one!(r, Cell::Bool),
            ColumnReader::Int32ColumnReader(r) => one!(r, |v: i32| if unsigned {
                Cell::Int(v as u32 as i64)
            } else {
                Cell::Int(v as i64)
            }),
            ColumnReader::Int64ColumnReader(r) => one!(r, |v: i64| if unsigned {
                Cell::UInt(v as u64)
            } else {
                Cell::Int(v)
            }),
            ColumnReader::Int96ColumnReader(r) => one!(r, |_| Cell::Null),
            ColumnReader::FloatColumnReader(r) => one!(r, |v: f32| Cell::Float(v as f64)),
            ColumnReader::DoubleColumnReader(r) => one!(r, Cell::Float),
            ColumnReader::ByteArrayColumnReader(r) => {
                one!(r, |v: parquet::data_type::ByteArray| Cell::Bytes(
                    v.data()[..v.len().min(limit)].to_vec()
                ))
            }
            ColumnReader::FixedLenByteArrayColumnReader(r) => {
                one!(r, |v: parquet::data_type::FixedLenByteArray| Cell::Bytes(
                    v.data()[..v.len().min(limit)].to_vec()
                ))
            }
        };
        self.next = row + 1;
        Ok(cell)
    }
}

/// Open cursors, most recently used last. Samples are read by a few threads in about index
/// order, so a cursor at or before the wanted row is almost always here.
static CURSORS: Mutex<Vec<Cursor>> = Mutex::new(Vec::new());
const MAX_CURSORS: usize = 64;

/// Most bytes the pooled cursors may hold together: a quarter of the memory budget (the
/// oldest go first). Many columns of a small file can point at one large dictionary or page.
fn max_pool_bytes() -> u64 {
    imgseq_core::budget::memory_limit().map_or(512 << 20, |l| (l / 4) as u64)
}

/// Bytes the pooled cursors hold ([`ChunkMemory::cursor`] summed): at most a quarter of the
/// memory budget.
#[doc(hidden)]
pub fn pooled_cursor_bytes() -> u64 {
    let pool = CURSORS.lock().unwrap_or_else(|e| e.into_inner());
    pool.iter().map(|c| c.bytes).sum()
}

fn take_cursor(file_id: u64, group: usize, leaf: usize, row: usize) -> Option<Cursor> {
    let mut pool = CURSORS.lock().unwrap_or_else(|e| e.into_inner());
    let i = pool
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            c.file_id == file_id && c.group == group && c.leaf == leaf && c.next <= row
        })
        .max_by_key(|(_, c)| c.next)
        .map(|(i, _)| i)?;
    Some(pool.remove(i))
}

fn put_cursor(c: Cursor) {
    let mut pool = CURSORS.lock().unwrap_or_else(|e| e.into_inner());
    pool.push(c);
    let cap = max_pool_bytes();
    let mut held: u64 = pool.iter().map(|c| c.bytes).sum();
    while pool.len() > MAX_CURSORS || (held > cap && !pool.is_empty()) {
        held -= pool.remove(0).bytes;
    }
}

/// A BYTE_ARRAY leaf annotated as text (string, JSON, enum).
pub(crate) fn is_text(c: &ColumnDescriptor) -> bool {
    c.physical_type() == PhysicalType::BYTE_ARRAY
        && (matches!(
            c.logical_type_ref(),
            Some(LogicalType::String | LogicalType::Json | LogicalType::Enum)
        ) || matches!(
            c.converted_type(),
            ConvertedType::UTF8 | ConvertedType::JSON | ConvertedType::ENUM
        ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{index, index_with, SourceOptions};
    use parquet::basic::{Compression, GzipLevel};
    use parquet::data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;

    /// A leaf column's values, in schema order; `None` is null (a null struct field for
    /// leaves inside an optional struct).
    enum Col {
        Bytes(Vec<Option<Vec<u8>>>),
        I32(Vec<Option<i32>>),
        I64(Vec<Option<i64>>),
    }

    /// Writes `cols` (one per leaf of `schema`, every leaf optional) in row groups of
    /// `group_rows`, pages of at most 2 rows (so that reads skip pages), with `codec`;
    /// dictionary-encoded unless uncompressed (so that the bytes of an uncompressed file can
    /// be found and damaged).
    fn write_table(path: &Path, schema: &str, cols: &[Col], group_rows: usize, codec: Compression) {
        let schema = Arc::new(parse_message_type(schema).unwrap());
        let props = WriterProperties::builder()
            .set_compression(codec)
            .set_dictionary_enabled(codec != Compression::UNCOMPRESSED)
            .set_data_page_row_count_limit(2)
            .set_write_batch_size(1)
            .build();
        let f = std::fs::File::create(path).unwrap();
        let mut w = SerializedFileWriter::new(f, schema, Arc::new(props)).unwrap();
        let defs: Vec<i16> = w
            .schema_descr()
            .columns()
            .iter()
            .map(|c| c.max_def_level())
            .collect();
        let n = match &cols[0] {
            Col::Bytes(v) => v.len(),
            Col::I32(v) => v.len(),
            Col::I64(v) => v.len(),
        };
        for start in (0..n).step_by(group_rows) {
            let rows = start..(start + group_rows).min(n);
            let mut rg = w.next_row_group().unwrap();
            for (c, &max_def) in cols.iter().zip(&defs) {
                let mut cw = rg.next_column().unwrap().unwrap();
                fn split<T: Clone>(v: &[Option<T>], max_def: i16) -> (Vec<T>, Vec<i16>) {
                    let vals = v.iter().flatten().cloned().collect();
                    let defs = v
                        .iter()
                        .map(|x| if x.is_some() { max_def } else { max_def - 1 })
                        .collect();
                    (vals, defs)
                }
                match c {
                    Col::Bytes(v) => {
                        let (vals, defs) = split(&v[rows.clone()], max_def);
                        let vals: Vec<ByteArray> = vals.into_iter().map(ByteArray::from).collect();
                        cw.typed::<ByteArrayType>()
                            .write_batch(&vals, Some(&defs), None)
                            .unwrap();
                    }
                    Col::I32(v) => {
                        let (vals, defs) = split(&v[rows.clone()], max_def);
                        cw.typed::<Int32Type>()
                            .write_batch(&vals, Some(&defs), None)
                            .unwrap();
                    }
                    Col::I64(v) => {
                        let (vals, defs) = split(&v[rows.clone()], max_def);
                        cw.typed::<Int64Type>()
                            .write_batch(&vals, Some(&defs), None)
                            .unwrap();
                    }
                }
                cw.close().unwrap();
            }
            rg.close().unwrap();
        }
        w.close().unwrap();
    }

    fn png(i: u8) -> Vec<u8> {
        let img =
            image::RgbImage::from_fn(5 + i as u32, 4, |x, y| image::Rgb([i, x as u8, y as u8]));
        let mut v = Vec::new();
        img.write_to(&mut std::io::Cursor::new(&mut v), image::ImageFormat::Png)
            .unwrap();
        v
    }

    fn text(v: &[Option<&str>]) -> Col {
        Col::Bytes(v.iter().map(|s| s.map(|s| s.as_bytes().to_vec())).collect())
    }

    const IMG2DATASET: &str = "message schema {
        optional binary key (STRING);
        optional binary caption (STRING);
        optional int32 width;
        optional binary status (STRING);
        optional binary error_message (STRING);
        optional binary jpg;
    }";

    /// 7 rows of img2dataset's layout; row 4 a failed download (null image).
    fn img2dataset(path: &Path, group_rows: usize, codec: Compression) -> Vec<Option<Vec<u8>>> {
        let n = 7u8;
        let images: Vec<Option<Vec<u8>>> = (0..n).map(|i| (i != 4).then(|| png(i))).collect();
        let keys: Vec<String> = (0..n).map(|i| format!("{:09}", i as u32 * 10)).collect();
        let caps: Vec<String> = (0..n).map(|i| format!("caption {i}")).collect();
        write_table(
            path,
            IMG2DATASET,
            &[
                text(&keys.iter().map(|k| Some(k.as_str())).collect::<Vec<_>>()),
                text(&caps.iter().map(|c| Some(c.as_str())).collect::<Vec<_>>()),
                Col::I32((0..n).map(|i| (i != 4).then_some(5 + i as i32)).collect()),
                text(
                    &(0..n)
                        .map(|i| {
                            Some(if i == 4 {
                                "failed_to_download"
                            } else {
                                "success"
                            })
                        })
                        .collect::<Vec<_>>(),
                ),
                text(
                    &(0..n)
                        .map(|i| (i == 4).then_some("HTTP Error 404"))
                        .collect::<Vec<_>>(),
                ),
                Col::Bytes(images.clone()),
            ],
            group_rows,
            codec,
        );
        images
    }

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/parquet")
            .join(name)
    }

    #[test]
    fn pyarrow_files_in_img2dataset_and_hugging_face_layouts_are_read_exactly() {
        use sha2::{Digest, Sha256};
        // img2dataset: keys from its key column, bytes whose SHA-256 is its sha256 column, the
        // failed download listed with its error message.
        let p = fixture("img2dataset.parquet");
        let idx = index(std::slice::from_ref(&p)).unwrap();
        let keys: Vec<&str> = idx.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, ["000000001", "000000004", "000000005", "000000007"]);
        for (i, s) in idx.iter().enumerate() {
            match s.load() {
                Ok(s) => {
                    let j = &s.meta["json"];
                    assert_eq!(
                        crate::wds::hex(&Sha256::digest(&s.image)),
                        j["sha256"].as_str().unwrap()
                    );
                    assert_eq!(
                        j["url"],
                        format!("https://example.com/{}.jpg", s.key.trim_start_matches('0'))
                    );
                    assert_eq!(
                        (&j["width"], &j["height"], &j["status"]),
                        (&Value::from(40), &Value::from(36), &Value::from("success"))
                    );
                    assert_eq!(
                        s.meta["caption"],
                        format!("picture number {}", s.key.trim_start_matches('0'))
                    );
                    assert_eq!(image::load_from_memory(&s.image).unwrap().width(), 40);
                }
                Err(e) => {
                    assert_eq!(i, 2);
                    assert!(e.to_string().ends_with("img2dataset.parquet: row 2: no image, jpg is null (HTTP Error 404: Not Found)"), "{e}");
                }
            }
        }
        // Hugging Face datasets: the image struct, keys from the file name, the ClassLabel.
        let p = fixture("hf_datasets.parquet");
        let idx = index(std::slice::from_ref(&p)).unwrap();
        assert_eq!(idx.len(), 5);
        assert_eq!(idx[3].key, "hf_datasets-00003");
        let labels: Vec<Value> = idx
            .iter()
            .map(|s| s.load().unwrap().meta["label"].clone())
            .collect();
        assert_eq!(labels, [0, 3, 1, 4, 2].map(Value::from));
        let s = idx[4].load().unwrap();
        assert_eq!(s.meta["json"]["image.path"], "img_9.png");
        assert_eq!(
            image::load_from_memory(&s.image)
                .unwrap()
                .to_rgb8()
                .get_pixel(0, 0)[2] as u32,
            9 * 31 % 256
        );
        // Another codec: refused when listed, naming the file and the codec.
        let e = index(&[fixture("zstd.parquet")]).unwrap_err().to_string();
        assert!(e.contains("zstd.parquet: column url is compressed with ZSTD; imgseq reads uncompressed, snappy and gzip"), "{e}");
    }

    #[test]
    fn img2dataset_parquet_rows_are_samples_with_their_metadata_in_any_read_order() {
        let d = tempfile::tempdir().unwrap();
        for (name, groups, codec) in [
            ("snappy.parquet", 3, Compression::SNAPPY),
            ("gzip.parquet", 7, Compression::GZIP(GzipLevel::default())),
            ("plain.parquet", 2, Compression::UNCOMPRESSED),
        ] {
            let p = d.path().join(name);
            let images = img2dataset(&p, groups, codec);
            let idx = index(std::slice::from_ref(&p)).unwrap();
            let keys: Vec<&str> = idx.iter().map(|s| s.key.as_str()).collect();
            assert_eq!(keys[..3], ["000000000", "000000010", "000000020"], "{name}");
            assert_eq!(idx.len(), 7);
            assert_eq!(idx[6].source, format!("{}:6", p.display()));
            // Backwards, forwards, and every other row: each read gets its own row's bytes.
            let order: Vec<usize> = (0..7).rev().chain(0..7).chain([1, 3, 5, 0, 2, 6]).collect();
            for i in order {
                match (&images[i], idx[i].load()) {
                    (Some(img), Ok(s)) => {
                        assert_eq!(&s.image, img, "{name} row {i}");
                        assert_eq!(s.meta["caption"], format!("caption {i}"));
                        let j = &s.meta["json"];
                        assert_eq!(j["key"], format!("{:09}", i * 10));
                        assert_eq!(j["width"], 5 + i as i64);
                        assert_eq!(j["status"], "success");
                        assert_eq!(j["error_message"], Value::Null);
                        assert!(j.get("jpg").is_none(), "no image bytes in the metadata");
                    }
                    (None, Err(e)) => {
                        let e = e.to_string();
                        assert!(
                            e.contains(&format!(
                                "{name}: row 4: no image, jpg is null (HTTP Error 404)"
                            )),
                            "{e}"
                        );
                    }
                    (want, got) => {
                        panic!("{name} row {i}: {:?} vs {:?}", want.is_some(), got.is_ok())
                    }
                }
            }
        }
    }

    #[test]
    fn hugging_face_image_structs_give_keys_from_the_file_name_and_labels() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("train-00000-of-00001.parquet");
        let schema = "message schema {
            optional group image { optional binary bytes; optional binary path (STRING); }
            optional int64 label;
        }";
        let images: Vec<Option<Vec<u8>>> = (0..3).map(|i| Some(png(i))).collect();
        write_table(
            &p,
            schema,
            &[
                Col::Bytes(images.clone()),
                text(&[Some("a.png"), None, Some("c.png")]),
                Col::I64(vec![Some(7), Some(0), None]),
            ],
            2,
            Compression::SNAPPY,
        );
        let idx = index(std::slice::from_ref(&p)).unwrap();
        let keys: Vec<&str> = idx.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "train-00000-of-00001-00000",
                "train-00000-of-00001-00001",
                "train-00000-of-00001-00002"
            ]
        );
        let s = idx[0].load().unwrap();
        assert_eq!(s.image, images[0].clone().unwrap());
        assert_eq!(s.meta["label"], 7);
        assert_eq!(
            s.meta["json"],
            serde_json::json!({"image.path": "a.png", "label": 7})
        );
        let s = idx[2].load().unwrap();
        assert_eq!(s.image, images[2].clone().unwrap());
        assert!(s.meta.get("label").is_none(), "a null label is no label");
        // Naming the struct picks the same column; naming another is an error naming the file.
        let o = |c: &str| SourceOptions {
            image_column: Some(c.into()),
        };
        let named = index_with(std::slice::from_ref(&p), &o("image")).unwrap();
        assert_eq!(named[1].load().unwrap().image, images[1].clone().unwrap());
        let e = index_with(std::slice::from_ref(&p), &o("label"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("train-00000-of-00001.parquet: column label holds no image bytes"),
            "{e}"
        );
        let e = index_with(std::slice::from_ref(&p), &o("jpg"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no column jpg (--image-column); its columns: image, label"),
            "{e}"
        );
    }

    #[test]
    fn the_image_column_is_found_by_name_among_several_and_refused_when_ambiguous() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("two.parquet");
        let cols = |a: u8, b: u8| {
            [
                Col::Bytes(vec![Some(png(a))]),
                Col::Bytes(vec![Some(png(b))]),
            ]
        };
        write_table(
            &p,
            "message m { optional binary thumb; optional binary png; }",
            &cols(1, 2),
            1,
            Compression::SNAPPY,
        );
        let s = index(std::slice::from_ref(&p)).unwrap()[0].load().unwrap();
        assert_eq!(s.image, png(2), "the column named png");
        write_table(
            &p,
            "message m { optional binary a; optional binary b; }",
            &cols(1, 2),
            1,
            Compression::SNAPPY,
        );
        let e = index(std::slice::from_ref(&p)).unwrap_err().to_string();
        assert!(
            e.contains(
                "several columns could hold the images (a, b): name one with --image-column"
            ),
            "{e}"
        );
        let o = SourceOptions {
            image_column: Some("b".into()),
        };
        let s = index_with(std::slice::from_ref(&p), &o).unwrap()[0]
            .load()
            .unwrap();
        assert_eq!(s.image, png(2));
        write_table(
            &p,
            "message m { optional binary key (STRING); optional int32 width; }",
            &[text(&[Some("k")]), Col::I32(vec![Some(1)])],
            1,
            Compression::SNAPPY,
        );
        let e = index(std::slice::from_ref(&p)).unwrap_err().to_string();
        assert!(
            e.contains("two.parquet: no image column") && e.contains("among key, width"),
            "{e}"
        );
        // --image-column without a Parquet source.
        let e = index_with(&[d.path().to_path_buf()], &o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no source is a .parquet file"), "{e}");
    }

    #[test]
    fn a_truncated_parquet_file_is_a_one_line_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("cut.parquet");
        img2dataset(&p, 3, Compression::SNAPPY);
        let bytes = std::fs::read(&p).unwrap();
        for keep in [0, 3, 8, bytes.len() / 2, bytes.len() - 1] {
            std::fs::write(&p, &bytes[..keep]).unwrap();
            let e = index(std::slice::from_ref(&p)).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("{}: not a readable Parquet file", p.display())),
                "{keep}: {e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_corrupt_page_fails_only_the_rows_it_holds() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("bad.parquet");
        let images = img2dataset(&p, 7, Compression::UNCOMPRESSED);
        let mut bytes = std::fs::read(&p).unwrap();
        // Scribble over the middle of the last image's PNG bytes (inside its data page).
        let last = images[6].as_ref().unwrap();
        let at = bytes
            .windows(last.len())
            .position(|w| w == last.as_slice())
            .expect("uncompressed PNG bytes in the page");
        for b in &mut bytes[at - 12..at + 24] {
            *b ^= 0x5a;
        }
        std::fs::write(&p, &bytes).unwrap();
        let idx = index(std::slice::from_ref(&p)).unwrap();
        let mut failed = Vec::new();
        for (i, s) in idx.iter().enumerate() {
            match s.load() {
                Ok(s) => assert_eq!(Some(s.image), images[i], "row {i}"),
                Err(e) => {
                    let e = e.to_string();
                    assert!(e.starts_with(&format!("{}: row {i}", p.display())), "{e}");
                    assert!(!e.contains('\n'), "{e}");
                    failed.push(i);
                }
            }
        }
        assert!(failed.contains(&6) && failed.contains(&4), "{failed:?}");
        assert!(
            failed.len() <= 3,
            "only the null row and the damaged page: {failed:?}"
        );
    }
}
