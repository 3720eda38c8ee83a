//! `imgseq weights convert`: a checkpoint of any VQ family (taming `.ckpt`, LlamaGen `.pt`,
//! diffusers folders, Janus, IBQ's EMA weights) → our `model.safetensors` + `config.json`
//! (and taming's `model.yaml` on request), the model built once to prove the files load.

use crate::config::VqConfig;
use crate::family::Family;
use crate::load::{
    build_named, default_config_path, describe, is_torch_checkpoint, resolve_weights, shapes_of,
    Described, IGNORED_PREFIXES,
};
use crate::rename::{self, RenamedWeights};
use candle_core::{DType, Device};
use imgseq_core::{Error, Result};
use imgseq_torch::lightning::WeightSet;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What [`convert_checkpoint`] wrote.
#[derive(Debug, Clone)]
pub struct ConvertReport {
    pub config_path: PathBuf,
    /// taming's `model.yaml`, when [`ConvertOptions::taming_yaml`] asked for it.
    pub yaml_path: Option<PathBuf>,
    pub written: usize,
    pub dropped: usize,
    pub params: usize,
    /// The family of the model (recorded in the written config's `variant`).
    pub family: Family,
    /// Whether the codebook was written l2-normalised ([`ConvertOptions::fold_l2_norm`]).
    pub folded_l2_norm: bool,
}

/// The files [`convert_checkpoint`] writes beside `output`: (`config.json`, `model.yaml`).
pub fn convert_outputs(output: &Path) -> (PathBuf, PathBuf) {
    let dir = output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    (dir.join("config.json"), dir.join("model.yaml"))
}

/// How [`convert_checkpoint`] may change the model on the way (all off by default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConvertOptions {
    /// Store the codebook l2-normalised and clear the config's `l2_norm`
    /// ([`fold_l2_norm`]); the input must have `l2_norm`.
    pub fold_l2_norm: bool,
    /// Also write taming's `model.yaml` beside the output
    /// ([`VqConfig::to_taming_yaml_string`]); the model must be one taming's code builds.
    pub taming_yaml: bool,
}

/// An l2-normalised codebook search (LlamaGen's `codebook_l2_norm`, imgseq's photo VQGAN)
/// rewritten as a plain one, in place: every row of `codebook` (n_embed, embed_dim) divided
/// by its length.
///
/// Why the tokens stay the same: with unit entries, taming's ‖z‖² + ‖e‖² − 2·z·e =
/// ‖z‖² + 1 − 2·z·e is least for the entry with the largest z·e, which is the entry nearest
/// to z/‖z‖ — the l2 search's answer (cdist's √ of the same expression is monotone, so the
/// same holds there). And the decoder gets the normalised entry either way. So the folded
/// model, with `l2_norm` false, tokenizes and decodes like the original — up to float
/// rounding in near-ties — and is a plain model that taming's own `VectorQuantizer` runs.
pub fn fold_l2_norm(codebook: &candle_core::Tensor) -> Result<candle_core::Tensor> {
    let dt = codebook.dtype();
    let rows = codebook.to_dtype(DType::F32)?;
    Ok(crate::quantize::l2_normalize_rows(&rows)?.to_dtype(dt)?)
}

/// Converts a taming `.ckpt`, a LlamaGen `.pt` / `model.safetensors`, a diffusers
/// `VQModel` or an imgseq run's `model.safetensors` to safetensors in our layout (taming's
/// names) holding only the model tensors (`loss.*` and the family's ignored tensors dropped)
/// in their original dtype, plus our `config.json` beside the output (with the family's
/// `variant`) and, when asked, taming's `model.yaml`. The model is built from the input
/// first, so an input that does not fit its config is an error and nothing is written.
/// Every file is written atomically.
pub fn convert_checkpoint(
    input: &Path,
    config: Option<&Path>,
    output: &Path,
    options: ConvertOptions,
) -> Result<ConvertReport> {
    let input = &resolve_weights(input)?;
    let cfg_path = match config {
        Some(c) => Some(c.to_path_buf()),
        None => default_config_path(input).ok(),
    };
    let stored = read_stored(input)?;
    let map: HashMap<String, candle_core::Tensor> = stored
        .iter()
        .map(|(k, t, _)| (k.clone(), t.clone()))
        .collect();
    let d = describe(input, cfg_path.as_deref(), &shapes_of(&map))?;
    build_named(&d, input, map.clone(), WeightSet::Default, &Device::Cpu)?;
    let stored = crate::ibq::model_weights_of(&d.config, input, stored, WeightSet::Default)?;
    let (mut keep, params, dropped) = kept_tensors(&d, input, &stored, map)?;
    let mut config = d.config;
    if options.fold_l2_norm {
        fold_codebook(&mut config, &mut keep, input)?;
    }
    let yaml = match options.taming_yaml {
        false => None,
        true => Some(config.to_taming_yaml_string().map_err(|why| {
            Error::invalid(format!(
                "{}: taming's code cannot build this model for a model.yaml: {why}",
                input.display()
            ))
        })?),
    };
    keep.sort_by(|a, b| a.0.cmp(&b.0));
    let bytes = serialize_converted(&keep, &config, output)?;
    let (cfg_out, yaml_out) = convert_outputs(output);
    imgseq_core::fsutil::write_bytes_atomic(output, &bytes)?;
    imgseq_core::fsutil::write_bytes_atomic(&cfg_out, config.to_json_string().as_bytes())?;
    let yaml_path = match yaml {
        Some(y) => {
            imgseq_core::fsutil::write_bytes_atomic(&yaml_out, y.as_bytes())?;
            Some(yaml_out)
        }
        None => None,
    };
    Ok(ConvertReport {
        config_path: cfg_out,
        yaml_path,
        written: keep.len(),
        dropped,
        params,
        family: config.variant.family,
        folded_l2_norm: options.fold_l2_norm,
    })
}

