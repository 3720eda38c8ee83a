//! A Parquet column chunk's page headers checked before the Parquet reader allocates for
//! them. The reader sizes its buffers from the headers (a page's uncompressed size, a
//! dictionary's number of values) and inflates gzip pages without a bound, so a file of a few
//! kilobytes could ask for gigabytes. Every page of a chunk is checked once, before the chunk
//! is first read: it lies inside the chunk and the file, its uncompressed size is at most
//! [`MAX_PAGE_BYTES`], at most what its codec can inflate its compressed bytes to (so bounded
//! by the file's size) and fits [`imgseq_core::budget`], a dictionary's values fit its page, a
//! gzip page inflates to no more than it declares (inflated into nothing, counted), and the
//! chunk's values (each page's declared count, summed) fit the budget once decoded. The check
//! returns what a reader of the chunk holds at most ([`ChunkMemory`]), which the cursor pool
//! counts.

use parquet::basic::{Compression, Type as PhysicalType};
use parquet::file::metadata::ColumnChunkMetaData;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

/// Largest uncompressed page read: one image of the largest size a sample may have (256 MiB) and
/// some room.
pub const MAX_PAGE_BYTES: i64 = (256 + 16) << 20;
/// Largest page header read (statistics included).
const MAX_HEADER_BYTES: u64 = 16 << 20;

const DATA_PAGE_V2: i32 = 3;
const DICTIONARY_PAGE: i32 = 2;

/// What the checks need of a page header.
#[derive(Debug, Default, Clone, PartialEq)]
struct PageHeader {
    kind: i32,
    uncompressed: i64,
    compressed: i64,
    /// A dictionary page's number of values.
    dict_values: Option<i64>,
    /// A data page's (v1 or v2) number of values, levels included.
    num_values: Option<i64>,
    /// A v2 data page's level bytes (stored uncompressed before the values) and whether
    /// its values are compressed.
    v2: Option<(i64, bool)>,
}

/// Reads Thrift's compact protocol, just enough to find a few fields and skip the rest.
struct Compact<'a> {
    b: &'a [u8],
    pos: usize,
}

/// Why a header could not be read: the bytes end early (read more), or they are not one.
enum Bad {
    Short,
    Invalid,
}

impl Compact<'_> {
    fn byte(&mut self) -> Result<u8, Bad> {
        let v = *self.b.get(self.pos).ok_or(Bad::Short)?;
        self.pos += 1;
        Ok(v)
    }

    fn varint(&mut self) -> Result<u64, Bad> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Bad::Invalid)
    }

    fn int(&mut self) -> Result<i64, Bad> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn skip_bytes(&mut self, n: u64) -> Result<(), Bad> {
        let n = usize::try_from(n).map_err(|_| Bad::Invalid)?;
        let end = self.pos.checked_add(n).ok_or(Bad::Short)?;
        if end > self.b.len() {
            return Err(Bad::Short);
        }
        self.pos = end;
        Ok(())
    }

    /// Skips a value of compact type `t`.
    fn skip(&mut self, t: u8, depth: usize) -> Result<(), Bad> {
        if depth > 32 {
            return Err(Bad::Invalid);
        }
        match t {
            1 | 2 => Ok(()),
            3 => self.byte().map(drop),
            4..=6 => self.varint().map(drop),
            7 => self.skip_bytes(8),
            8 => {
                let n = self.varint()?;
                self.skip_bytes(n)
            }
            // No list, set or map is part of a page header (the Parquet reader skips a list of
            // 2³¹ booleans without reading a byte, for minutes): not a page header.
            9..=11 => Err(Bad::Invalid),
            12 => self.fields(&mut |c, _, t| c.skip(t, depth + 1)),
            _ => Err(Bad::Invalid),
        }
    }

    /// Reads a struct's fields up to its end, handing each (id, type) to `f`, which must
    /// consume the value.
    fn fields(
        &mut self,
        f: &mut dyn FnMut(&mut Self, i16, u8) -> Result<(), Bad>,
    ) -> Result<(), Bad> {
        let mut last = 0i16;
        loop {
            let h = self.byte()?;
            if h == 0 {
                return Ok(());
            }
            let t = h & 0x0f;
            let id = match h >> 4 {
                0 => i16::try_from(self.int()?).map_err(|_| Bad::Invalid)?,
                d => last.wrapping_add(i16::from(d)),
            };
            last = id;
            f(self, id, t)?;
        }
    }

    /// An i32 field's value (type 5), else the field skipped and `None`.
    fn i32_field(&mut self, t: u8, depth: usize) -> Result<Option<i64>, Bad> {
        if t == 5 {
            return self.int().map(Some);
        }
        self.skip(t, depth).map(|_| None)
    }
}

