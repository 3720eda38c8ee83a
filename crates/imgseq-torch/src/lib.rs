//! A restricted, non-executing reader for PyTorch `torch.save` files (zip format, torch ≥ 1.6),
//! such as taming's PyTorch-Lightning `last.ckpt`, and for the weights of TorchScript archives
//! (`torch.jit.save`, such as NVIDIA's Cosmos tokenizers' `encoder.jit`): their module tree,
//! flattened to `state_dict` names; their code is never read.
//!
//! Python's `pickle.load` would import and call whatever a checkpoint's pickle names, so a
//! checkpoint can run arbitrary code. This crate instead interprets the pickle on a small
//! stack machine of plain values that never calls anything; names outside an allowlist
//! (`torch.*`, `collections.*`, Lightning) are refused as soon as they appear, and storage
//! bytes are read only for the tensors asked for.
//!
//! * [`opcodes`]: the pickle opcodes by name.
//! * `pickle`: the stack machine and the allowlist of globals.
//! * `archive`: the zip layout (`data.pkl`, `data/<key>`).
//! * [`script`]: a TorchScript archive's module objects → `state_dict` names.
//! * `tensor`: storage types and views → candle tensors (any strides; floats become f32,
//!   integers i64, bytes and bools u8).
//! * [`error`]: [`TorchError`], convertible into [`imgseq_core::Error`].
//! * [`lightning`]: which copy of a Lightning checkpoint's weights runs (`LitEma`'s or the
//!   raw ones), for every family trained with it.
//!
//! ```no_run
//! let sd = imgseq_torch::read_state_dict("last.ckpt", &candle_core::Device::Cpu)?;
//! for (name, t) in &sd {
//!     println!("{name}: {} {:?}", t.dtype.torch_name(), t.tensor.dims());
//! }
//! # Ok::<(), imgseq_torch::TorchError>(())
//! ```

mod archive;
pub mod error;
pub mod lightning;
pub mod opcodes;
mod pickle;
pub mod script;
mod tensor;

pub use archive::{inflate_budget, MAX_PICKLE_BYTES};
pub use error::{FormatError, PickleError, Result, TensorProblem, TorchError};
pub use tensor::{CkptTensor, StorageDType, MAX_TENSOR_BYTES};

use archive::Archive;
use candle_core::Device;
use error::FormatError as F;
use pickle::Value;
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use tensor::TensorRef;

/// A torch zip checkpoint, opened: the parsed object tree and access to its storages.
pub struct Checkpoint {
    archive: Archive,
    root: Value,
    /// A TorchScript archive (module objects instead of a dict).
    script: bool,
    /// Storage bytes still needed by a tensor not yet materialised.
    cache: HashMap<String, Rc<Vec<u8>>>,
}

