//! DC-AE: diffusers' `AutoencoderDC` (the deep-compression autoencoder of SANA: f32 to f128,
//! e.g. `dc-ae-f32c32-sana-1.0`) as a tokenizer of continuous latents.
//!
//! * [`config`]: [`DcaeConfig`], diffusers' arguments from the folder's `config.json`.
//! * [`model`]: [`DcaeModel`], the encoder and decoder module by module (ResBlocks,
//!   EfficientViT blocks with multi-scale ReLU linear attention, pixel-(un)shuffle blocks).
//! * [`tokenizer`]: [`DcaeTokenizer`]: per image the latent `· scaling_factor` (what SANA's
//!   pipeline feeds its transformer) as a map (C, h, w) or as p×p patch tokens.
//! * [`load`]: a `save_pretrained` folder (or its weights file with the config beside it),
//!   with the weights audit of the other families.

pub mod config;
pub mod model;
pub mod tokenizer;

pub use config::DcaeConfig;
pub use model::DcaeModel;
pub use tokenizer::DcaeTokenizer;

use candle_core::{DType, Device};
use imgseq_core::weights::AuditedWeights;
use imgseq_core::Result;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The family's registry name.
pub const NAME: &str = "autoencoder_dc";
/// Its name as users read it.
pub const LABEL: &str = "AutoencoderDC (DC-AE)";

pub use crate::load::config_beside;

/// Whether `path` is a JSON config whose `_class_name` is `AutoencoderDC`.
pub fn is_dcae_config_file(path: &Path) -> bool {
    path.is_file()
        && crate::load::read_config(path)
            .is_ok_and(|v| v.get("_class_name").and_then(Value::as_str) == Some(config::CLASS))
}

/// A model read from files: the model, its weights file and its config file.
pub struct Loaded {
    pub model: DcaeModel,
    pub weights: PathBuf,
    pub config: PathBuf,
}

/// Loads the `AutoencoderDC` at `source` (a folder or its weights file) with `config`
/// (default: `config.json` beside it). Missing tensors, wrong shapes and unused tensors are
/// one-line errors naming the tensor and the file.
pub fn load(source: &Path, config: Option<&Path>, device: &Device) -> Result<Loaded> {
    let weights = crate::load::resolve_weights(source)?;
    let config = config.map_or_else(|| config_beside(source), Path::to_path_buf);
    let v = crate::load::read_config(&config)?;
    let cfg = DcaeConfig::from_json(&v, &config)?;
    let map = crate::load::read_all_tensors(&weights, device)?;
    let w = AuditedWeights::new(&weights, map);
    let model = DcaeModel::new(&cfg, w.var_builder(DType::F32, device))
        .map_err(|e| imgseq_core::weights::model_error(&weights, e))?;
    w.finish(&[])?;
    Ok(Loaded {
        model,
        weights,
        config,
    })
}
