//! Model folders in HF's layout: `config.json` ([`GptConfig`]) + `model.safetensors` with
//! `GPT2LMHeadModel`'s names. `lm_head.weight` is not stored when tied to `wte` (as HF's
//! `save_pretrained`), so `GPT2LMHeadModel.from_pretrained(dir)` loads the folder unchanged.

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use imgseq_core::weights::{load_tensors, model_error, save_tensors};
use imgseq_core::{AuditedWeights, Error, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::config::GptConfig;
use crate::model::Gpt2LMHeadModel;

pub const CONFIG_FILE: &str = "config.json";
pub const WEIGHTS_FILE: &str = "model.safetensors";

/// Where a model's config and weights are: a folder, or a `.safetensors` file with
/// `config.json` beside it.
pub fn locate(path: &Path) -> Result<(PathBuf, PathBuf)> {
    if path.is_dir() {
        return Ok((path.join(CONFIG_FILE), path.join(WEIGHTS_FILE)));
    }
    if !path.exists() {
        return Err(Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
        ));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    Ok((dir.join(CONFIG_FILE), path.to_path_buf()))
}

/// Whether `name` is one of the attention-mask buffers older HF GPT-2 files carry
/// (`h.{i}.attn.bias` (1, 1, n, n), `h.{i}.attn.masked_bias`): constants, not weights.
fn is_mask_buffer(name: &str) -> bool {
    name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias")
}

/// The tensors of a GPT-2 safetensors file under `GPT2LMHeadModel` names: mask buffers are
/// dropped and the bare `GPT2Model` names of the original `gpt2` files (`wte.weight`, `h.0...`)
/// get the `transformer.` prefix.
pub fn read_weights(path: &Path, device: &Device) -> Result<AuditedWeights> {
    let raw = load_tensors(path, device)?;
    let bare = raw.keys().any(|k| k.starts_with("wte."));
    let tensors: HashMap<String, Tensor> = raw
        .into_iter()
        .filter(|(k, _)| !is_mask_buffer(k))
        .map(|(k, v)| {
            if bare && !k.starts_with("lm_head.") {
                (format!("transformer.{k}"), v)
            } else {
                (k, v)
            }
        })
        .collect();
    Ok(AuditedWeights::new(path, tensors))
}

/// Loads a model strictly: every tensor the model needs must be in the file with the right
/// shape, and every tensor in the file must be used (a tied `lm_head.weight` equal to `wte`
/// is accepted).
pub fn load(path: &Path, device: &Device) -> Result<(GptConfig, Gpt2LMHeadModel)> {
    let (config, weights) = locate(path)?;
    let cfg = GptConfig::load(&config)?;
    let w = read_weights(&weights, device)?;
    let vb = w.var_builder(DType::F32, device);
    let model = Gpt2LMHeadModel::new(&cfg, vb).map_err(|e| model_error(&weights, e))?;
    if cfg.tie_word_embeddings && w.shapes().contains_key("lm_head.weight") {
        let head = w.get("lm_head.weight")?;
        let same = head.dims() == model.wte.dims()
            && (head.to_dtype(DType::F32)? - &model.wte)?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?
                == 0.0;
        if !same {
            return Err(Error::weights(
                &weights,
                "lm_head.weight differs from transformer.wte.weight but the config ties them",
            ));
        }
    }
    w.finish(&[])?;
    Ok((cfg, model))
}

/// The tensors of a training `VarMap` as they are saved (HF names; the tied head is `wte`).
pub fn var_tensors(vars: &VarMap) -> HashMap<String, Tensor> {
    let data = vars.data().lock().expect("poisoned");
    data.iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
        .collect()
}

/// Writes `config.json` and `model.safetensors` into `dir` (each atomically).
pub fn save(dir: &Path, cfg: &GptConfig, tensors: &HashMap<String, Tensor>) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    save_tensors(dir.join(WEIGHTS_FILE), tensors)?;
    cfg.save(dir.join(CONFIG_FILE))
}

/// Parameter count of a model's tensors.
pub fn param_count(tensors: &HashMap<String, Tensor>) -> usize {
    tensors.values().map(|t| t.elem_count()).sum()
}
