//! Storage element types, tensor views on storages, and turning a view's bytes into a candle
//! tensor: float storages (f32, f64, f16, bf16) become f32, integer ones i64, byte and bool
//! ones u8.

use crate::error::{FormatError, Result, TensorProblem, TorchError};
use candle_core::{DType, Device, Tensor};
use std::path::Path;

/// Element type of a torch storage (`torch.FloatStorage` → `F32`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageDType {
    F32,
    F64,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
}

impl StorageDType {
    /// The type of a `torch.<class>` storage, `None` for a class imgseq does not read.
    pub(crate) fn from_class(name: &str) -> Option<Self> {
        Some(match name {
            "FloatStorage" => Self::F32,
            "DoubleStorage" => Self::F64,
            "HalfStorage" => Self::F16,
            "BFloat16Storage" => Self::BF16,
            "LongStorage" => Self::I64,
            "IntStorage" => Self::I32,
            "ShortStorage" => Self::I16,
            "CharStorage" => Self::I8,
            "ByteStorage" | "UntypedStorage" => Self::U8,
            "BoolStorage" => Self::Bool,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::F64 | Self::I64 => 8,
            Self::F32 | Self::I32 => 4,
            Self::F16 | Self::BF16 | Self::I16 => 2,
            Self::I8 | Self::U8 | Self::Bool => 1,
        }
    }

    /// PyTorch's name for it (`float32`, ...), as printed by `imgseq weights inspect`.
    pub fn torch_name(self) -> &'static str {
        match self {
            Self::F32 => "float32",
            Self::F64 => "float64",
            Self::F16 => "float16",
            Self::BF16 => "bfloat16",
            Self::I64 => "int64",
            Self::I32 => "int32",
            Self::I16 => "int16",
            Self::I8 => "int8",
            Self::U8 => "uint8",
            Self::Bool => "bool",
        }
    }
}

/// Largest tensor a checkpoint may make us allocate.
pub const MAX_TENSOR_BYTES: usize = 16 << 30;

/// A tensor read from a checkpoint: its original dtype and the materialised candle tensor.
#[derive(Debug, Clone)]
pub struct CkptTensor {
    pub dtype: StorageDType,
    pub tensor: Tensor,
}

/// A reference to (part of) a storage, as described by `_rebuild_tensor_v2`.
#[derive(Debug, Clone)]
pub(crate) struct TensorRef {
    pub key: String,
    pub dtype: StorageDType,
    pub storage_numel: usize,
    pub offset: usize,
    pub size: Vec<usize>,
    pub stride: Vec<usize>,
}

impl TensorRef {
    /// The element count of the view, checked (with overflow checks: the sizes come from
    /// the file and may be anything) to lie inside the `storage_numel` elements its
    /// storage declares.
    pub fn checked_numel(&self) -> std::result::Result<usize, TensorProblem> {
        let numel = self
            .size
            .iter()
            .try_fold(1usize, |a, &s| a.checked_mul(s))
            .ok_or(TensorProblem::ImpossibleSize)?;
        let last = self.last_index()?;
        if numel > 0 && last >= self.storage_numel {
            return Err(TensorProblem::OutsideStorage);
        }
        Ok(numel)
    }

    /// Largest element index the view touches.
    fn last_index(&self) -> std::result::Result<usize, TensorProblem> {
        self.size
            .iter()
            .zip(&self.stride)
            .try_fold(self.offset, |a, (s, st)| {
                a.checked_add(s.saturating_sub(1).checked_mul(*st)?)
            })
            .ok_or(TensorProblem::ImpossibleStride)
    }

    /// Bytes the materialised tensor of `numel` elements takes (floats become f32, integers
    /// i64), saturating.
    pub fn out_bytes(&self, numel: usize) -> u64 {
        let es = match self.dtype {
            StorageDType::I64 | StorageDType::I32 | StorageDType::I16 | StorageDType::I8 => 8,
            StorageDType::U8 | StorageDType::Bool => 1,
            _ => 4,
        };
        (numel as u64).saturating_mul(es)
    }
}

/// Builds tensor `name` of the file at `path` from the view `t` on `storage` (the bytes of
/// storage `t.key`, at least `t.storage_numel` elements long).
pub(crate) fn materialise(
    path: &Path,
    name: &str,
    t: &TensorRef,
    storage: &[u8],
    device: &Device,
) -> Result<Tensor> {
    let es = t.dtype.size();
    let bad = |problem| {
        TorchError::format(
            path,
            FormatError::BadTensor {
                key: name.to_string(),
                problem,
            },
        )
    };
    let numel = t.checked_numel().map_err(bad)?;
    let last = t.last_index().map_err(bad)?;
    let avail = storage.len() / es;
    if numel > 0 && last >= avail {
        return Err(bad(TensorProblem::OutsideStorage));
    }
    // Views may repeat elements (stride 0); refuse absurd expansions instead of aborting
    // on allocation.
    if numel.saturating_mul(es) > MAX_TENSOR_BYTES {
        return Err(TorchError::format(
            path,
            FormatError::Limit {
                key: name.to_string(),
                max_bytes: MAX_TENSOR_BYTES,
            },
        ));
    }
    let bytes = gather(t, numel, storage)
        .ok_or_else(|| TorchError::format(path, FormatError::OutOfMemory { bytes: numel * es }))?;
    let shape = t.size.clone();
    let raw = |dt: DType| Tensor::from_raw_buffer(&bytes, dt, &shape, &Device::Cpu);
    let tensor = match t.dtype {
        StorageDType::F32 => raw(DType::F32)?,
        StorageDType::F64 => raw(DType::F64)?.to_dtype(DType::F32)?,
        StorageDType::F16 => raw(DType::F16)?.to_dtype(DType::F32)?,
        StorageDType::BF16 => raw(DType::BF16)?.to_dtype(DType::F32)?,
        StorageDType::I64 => raw(DType::I64)?,
        StorageDType::I32 => raw(DType::I32)?.to_dtype(DType::I64)?,
        StorageDType::I16 => raw(DType::I16)?.to_dtype(DType::I64)?,
        StorageDType::I8 => {
            let v: Vec<i64> = bytes.iter().map(|&b| b as i8 as i64).collect();
            Tensor::from_vec(v, shape.as_slice(), &Device::Cpu)?
        }
        StorageDType::U8 | StorageDType::Bool => raw(DType::U8)?,
    };
    Ok(tensor.to_device(device)?)
}

/// The `numel` elements of view `t`, row-major over its size, as contiguous bytes. The view
/// has been checked to lie inside `storage`.
fn gather(t: &TensorRef, numel: usize, storage: &[u8]) -> Option<Vec<u8>> {
    let es = t.dtype.size();
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(numel * es).ok()?;
    if is_contiguous(t) {
        bytes.extend_from_slice(&storage[t.offset * es..(t.offset + numel) * es]);
    } else if numel > 0 {
        let mut idx = vec![0usize; t.size.len()];
        for _ in 0..numel {
            let off = t.offset + idx.iter().zip(&t.stride).map(|(i, s)| i * s).sum::<usize>();
            bytes.extend_from_slice(&storage[off * es..(off + 1) * es]);
            for d in (0..idx.len()).rev() {
                idx[d] += 1;
                if idx[d] < t.size[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
    Some(bytes)
}

/// True when the view's strides are row-major (dimensions of size 1 may have any stride).
fn is_contiguous(t: &TensorRef) -> bool {
    let mut expect = 1;
    let mut ok = true;
    for (s, st) in t.size.iter().zip(&t.stride).rev() {
        if *s != 1 && *st != expect {
            ok = false;
        }
        expect *= s;
    }
    ok
}