/// Parses a page header at the start of `b`; its length in bytes with it.
fn parse_header(b: &[u8]) -> Result<(PageHeader, usize), Bad> {
    let mut c = Compact { b, pos: 0 };
    let mut h = PageHeader {
        kind: -1,
        uncompressed: -1,
        compressed: -1,
        ..Default::default()
    };
    c.fields(&mut |c, id, t| {
        match id {
            1 => h.kind = c.i32_field(t, 1)?.unwrap_or(-1) as i32,
            2 => h.uncompressed = c.i32_field(t, 1)?.unwrap_or(-1),
            3 => h.compressed = c.i32_field(t, 1)?.unwrap_or(-1),
            5 if t == 12 => {
                c.fields(&mut |c, id, t| {
                    match id {
                        1 => h.num_values = c.i32_field(t, 2)?,
                        _ => c.skip(t, 2)?,
                    }
                    Ok(())
                })?;
            }
            7 if t == 12 => {
                let mut n = None;
                c.fields(&mut |c, id, t| {
                    match id {
                        1 => n = c.i32_field(t, 2)?,
                        _ => c.skip(t, 2)?,
                    }
                    Ok(())
                })?;
                h.dict_values = Some(n.unwrap_or(-1));
            }
            8 if t == 12 => {
                let (mut def, mut rep, mut compressed) = (0, 0, true);
                c.fields(&mut |c, id, t| {
                    match (id, t) {
                        (1, _) => h.num_values = c.i32_field(t, 2)?,
                        (5, _) => def = c.i32_field(t, 2)?.unwrap_or(-1),
                        (6, _) => rep = c.i32_field(t, 2)?.unwrap_or(-1),
                        (7, 1 | 2) => compressed = t == 1,
                        _ => c.skip(t, 2)?,
                    }
                    Ok(())
                })?;
                let levels = if def < 0 || rep < 0 { -1 } else { def + rep };
                h.v2 = Some((levels, compressed));
            }
            _ => c.skip(t, 1)?,
        }
        Ok(())
    })?;
    Ok((h, c.pos))
}

/// Bits a plain-encoded value of `t` takes at least in a page (a boolean: one bit; a byte
/// array: its 4-byte length).
fn min_value_bits(t: PhysicalType, type_len: i32) -> i64 {
    match t {
        PhysicalType::BOOLEAN => 1,
        PhysicalType::INT32 | PhysicalType::FLOAT | PhysicalType::BYTE_ARRAY => 32,
        PhysicalType::INT64 | PhysicalType::DOUBLE => 64,
        PhysicalType::INT96 => 96,
        PhysicalType::FIXED_LEN_BYTE_ARRAY => 8 * i64::from(type_len.max(1)),
    }
}

/// Most bytes a codec gives per compressed byte (a little over: snappy's best is a 3-byte copy
/// of 64 bytes, about 21:1; gzip's about 1,032:1), besides [`INFLATE_SLACK`].
fn max_ratio(c: Compression) -> i64 {
    match c {
        Compression::UNCOMPRESSED => 1,
        Compression::SNAPPY => 24,
        _ => 1100,
    }
}

