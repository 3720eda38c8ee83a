//! Loading a [`VqModel`] from safetensors (+ `config.json`) or a taming `.ckpt`
//! (+ `model.yaml` or `config.json`), with strict key checks.

use crate::config::VqConfig;
use crate::model::VqModel;
use candle_core::{DType, Device};
use imgseq_core::weights::model_error;
use imgseq_core::{AuditedWeights, Error, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Prefix of the training-only tensors (LPIPS, discriminator) in taming checkpoints.
pub const IGNORED_PREFIXES: [&str; 1] = ["loss."];

/// True when the file looks like a torch zip checkpoint (by magic, then by extension).
pub fn is_torch_checkpoint(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    if let Ok(mut f) = std::fs::File::open(path) {
        use std::io::Read;
        if f.read_exact(&mut magic).is_ok() {
            return &magic == b"PK\x03\x04";
        }
    }
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("ckpt" | "pt" | "pth" | "bin")
    )
}

/// Reads every tensor of a safetensors file or a torch checkpoint's state dict.
pub fn load_weights(path: impl AsRef<Path>, device: &Device) -> Result<AuditedWeights> {
    let path = path.as_ref();
    if is_torch_checkpoint(path) {
        let sd = imgseq_torch::read_state_dict(path, device)?;
        let map: HashMap<String, _> = sd.into_iter().map(|(k, t)| (k, t.tensor)).collect();
        Ok(AuditedWeights::new(path, map))
    } else {
        AuditedWeights::from_safetensors(path, device)
    }
}

/// The config that belongs to a weights file `DIR/NAME.ext` when none is given, the first of
/// `DIR/NAME_config.json`, `DIR/config.json`, `DIR/NAME_model.yaml`, `DIR/model.yaml`.
pub fn default_config_path(weights: &Path) -> Result<PathBuf> {
    let dir = weights
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let stem = weights
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let names = [
        format!("{stem}_config.json"),
        "config.json".to_string(),
        format!("{stem}_model.yaml"),
        "model.yaml".to_string(),
    ];
    for name in &names {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(Error::invalid(format!(
        "{}: no config.json or model.yaml beside the weights; name the model's config file",
        weights.display()
    )))
}

/// Builds the model from `weights` with `config` (or the config found beside the weights).
/// Missing tensors, wrong shapes and unexpected tensors (other than `loss.*`) are errors.
pub fn load_model(
    weights: impl AsRef<Path>,
    config: Option<&Path>,
    device: &Device,
) -> Result<VqModel> {
    let weights = weights.as_ref();
    let cfg_path = match config {
        Some(c) => c.to_path_buf(),
        None => default_config_path(weights)?,
    };
    let cfg = VqConfig::from_file(&cfg_path)?;
    let w = load_weights(weights, device)?;
    build(&cfg, &w, device)
}

/// Builds the model from already loaded weights and checks that all were used.
pub fn build(cfg: &VqConfig, w: &AuditedWeights, device: &Device) -> Result<VqModel> {
    let vb = w.var_builder(DType::F32, device);
    let model = VqModel::new(cfg, vb).map_err(|e| model_error(w.path(), e))?;
    w.finish(&IGNORED_PREFIXES)?;
    Ok(model)
}

/// One tensor of a weights file, as listed by `imgseq weights inspect`.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// PyTorch-style dtype name (`float32`, `float16`, `bfloat16`, `int64`, ...).
    pub dtype: String,
    pub shape: Vec<usize>,
}

impl TensorInfo {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A summary of a weights file: its tensors (sorted by name) and, for checkpoints, the
/// top-level scalars (`epoch`, `global_step`, ...) and keys.
#[derive(Debug, Clone, Default)]
pub struct WeightsSummary {
    pub format: &'static str,
    pub tensors: Vec<TensorInfo>,
    pub scalars: Vec<(String, String)>,
    pub top_level_keys: Vec<String>,
}

fn candle_dtype_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::F64 => "float64",
        DType::I64 => "int64",
        DType::I32 => "int32",
        DType::I16 => "int16",
        DType::U32 => "uint32",
        DType::U8 => "uint8",
        _ => "other",
    }
}

