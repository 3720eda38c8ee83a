//! Reading a vision tower ([`crate::tower`]'s loading): a model folder or a weights file with
//! its `config.json`, the config, and the safetensors read one tensor at a time (a full
//! checkpoint's other tower left unread).

use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A model folder's or a weights file's `(weights, config.json)`: `model.safetensors` and
/// `config.json` inside a folder; the file and the `config.json` beside it.
pub fn files_of(source: &Path) -> (PathBuf, PathBuf) {
    if source.is_dir() {
        (source.join("model.safetensors"), source.join("config.json"))
    } else {
        (source.to_path_buf(), source.with_file_name("config.json"))
    }
}

/// The `model_type` of the `config.json` at `path` (at most 1 MiB; `None` when it is no
/// readable JSON object with one): how a family tells a tower's folder is its own.
pub fn model_type_of(path: &Path) -> Option<String> {
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() < 1 << 20) {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    Some(v.get("model_type")?.as_str()?.to_string())
}

/// The JSON of the config at `path` (one-line errors naming the file).
pub fn read_config(path: &Path) -> imgseq_core::Result<serde_json::Value> {
    let bytes = imgseq_core::weights::read_regular_file(path, 1 << 20, "a config")?;
    serde_json::from_slice(&bytes)
        .map_err(|e| imgseq_core::Error::format(path, format!("not valid JSON ({e})")))
}

/// The tensors of `file`; those of a full checkpoint (names starting `prefix`, e.g. a CLIP
/// or SigLIP model's `vision_model.`) with the prefix taken off and the others left out
/// (never read).
pub fn tower_tensors(
    file: &Path,
    prefix: &str,
    device: &candle_core::Device,
) -> imgseq_core::Result<HashMap<String, Tensor>> {
    read_safetensors(file, Some(prefix), device)
}

/// Largest safetensors header read (the JSON table of names, shapes and offsets).
const MAX_HEADER_BYTES: u64 = 100 << 20;

/// The tensors of the safetensors `file`, read one at a time (the file is never held whole
/// beside its tensors: loading peaks at the tensors and one tensor's bytes). With `prefix`,
/// a file holding names that start with it gives those, the prefix taken off, and leaves the
/// others unread. One-line errors naming the file.
pub fn read_safetensors(
    file: &Path,
    prefix: Option<&str>,
    device: &candle_core::Device,
) -> imgseq_core::Result<HashMap<String, Tensor>> {
    use candle_core::DType;
    use imgseq_core::Error;
    use std::io::{Read, Seek, SeekFrom};
    let (mut f, len) = imgseq_core::weights::open_regular_file(file)?;
    let max = imgseq_core::weights::MAX_SAFETENSORS_BYTES;
    if len > max {
        return Err(Error::format(
            file,
            format!("{len} bytes is more than imgseq reads as a safetensors file ({max} bytes)"),
        ));
    }
    let bad = |m: String| Error::format(file, format!("not a valid safetensors file ({m})"));
    let mut n = [0u8; 8];
    f.read_exact(&mut n)
        .map_err(|_| bad("shorter than its 8-byte header length".into()))?;
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER_BYTES || 8 + n > len {
        return Err(bad(format!("a header of {n} bytes in a file of {len}")));
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header).map_err(|e| Error::io(file, e))?;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| bad(format!("its header: {e}")))?;
    let data_start = 8 + n;
    let wanted = |name: &str| -> Option<String> {
        match prefix {
            Some(p) if header.keys().any(|k| k.starts_with(p)) => {
                name.strip_prefix(p).map(str::to_string)
            }
            _ => Some(name.to_string()),
        }
    };
    // In file order, so the reads go forward.
    let mut entries = Vec::new();
    for (name, info) in &header {
        if name == "__metadata__" {
            continue;
        }
        let Some(key) = wanted(name) else { continue };
        let field = |k: &str| {
            info.get(k)
                .ok_or_else(|| bad(format!("tensor `{name}` has no `{k}`")))
        };
        let dtype = match field("dtype")?.as_str() {
            Some("F32") => DType::F32,
            Some("F16") => DType::F16,
            Some("BF16") => DType::BF16,
            Some("F64") => DType::F64,
            Some("I64") => DType::I64,
            Some("U32") => DType::U32,
            Some("U8") => DType::U8,
            other => return Err(bad(format!("tensor `{name}` of dtype {other:?}"))),
        };
        let shape: Vec<usize> = serde_json::from_value(field("shape")?.clone())
            .map_err(|_| bad(format!("tensor `{name}`: its shape")))?;
        let offsets: [u64; 2] = serde_json::from_value(field("data_offsets")?.clone())
            .map_err(|_| bad(format!("tensor `{name}`: its data_offsets")))?;
        let bytes = shape
            .iter()
            .try_fold(dtype.size_in_bytes() as u64, |a, &d| {
                a.checked_mul(d as u64)
            });
        let [begin, end] = offsets;
        if begin > end
            || Some(end - begin) != bytes
            || data_start.checked_add(end).is_none_or(|e| e > len)
        {
            return Err(bad(format!(
                "tensor `{name}` of {shape:?} {dtype:?} at bytes {begin} to {end} of {}",
                len - data_start
            )));
        }
        entries.push((begin, end, key, dtype, shape));
    }
    entries.sort_by_key(|e| e.0);
    let mut out = HashMap::with_capacity(entries.len());
    let mut buf = Vec::new();
    for (begin, end, key, dtype, shape) in entries {
        buf.clear();
        buf.resize((end - begin) as usize, 0);
        f.seek(SeekFrom::Start(data_start + begin))
            .and_then(|_| f.read_exact(&mut buf))
            .map_err(|e| Error::io(file, e))?;
        let t = Tensor::from_raw_buffer(&buf, dtype, &shape, device)
            .map_err(|e| bad(format!("tensor `{key}`: {e}")))?;
        out.insert(key, t);
    }
    Ok(out)
}

