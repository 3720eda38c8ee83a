//! Audited weight loading.
//!
//! PyTorch's `load_state_dict(strict=False)` (used by taming-transformers) silently ignores
//! missing and unexpected keys; candle's `VarBuilder` checks shapes but not leftovers. An
//! [`AuditedWeights`] wraps a name → tensor map, hands out a `VarBuilder` that records every
//! name the model asks for, and [`AuditedWeights::finish`] then fails if any tensor of the file
//! was not used. Missing tensors and wrong shapes fail at the `get` that asks for them, with the
//! file name in the message.

use crate::{Error, Result};
use candle_core::{DType, Device, Shape, Tensor, Var};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A set of named tensors read from one file, with a record of which names were used.
#[derive(Clone)]
pub struct AuditedWeights {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    tensors: HashMap<String, Tensor>,
    used: Mutex<BTreeSet<String>>,
}

impl AuditedWeights {
    /// Wraps tensors that were read from `path` (the path is only used in messages).
    pub fn new(path: impl AsRef<Path>, tensors: HashMap<String, Tensor>) -> Self {
        Self {
            inner: Arc::new(Inner {
                path: path.as_ref().to_path_buf(),
                tensors,
                used: Mutex::new(BTreeSet::new()),
            }),
        }
    }

    /// Reads every tensor of a safetensors file onto `device`.
    pub fn from_safetensors(path: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let path = path.as_ref();
        Ok(Self::new(path, load_tensors(path, device)?))
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// All tensors, sorted by name, with their shapes.
    pub fn shapes(&self) -> BTreeMap<String, Vec<usize>> {
        self.inner
            .tensors
            .iter()
            .map(|(k, v)| (k.clone(), v.dims().to_vec()))
            .collect()
    }

    /// Direct access to one tensor (marks it used).
    pub fn get(&self, name: &str) -> Result<Tensor> {
        match self.inner.tensors.get(name) {
            Some(t) => {
                self.inner
                    .used
                    .lock()
                    .expect("poisoned")
                    .insert(name.to_string());
                Ok(t.clone())
            }
            None => Err(Error::weights(
                &self.inner.path,
                format!("missing tensor `{name}`"),
            )),
        }
    }

    /// A `VarBuilder` whose `get`s are recorded; shape mismatches are errors naming the file.
    pub fn var_builder(&self, dtype: DType, device: &Device) -> VarBuilder<'static> {
        VarBuilder::from_backend(Box::new(self.clone()), dtype, device.clone())
    }

    /// Fails unless every tensor whose name does not start with one of `ignore_prefixes` was
    /// used by the model.
    pub fn finish(&self, ignore_prefixes: &[&str]) -> Result<()> {
        let used = self.inner.used.lock().expect("poisoned");
        let unused: Vec<&String> = self
            .inner
            .tensors
            .keys()
            .filter(|k| !used.contains(*k) && !ignore_prefixes.iter().any(|p| k.starts_with(p)))
            .collect();
        if unused.is_empty() {
            return Ok(());
        }
        Err(unexpected_tensors(&self.inner.path, unused, "the model"))
    }
}

/// The one message for tensors a file holds that its model does not use: how many, the first
/// five in name order, and `model` (e.g. "the model", "the LlamaGen model").
pub fn unexpected_tensors<S: AsRef<str>>(path: &Path, mut names: Vec<S>, model: &str) -> Error {
    names.sort_by(|a, b| a.as_ref().cmp(b.as_ref()));
    let n = names.len();
    let shown: Vec<&str> = names.iter().take(5).map(|s| s.as_ref()).collect();
    let more = if n > 5 {
        format!(" (and {} more)", n - 5)
    } else {
        String::new()
    };
    Error::weights(
        path,
        format!(
            "{n} unexpected tensor(s) not used by {model}: {}{more}",
            shown.join(", ")
        ),
    )
}

