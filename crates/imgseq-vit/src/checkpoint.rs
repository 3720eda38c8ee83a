//! Loading and saving ViT checkpoints in HF's layout: a folder with `config.json`
//! (HF `ViTConfig`) and `model.safetensors` (HF weight names). Such a folder loads in
//! `ViTForImageClassification.from_pretrained(dir)` unchanged.

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use imgseq_core::weights::model_error;
pub use imgseq_core::weights::{load_tensors, save_tensors};
use imgseq_core::{AuditedWeights, Error, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::config::ViTConfig;
use crate::model::ViTForImageClassification;

pub const CONFIG_FILE: &str = "config.json";
pub const WEIGHTS_FILE: &str = "model.safetensors";

/// Where a model's config and weights are.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    pub config: PathBuf,
    pub weights: PathBuf,
}

impl ModelFiles {
    /// `path` is a checkpoint folder, or a `.safetensors` file with `config.json` beside it.
    pub fn locate(path: &Path) -> Result<Self> {
        if path.is_dir() {
            return Ok(Self {
                config: path.join(CONFIG_FILE),
                weights: path.join(WEIGHTS_FILE),
            });
        }
        if !path.exists() {
            return Err(Error::io(
                path,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
            ));
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        Ok(Self {
            config: dir.join(CONFIG_FILE),
            weights: path.to_path_buf(),
        })
    }
}

/// Loads a classifier strictly: every tensor the model needs must be in the file with the
/// right shape, and every tensor in the file must be used.
pub fn load_classifier(
    path: &Path,
    device: &Device,
) -> Result<(ViTConfig, ViTForImageClassification)> {
    let files = ModelFiles::locate(path)?;
    let cfg = ViTConfig::load(&files.config)?;
    let weights = AuditedWeights::from_safetensors(&files.weights, device)?;
    let vb = weights.var_builder(DType::F32, device);
    let model =
        ViTForImageClassification::new(&cfg, vb).map_err(|e| model_error(&files.weights, e))?;
    weights.finish(&[])?;
    Ok((cfg, model))
}

/// Saves the variables of a training `VarMap` (HF names) and the config into `dir`.
pub fn save_classifier(dir: &Path, cfg: &ViTConfig, vars: &VarMap) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tensors: HashMap<String, Tensor> = {
        let data = vars.data().lock().expect("poisoned");
        data.iter()
            .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
            .collect()
    };
    save_tensors(dir.join(WEIGHTS_FILE), &tensors)?;
    cfg.save(dir.join(CONFIG_FILE))
}

/// HF's image-processor file: with it, `AutoImageProcessor.from_pretrained(dir)` and
/// `pipeline("image-classification", model=dir)` prepare images as imgseq does.
pub const PREPROCESSOR_FILE: &str = "preprocessor_config.json";

/// Writes `preprocessor_config.json` for HF's `ViTImageProcessor`: resize to the model's square
/// with Pillow's bilinear filter (`resample` 2, what imgseq's
/// [`resize_bilinear_pil`](imgseq_core::resample::resize_bilinear_pil) reproduces), `x/255`,
/// then `(x − mean)/std` per channel. Only models trained on whole-canvas inputs can be
/// described this way (a padded canvas is not something the processor does).
pub fn save_preprocessor_config(
    dir: &Path,
    cfg: &ViTConfig,
    normalize: &crate::data::Normalize,
) -> Result<()> {
    let c = cfg.num_channels;
    if normalize.image_mean.len() != c || normalize.image_std.len() != c {
        return Err(Error::invalid(format!(
            "{}: mean/std have {}/{} values for a {c}-channel model",
            dir.display(),
            normalize.image_mean.len(),
            normalize.image_std.len()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let value = serde_json::json!({
        "image_processor_type": "ViTImageProcessor",
        "do_resize": true,
        "size": {"height": cfg.image_size, "width": cfg.image_size},
        "resample": 2,
        "do_rescale": true,
        "rescale_factor": 1.0f64 / 255.0,
        "do_normalize": true,
        "image_mean": normalize.image_mean,
        "image_std": normalize.image_std,
    });
    imgseq_core::fsutil::write_json(dir.join(PREPROCESSOR_FILE), &value)
}
