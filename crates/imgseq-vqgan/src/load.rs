//! Loading a [`VqModel`] from safetensors (+ `config.json`) or a taming `.ckpt`
//! (+ `model.yaml` or `config.json`), with strict key checks.

use crate::ckpt;
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
        let sd = ckpt::read_state_dict(path, device)?;
        let map: HashMap<String, _> = sd.into_iter().map(|(k, t)| (k, t.tensor)).collect();
        Ok(AuditedWeights::new(path, map))
    } else {
        AuditedWeights::from_safetensors(path, device)
    }
}

/// The config that belongs to a weights file when none is given: `config.json` beside it,
/// else `model.yaml` beside it.
pub fn default_config_path(weights: &Path) -> Result<PathBuf> {
    let dir = weights
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    for name in ["config.json", "model.yaml"] {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(Error::invalid(format!(
        "{}: no config.json or model.yaml beside the weights; pass --config",
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