/// Lists the tensors of a safetensors file or torch checkpoint without building a model
/// (checkpoint tensor data is not read).
pub fn inspect(path: impl AsRef<Path>) -> Result<WeightsSummary> {
    let path = path.as_ref();
    let mut s = if is_torch_checkpoint(path) {
        let c = imgseq_torch::Checkpoint::open(path)?;
        WeightsSummary {
            format: "PyTorch checkpoint (zip)",
            tensors: c
                .tensor_infos()?
                .into_iter()
                .map(|(name, dt, shape)| TensorInfo {
                    name,
                    dtype: dt.torch_name().into(),
                    shape,
                })
                .collect(),
            scalars: c.scalars(),
            top_level_keys: c.top_level_keys(),
        }
    } else {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let st = candle_core::safetensors::SliceSafetensors::new(&bytes)
            .map_err(|e| Error::format(path, format!("not a valid safetensors file ({e})")))?;
        let tensors = st
            .tensors()
            .into_iter()
            .map(|(name, v)| {
                let dtype = DType::try_from(v.dtype())
                    .map(candle_dtype_name)
                    .unwrap_or("other");
                TensorInfo {
                    name,
                    dtype: dtype.into(),
                    shape: v.shape().to_vec(),
                }
            })
            .collect();
        WeightsSummary {
            format: "safetensors",
            tensors,
            ..Default::default()
        }
    };
    s.tensors.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(s)
}

/// What [`convert_checkpoint`] wrote.
#[derive(Debug, Clone)]
pub struct ConvertReport {
    pub config_path: PathBuf,
    pub written: usize,
    pub dropped: usize,
    pub params: usize,
}

/// Converts a taming `.ckpt` to safetensors holding only the model tensors (`loss.*` and any
/// other training-only keys dropped) in their original dtype, plus `config.json` beside the
/// output. The model is built from the checkpoint first, so a checkpoint that does not fit
/// the config is an error and nothing is written. Both files are written atomically.
pub fn convert_checkpoint(
    input: &Path,
    config: Option<&Path>,
    output: &Path,
) -> Result<ConvertReport> {
    let cfg_path = match config {
        Some(c) => c.to_path_buf(),
        None => default_config_path(input)?,
    };
    let cfg = VqConfig::from_file(&cfg_path)?;
    let mut c = imgseq_torch::Checkpoint::open(input)?;
    let sd = c.state_dict(&Device::Cpu)?;
    let map: HashMap<String, candle_core::Tensor> = sd
        .iter()
        .map(|(k, t)| (k.clone(), t.tensor.clone()))
        .collect();
    build(&cfg, &AuditedWeights::new(input, map), &Device::Cpu)?;
    let mut keep = Vec::new();
    let mut dropped = 0;
    let mut params = 0;
    for (k, t) in sd {
        if IGNORED_PREFIXES.iter().any(|p| k.starts_with(p)) {
            dropped += 1;
            continue;
        }
        let dt = match t.dtype {
            imgseq_torch::StorageDType::F16 => DType::F16,
            imgseq_torch::StorageDType::BF16 => DType::BF16,
            _ => t.tensor.dtype(),
        };
        params += t.tensor.elem_count();
        keep.push((k, t.tensor.to_dtype(dt)?));
    }
    keep.sort_by(|a, b| a.0.cmp(&b.0));
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    meta.insert(
        "source".to_string(),
        "taming-transformers VQGAN, converted by imgseq".to_string(),
    );
    let bytes = safetensors::serialize(keep.iter().map(|(k, t)| (k.as_str(), t)), Some(meta))
        .map_err(|e| Error::format(output, format!("cannot serialise safetensors ({e})")))?;
    let cfg_out = output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join("config.json");
    imgseq_core::fsutil::write_bytes_atomic(output, &bytes)?;
    imgseq_core::fsutil::write_bytes_atomic(&cfg_out, cfg.to_json_string().as_bytes())?;
    Ok(ConvertReport {
        config_path: cfg_out,
        written: keep.len(),
        dropped,
        params,
    })
}