/// Bytes a page may inflate to beyond its codec's ratio (room for small pages).
const INFLATE_SLACK: i64 = 1 << 12;

/// Bytes of memory a decoded dictionary value takes (the reader's `ByteArray`: a `Bytes`
/// handle into the page) and a decoded value with its two levels in a whole-column read.
const DICT_VALUE_BYTES: i64 = 32;
const VALUE_BYTES: i64 = 8 + 2 + 2;

/// What reading a column chunk holds at most: its dictionary (page and decoded values), one
/// decompressed data page (and the compressed one it came from), and, read whole, every value
/// with its levels.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ChunkMemory {
    /// A cursor reading value by value: dictionary + two pages.
    pub cursor: u64,
    /// Where the chunk's readable pages end: its end, or the first header that is not a page
    /// header (the reader is not shown what follows, so its rows fail at once).
    pub readable_end: u64,
    /// A whole-column read: the cursor's plus every value decoded.
    pub whole: u64,
}

/// Reads the header of the page at `pos` (the chunk ending at `end`).
/// `None` when the bytes there are not a page header.
fn read_header(f: &mut File, pos: u64, end: u64) -> Result<Option<(PageHeader, u64)>, String> {
    let mut want = (end - pos).min(64 << 10);
    loop {
        f.seek(SeekFrom::Start(pos)).map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        f.by_ref()
            .take(want)
            .read_to_end(&mut buf)
            .map_err(|e| e.to_string())?;
        match parse_header(&buf) {
            Ok((h, len)) => return Ok(Some((h, len as u64))),
            Err(Bad::Short) if want < (end - pos).min(MAX_HEADER_BYTES) => {
                want = (end - pos).min(MAX_HEADER_BYTES);
            }
            Err(_) => return Ok(None),
        }
    }
}

/// Inflates the gzip stream of `len` bytes at `pos`, refusing one that gives more than
/// `declared` bytes.
fn check_gzip(f: &mut File, pos: u64, len: u64, declared: i64) -> Result<(), String> {
    f.seek(SeekFrom::Start(pos)).map_err(|e| e.to_string())?;
    let body = f.by_ref().take(len);
    let mut z = flate2::read::MultiGzDecoder::new(body).take(declared as u64 + 1);
    let n = std::io::copy(&mut z, &mut std::io::sink()).map_err(|e| e.to_string())?;
    if n > declared as u64 {
        return Err(format!(
            "the gzip page at byte {pos} inflates to more than the {declared} bytes it declares"
        ));
    }
    Ok(())
}

/// Checks that the snappy stream at `pos` says it inflates to exactly `declared` bytes (the
/// reader allocates what the page header declares, whatever the stream holds).
fn check_snappy(f: &mut File, pos: u64, len: u64, declared: i64) -> Result<(), String> {
    f.seek(SeekFrom::Start(pos)).map_err(|e| e.to_string())?;
    let mut head = Vec::new();
    f.by_ref()
        .take(len.min(10))
        .read_to_end(&mut head)
        .map_err(|e| e.to_string())?;
    let mut c = Compact { b: &head, pos: 0 };
    match c.varint() {
        Ok(n) if n == declared as u64 => Ok(()),
        Ok(n) => Err(format!(
            "the snappy page at byte {pos} holds {n} bytes but declares {declared}"
        )),
        Err(_) => Err(format!("the snappy page at byte {pos} has no valid length")),
    }
}

