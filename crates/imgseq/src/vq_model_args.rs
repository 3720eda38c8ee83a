//! What every command that runs a tokenizer shares: the model flags (`--model`/`--weights`,
//! `--config`, `--precision`, `--bf16-encoder`, `--raw`; a VAE's `--preset`, `--patch`,
//! `--sample-seed`, `--tile`) and opening the model through the loader, the input-size flags,
//! gray picture output.

use anyhow::Result;
use clap::Args;
use imgseq_core::fsutil::Outputs;
use imgseq_core::image_io;
use imgseq_models::{OpenOptions, Opened};
use std::path::{Path, PathBuf};

use crate::precision_arg::PrecisionArg;

/// Which model to use.
#[derive(Args, Clone)]
pub struct ModelArgs {
    /// The model: a weights file or folder of any family the loader reads — taming .ckpt or
    /// safetensors, LlamaGen .pt, a diffusers or Janus folder, IBQ or Open-MAGVIT2 .ckpt, VAR's
    /// .pth, a Chameleon VQ or Emu3 VQ folder, a CLIP, SigLIP or DINOv2 vision folder, an
    /// AutoencoderKL, a catalogue name (`imgseq models`) or hf:ORG/NAME (default: the shipped
    /// weights/vqgan).
    #[arg(long, visible_alias = "model", value_name = "PATH")]
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
    #[command(flatten)]
    pub latent: LatentArgs,
    #[command(flatten)]
    pub tower: TowerArgs,
}

/// Vision towers' settings (CLIP, SigLIP, DINOv2; other families refuse them).
#[derive(Args, Clone, Default)]
pub struct TowerArgs {
    /// A vision tower's hidden state, as transformers' hidden_states[N]: -1 the last block's
    /// output, -2 what LLaVA reads (default: its last_hidden_state; docs/vit-tokens.md).
    #[arg(long, allow_negative_numbers = true)]
    pub layer: Option<isize>,
    /// A vision tower's patch tokens only, without the class token and registers (LLaVA's
    /// "patch" feature).
    #[arg(long)]
    pub patches_only: bool,
    /// A vision tower's pooled output (transformers' pooler_output): one vector per picture.
    #[arg(long, conflicts_with_all = ["layer", "patches_only"])]
    pub pooled: bool,
}

/// Continuous-latent models' settings (VAEs; discrete families refuse them).
#[derive(Args, Clone, Default)]
pub struct LatentArgs {
    /// A released VAE's config for a single weights file: sd (1.x/2.x), sdxl, sd3, flux.
    #[arg(long)]
    pub preset: Option<String>,
    /// Cut a VAE's latents into p×p patches: (h/p·w/p) tokens of p²·C values (FLUX's order).
    #[arg(long)]
    pub patch: Option<usize>,
    /// Draw a VAE's latents from the posterior with this seed instead of taking its mean.
    #[arg(long)]
    pub sample_seed: Option<u64>,
    /// A VAE's tiled encode/decode, tiles of this side in pixels (bounded memory).
    #[arg(long)]
    pub tile: Option<usize>,
}

/// Input preprocessing.
#[derive(Args, Clone)]
pub struct Preprocess {
    /// Input side in pixels, a multiple of the downsampling factor (default: 384 for colour
    /// VQ models, the training resolution for gray ones, the yaml's for Open-MAGVIT2, 256 for
    /// VAEs).
    #[arg(long)]
    pub size: Option<u32>,
    /// Allow enlarging images whose shorter side is smaller than --size.
    #[arg(long)]
    pub upscale: bool,
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

impl ModelArgs {
    /// The files given on the command line (inputs an output must not replace).
    pub fn given(&self) -> Vec<PathBuf> {
        self.weights.iter().chain(&self.config).cloned().collect()
    }
}

impl ModelArgs {
    /// The loader's options for these flags and an input side (`None`: the model's default).
    pub fn open_options(&self, size: Option<u32>) -> OpenOptions {
        OpenOptions {
            config: self.config.clone(),
            size,
            precision: self.precision.precision,
            bf16_encoder: self.bf16_encoder,
            raw: self.raw,
            preset: self.latent.preset.clone(),
            patch: self.latent.patch,
            sample_seed: self.latent.sample_seed,
            tile: self.latent.tile,
            layer: self.tower.layer,
            patches_only: self.tower.patches_only,
            pooled: self.tower.pooled,
        }
    }

    /// The tokenizer these flags name (the shipped default without `--weights`), through the
    /// loader; its files added to `outs`, its notes and (with `--verbose`) its precision said
    /// on stderr.
    pub fn open(&self, size: Option<u32>, outs: &mut Outputs) -> Result<Opened> {
        let t = imgseq_models::open_default(self.weights.as_deref(), &self.open_options(size))?;
        for f in &t.files {
            outs.add_input(f);
        }
        if let Some(c) = &t.precision {
            self.precision.report(c);
        }
        for n in &t.notes {
            eprintln!("{n}");
        }
        Ok(t)
    }
}
