//! NumPy `.npy` files (format version 1.0 written; 1.0, 2.0 and 3.0 read), C order, little
//! endian.
//!
//! Token files are written as `<i8` (int64), the dtype `numpy.load` gives for indices and the
//! one PyTorch uses for `LongTensor`s. Writers go through [`crate::fsutil::write_atomic`], so a
//! failed write never leaves a partial file. The header is laid out exactly as `numpy.save`
//! does it (keys sorted, 21-digit growth space after the dict, padded with spaces to a multiple
//! of 64 bytes including the final newline), so files are byte-for-byte what NumPy writes.
//!
//! The reader accepts the integer dtypes `<i1 <i2 <i4 <i8 <u1 <u2 <u4 <u8` (and `|i1 |u1`),
//! returned as `i64`, and `<f4 <f8`, returned as `f32`. Fortran order, big-endian data, object
//! or structured dtypes, bad magic and truncated data are one-line [`Error::Format`]s naming
//! the file.

use crate::fsutil::write_atomic;
use crate::{Error, Result};
use std::path::Path;

const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// NumPy pads the header so that the data starts at a multiple of this.
const ARRAY_ALIGN: usize = 64;
/// NumPy leaves room for the first axis to grow to this many digits.
const GROWTH_AXIS_MAX_DIGITS: usize = 21;

/// The elements of an array read from a `.npy` file.
#[derive(Debug, Clone, PartialEq)]
pub enum NpyData {
    /// Any integer dtype, widened to `i64`.
    I64(Vec<i64>),
    /// `<f4` (or `<f2` widened, `<f8` narrowed, to `f32`).
    F32(Vec<f32>),
}

/// An array read from a `.npy` file: shape (C order) and elements.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    pub shape: Vec<usize>,
    /// The dtype string of the file, e.g. `<i8`.
    pub descr: String,
    pub data: NpyData,
}

impl NpyArray {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match &self.data {
            NpyData::I64(v) => v.len(),
            NpyData::F32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The integer elements, or `None` for a float array.
    pub fn as_i64(&self) -> Option<&[i64]> {
        match &self.data {
            NpyData::I64(v) => Some(v),
            NpyData::F32(_) => None,
        }
    }

    /// The float elements, or `None` for an integer array.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            NpyData::F32(v) => Some(v),
            NpyData::I64(_) => None,
        }
    }

    /// The elements as `f32` (integers are converted).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match &self.data {
            NpyData::F32(v) => v.clone(),
            NpyData::I64(v) => v.iter().map(|&x| x as f32).collect(),
        }
    }
}

/// Largest `.npy` file read (a token grid of 10⁸ int64 codes is 800 MB).
pub const MAX_NPY_BYTES: u64 = 4 << 30;

/// Reads a `.npy` file (a regular file of at most [`MAX_NPY_BYTES`]).
pub fn read_npy(path: impl AsRef<Path>) -> Result<NpyArray> {
    let path = path.as_ref();
    let bytes = crate::weights::read_regular_file(path, MAX_NPY_BYTES, "a .npy file")?;
    parse_npy(path, &bytes)
}

/// What the `npy` fuzz target runs (and the corpus replay test). Must never panic.
#[doc(hidden)]
pub fn fuzz_npy_bytes(data: &[u8]) {
    if let Ok(a) = parse_npy("fuzz.npy", data) {
        let _ = (a.len(), a.to_f32_vec().len());
    }
}

/// Reads a `.npy` file that must hold integers; returns `(shape, elements)`.
pub fn read_npy_i64(path: impl AsRef<Path>) -> Result<(Vec<usize>, Vec<i64>)> {
    let path = path.as_ref();
    let a = read_npy(path)?;
    match a.data {
        NpyData::I64(v) => Ok((a.shape, v)),
        NpyData::F32(_) => Err(Error::format(
            path,
            format!("expected an integer array, found dtype {}", a.descr),
        )),
    }
}

/// Reads a `.npy` file as `f32` (integer arrays are converted); returns `(shape, elements)`.
pub fn read_npy_f32(path: impl AsRef<Path>) -> Result<(Vec<usize>, Vec<f32>)> {
    let a = read_npy(path)?;
    let v = match a.data {
        NpyData::F32(v) => v,
        NpyData::I64(v) => v.into_iter().map(|x| x as f32).collect(),
    };
    Ok((a.shape, v))
}