/// A page's sizes: not negative, inside its chunk (ending at `end`), at most
/// [`MAX_PAGE_BYTES`] uncompressed and at most what `codec` inflates its bytes to.
fn check_sizes(h: &PageHeader, body: u64, end: u64, codec: Compression) -> Result<(), String> {
    if h.compressed < 0 || h.uncompressed < 0 {
        return Err("negative or missing page size".into());
    }
    if body + h.compressed as u64 > end {
        return Err(format!(
            "{} bytes declared, past the end of its column chunk",
            h.compressed
        ));
    }
    if h.uncompressed > MAX_PAGE_BYTES {
        return Err(format!(
            "{} bytes uncompressed, more than imgseq reads ({MAX_PAGE_BYTES})",
            h.uncompressed
        ));
    }
    // What the page holds is bounded by its bytes in the file: no codec inflates more
    // than its ratio (an uncompressed page is its own size).
    if h.uncompressed
        > h.compressed
            .saturating_mul(max_ratio(codec))
            .saturating_add(INFLATE_SLACK)
    {
        let name = format!("{codec:?}");
        return Err(format!(
            "{} bytes uncompressed from {} compressed, more than {} inflates",
            h.uncompressed,
            h.compressed,
            name.split('(').next().unwrap_or(&name)
        ));
    }
    Ok(())
}

/// Checks every page header of a column chunk of a file of `file_len` bytes (see the module
/// documentation); what reading it holds at most, or the reason when a page is refused.
pub(crate) fn check_chunk(
    f: &mut File,
    file_len: u64,
    chunk: &ColumnChunkMetaData,
    ptype: PhysicalType,
    type_len: i32,
) -> Result<ChunkMemory, String> {
    let (start, len) = chunk.byte_range();
    let end = start
        .checked_add(len)
        .filter(|&e| e <= file_len)
        .ok_or_else(|| {
            format!("the column chunk (bytes {start}+{len}) ends past the file's {file_len} bytes")
        })?;
    let gzip = matches!(chunk.compression(), Compression::GZIP(_));
    let snappy = chunk.compression() == Compression::SNAPPY;
    let compressed_codec = chunk.compression() != Compression::UNCOMPRESSED;
    let (mut dict, mut page, mut values) = (0i64, 0i64, 0i64);
    let memory = |dict: i64, page: i64, values: i64, readable_end: u64| {
        let cursor = (dict + page) as u64;
        ChunkMemory {
            cursor,
            readable_end,
            whole: cursor.saturating_add((values as u64).saturating_mul(VALUE_BYTES as u64)),
        }
    };
    let mut pos = start;
    while pos < end {
        // A header that does not parse stops the check, and the reader is shown the chunk up
        // to it only: the rows from there fail at once, the others are read.
        let Some((h, hlen)) = read_header(f, pos, end)? else {
            return Ok(memory(dict, page, values, pos));
        };
        let body = pos + hlen;
        let at = |what: String| format!("page at byte {pos}: {what}");
        check_sizes(&h, body, end, chunk.compression()).map_err(at)?;
        imgseq_core::budget::check_memory(h.uncompressed as u128).map_err(at)?;
        if let Some(n) = h.dict_values.filter(|_| h.kind == DICTIONARY_PAGE) {
            let min = min_value_bits(ptype, type_len);
            if n < 0 || n.saturating_mul(min) > h.uncompressed.max(0).saturating_mul(8) {
                return Err(at(format!(
                    "a dictionary of {n} values in {} bytes",
                    h.uncompressed
                )));
            }
            // The dictionary stays while the chunk is read: its page and decoded values.
            dict = dict.saturating_add(
                h.uncompressed
                    .saturating_add(n.saturating_mul(DICT_VALUE_BYTES)),
            );
        } else {
            let n = h.num_values.unwrap_or(0).max(0);
            values = values.saturating_add(n);
            page = page.max(h.uncompressed.saturating_add(h.compressed));
        }
        let m = memory(dict, page, values, end);
        imgseq_core::budget::check_memory(m.cursor as u128).map_err(at)?;
        imgseq_core::budget::check_memory(m.whole as u128).map_err(|e| {
            at(format!(
                "the column chunk's {values} values read whole (with its dictionary) {e}"
            ))
        })?;
        let (levels, values_compressed) = match h.v2.filter(|_| h.kind == DATA_PAGE_V2) {
            Some((levels, _)) if levels < 0 || levels > h.compressed.min(h.uncompressed) => {
                return Err(at(format!("{levels} bytes of levels")));
            }
            Some((levels, c)) => (levels, c),
            None => (0, true),
        };
        if gzip && compressed_codec && values_compressed && h.uncompressed > levels {
            check_gzip(
                f,
                body + levels as u64,
                (h.compressed - levels) as u64,
                h.uncompressed - levels,
            )
            .map_err(at)?;
        }
        if snappy && values_compressed && h.uncompressed > levels {
            check_snappy(
                f,
                body + levels as u64,
                (h.compressed - levels) as u64,
                h.uncompressed - levels,
            )
            .map_err(at)?;
        }
        pos = body + h.compressed as u64;
    }
    Ok(memory(dict, page, values, end))
}

