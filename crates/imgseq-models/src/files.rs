//! Weights files as files (`imgseq weights inspect | convert`): every tensor listed with the
//! family its names belong to, and a VQ checkpoint converted to our safetensors layout. The
//! family is told here, beside the loader's own detection, so that the command line names
//! none.

use imgseq_core::{Error, Result};
use std::path::{Path, PathBuf};

pub use imgseq_vqgan::load::{ConvertOptions, ConvertReport, TensorInfo, WeightsSummary};

/// A weights file's tensors, scalars and top-level keys, and the family its tensor names
/// belong to in words (`None` when they match none).
pub fn inspect(path: &Path) -> Result<(WeightsSummary, Option<String>)> {
    let s = imgseq_vqgan::load::inspect(path)?;
    let names = || s.tensors.iter().map(|t| t.name.as_str());
    let kl = imgseq_vqgan::kl::load::kl_of_shapes(
        s.tensors
            .iter()
            .map(|t| (t.name.as_str(), t.shape.as_slice())),
    );
    // Open-MAGVIT2's names overlap taming's (`encoder.conv_in`): its own marker comes first.
    let dcae_config = imgseq_vqgan::dcae::config_beside(path);
    let family = if imgseq_vqgan::cosmos::is_cosmos_source(path) {
        Some(imgseq_vqgan::cosmos::LABEL.to_string())
    } else if imgseq_vqgan::dcae::is_dcae_config_file(&dcae_config) {
        Some(imgseq_vqgan::dcae::LABEL.to_string())
    } else if imgseq_lfq::load::names_are_lfq(names()) {
        Some(imgseq_lfq::FAMILY.to_string())
    } else if let Some((naming, c)) = kl {
        let class = match names().any(|n| n == "bn.running_mean") {
            true => "AutoencoderKLFlux2",
            false => "AutoencoderKL",
        };
        Some(format!("{class} ({naming} names, {c} latent channels)"))
    } else {
        s.family.map(|f| f.label().to_string())
    };
    Ok((s, family))
}

/// The files a conversion to `output` writes: the weights, `config.json` beside them and
/// (on request) taming's `model.yaml`.
pub fn convert_outputs(output: &Path) -> (PathBuf, PathBuf) {
    imgseq_vqgan::load::convert_outputs(output)
}

/// The weights file and config a conversion of `input` reads (for the caller's output
/// checks); what cannot be resolved is left out (the conversion then says why).
pub fn convert_inputs(input: &Path, config: Option<&Path>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::iter::once(input)
        .chain(config)
        .map(Path::to_path_buf)
        .collect();
    if let Ok(file) = imgseq_vqgan::load::resolve_weights(input) {
        if config.is_none() {
            out.extend(imgseq_vqgan::load::default_config_path(&file).ok());
        }
        out.push(file);
    }
    out
}

/// Converts a VQ checkpoint (taming `.ckpt`, LlamaGen `.pt`, a diffusers or Janus folder,
/// IBQ's EMA weights) to `output` + `config.json`; the label of the family it was. An
/// Open-MAGVIT2 checkpoint is refused: it is read as it is.
pub fn convert(
    input: &Path,
    config: Option<&Path>,
    output: &Path,
    opts: ConvertOptions,
) -> Result<(ConvertReport, &'static str)> {
    if imgseq_lfq::is_lfq_checkpoint(input) {
        return Err(Error::invalid(format!(
            "{}: an {} checkpoint is read as it is (`imgseq encode|decode|roundtrip --model {}`); \
             convert does not take it",
            input.display(),
            imgseq_lfq::FAMILY,
            input.display()
        )));
    }
    let r = imgseq_vqgan::load::convert_checkpoint(input, config, output, opts)?;
    let label = r.family.label();
    Ok((r, label))
}

/// The codebook size of the model whose files are `weights` and/or `config`, read without
/// building the model: a config file's (our JSON, taming's or IBQ's yaml), an Open-MAGVIT2
/// checkpoint's (2^latent channels), or a VQ model's — the config beside its weights, else its
/// codebook tensor (a LlamaGen `.pt` has no config). `None` when neither is given.
pub fn codebook_size(weights: Option<&Path>, config: Option<&Path>) -> Result<Option<usize>> {
    Ok(match (config, weights) {
        (Some(c), _) => Some(imgseq_vqgan::VqConfig::from_file(c)?.n_embed),
        (None, Some(w)) if imgseq_lfq::is_lfq_checkpoint(w) => {
            Some(imgseq_lfq::load::codebook_size(w)?)
        }
        (None, Some(w)) => Some(
            imgseq_vqgan::load::codebook_size(w)
                .map_err(|e| Error::invalid(format!("{e}; pass --config")))?,
        ),
        (None, None) => None,
    })
}