#[derive(Clone, Copy)]
enum Kind {
    I1,
    U1,
    I2,
    U2,
    I4,
    U4,
    I8,
    U8,
    F2,
    F4,
    F8,
}

impl Kind {
    fn size(self) -> usize {
        match self {
            Kind::I1 | Kind::U1 => 1,
            Kind::I2 | Kind::U2 | Kind::F2 => 2,
            Kind::I4 | Kind::U4 | Kind::F4 => 4,
            Kind::I8 | Kind::U8 | Kind::F8 => 8,
        }
    }
}

fn parse_descr(path: &Path, descr: &str) -> Result<Kind> {
    let bad = |why: &str| Error::unsupported(path, format!("unsupported dtype '{descr}' ({why})"));
    // The first byte is the byte order; a multi-byte first character is no dtype (found by
    // fuzzing: `split_at(1)` inside a character panics).
    let Some((order, code)) = descr.split_at_checked(1).filter(|(_, c)| !c.is_empty()) else {
        return Err(bad("not a simple dtype"));
    };
    let kind = match code {
        "i1" => Kind::I1,
        "u1" | "b1" => Kind::U1,
        "i2" => Kind::I2,
        "u2" => Kind::U2,
        "i4" => Kind::I4,
        "u4" => Kind::U4,
        "i8" => Kind::I8,
        "u8" => Kind::U8,
        "f2" => Kind::F2,
        "f4" => Kind::F4,
        "f8" => Kind::F8,
        _ if code.starts_with('O') => return Err(bad("object arrays are not supported")),
        _ => {
            return Err(bad(
                "supported: <i1 <i2 <i4 <i8 <u1 <u2 <u4 <u8 <f2 <f4 <f8 |i1 |u1",
            ))
        }
    };
    match order {
        "<" => Ok(kind),
        "|" | "=" if kind.size() == 1 => Ok(kind),
        ">" if kind.size() == 1 => Ok(kind),
        ">" => Err(bad("big-endian data is not supported")),
        _ => Err(bad("byte order must be little endian '<'")),
    }
}

/// Parses the bytes of a `.npy` file; `path` is only used in error messages.
pub fn parse_npy(path: impl AsRef<Path>, bytes: &[u8]) -> Result<NpyArray> {
    let path = path.as_ref();
    let (h, hend) = read_header(path, bytes)?;
    let kind = parse_descr(path, &h.descr)?;
    let nbytes = data_len(path, &h, kind)?;
    let data = &bytes[hend..];
    if data.len() < nbytes {
        return Err(Error::format(
            path,
            format!(
                "truncated data: shape {:?} of {} needs {nbytes} bytes, the file holds {}",
                h.shape,
                h.descr,
                data.len()
            ),
        ));
    }
    if data.len() > nbytes {
        return Err(Error::format(
            path,
            format!(
                "{} unexpected bytes after the data of shape {:?}",
                data.len() - nbytes,
                h.shape
            ),
        ));
    }
    let data = decode(path, kind, data)?;
    Ok(NpyArray {
        shape: h.shape,
        descr: h.descr,
        data,
    })
}

/// The magic, version and header dict of a `.npy` file, and where its data starts.
fn read_header(path: &Path, bytes: &[u8]) -> Result<(Header, usize)> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(Error::format(path, "not a .npy file (bad magic)"));
    }
    let major = bytes[6];
    let (hlen, hstart): (usize, usize) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(Error::format(path, "truncated .npy header"));
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        v => {
            return Err(Error::unsupported(
                path,
                format!("unsupported .npy format version {v}.{}", bytes[7]),
            ))
        }
    };
    let hend = hstart
        .checked_add(hlen)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| Error::format(path, "truncated .npy header"))?;
    let header = std::str::from_utf8(&bytes[hstart..hend])
        .map_err(|_| Error::format(path, "the .npy header is not valid text"))?;
    let h =
        parse_header(header).map_err(|m| Error::format(path, format!("bad .npy header: {m}")))?;
    if h.fortran_order {
        return Err(Error::format(
            path,
            "Fortran-order arrays are not supported (save with C order)",
        ));
    }
    Ok((h, hend))
}