impl SimpleBackend for AuditedWeights {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _h: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let t = self
            .get(name)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        if t.shape() != &s {
            return Err(candle_core::Error::Msg(format!(
                "{}: tensor `{name}` has shape {:?}, the model expects {:?}",
                self.inner.path.display(),
                t.dims(),
                s.dims()
            )));
        }
        t.to_dtype(dtype)?.to_device(dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let t = self
            .get(name)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        t.to_dtype(dtype)?.to_device(dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.inner.tensors.contains_key(name)
    }
}

/// Largest safetensors file read (weights of the largest models imgseq builds are < 2 GB).
pub const MAX_SAFETENSORS_BYTES: u64 = 16 << 30;

/// Reads every tensor of a safetensors file onto `device` (no audit; for checkpoints and
/// optimizer state).
pub fn load_tensors(path: impl AsRef<Path>, device: &Device) -> Result<HashMap<String, Tensor>> {
    let path = path.as_ref();
    let bytes = read_regular_file(path, MAX_SAFETENSORS_BYTES, "a safetensors file")?;
    parse_safetensors(path, &bytes, device)
}

/// [`load_tensors`] on the bytes of a file; `path` is only used in messages.
pub fn parse_safetensors(
    path: &Path,
    bytes: &[u8],
    device: &Device,
) -> Result<HashMap<String, Tensor>> {
    candle_core::safetensors::load_buffer(bytes, device)
        .map_err(|e| Error::format(path, format!("not a valid safetensors file ({e})")))
}

pub use crate::fsutil::{open_regular_file, read_regular_file};

/// Restores training variables from a checkpoint: sets each of `vars` to the tensor of its
/// name in `saved` (read from `path`, which the messages name), converted to the variable's
/// dtype. A missing tensor or another shape is an error; tensors no variable asks for are the
/// caller's to judge.
pub fn set_vars<'a>(
    path: &Path,
    saved: &HashMap<String, Tensor>,
    vars: impl IntoIterator<Item = (&'a str, &'a Var)>,
) -> Result<()> {
    for (name, var) in vars {
        let t = saved
            .get(name)
            .ok_or_else(|| Error::weights(path, format!("missing tensor `{name}`")))?;
        let want = var.as_tensor().dims();
        if t.dims() != want {
            return Err(Error::weights(
                path,
                format!(
                    "`{name}` has shape {:?}, the model needs {want:?}",
                    t.dims()
                ),
            ));
        }
        var.set(&t.to_dtype(var.dtype())?)?;
    }
    Ok(())
}

/// Writes named tensors as safetensors, atomically (no partial file on error).
pub fn save_tensors<'a, K: AsRef<str>>(
    path: impl AsRef<Path>,
    tensors: impl IntoIterator<Item = (K, &'a Tensor)>,
) -> Result<()> {
    let path = path.as_ref();
    let mut named: Vec<(K, &Tensor)> = tensors.into_iter().collect();
    named.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
    let bytes = safetensors::serialize(named.iter().map(|(k, v)| (k.as_ref(), *v)), None)
        .map_err(|e| Error::format(path, format!("cannot serialise tensors ({e})")))?;
    crate::fsutil::write_bytes_atomic(path, &bytes)
}

/// Turns a candle error raised while building a model from `weights` into a one-line
/// weights error (candle wraps messages in context chains; we keep the innermost text).
pub fn model_error(path: &Path, e: candle_core::Error) -> Error {
    let msg = e.to_string();
    let line = msg.lines().next().unwrap_or("").to_string();
    let prefix = format!("{}: ", path.display());
    match line.strip_prefix(&prefix) {
        Some(rest) => Error::weights(path, rest.to_string()),
        None => Error::weights(path, line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> AuditedWeights {
        let dev = Device::Cpu;
        let mut m = HashMap::new();
        m.insert(
            "a.weight".to_string(),
            Tensor::zeros((2, 3), DType::F32, &dev).unwrap(),
        );
        m.insert(
            "a.bias".to_string(),
            Tensor::zeros(2, DType::F32, &dev).unwrap(),
        );
        m.insert(
            "loss.x".to_string(),
            Tensor::zeros(1, DType::F32, &dev).unwrap(),
        );
        AuditedWeights::new("w.safetensors", m)
    }

    #[test]
    fn unused_tensor_is_reported_with_file_name() {
        let w = store();
        let vb = w.var_builder(DType::F32, &Device::Cpu);
        vb.pp("a").get((2, 3), "weight").unwrap();
        let err = w.finish(&["loss."]).unwrap_err().to_string();
        assert!(err.starts_with("w.safetensors: 1 unexpected"), "{err}");
        assert!(err.contains("a.bias"), "{err}");
        vb.pp("a").get(2, "bias").unwrap();
        w.finish(&["loss."]).unwrap();
    }

    #[test]
    fn wrong_shape_names_file_tensor_and_both_shapes() {
        let w = store();
        let vb = w.var_builder(DType::F32, &Device::Cpu);
        let err = vb.pp("a").get((3, 2), "weight").unwrap_err();
        let e = model_error(w.path(), err).to_string();
        assert!(
            e.contains("w.safetensors") && e.contains("a.weight") && e.contains("[2, 3]"),
            "{e}"
        );
        assert_eq!(e.lines().count(), 1);
    }

    #[test]
    fn missing_tensor_is_an_error() {
        let w = store();
        let vb = w.var_builder(DType::F32, &Device::Cpu);
        let err = vb.pp("b").get(2, "bias").unwrap_err().to_string();
        assert!(err.contains("missing tensor `b.bias`"), "{err}");
    }
}