/// A tensor as stored: name, values, and the dtype it is written back in (torch's half
/// storages, read as f32) or `None` for its own.
type StoredTensor = (String, candle_core::Tensor, Option<DType>);

/// A tensor of the converted file: our name and its values in the stored dtype.
type KeptTensor = (String, candle_core::Tensor);

/// The input's tensors in their stored dtypes.
fn read_stored(input: &Path) -> Result<Vec<StoredTensor>> {
    let mut stored: Vec<StoredTensor> = Vec::new();
    if is_torch_checkpoint(input) {
        let mut c = imgseq_torch::Checkpoint::open(input)?;
        for (k, t) in c.state_dict(&Device::Cpu)? {
            let dt = match t.dtype {
                imgseq_torch::StorageDType::F16 => Some(DType::F16),
                imgseq_torch::StorageDType::BF16 => Some(DType::BF16),
                _ => None,
            };
            stored.push((k, t.tensor, dt));
        }
    } else {
        for (k, t) in imgseq_core::weights::load_tensors(input, &Device::Cpu)? {
            stored.push((k, t, None));
        }
    }
    Ok(crate::janus::vq_part_of(stored))
}

/// The model tensors under our names in their stored dtypes, their parameter count and how
/// many input tensors were dropped.
fn kept_tensors(
    d: &Described,
    input: &Path,
    stored: &[StoredTensor],
    map: HashMap<String, candle_core::Tensor>,
) -> Result<(Vec<KeptTensor>, usize, usize)> {
    let target: HashMap<&str, Option<DType>> =
        stored.iter().map(|(k, _, dt)| (k.as_str(), *dt)).collect();
    let mut keep = Vec::new();
    let mut params = 0;
    let dropped;
    match d.names {
        Family::Taming | Family::Ibq => {
            let mut n = 0;
            for (k, t, dt) in stored {
                if IGNORED_PREFIXES.iter().any(|p| k.starts_with(p)) {
                    n += 1;
                    continue;
                }
                params += t.elem_count();
                keep.push((k.clone(), t.to_dtype(dt.unwrap_or(t.dtype()))?));
            }
            dropped = n;
        }
        f => {
            let names = rename::model_tensor_names(&d.config)?;
            let levels = d.config.ddconfig.ch_mult.len();
            let w = RenamedWeights::new(input, map, f, levels);
            let ours = w.renamed(&names)?;
            dropped = stored.len() - ours.len();
            for (k, src, t) in ours {
                let dt = target.get(src.as_str()).copied().flatten();
                params += t.elem_count();
                let dt = dt.unwrap_or(t.dtype());
                keep.push((k, t.to_dtype(dt)?));
            }
        }
    }
    Ok((keep, params, dropped))
}

/// `--fold-l2-norm`: the codebook normalised in place and the config's `l2_norm` cleared.
fn fold_codebook(config: &mut VqConfig, keep: &mut [KeptTensor], input: &Path) -> Result<()> {
    if !config.variant.l2_norm {
        let msg = "cannot fold the l2 normalisation: the model's codes are not l2-normalised \
                   (its config has no `l2_norm`)";
        return Err(Error::invalid(format!("{}: {msg}", input.display())));
    }
    let Some((_, cb)) = keep
        .iter_mut()
        .find(|(k, _)| k == crate::quantize::CODEBOOK)
    else {
        let msg = format!("no `{}` tensor to fold", crate::quantize::CODEBOOK);
        return Err(Error::format(input, msg));
    };
    *cb = fold_l2_norm(cb)?;
    config.variant.l2_norm = false;
    Ok(())
}

/// The converted file's bytes: the tensors sorted by name, with taming's metadata.
fn serialize_converted(keep: &[KeptTensor], config: &VqConfig, output: &Path) -> Result<Vec<u8>> {
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    meta.insert(
        "source".to_string(),
        format!(
            "{}, converted by imgseq",
            match config.variant.family {
                Family::Taming => "taming-transformers VQGAN",
                f => f.label(),
            }
        ),
    );
    let bytes = safetensors::serialize(keep.iter().map(|(k, t)| (k.as_str(), t)), Some(meta))
        .map_err(|e| Error::format(output, format!("cannot serialise safetensors ({e})")))?;
    Ok(bytes)
}