/// Bytes of data the header's shape and dtype call for (an overflow is an error).
fn data_len(path: &Path, h: &Header, kind: Kind) -> Result<usize> {
    let too_large = || Error::format(path, format!("shape {:?} is too large", h.shape));
    h.shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .and_then(|count| count.checked_mul(kind.size()))
        .ok_or_else(too_large)
}

fn decode(path: &Path, kind: Kind, d: &[u8]) -> Result<NpyData> {
    fn ints<const N: usize>(d: &[u8], f: impl Fn([u8; N]) -> i64) -> Vec<i64> {
        d.chunks_exact(N)
            .map(|c| f(c.try_into().expect("chunk size")))
            .collect()
    }
    Ok(match kind {
        Kind::I1 => NpyData::I64(d.iter().map(|&b| b as i8 as i64).collect()),
        Kind::U1 => NpyData::I64(d.iter().map(|&b| b as i64).collect()),
        Kind::I2 => NpyData::I64(ints::<2>(d, |b| i16::from_le_bytes(b) as i64)),
        Kind::U2 => NpyData::I64(ints::<2>(d, |b| u16::from_le_bytes(b) as i64)),
        Kind::I4 => NpyData::I64(ints::<4>(d, |b| i32::from_le_bytes(b) as i64)),
        Kind::U4 => NpyData::I64(ints::<4>(d, |b| u32::from_le_bytes(b) as i64)),
        Kind::I8 => NpyData::I64(ints::<8>(d, i64::from_le_bytes)),
        Kind::U8 => {
            let mut v = Vec::with_capacity(d.len() / 8);
            for c in d.chunks_exact(8) {
                let x = u64::from_le_bytes(c.try_into().expect("chunk size"));
                let x = i64::try_from(x).map_err(|_| {
                    Error::format(path, format!("uint64 value {x} does not fit in int64"))
                })?;
                v.push(x);
            }
            NpyData::I64(v)
        }
        Kind::F2 => NpyData::F32(
            d.chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        Kind::F4 => NpyData::F32(
            d.chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("chunk size")))
                .collect(),
        ),
        Kind::F8 => NpyData::F32(
            d.chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().expect("chunk size")) as f32)
                .collect(),
        ),
    })
}

struct Header {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// Parses the Python dict literal of a `.npy` header (only what NumPy writes).
fn parse_header(s: &str) -> std::result::Result<Header, String> {
    let mut p = Lexer {
        s: s.as_bytes(),
        i: 0,
    };
    p.expect(b'{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        p.ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.ws();
        p.expect(b':')?;
        p.ws();
        match key.as_str() {
            "descr" => {
                if p.peek() == Some(b'[') || p.peek() == Some(b'(') {
                    return Err("structured dtypes are not supported".into());
                }
                descr = Some(p.string()?)
            }
            "fortran_order" => fortran = Some(p.boolean()?),
            "shape" => shape = Some(p.tuple()?),
            k => return Err(format!("unexpected key '{k}'")),
        }
        p.ws();
        if !p.eat(b',') {
            p.ws();
            p.expect(b'}')?;
            break;
        }
    }
    p.ws();
    if p.i != p.s.len() {
        return Err("unexpected text after the header dict".into());
    }
    Ok(Header {
        descr: descr.ok_or("missing 'descr'")?,
        fortran_order: fortran.ok_or("missing 'fortran_order'")?,
        shape: shape.ok_or("missing 'shape'")?,
    })
}

struct Lexer<'a> {
    s: &'a [u8],
    i: usize,
}

