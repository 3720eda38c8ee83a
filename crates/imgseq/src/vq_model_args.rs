//! What every `vq` command that runs a model shares: the model flags (`--weights`,
//! `--config`, `--precision`) and their loading, the input-size flags, gray picture output.

use anyhow::{Context, Result};
use candle_core::Device;
use clap::Args;
use imgseq_core::fsutil::Outputs;
use imgseq_core::image_io;
use imgseq_kernels::PrecisionChoice;
use imgseq_vqgan::load::default_config_path;
use imgseq_vqgan::{load_model, VqConfig, VqModel};
use std::path::{Path, PathBuf};

use crate::paths::default_model;
use crate::precision_arg::PrecisionArg;

/// Folder name of the shipped default VQGAN under `weights/`.
pub const DEFAULT_VQGAN: &str = "vqgan";
/// Which model to use.
#[derive(Args, Clone)]
pub struct ModelArgs {
    /// Weights: safetensors, taming .ckpt, LlamaGen .pt, diffusers folder or an Open-MAGVIT2
    /// .ckpt (encode, decode, roundtrip) (default: weights/vqgan).
    #[arg(long)]
    pub weights: Option<PathBuf>,
    /// Model config: config.json or taming's model.yaml (default: beside the weights).
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub precision: PrecisionArg,
    /// Run the encoder's convs in bf16 too (opt-in; AMX or AVX512-BF16 where the CPU has
    /// them): faster, but some tokens differ from the f32 encoder's — says on stderr how many
    /// of a built-in picture's tokens still agree.
    #[arg(long)]
    pub bf16_encoder: bool,
    /// Open-MAGVIT2 checkpoints: run the raw weights instead of their EMA copies.
    #[arg(long)]
    pub raw: bool,
}

/// Input preprocessing.
#[derive(Args, Clone)]
pub struct Preprocess {
    /// Input side in pixels, a multiple of the downsampling factor (default: the model's).
    #[arg(long)]
    pub size: Option<u32>,
    /// Allow enlarging images whose shorter side is smaller than --size.
    #[arg(long)]
    pub upscale: bool,
}

/// Side of colour models' inputs when --size is not given.
pub const DEFAULT_SIZE: u32 = 384;

impl Preprocess {
    /// --size, or its default for the model `cfg`: [`DEFAULT_SIZE`] for colour models, the
    /// training resolution (`ddconfig.resolution`) for gray ones.
    pub fn size_for(&self, cfg: &VqConfig) -> u32 {
        self.size.unwrap_or(if cfg.ddconfig.in_channels == 1 {
            cfg.ddconfig.resolution as u32
        } else {
            DEFAULT_SIZE
        })
    }
}

/// Writes a model's output picture: as an 8-bit gray image when `gray` (a one-channel
/// model's pictures have r = g = b), else RGB.
pub fn save_picture(path: &Path, img: &image::RgbImage, gray: bool) -> imgseq_core::Result<()> {
    if gray {
        image_io::save_image(path, &image_io::rgb_to_gray(img))
    } else {
        image_io::save_image(path, img)
    }
}

/// The shipped default model's weights, `weights/vqgan/model.safetensors` (found as
/// [`default_model`] finds any shipped model).
fn default_weights() -> Result<PathBuf> {
    let w = default_model(DEFAULT_VQGAN)
        .ok()
        .map(|d| tidy(&d.join("model.safetensors")))
        .filter(|w| w.is_file());
    w.with_context(|| {
        let looked = match std::env::var_os("IMGSEQ_WEIGHTS_DIR") {
            Some(d) if !d.is_empty() => format!(" in $IMGSEQ_WEIGHTS_DIR={}", d.to_string_lossy()),
            _ => " next to the executable or in the source tree".into(),
        };
        format!(
            "no --weights given and the default VQGAN weights \
             ({DEFAULT_VQGAN}/model.safetensors) were not found{looked}; pass --weights \
             (safetensors or taming .ckpt) or make them with `imgseq weights convert last.ckpt \
             --config model.yaml -o weights/{DEFAULT_VQGAN}/model.safetensors`"
        )
    })
}

/// Folds `a/b/../c` into `a/c` (for readable messages; no file system access).
fn tidy(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

impl ModelArgs {
    /// The files given on the command line (inputs an output must not replace).
    pub fn given(&self) -> Vec<PathBuf> {
        self.weights.iter().chain(&self.config).cloned().collect()
    }
}

/// The model `m` names and the weights file it came from (the shipped default when
/// `--weights` is absent), for reports.
pub fn load(m: &ModelArgs) -> Result<(VqModel, PathBuf)> {
    load_with(m, &mut Outputs::default())
}

/// [`load`], adding the weights and config files to the command's inputs `outs`.
pub fn load_with(m: &ModelArgs, outs: &mut Outputs) -> Result<(VqModel, PathBuf)> {
    let (model, weights, _) = load_choosing(m, outs)?;
    Ok((model, weights))
}

/// [`load_with`], also giving the precision that `--precision` resolved to and why (said on
/// stderr with `--verbose`).
pub fn load_choosing(
    m: &ModelArgs,
    outs: &mut Outputs,
) -> Result<(VqModel, PathBuf, PrecisionChoice)> {
    if m.raw {
        anyhow::bail!("--raw applies to Open-MAGVIT2 checkpoints (encode, decode, roundtrip) only");
    }
    let weights = match &m.weights {
        Some(w) => w.clone(),
        None => default_weights()?,
    };
    if imgseq_lfq::is_lfq_checkpoint(&weights) {
        anyhow::bail!(
            "{}: {} checkpoints are read by vq encode, decode, roundtrip, tokenize and eval only",
            weights.display(),
            imgseq_lfq::FAMILY
        );
    }
    // A LlamaGen `.pt` needs no config (its weights describe it); a diffusers folder has
    // its config.json inside (`--weights` may name the folder).
    let file = imgseq_vqgan::load::resolve_weights(&weights)?;
    let config = match &m.config {
        Some(c) => Some(c.clone()),
        None => default_config_path(&file).ok(),
    };
    outs.add_input(&file);
    if let Some(c) = &config {
        outs.add_input(c);
    }
    let mut model =
        load_model(&file, config.as_deref(), &Device::Cpu).map_err(|e| match (&config, e) {
            (None, imgseq_core::Error::Invalid(msg)) => anyhow::anyhow!("{msg}; pass --config"),
            (_, e) => e.into(),
        })?;
    let choice = model
        .choose_precision(m.precision.precision)
        .with_context(|| format!("{}: cannot set precision", file.display()))?;
    m.precision.report(&choice);
    if m.bf16_encoder {
        let cannot = || format!("{}: cannot run the encoder in bf16", file.display());
        let (equal, of) = model.use_bf16_encoder().with_context(cannot)?;
        eprintln!(
            "encoder: bf16 (--bf16-encoder): {equal} of {of} tokens of the built-in check \
             picture equal the f32 encoder's ({:.1}%)",
            100.0 * equal as f64 / of.max(1) as f64
        );
    }
    Ok((model, weights, choice))
}