/// A file whose bytes from `end` on are not shown to the Parquet reader (they read as the end
/// of the file): what follows a header [`crate::parquet_pages::check_chunk`] could not read.
pub(crate) struct Bounded {
    pub file: std::fs::File,
    pub end: u64,
}

impl parquet::file::reader::Length for Bounded {
    fn len(&self) -> u64 {
        self.end
    }
}

impl parquet::file::reader::ChunkReader for Bounded {
    type T = std::io::BufReader<std::io::Take<std::fs::File>>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use std::io::{Read, Seek};
        let mut f = self.file.try_clone()?;
        f.seek(std::io::SeekFrom::Start(start))?;
        Ok(std::io::BufReader::new(
            f.take(self.end.saturating_sub(start)),
        ))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        use std::io::Read;
        let mut buf = Vec::with_capacity(length.min(self.end.saturating_sub(start) as usize));
        self.get_read(start)?
            .take(length as u64)
            .read_to_end(&mut buf)?;
        if buf.len() != length {
            return Err(parquet::errors::ParquetError::EOF(format!(
                "expected {length} bytes at {start}, the readable chunk holds {}",
                buf.len()
            )));
        }
        Ok(buf.into())
    }
}

/// Runs the header reader over arbitrary bytes (the fuzz target's body).
#[doc(hidden)]
pub fn fuzz_page_header(data: &[u8]) {
    let _ = parse_header(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compact-protocol page header: type, sizes, and a dictionary header of `dict` values.
    fn header(kind: i32, unc: i32, comp: i32, dict: Option<i32>) -> Vec<u8> {
        let zz = |v: i64| {
            let mut u = ((v << 1) ^ (v >> 63)) as u64;
            let mut out = Vec::new();
            loop {
                let b = (u & 0x7f) as u8;
                u >>= 7;
                if u == 0 {
                    out.push(b);
                    return out;
                }
                out.push(b | 0x80);
            }
        };
        let mut v = vec![0x15];
        v.extend(zz(kind.into()));
        v.push(0x15);
        v.extend(zz(unc.into()));
        v.push(0x15);
        v.extend(zz(comp.into()));
        if let Some(n) = dict {
            v.push(0x4c); // field 7 (delta 4), struct
            v.push(0x15);
            v.extend(zz(n.into()));
            v.push(0x15);
            v.extend(zz(0));
            v.push(0);
        }
        v.push(0);
        v
    }

    #[test]
    fn page_headers_parse_and_cut_off_ones_ask_for_more() {
        let b = header(2, 100, 40, Some(10));
        let (h, len) = parse_header(&b).ok().unwrap();
        assert_eq!(len, b.len());
        assert_eq!((h.kind, h.uncompressed, h.compressed), (2, 100, 40));
        assert_eq!(h.dict_values, Some(10));
        assert!(matches!(parse_header(&b[..b.len() - 1]), Err(Bad::Short)));
        assert!(matches!(parse_header(&[0x1f, 0]), Err(Bad::Invalid)));
    }
}