impl Lexer<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\t' | b'\r')) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: u8) -> std::result::Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected '{}' at offset {}", c as char, self.i))
        }
    }
    fn string(&mut self) -> std::result::Result<String, String> {
        let q = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("expected a quoted string at offset {}", self.i)),
        };
        self.i += 1;
        let start = self.i;
        while let Some(c) = self.peek() {
            if c == q {
                let v = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
                self.i += 1;
                return Ok(v);
            }
            self.i += 1;
        }
        Err("unterminated string".into())
    }
    fn boolean(&mut self) -> std::result::Result<bool, String> {
        let rest = &self.s[self.i..];
        if rest.starts_with(b"True") {
            self.i += 4;
            Ok(true)
        } else if rest.starts_with(b"False") {
            self.i += 5;
            Ok(false)
        } else {
            Err(format!("expected True or False at offset {}", self.i))
        }
    }
    fn tuple(&mut self) -> std::result::Result<Vec<usize>, String> {
        self.expect(b'(')?;
        let mut v = Vec::new();
        loop {
            self.ws();
            if self.eat(b')') {
                return Ok(v);
            }
            let start = self.i;
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.i += 1;
            }
            // Python 2 era files may write `3L`.
            let digits = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
            let n: usize = digits
                .parse()
                .map_err(|_| format!("bad shape entry at offset {start}"))?;
            self.eat(b'L');
            v.push(n);
            self.ws();
            if !self.eat(b',') {
                self.ws();
                self.expect(b')')?;
                return Ok(v);
            }
        }
    }
}

/// The header (magic, version, length, dict, padding) NumPy writes for an array of `descr`
/// and `shape` in C order.
pub fn npy_header(descr: &str, shape: &[usize]) -> Vec<u8> {
    let shape_repr = match shape {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut dict =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_repr}, }}");
    if let Some(first) = shape.first() {
        let digits = first.to_string().len();
        dict.push_str(&" ".repeat(GROWTH_AXIS_MAX_DIGITS.saturating_sub(digits)));
    }
    // magic (6) + version (2) + u16 length (2) + dict + padding + '\n'
    let unpadded = 10 + dict.len() + 1;
    let pad = (ARRAY_ALIGN - unpadded % ARRAY_ALIGN) % ARRAY_ALIGN;
    dict.push_str(&" ".repeat(pad));
    dict.push('\n');
    let mut out = Vec::with_capacity(10 + dict.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    // A dict for up to ~2000 dimensions fits; shapes are built by this crate.
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}

fn check_shape(path: &Path, shape: &[usize], len: usize) -> Result<()> {
    let count = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if count != Some(len) {
        return Err(Error::invalid(format!(
            "{}: shape {shape:?} does not match {len} elements",
            path.display()
        )));
    }
    if shape.len() > 64 {
        return Err(Error::invalid(format!(
            "{}: too many dimensions ({})",
            path.display(),
            shape.len()
        )));
    }
    Ok(())
}

fn write_npy<T: Copy, const N: usize>(
    path: &Path,
    descr: &str,
    shape: &[usize],
    data: &[T],
    to_le: impl Fn(T) -> [u8; N],
) -> Result<()> {
    check_shape(path, shape, data.len())?;
    let header = npy_header(descr, shape);
    write_atomic(path, |w| {
        w.write_all(&header)?;
        let mut buf = Vec::with_capacity(64 * 1024);
        for chunk in data.chunks(64 * 1024 / N) {
            buf.clear();
            for &x in chunk {
                buf.extend_from_slice(&to_le(x));
            }
            w.write_all(&buf)?;
        }
        Ok(())
    })
}

/// Writes an `int64` (`<i8`) array atomically.
pub fn write_npy_i64(path: impl AsRef<Path>, shape: &[usize], data: &[i64]) -> Result<()> {
    write_npy(path.as_ref(), "<i8", shape, data, i64::to_le_bytes)
}

/// Writes an `int32` (`<i4`) array atomically.
pub fn write_npy_i32(path: impl AsRef<Path>, shape: &[usize], data: &[i32]) -> Result<()> {
    write_npy(path.as_ref(), "<i4", shape, data, i32::to_le_bytes)
}

/// Writes a `uint16` (`<u2`) array atomically.
pub fn write_npy_u16(path: impl AsRef<Path>, shape: &[usize], data: &[u16]) -> Result<()> {
    write_npy(path.as_ref(), "<u2", shape, data, u16::to_le_bytes)
}

/// Writes a `float32` (`<f4`) array atomically.
pub fn write_npy_f32(path: impl AsRef<Path>, shape: &[usize], data: &[f32]) -> Result<()> {
    write_npy(path.as_ref(), "<f4", shape, data, f32::to_le_bytes)
}