impl Checkpoint {
    /// Opens `path` and interprets its pickle (no tensor data is read yet).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::with_archive(Archive::open(path.as_ref())?)
    }

    /// [`Self::open`] on the bytes of a checkpoint file; `path` is only used in messages.
    pub fn from_bytes(path: impl AsRef<Path>, bytes: Vec<u8>) -> Result<Self> {
        Self::with_archive(Archive::from_bytes(path.as_ref(), bytes)?)
    }

    fn with_archive(mut archive: Archive) -> Result<Self> {
        let bytes = archive.read_pickle()?;
        let script = archive.is_torchscript();
        let flavor = match script {
            true => pickle::Flavor::TorchScript,
            false => pickle::Flavor::TorchSave,
        };
        let root =
            pickle::load(&bytes, flavor).map_err(|e| TorchError::format(archive.path(), e))?;
        Ok(Self {
            archive,
            root,
            script,
            cache: HashMap::new(),
        })
    }

    /// Whether the file is a TorchScript archive (`torch.jit.save`), whose weights
    /// [`Self::state_dict`] reads off its module tree ([`script`]).
    pub fn is_torchscript(&self) -> bool {
        self.script
    }

    /// The root dict: the checkpoint's, or a TorchScript root module's attributes.
    fn root_dict(&self) -> Option<Rc<std::cell::RefCell<pickle::Pairs>>> {
        match &self.root {
            Value::Dict(d) => Some(d.clone()),
            Value::Object(o) => match &*o.state.borrow() {
                Some(Value::Dict(d)) => Some(d.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    /// Names of the top-level keys (e.g. `state_dict`, `epoch`, `global_step`; a TorchScript
    /// root module's attributes).
    pub fn top_level_keys(&self) -> Vec<String> {
        match self.root_dict() {
            Some(d) => d
                .borrow()
                .iter()
                .filter_map(|(k, _)| match k {
                    Value::Str(s) => Some(s.to_string()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Name, dtype and shape of every tensor of [`Self::state_dict`], without reading data.
    /// Each view is checked against the element count its storage declares.
    pub fn tensor_infos(&self) -> Result<Vec<(String, StorageDType, Vec<usize>)>> {
        self.state_dict_refs()?
            .into_iter()
            .map(|(k, t)| {
                t.checked_numel()
                    .map_err(|problem| self.bad_tensor(&k, problem))?;
                Ok((k, t.dtype, t.size.clone()))
            })
            .collect()
    }

    fn bad_tensor(&self, key: &str, problem: TensorProblem) -> TorchError {
        TorchError::format(
            self.archive.path(),
            F::BadTensor {
                key: key.to_string(),
                problem,
            },
        )
    }

    /// Top-level entries that are plain scalars (`epoch: 3`, `global_step: 10`, ...).
    pub fn scalars(&self) -> Vec<(String, String)> {
        let Some(d) = self.root_dict() else {
            return Vec::new();
        };
        let d = d.borrow();
        d.iter()
            .filter_map(|(k, v)| {
                let Value::Str(k) = k else { return None };
                let v = match v {
                    Value::Int(i) => i.to_string(),
                    Value::Float(f) => f.to_string(),
                    Value::Bool(b) => b.to_string(),
                    Value::Str(s) => format!("{s:?}"),
                    Value::Bytes(b) => format!("<{} bytes>", b.len()),
                    Value::Opaque(g) => format!("<{}.{} object, not built>", g.0, g.1),
                    _ => return None,
                };
                Some((k.to_string(), v))
            })
            .collect()
    }

    /// The top-level entry that holds the model's tensors, if not the root dict itself:
    /// `state_dict` (Lightning); else, when the root holds no tensor, `ema` or `model` (in
    /// that order, as LlamaGen's own loaders pick them).
    pub fn state_dict_key(&self) -> Option<String> {
        let Value::Dict(d) = &self.root else {
            return None;
        };
        if self.script {
            return None;
        }
        let d = d.borrow();
        let dict_at = |name: &str| {
            d.iter()
                .any(|(k, v)| matches!((k, v), (Value::Str(k), Value::Dict(_)) if &**k == name))
        };
        if dict_at("state_dict") {
            return Some("state_dict".into());
        }
        if d.iter().any(|(_, v)| matches!(v, Value::Tensor(_))) {
            return None;
        }
        ["ema", "model"]
            .into_iter()
            .find(|n| dict_at(n))
            .map(str::to_string)
    }

    /// The tensor entries of [`Self::state_dict_key`]'s entry, or of the root dict.
    fn state_dict_refs(&self) -> Result<Vec<(String, Rc<TensorRef>)>> {
        let path = self.archive.path();
        if self.script {
            let entries = script::flatten(&self.root).map_err(|e| TorchError::format(path, e))?;
            if entries.is_empty() {
                return Err(TorchError::format(path, F::NoTensors));
            }
            return Ok(entries);
        }
        let key = self.state_dict_key();
        let dict = match &self.root {
            Value::Dict(d) => {
                let sd = d.borrow().iter().find_map(|(k, v)| match (k, v) {
                    (Value::Str(k), Value::Dict(sd)) if Some(&**k) == key.as_deref() => {
                        Some(sd.clone())
                    }
                    _ => None,
                });
                sd.unwrap_or_else(|| d.clone())
            }
            other => {
                return Err(TorchError::format(
                    path,
                    F::NotADict {
                        found: other.describe(),
                    },
                ))
            }
        };
        let entries: Vec<(String, Rc<TensorRef>)> = dict
            .borrow()
            .iter()
            .filter_map(|(k, v)| match (k, v) {
                (Value::Str(k), Value::Tensor(t)) => Some((k.to_string(), t.clone())),
                _ => None,
            })
            .collect();
        if entries.is_empty() {
            return Err(TorchError::format(path, F::NoTensors));
        }
        Ok(entries)
    }

    /// The tensors of the model: the `state_dict` entry of a Lightning checkpoint, the
    /// top-level dict itself for a plain `torch.save(model.state_dict())`, LlamaGen's
    /// `ema` / `model` entry ([`Self::state_dict_key`]), or a TorchScript archive's module
    /// tree by `state_dict` names ([`script`]). Entries in file order; non-tensor values are
    /// skipped.
    pub fn state_dict(&mut self, device: &Device) -> Result<Vec<(String, CkptTensor)>> {
        let entries = self.state_dict_refs()?;
        // Storage bytes are kept only while a later tensor still needs them, so the peak is
        // about one copy of the model (plus one storage), not two.
        let mut pending: HashMap<String, usize> = HashMap::new();
        for (_, t) in &entries {
            *pending.entry(t.key.clone()).or_default() += 1;
        }
        // The memory the tensors take is checked before anything is read: views may repeat
        // their storage (stride 0), so a few bytes of file can describe terabytes.
        let file_len = self.archive.file_len();
        let budget = tensor_budget(file_len);
        let mut total = 0u64;
        let mut out = Vec::with_capacity(entries.len());
        for (name, t) in entries {
            let numel = t
                .checked_numel()
                .map_err(|problem| self.bad_tensor(&name, problem))?;
            total = total.saturating_add(t.out_bytes(numel));
            if total > budget {
                return Err(TorchError::format(
                    self.archive.path(),
                    F::TensorBudget {
                        key: name,
                        max: budget,
                        file_len,
                    },
                ));
            }
            let storage = self.storage(&t)?;
            let tensor = tensor::materialise(self.archive.path(), &name, &t, &storage, device)?;
            let left = pending.get_mut(&t.key).expect("counted");
            *left -= 1;
            if *left == 0 {
                self.cache.remove(&t.key);
            }
            out.push((
                name,
                CkptTensor {
                    dtype: t.dtype,
                    tensor,
                },
            ));
        }
        Ok(out)
    }

    /// The bytes of the storage `t` views, checked to hold its declared element count.
    fn storage(&mut self, t: &TensorRef) -> Result<Rc<Vec<u8>>> {
        if let Some(b) = self.cache.get(&t.key) {
            return Ok(b.clone());
        }
        let want = t
            .storage_numel
            .checked_mul(t.dtype.size())
            .ok_or_else(|| self.bad_tensor(&t.key, TensorProblem::ImpossibleSize))?;
        let b = Rc::new(self.archive.read_storage(&t.key, want)?);
        self.cache.insert(t.key.clone(), b.clone());
        Ok(b)
    }
}

/// Most bytes the tensors of a checkpoint of `file_len` bytes may take once read: 8 times
/// the file (an int8 storage becomes int64, views may share a storage), at least 256 MiB.
pub fn tensor_budget(file_len: u64) -> u64 {
    file_len.saturating_mul(8).max(256 << 20)
}

/// What the `torch_ckpt` fuzz target runs on its input (and the corpus replay test): open
/// the bytes as a checkpoint, list it and read its tensors. Must never panic or abort.
#[doc(hidden)]
pub fn fuzz_checkpoint_bytes(data: &[u8]) {
    let Ok(mut c) = Checkpoint::from_bytes("fuzz.ckpt", data.to_vec()) else {
        return;
    };
    let _ = c.top_level_keys();
    let _ = c.scalars();
    let _ = c.tensor_infos();
    let _ = c.state_dict(&Device::Cpu);
}

/// Reads the model tensors of a checkpoint (see [`Checkpoint::state_dict`]).
pub fn read_state_dict(
    path: impl AsRef<Path>,
    device: &Device,
) -> Result<Vec<(String, CkptTensor)>> {
    Checkpoint::open(path)?.state_dict(device)
}
