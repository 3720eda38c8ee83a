//! A safetensors file's table of contents read from its header alone: names, dtypes, shapes
//! and where each tensor's bytes lie, checked against the file's length — without reading
//! the data (`weights inspect` of a 200 MB file reads a few kilobytes).
//!
//! The layout (huggingface/safetensors): 8 bytes, little-endian u64 `n`; `n` bytes of JSON,
//! an object of `name → {"dtype", "shape", "data_offsets": [begin, end]}` (offsets relative
//! to the end of the header) plus an optional `"__metadata__"` of strings; then the data.

use crate::{Error, Result};
use std::io::Read;
use std::path::Path;

/// The largest header read (the format's own limit).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// One tensor's entry in the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    pub name: String,
    /// As the file writes it: `F32`, `BF16`, `I64`, ...
    pub dtype: String,
    pub shape: Vec<usize>,
    /// Byte range within the data section.
    pub data_offsets: (u64, u64),
}

/// Bytes per element of a safetensors dtype (`None`: a dtype this reader does not know).
pub fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F64" | "I64" | "U64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "I8" | "U8" | "BOOL" | "F8_E4M3" | "F8_E5M2" => 1,
        _ => return None,
    })
}

/// The tensors of the safetensors file at `path`, from its header; each entry's byte range
/// must match its dtype and shape and lie inside the file.
pub fn read_header(path: &Path) -> Result<Vec<TensorEntry>> {
    let bad = |why: String| Error::format(path, format!("not a valid safetensors file ({why})"));
    let (f, len) = crate::fsutil::open_regular_file(path)?;
    let mut f = f.take(len);
    let mut n8 = [0u8; 8];
    f.read_exact(&mut n8).map_err(|_| {
        bad(format!(
            "{len} bytes, shorter than the 8-byte header length"
        ))
    })?;
    let n = u64::from_le_bytes(n8);
    let Some(data_len) = data_len(n, len) else {
        return Err(bad(format!(
            "a header of {n} bytes in a file of {len} bytes (at most {MAX_HEADER_BYTES})"
        )));
    };
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header).map_err(|e| Error::io(path, e))?;
    parse_header(path, &header, data_len)
}

/// The data section's length of a `len`-byte file whose header declares `n` bytes; `None`
/// when the header is longer than the format allows or than the file.
fn data_len(n: u64, len: u64) -> Option<u64> {
    (n <= MAX_HEADER_BYTES && n <= len.checked_sub(8)?).then(|| len - 8 - n)
}

/// The entries of a safetensors header's JSON `header`, checked against a data section of
/// `data_len` bytes; `path` names the file in errors (the fuzz target `safetensors_audited`
/// feeds it through [`fuzz_header_bytes`]).
pub fn parse_header(path: &Path, header: &[u8], data_len: u64) -> Result<Vec<TensorEntry>> {
    let bad = |why: String| Error::format(path, format!("not a valid safetensors file ({why})"));
    let json: serde_json::Value =
        serde_json::from_slice(header).map_err(|e| bad(format!("its header is not JSON: {e}")))?;
    let serde_json::Value::Object(map) = json else {
        return Err(bad("its header is not a JSON object".into()));
    };
    let mut out = Vec::with_capacity(map.len());
    for (name, v) in map {
        if name == "__metadata__" {
            continue;
        }
        let entry = entry(&name, &v).ok_or_else(|| {
            bad(format!(
                "tensor {name:?} lacks a dtype, shape or data_offsets"
            ))
        })?;
        let (begin, end) = entry.data_offsets;
        if begin > end || end > data_len {
            return Err(bad(format!(
                "tensor {name:?} lies at bytes {begin}..{end} of a {data_len}-byte data section \
                 (truncated?)"
            )));
        }
        if let Some(size) = dtype_bytes(&entry.dtype) {
            let want = entry
                .shape
                .iter()
                .try_fold(size, |a, &d| a.checked_mul(d as u64));
            if want != Some(end - begin) {
                return Err(bad(format!(
                    "tensor {name:?} of shape {:?} and dtype {} takes {} bytes, not {}",
                    entry.shape,
                    entry.dtype,
                    want.map_or("too many".to_string(), |w| w.to_string()),
                    end - begin
                )));
            }
        }
        out.push(entry);
    }
    Ok(out)
}

/// Fuzz body: `bytes` as a whole safetensors file, its header parsed as [`read_header`] does.
#[doc(hidden)]
pub fn fuzz_header_bytes(bytes: &[u8]) {
    let Some(n8) = bytes.get(..8) else {
        return;
    };
    let n = u64::from_le_bytes(n8.try_into().expect("8 bytes"));
    let Some(rest) = data_len(n, bytes.len() as u64) else {
        return;
    };
    let header = &bytes[8..8 + n as usize];
    let _ = parse_header(Path::new("fuzz.safetensors"), header, rest);
}

fn entry(name: &str, v: &serde_json::Value) -> Option<TensorEntry> {
    let dtype = v.get("dtype")?.as_str()?.to_string();
    let shape = v
        .get("shape")?
        .as_array()?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<Vec<usize>>>()?;
    let offs = v.get("data_offsets")?.as_array()?;
    let [b, e] = offs.as_slice() else {
        return None;
    };
    Some(TensorEntry {
        name: name.to_string(),
        dtype,
        shape,
        data_offsets: (b.as_u64()?, e.as_u64()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    /// The header's entries are what candle writes; a truncated file, a header longer than
    /// the file and a shape that does not match its bytes are one-line errors.
    #[test]
    fn header_lists_what_candle_wrote_and_refuses_what_does_not_fit() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("w.safetensors");
        let a = Tensor::zeros((2, 3), candle_core::DType::F32, &Device::Cpu).unwrap();
        let b = Tensor::zeros(5, candle_core::DType::BF16, &Device::Cpu).unwrap();
        candle_core::safetensors::save(
            &std::collections::HashMap::from([("a".to_string(), a), ("b".to_string(), b)]),
            &p,
        )
        .unwrap();
        let mut got = read_header(&p).unwrap();
        got.sort_by(|x, y| x.name.cmp(&y.name));
        assert_eq!(
            got.iter()
                .map(|e| (e.name.as_str(), e.dtype.as_str(), e.shape.clone()))
                .collect::<Vec<_>>(),
            vec![("a", "F32", vec![2, 3]), ("b", "BF16", vec![5])]
        );
        let bytes = std::fs::read(&p).unwrap();
        let t = d.path().join("t.safetensors");
        std::fs::write(&t, &bytes[..bytes.len() - 4]).unwrap();
        let e = read_header(&t).unwrap_err().to_string();
        assert!(
            e.contains("t.safetensors") && e.contains("truncated"),
            "{e}"
        );
        let mut huge = bytes.clone();
        huge[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        std::fs::write(&t, &huge).unwrap();
        let e = read_header(&t).unwrap_err().to_string();
        assert!(e.contains("header of 1099511627776 bytes"), "{e}");
        let text = String::from_utf8_lossy(&bytes).replace("[2,3]", "[3,3]");
        std::fs::write(&t, text.as_bytes()).unwrap();
        let e = read_header(&t).unwrap_err().to_string();
        assert!(e.contains("takes 36 bytes, not 24"), "{e}");
        std::fs::write(&t, b"1234").unwrap();
        assert!(read_header(&t).is_err());
        assert_eq!(e.lines().count(), 1);
    }
}
