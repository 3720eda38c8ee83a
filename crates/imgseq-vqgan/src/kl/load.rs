//! Loading an `AutoencoderKL`: a diffusers `save_pretrained` folder (`config.json` +
//! `diffusion_pytorch_model.safetensors`) or a single `.safetensors` / `.ckpt` file under
//! diffusers' names or the original LDM (taming) names — also inside a whole Stable Diffusion
//! checkpoint (`first_stage_model.` prefix). The audit is the VQ families': every tensor the
//! model asks for must exist with its shape, and every tensor of the file must be used.

use super::config::{KlConfig, KlPreset};
use super::model::KlModel;
use crate::family::{family_of_keys, Family};
use crate::load::{default_config_path, resolve_weights};
use crate::rename::RenamedWeights;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use imgseq_core::weights::{model_error, AuditedWeights};
use imgseq_core::{Error, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The prefix of the VAE's tensors inside a whole Stable Diffusion checkpoint.
const SD_PREFIX: &str = "first_stage_model.";

/// Where the config of a model comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum KlSource {
    /// A diffusers `config.json`.
    Config(PathBuf),
    /// A preset; the quant convs are used when the weights have them.
    Preset(KlPreset),
}

/// `--config`, else `--preset`, else the `config.json` beside the weights (a diffusers
/// folder); a single file without any is an error that asks for a preset.
pub fn choose_source(
    weights: &Path,
    config: Option<&Path>,
    preset: Option<KlPreset>,
) -> Result<KlSource> {
    if let Some(c) = config {
        return Ok(KlSource::Config(c.to_path_buf()));
    }
    if let Some(p) = preset {
        return Ok(KlSource::Preset(p));
    }
    let file = resolve_weights(weights)?;
    default_config_path(&file)
        .map(KlSource::Config)
        .map_err(|_| {
            Error::invalid(format!(
            "{}: no config.json beside the weights; name it (--config) or a preset (--preset sd, \
             sdxl, sd3 or flux)",
            file.display()
        ))
        })
}

/// Every tensor of a safetensors file or torch checkpoint; a whole SD checkpoint's VAE part
/// without its prefix.
fn read_tensors(path: &Path, device: &Device) -> Result<HashMap<String, Tensor>> {
    let map = crate::load::read_all_tensors(path, device)?;
    if map.keys().any(|k| k.starts_with(SD_PREFIX)) {
        return Ok(map
            .into_iter()
            .filter_map(|(k, t)| k.strip_prefix(SD_PREFIX).map(|s| (s.to_string(), t)))
            .collect());
    }
    Ok(map)
}

/// Loads the model at `weights` (file or folder) with its config chosen by
/// [`choose_source`]. Missing tensors, wrong shapes and unused tensors (other than LDM's
/// `loss.*`) are one-line errors naming the tensor and the file.
pub fn load_kl(
    weights: &Path,
    config: Option<&Path>,
    preset: Option<KlPreset>,
    device: &Device,
) -> Result<KlModel> {
    let source = choose_source(weights, config, preset)?;
    let file = resolve_weights(weights)?;
    let map = read_tensors(&file, device)?;
    let cfg = match &source {
        KlSource::Config(c) => KlConfig::from_file(c)?,
        KlSource::Preset(p) => {
            let mut c = p.config();
            c.use_quant_conv = map.contains_key("quant_conv.weight");
            c.use_post_quant_conv = map.contains_key("post_quant_conv.weight");
            c
        }
    };
    build(&cfg, &file, map, device)
}

/// Builds the model of `cfg` from `map` (read from `path`), under the names its keys use.
pub fn build(
    cfg: &KlConfig,
    path: &Path,
    map: HashMap<String, Tensor>,
    device: &Device,
) -> Result<KlModel> {
    if map.contains_key(crate::quantize::CODEBOOK) {
        return Err(Error::weights(
            path,
            format!(
                "has a codebook (`{}`): a VQ model, not an AutoencoderKL (use `imgseq vq`)",
                crate::quantize::CODEBOOK
            ),
        ));
    }
    match family_of_keys(map.keys().map(String::as_str)) {
        Some(Family::Diffusers) => {
            let w = RenamedWeights::new(path, map, Family::Diffusers, cfg.ddconfig.ch_mult.len());
            let vb = VarBuilder::from_backend(Box::new(w.clone()), DType::F32, device.clone());
            let model = KlModel::new(cfg, vb).map_err(|e| model_error(path, e))?;
            w.finish()?;
            Ok(model)
        }
        Some(Family::Taming) => {
            let w = AuditedWeights::new(path, map);
            let model = KlModel::new(cfg, w.var_builder(DType::F32, device))
                .map_err(|e| model_error(path, e))?;
            w.finish(&crate::load::IGNORED_PREFIXES)?;
            Ok(model)
        }
        _ => Err(Error::weights(
            path,
            "no AutoencoderKL tensors (neither diffusers' `encoder.down_blocks.*` nor LDM's \
             `encoder.down.*`)",
        )),
    }
}

/// Whether the tensors (name → shape) are an `AutoencoderKL`'s: no codebook, and an encoder
/// that writes twice the channels the decoder reads (mean and log-variance). `None` if not,
/// else the naming (`diffusers` or `LDM`) and the latent channels.
pub fn kl_of_shapes<'a>(
    shapes: impl IntoIterator<Item = (&'a str, &'a [usize])>,
) -> Option<(&'static str, usize)> {
    let mut enc = None;
    let mut dec = None;
    let mut names = Vec::new();
    for (k, s) in shapes {
        let k = k.strip_prefix(SD_PREFIX).unwrap_or(k);
        if k == crate::quantize::CODEBOOK {
            return None;
        }
        match (k, s) {
            ("encoder.conv_out.weight", [o, ..]) => enc = Some(*o),
            ("decoder.conv_in.weight", [_, i, ..]) => dec = Some(*i),
            _ => {}
        }
        if k.starts_with("encoder.down") {
            names.push(k);
        }
    }
    let (e, d) = (enc?, dec?);
    if e != 2 * d {
        return None;
    }
    match family_of_keys(names) {
        Some(Family::Diffusers) => Some(("diffusers", d)),
        Some(Family::Taming) => Some(("LDM", d)),
        _ => None,
    }
}

/// [`kl_of_shapes`] of a weights file (or folder), for `weights inspect`.
pub fn is_kl_file(path: &Path) -> Result<Option<(&'static str, usize)>> {
    let s = crate::load::inspect(path)?;
    Ok(kl_of_shapes(
        s.tensors
            .iter()
            .map(|t| (t.name.as_str(), t.shape.as_slice())),
    ))
}