/// The loading every tower shares, from a folder (`config.json` + `model.safetensors`) or a
/// safetensors file with its `config.json` beside it: the config parsed by `parse`, the
/// tensors (a full checkpoint's under `prefix` with it taken off, [`tower_tensors`]; `None`:
/// the file's as they are), the model built by `build` (`what` names it in errors), and every
/// tensor used but those in `unused`.
pub fn load_model<C, M>(
    source: &Path,
    device: &candle_core::Device,
    prefix: Option<&str>,
    what: &str,
    parse: impl FnOnce(&serde_json::Value) -> std::result::Result<C, String>,
    build: impl FnOnce(&C, VarBuilder) -> Result<M>,
    unused: &[&str],
) -> imgseq_core::Result<M> {
    use imgseq_core::Error;
    let (file, cfg_path) = files_of(source);
    let v = read_config(&cfg_path)?;
    let cfg = parse(&v).map_err(|m| Error::format(&cfg_path, m))?;
    let map = read_safetensors(&file, prefix, device)?;
    let w = imgseq_core::weights::AuditedWeights::new(&file, map);
    let model = build(&cfg, w.var_builder(candle_core::DType::F32, device))
        .map_err(|e| Error::format(&file, format!("not the {what} its config describes: {e}")))?;
    w.finish(unused)?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The streamed reader gives candle's tensors, leaves a full checkpoint's others unread,
    /// and refuses a damaged file in one line naming it.
    #[test]
    fn safetensors_read_one_tensor_at_a_time_equal_candles_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.safetensors");
        let dev = Device::Cpu;
        let a = Tensor::arange(0f32, 12., &dev)
            .unwrap()
            .reshape((3, 4))
            .unwrap();
        let b = Tensor::new(&[1.5f32, -2.0], &dev)
            .unwrap()
            .to_dtype(candle_core::DType::BF16)
            .unwrap();
        let m: HashMap<String, Tensor> = [
            ("vision_model.a".to_string(), a.clone()),
            ("text_model.b".to_string(), b.clone()),
        ]
        .into();
        candle_core::safetensors::save(&m, &path).unwrap();
        let all = read_safetensors(&path, None, &dev).unwrap();
        let want = candle_core::safetensors::load(&path, &dev).unwrap();
        assert_eq!(all.len(), 2);
        for (k, t) in &want {
            let got = &all[k];
            assert_eq!((got.dtype(), got.dims()), (t.dtype(), t.dims()), "{k}");
            let f = |t: &Tensor| {
                t.to_dtype(candle_core::DType::F32)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
            };
            assert_eq!(f(got), f(t), "{k}");
        }
        let tower = tower_tensors(&path, "vision_model.", &dev).unwrap();
        assert_eq!(tower.keys().collect::<Vec<_>>(), ["a"]);
        // Cut short: the last tensor's bytes run past the end.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
        let e = read_safetensors(&path, None, &dev).unwrap_err().to_string();
        assert!(
            e.contains("w.safetensors") && e.contains("at bytes") && e.lines().count() == 1,
            "{e}"
        );
        std::fs::write(&path, [200u8, 0, 0, 0, 0, 0, 0, 0, b'{']).unwrap();
        let e = read_safetensors(&path, None, &dev).unwrap_err().to_string();
        assert!(e.contains("a header of 200 bytes"), "{e}");
    }
}
