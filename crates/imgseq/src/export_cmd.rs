//! `imgseq export ...`: tokens in the layouts other projects' training code reads.

use crate::vq_model_args::ModelArgs;
use anyhow::Result;
use clap::{Args, Subcommand};
use imgseq_core::fsutil::Outputs;
use imgseq_shards::llamagen_codes::{self, Options};
use std::path::PathBuf;

/// `imgseq export` (docs/tokenize-a-dataset.md, "Codes for LlamaGen's training").
#[derive(Subcommand)]
pub enum ExportCmd {
    /// An ImageFolder's codes and labels as LlamaGen's extract_codes_c2i.py writes them:
    /// {dataset}{size}_codes/{i}.npy (1, augmentations, tokens) int64 and
    /// {dataset}{size}_labels/{i}.npy (1,) int64; resumable
    LlamagenCodes(LlamagenArgs),
    /// An ImageFolder's tokens as RAR's and TiTok's pretokenization.py writes them:
    /// pretokenized.jsonl, one {"class_id", "tokens"} line per view (the ADM crop and its
    /// flip, or ten crops); resumable
    RarTokens(RarArgs),
}

/// `export rar-tokens`' flags.
#[derive(Args)]
pub struct RarArgs {
    /// An ImageFolder: one folder per class, images inside (torchvision's order and labels).
    folder: PathBuf,
    #[command(flatten)]
    model: ModelArgs,
    /// Input side in pixels (the script's --img_size; default: the model's).
    #[arg(long)]
    size: Option<u32>,
    /// Ten crops of a 1.1× larger centre crop (the script's --ten_crop) instead of the crop
    /// and its horizontal flip.
    #[arg(long)]
    ten_crop: bool,
    /// Output folder (the script's --cached_path): pretokenized.jsonl goes there.
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
}

/// `export llamagen-codes`' flags.
#[derive(Args)]
pub struct LlamagenArgs {
    /// An ImageFolder: one folder per class, images inside (torchvision's order and labels).
    folder: PathBuf,
    #[command(flatten)]
    model: ModelArgs,
    /// Input side in pixels (LlamaGen's --image-size; default: the model's).
    #[arg(long)]
    size: Option<u32>,
    /// Ten crops of a crop-range× larger centre crop (LlamaGen's --ten-crop) instead of the
    /// crop and its horizontal flip.
    #[arg(long)]
    ten_crop: bool,
    /// The larger crop's side over --size, with --ten-crop (LlamaGen's --crop-range).
    #[arg(long, default_value_t = 1.1)]
    crop_range: f64,
    /// The name before the size in the folder names (LlamaGen's --dataset).
    #[arg(long, default_value = "imagenet")]
    dataset: String,
    /// Output folder (LlamaGen's --code-path).
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
}

pub fn run(c: ExportCmd) -> Result<()> {
    match c {
        ExportCmd::LlamagenCodes(a) => llamagen(&a),
        ExportCmd::RarTokens(a) => rar(&a),
    }
}

fn rar(a: &RarArgs) -> Result<()> {
    let mut outs = Outputs::new(std::iter::once(&a.folder).chain(&a.model.given()));
    let t = a.model.open(a.size, &mut outs)?;
    let r = imgseq_shards::rar_tokens::export(&t, &a.folder, &a.output, a.ten_crop, true)?;
    println!(
        "{} images of {} classes: {} encoded now ({} lines), {} done before; wrote {}",
        r.images,
        r.classes,
        r.written,
        r.lines,
        r.images - r.written,
        r.file.display()
    );
    Ok(())
}

fn llamagen(a: &LlamagenArgs) -> Result<()> {
    let mut outs = Outputs::new(std::iter::once(&a.folder).chain(&a.model.given()));
    let t = a.model.open(a.size, &mut outs)?;
    let o = Options {
        dataset: a.dataset.clone(),
        ten_crop: a.ten_crop,
        crop_range: a.crop_range,
    };
    let r = llamagen_codes::export(&t, &a.folder, &a.output, &o, true)?;
    println!(
        "{} images of {} classes: {} written, {} already there",
        r.images, r.classes, r.written, r.skipped
    );
    println!(
        "wrote {} and {}",
        r.codes_dir.display(),
        r.labels_dir.display()
    );
    Ok(())
}
