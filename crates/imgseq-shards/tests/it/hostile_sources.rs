//! Hostile sources for the dataset job: Parquet files whose page headers or footer declare
//! absurd sizes, special files where files are expected, tar members with path-like keys.
//! Each must give a one-line error (or a listed skip), never an aborted allocation, a panic or
//! a hang.

use imgseq_shards::source::index;
use parquet::basic::{Compression, Encoding, GzipLevel};
use parquet::file::metadata::{
    ColumnChunkMetaData, FileMetaData, ParquetMetaData, ParquetMetaDataWriter, RowGroupMetaData,
};
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::SchemaDescriptor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A compact-protocol Thrift value.
enum T {
    I32(i64),
    Struct(Vec<(i16, T)>),
}

fn varint(mut u: u64, out: &mut Vec<u8>) {
    loop {
        let b = (u & 0x7f) as u8;
        u >>= 7;
        if u == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn thrift(fields: &[(i16, T)], out: &mut Vec<u8>) {
    let mut last = 0i16;
    for (id, v) in fields {
        let t = match v {
            T::I32(_) => 5u8,
            T::Struct(_) => 12,
        };
        out.push((((id - last) as u8) << 4) | t);
        last = *id;
        match v {
            T::I32(x) => varint(((x << 1) ^ (x >> 63)) as u64, out),
            T::Struct(f) => thrift(f, out),
        }
    }
    out.push(0);
}

/// A page: its header (type, uncompressed size, declared compressed size = `body.len()`,
/// a dictionary header of `dict` values or a v1 data page header of `values`) and body.
fn page(kind: i64, uncompressed: i64, dict: Option<i64>, values: i64, body: &[u8]) -> Vec<u8> {
    let mut f = vec![
        (1, T::I32(kind)),
        (2, T::I32(uncompressed)),
        (3, T::I32(body.len() as i64)),
    ];
    match dict {
        Some(n) => f.push((7, T::Struct(vec![(1, T::I32(n)), (2, T::I32(0))]))),
        None => f.push((
            5,
            T::Struct(vec![
                (1, T::I32(values)),
                (2, T::I32(0)),
                (3, T::I32(3)),
                (4, T::I32(3)),
            ]),
        )),
    }
    let mut out = Vec::new();
    thrift(&f, &mut out);
    out.extend_from_slice(body);
    out
}

/// A Parquet file of one optional binary `jpg` column, one row group of `rows` rows whose
/// column chunk is `pages` (the first a dictionary page when `dict`), compressed with `codec`.
fn parquet_file(path: &Path, pages: &[Vec<u8>], dict: bool, rows: i64, codec: Compression) {
    shared_chunk_file(
        path,
        "message schema { optional binary jpg; }",
        pages,
        dict,
        rows,
        codec,
    );
}

/// [`parquet_file`] with the columns of `schema`, every one of them pointing at the same
/// column chunk (`pages`).
fn shared_chunk_file(
    path: &Path,
    schema: &str,
    pages: &[Vec<u8>],
    dict: bool,
    rows: i64,
    codec: Compression,
) {
    let schema = Arc::new(SchemaDescriptor::new(Arc::new(
        parse_message_type(schema).unwrap(),
    )));
    let mut bytes = b"PAR1".to_vec();
    let start = bytes.len() as i64;
    for p in pages {
        bytes.extend_from_slice(p);
    }
    let len = bytes.len() as i64 - start;
    let first_data = if dict {
        start + pages[0].len() as i64
    } else {
        start
    };
    let cols = (0..schema.num_columns())
        .map(|i| {
            ColumnChunkMetaData::builder(schema.column(i))
                .set_encodings(vec![Encoding::PLAIN, Encoding::RLE])
                .set_compression(codec)
                .set_num_values(rows)
                .set_total_compressed_size(len)
                .set_total_uncompressed_size(len)
                .set_data_page_offset(first_data)
                .set_dictionary_page_offset(dict.then_some(start))
                .build()
                .unwrap()
        })
        .collect();
    let rg = RowGroupMetaData::builder(schema.clone())
        .set_num_rows(rows)
        .set_total_byte_size(len)
        .set_column_metadata(cols)
        .build()
        .unwrap();
    let fm = FileMetaData::new(1, rows, None, None, schema, None);
    let meta = ParquetMetaData::new(fm, vec![rg]);
    ParquetMetaDataWriter::new(&mut bytes, &meta)
        .finish()
        .unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// With `IMGSEQ_FUZZ_SEEDS=DIR` set, copies the hostile file `p` to `DIR/<its name>` (how
/// the fuzz corpora of `fuzz/corpus/{parquet_source,tar_source}` got these seeds).
fn seed(p: &Path) {
    if let Some(dir) = std::env::var_os("IMGSEQ_FUZZ_SEEDS") {
        let ext = p.extension().unwrap().to_string_lossy().into_owned();
        let target = Path::new(&dir).join(if ext == "tar" {
            "tar_source"
        } else {
            "parquet_source"
        });
        std::fs::create_dir_all(&target).unwrap();
        std::fs::copy(p, target.join(p.file_name().unwrap())).unwrap();
    }
}

/// The error loading the first sample of `src` gives.
fn first_sample_error(src: &Path) -> String {
    seed(src);
    let idx = index(&[src.to_path_buf()]).unwrap();
    idx[0].load().unwrap_err().to_string()
}

fn tmp(d: &tempfile::TempDir, name: &str) -> PathBuf {
    d.path().join(name)
}

#[test]
fn parquet_dictionary_page_declaring_2_31_values_fails_its_rows_without_allocating() {
    let d = tempfile::tempdir().unwrap();
    let p = tmp(&d, "dict.parquet");
    let pages = [
        page(2, 8, Some((1 << 31) - 1), 0, &[1, 0, 0, 0, b'x', 0, 0, 0]),
        page(0, 4, None, 2, &[2, 0, 0, 0]),
    ];
    parquet_file(&p, &pages, true, 2, Compression::UNCOMPRESSED);
    let e = first_sample_error(&p);
    assert!(
        e.contains("dict.parquet") && e.contains("dictionary of 2147483647 values"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn parquet_page_declaring_2_gib_after_snappy_is_refused_before_reading_it() {
    let d = tempfile::tempdir().unwrap();
    let p = tmp(&d, "big.parquet");
    let pages = [page(0, (1 << 31) - 1, None, 1, &[0u8; 16])];
    parquet_file(&p, &pages, false, 1, Compression::SNAPPY);
    let e = first_sample_error(&p);
    assert!(
        e.contains("big.parquet") && e.contains("2147483647 bytes uncompressed"),
        "{e}"
    );
}

#[test]
fn parquet_snappy_page_declaring_more_than_its_stream_holds_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = tmp(&d, "snappy.parquet");
    // A 4-byte snappy stream (length 4, one literal) in a page declaring 4,000 bytes.
    let pages = [page(0, 4_000, None, 1, &[4, 0x0c, b'a', b'b', b'c', b'd'])];
    parquet_file(&p, &pages, false, 1, Compression::SNAPPY);
    let e = first_sample_error(&p);
    assert!(e.contains("holds 4 bytes but declares 4000"), "{e}");
}

#[test]
fn parquet_page_declaring_more_than_its_codec_inflates_its_bytes_to_is_refused() {
    let d = tempfile::tempdir().unwrap();
    // Snappy gives at most ~21 bytes a byte: 6 bytes cannot hold 60,000.
    let p = tmp(&d, "snappy-ratio.parquet");
    let pages = [page(0, 60_000, None, 1, &[4, 0x0c, b'a', b'b', b'c', b'd'])];
    parquet_file(&p, &pages, false, 1, Compression::SNAPPY);
    let e = first_sample_error(&p);
    assert!(
        e.contains("60000 bytes uncompressed from 6 compressed, more than SNAPPY inflates"),
        "{e}"
    );
    // An uncompressed page is its own size.
    let p = tmp(&d, "plain-ratio.parquet");
    let pages = [page(0, 50_000, None, 1, &[2, 0, 0, 0])];
    parquet_file(&p, &pages, false, 1, Compression::UNCOMPRESSED);
    let e = first_sample_error(&p);
    assert!(
        e.contains("50000 bytes uncompressed from 4 compressed"),
        "{e}"
    );
}

/// The `parquet_source` fuzz finding: a file of a few kilobytes whose columns all point at one
/// gzip dictionary page inflating to 30 MB of empty strings (7.5M values, ~270 MB decoded): a
/// row's metadata opens a cursor per column, and the pool kept every one of them (8 × 270 MB).
/// The pool is bounded by bytes now: a quarter of the budget, whatever the number of columns.
#[test]
fn parquet_columns_sharing_one_large_dictionary_keep_the_cursor_pool_within_its_bytes() {
    use std::io::Write;
    let d = tempfile::tempdir().unwrap();
    let p = tmp(&d, "shared-dict.parquet");
    let gz = |b: &[u8]| {
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(b).unwrap();
        z.finish().unwrap()
    };
    let dict_bytes = 30_000_000;
    let dict = gz(&vec![0u8; dict_bytes]);
    // One row: definition level 1 (RLE: 4-byte length, run of 1, value 1), index 0 (RLE
    // dictionary indices: bit width 0, run of 1).
    let data = gz(&[2, 0, 0, 0, 2, 1, 0, 2, 0]);
    // A v1 data page of one value, its values RLE_DICTIONARY-encoded (8).
    let mut data_page = Vec::new();
    let head = [
        (1, T::I32(0)),
        (2, T::I32(9)),
        (3, T::I32(data.len() as i64)),
        (
            5,
            T::Struct(vec![
                (1, T::I32(1)),
                (2, T::I32(8)),
                (3, T::I32(3)),
                (4, T::I32(3)),
            ]),
        ),
    ];
    thrift(&head, &mut data_page);
    data_page.extend_from_slice(&data);
    let n = (dict_bytes / 4) as i64;
    let pages = [page(2, dict_bytes as i64, Some(n), 0, &dict), data_page];
    let cols: String = (0..8)
        .map(|i| format!("optional binary c{i} (STRING); "))
        .collect();
    shared_chunk_file(
        &p,
        &format!("message schema {{ optional binary jpg; {cols}}}"),
        &pages,
        true,
        1,
        Compression::GZIP(GzipLevel::default()),
    );
    assert!(std::fs::metadata(&p).unwrap().len() < 200_000);
    seed(&p);
    let idx = index(std::slice::from_ref(&p)).unwrap();
    let s = idx[0].load().unwrap();
    let json = &s.meta["json"];
    assert_eq!(json["c7"], "", "{json}");
    let cap = imgseq_core::budget::memory_limit().unwrap() / 4;
    let pooled = imgseq_shards::parquet_in::pooled_cursor_bytes();
    assert!(pooled as u128 <= cap, "{pooled} bytes pooled, over {cap}");
}

#[test]
fn parquet_gzip_page_inflating_past_its_declared_size_is_refused() {
    use std::io::Write;
    let d = tempfile::tempdir().unwrap();
    let p = tmp(&d, "bomb.parquet");
    // 8 MiB of zeros in a few kilobytes, declared as 100 bytes.
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&vec![0u8; 8 << 20]).unwrap();
    let body = z.finish().unwrap();
    assert!(body.len() < 20_000);
    let pages = [page(0, 100, None, 1, &body)];
    parquet_file(
        &p,
        &pages,
        false,
        1,
        Compression::GZIP(GzipLevel::default()),
    );
    let e = first_sample_error(&p);
    assert!(e.contains("inflates to more than the 100 bytes"), "{e}");
}

/// The `parquet_source` fuzz timeout: a page header holding a list of 2³¹ booleans, which the
/// Parquet reader skips one by one without reading a byte (minutes). Page headers hold no
/// lists: the reader is shown the chunk up to that header only, and the row fails at once.
#[test]
fn parquet_page_header_holding_a_list_of_2_31_booleans_fails_its_row_at_once() {
    let d = tempfile::tempdir().unwrap();
    let p = tmp(&d, "list.parquet");
    let mut pg = page(0, 4, None, 1, &[2, 0, 0, 0]);
    // Before the header's stop byte: field 10 (delta 10 from 5), a list of 2³¹ − 1 `true`s.
    let body = pg.split_off(pg.len() - 4 - 1);
    pg.push((5 << 4) | 9);
    pg.push(0xf1);
    varint((1 << 31) - 1, &mut pg);
    pg.extend_from_slice(&body);
    parquet_file(&p, &[pg], false, 1, Compression::UNCOMPRESSED);
    let t = std::time::Instant::now();
    let e = first_sample_error(&p);
    assert!(t.elapsed().as_secs() < 10, "{:?}", t.elapsed());
    assert!(e.contains("list.parquet"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn parquet_row_group_declaring_2_40_rows_is_refused_when_listed() {
    let d = tempfile::tempdir().unwrap();
    let p = tmp(&d, "rows.parquet");
    let pages = [page(0, 4, None, 1, &[2, 0, 0, 0])];
    parquet_file(&p, &pages, false, 1 << 40, Compression::UNCOMPRESSED);
    seed(&p);
    let e = index(std::slice::from_ref(&p)).unwrap_err().to_string();
    assert!(
        e.contains("rows.parquet") && e.contains("1099511627776 rows"),
        "{e}"
    );
}

#[test]
fn parquet_pages_may_hold_the_largest_image_a_sample_may_have() {
    let page = imgseq_shards::parquet_pages::MAX_PAGE_BYTES as u64;
    assert!(page > imgseq_shards::source::MAX_IMAGE_BYTES);
}

#[test]
fn parquet_page_past_the_end_of_its_chunk_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = tmp(&d, "cut.parquet");
    let mut pg = page(0, 4, None, 1, &[2, 0, 0, 0]);
    pg.truncate(pg.len() - 2);
    parquet_file(&p, &[pg], false, 1, Compression::UNCOMPRESSED);
    let e = first_sample_error(&p);
    assert!(e.contains("past the end of its column chunk"), "{e}");
}

/// A tar whose members have exactly these names (no path checks) and tiny contents.
fn raw_tar(path: &Path, names: &[&str]) {
    let mut b = tar::Builder::new(std::fs::File::create(path).unwrap());
    for name in names {
        let mut h = tar::Header::new_gnu();
        let raw = &mut h.as_old_mut().name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        h.set_size(3);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        b.append(&h, &b"abc"[..]).unwrap();
    }
    b.finish().unwrap();
    drop(b);
    seed(path);
}

#[test]
fn tokenize_skips_tar_member_with_parent_dir_key() {
    let d = tempfile::tempdir().unwrap();
    let p = tmp(&d, "hostile.tar");
    raw_tar(&p, &["../../x.png", "/etc/y.png", "a/./b.png", "ok.png"]);
    let idx = index(std::slice::from_ref(&p)).unwrap();
    let keys: Vec<&str> = idx.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["../../x", "/etc/y", "a/./b", "ok"]);
    for s in &idx[..3] {
        let e = s.load().unwrap_err().to_string();
        assert!(e.contains("is not a relative name"), "{e}");
    }
    assert_eq!(idx[3].load().unwrap().image, b"abc");
}

#[test]
fn tokenize_skips_samples_with_overlong_keys() {
    let d = tempfile::tempdir().unwrap();
    let p = tmp(&d, "long.tar");
    let long = format!("{}.png", "k".repeat(99 - 4));
    raw_tar(&p, &[&long]);
    // 95 bytes pass; a longer key from a Parquet or folder source is refused the same way.
    assert!(index(std::slice::from_ref(&p)).unwrap()[0].load().is_ok());
    let e = imgseq_shards::source::key_problem(&"k".repeat(300)).unwrap();
    assert!(e.contains("300 bytes long"), "{e}");
}

#[test]
fn keys_stay_unique_when_a_repeat_meets_an_existing_suffix() {
    let d = tempfile::tempdir().unwrap();
    let p = tmp(&d, "dups.tar");
    raw_tar(&p, &["a.png", "b.png", "a.png", "a_2.png", "a.png"]);
    let idx = index(std::slice::from_ref(&p)).unwrap();
    let keys: Vec<&str> = idx.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["a", "b", "a_3", "a_2", "a_4"]);
}

#[cfg(unix)]
fn fifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

#[cfg(unix)]
#[test]
fn fifos_named_by_lists_tars_and_manifests_are_refused_without_hanging() {
    let d = tempfile::tempdir().unwrap();
    let pipe = tmp(&d, "pipe.png");
    fifo(&pipe);
    let list = tmp(&d, "list.txt");
    std::fs::write(&list, "pipe.png\n").unwrap();
    let idx = index(std::slice::from_ref(&list)).unwrap();
    let e = idx[0].load().unwrap_err().to_string();
    assert!(
        e.contains("pipe.png") && e.contains("not a regular file"),
        "{e}"
    );
    // A list, tar or Parquet source that is a FIFO.
    for name in ["l.txt", "t.tar", "p.parquet"] {
        let p = tmp(&d, name);
        fifo(&p);
        let e = index(std::slice::from_ref(&p)).unwrap_err().to_string();
        assert!(e.contains(name) && e.contains("not a regular file"), "{e}");
    }
    // A job manifest or a folder's manifest that is a FIFO.
    let out = tmp(&d, "out");
    std::fs::create_dir(&out).unwrap();
    fifo(&out.join("manifest-0000-of-0001.json"));
    let e = imgseq_shards::manifest::merge(&out)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a regular file"), "{e}");
    fifo(&out.join("manifest.json"));
    let e = imgseq_shards::job::read::read_manifest(&out)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a regular file"), "{e}");
}
