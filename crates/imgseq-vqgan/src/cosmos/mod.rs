//! NVIDIA's Cosmos image tokenizers (github.com/NVIDIA/Cosmos-Tokenizer; on the Hub as
//! `nvidia/Cosmos-Tokenizer-{DI,CI}{8x8,16x16}` and the Cosmos-0.1 / Cosmos-1.0 names): DI,
//! discrete, FSQ codes with levels [8, 8, 8, 5, 5, 5] (64,000 codes) on an H/16 × W/16 (or /8)
//! grid; CI, continuous, 16-channel latents.
//!
//! The releases are TorchScript archives only, `encoder.jit` and `decoder.jit` (plus
//! `autoencoder.jit`); their weights are read by `imgseq-torch`'s non-executing reader (the
//! archives' code is never read or run), and the network is rebuilt here from the family's
//! source:
//!
//! * [`config`]: [`CosmosConfig`], read off the archives' tensors (no config file exists).
//! * [`patching`]: the Haar wavelet patcher and unpatcher (patch 4).
//! * [`model`]: [`CosmosModel`]: encoder, `quant_conv`, FSQ ([`model::Fsq`]) or the latent,
//!   `post_quant_conv`, decoder.
//! * [`tokenizer`]: [`CosmosTokenizer`], the model at an input side as a
//!   [`imgseq_core::tokenizer::Tokenizer`].

pub mod config;
pub mod model;
pub mod patching;
pub mod tokenizer;

pub use config::CosmosConfig;
pub use model::CosmosModel;
pub use tokenizer::CosmosTokenizer;

use candle_core::{DType, Device};
use imgseq_core::weights::AuditedWeights;
use imgseq_core::{Error, Result};
use std::path::{Path, PathBuf};

/// The family's registry name.
pub const NAME: &str = "cosmos";
/// Its name as users read it.
pub const LABEL: &str = "Cosmos tokenizer";

/// The released archives' file names.
pub const ENCODER: &str = "encoder.jit";
pub const DECODER: &str = "decoder.jit";
/// The whole autoencoder's archive, beside the two (not read: its halves are the same weights).
pub const AUTOENCODER: &str = "autoencoder.jit";

/// Whether `source` names a Cosmos tokenizer by its files: a folder with `encoder.jit`, or one
/// of the released `.jit` archives (names only; nothing is read).
pub fn is_cosmos_source(source: &Path) -> bool {
    if source.is_dir() {
        return source.join(ENCODER).is_file();
    }
    let name = source.file_name().and_then(|n| n.to_str()).unwrap_or("");
    [ENCODER, DECODER, AUTOENCODER].contains(&name) && source.is_file()
}

/// The encoder and decoder archives of `source`: the folder's, or those beside the named file.
pub fn archives(source: &Path) -> Result<(PathBuf, PathBuf)> {
    let dir = if source.is_dir() {
        source.to_path_buf()
    } else {
        source
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    };
    let (enc, dec) = (dir.join(ENCODER), dir.join(DECODER));
    for f in [&enc, &dec] {
        if !f.is_file() {
            return Err(Error::format(
                source,
                format!(
                    "a Cosmos tokenizer needs `{ENCODER}` and `{DECODER}` side by side; `{}` is \
                     missing",
                    f.display()
                ),
            ));
        }
    }
    Ok((enc, dec))
}

/// A model read from files: the model and its two archives.
pub struct Loaded {
    pub model: CosmosModel,
    pub encoder: PathBuf,
    pub decoder: PathBuf,
}

/// The tensors of a TorchScript archive (weights only), audited.
fn read_archive(path: &Path, device: &Device) -> Result<AuditedWeights> {
    let c = imgseq_torch::Checkpoint::open(path)?;
    if !c.is_torchscript() {
        return Err(Error::format(
            path,
            "not a TorchScript archive (torch.jit.save); Cosmos tokenizers ship as encoder.jit / \
             decoder.jit",
        ));
    }
    let map = imgseq_torch::read_state_dict(path, device)?
        .into_iter()
        .map(|(k, t)| (k, t.tensor))
        .collect();
    Ok(AuditedWeights::new(path, map))
}

/// Loads the Cosmos image tokenizer at `source` (a folder with `encoder.jit` and
/// `decoder.jit`, or one of them). Its config is read off the tensors; missing tensors, wrong
/// shapes and unused tensors are one-line errors naming the tensor and the file.
pub fn load(source: &Path, device: &Device) -> Result<Loaded> {
    let (encoder, decoder) = archives(source)?;
    let enc = read_archive(&encoder, device)?;
    let dec = read_archive(&decoder, device)?;
    let cfg = CosmosConfig::from_weights(&enc, &dec)?;
    let model = CosmosModel::new(
        &cfg,
        enc.var_builder(DType::F32, device),
        dec.var_builder(DType::F32, device),
    )
    .map_err(|e| {
        // The message names whichever archive the failing tensor is in.
        let in_decoder = e.to_string().starts_with(&decoder.display().to_string());
        imgseq_core::weights::model_error(if in_decoder { &decoder } else { &encoder }, e)
    })?;
    // FSQ's `implicit_codebook` (all codes, precomputed) is not needed.
    enc.finish(&["quantizer.implicit_codebook"])?;
    dec.finish(&["inv_quant.quantizer.implicit_codebook"])?;
    Ok(Loaded {
        model,
        encoder,
        decoder,
    })
}
