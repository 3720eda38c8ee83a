//! `imgseq vq ...`: image ↔ VQGAN tokens. Flags and printing only: the work is
//! `imgseq_vqgan`'s (`inference`, `eval`, `tokens`, `train`).

use anyhow::{bail, Context, Result};
use candle_core::Device;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, Subcommand};
use imgseq_core::image_io;
use imgseq_vqgan::load::default_config_path;
use imgseq_vqgan::presets::{preset, PRESETS};
use imgseq_vqgan::train::{self, TrainConfig};
use imgseq_vqgan::{data, eval, inference, load_model, TokenGrid, VqConfig, VqModel};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use crate::paths::default_model;

/// Folder name of the shipped default VQGAN under `weights/`.
pub const DEFAULT_VQGAN: &str = "vqgan";

#[derive(Subcommand)]
pub enum VqCmd {
    /// Images → tokens.npy: (h, w) int64 for one image, (n, h, w) for several.
    Encode {
        /// Input images (png, jpg, webp, bmp).
        #[arg(required = true)]
        images: Vec<PathBuf>,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        pre: Preprocess,
        /// Images per forward pass.
        #[arg(long, default_value_t = 2)]
        batch_size: usize,
        /// Output token file (.npy).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// tokens.npy → image(s); several images are written as OUT_000.png, OUT_001.png, ...
    Decode {
        /// Token file: int array of shape (h, w) or (n, h, w).
        tokens: PathBuf,
        #[command(flatten)]
        model: ModelArgs,
        /// Images per forward pass.
        #[arg(long, default_value_t = 2)]
        batch_size: usize,
        /// Output PNG.
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// Image → tokens → image: writes DIR/tokens.npy, DIR/recon.png, DIR/side_by_side.png and
    /// prints token count, grid, PSNR, SSIM and how many codebook entries were used.
    Roundtrip {
        image: PathBuf,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        pre: Preprocess,
        /// Output folder (created if missing).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// Swap token cells: `--swap R1,C1:R2,C2` (0-based row,column), repeatable, applied in
    /// order to every image of the file.
    Edit {
        tokens: PathBuf,
        /// A swap `R1,C1:R2,C2`.
        #[arg(long = "swap", required = true)]
        swaps: Vec<String>,
        /// Output token file (.npy).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// Train a VQGAN on an image folder (random crops): L1 + L2 + image-gradient L1 +
    /// codebook/commitment loss (β = 0.25), k-means codebook init, dead-code restarts; no
    /// perceptual or adversarial loss. Checkpoints (model.safetensors, config.json,
    /// train.json, optimizer.safetensors, state.json) go to --out; --resume continues.
    Train(Box<TrainArgs>),
    /// Mean PSNR, SSIM and codebook usage (% of codes used across the set) of a model's
    /// reconstructions of every image in a folder (or a .txt list of image paths).
    Eval {
        /// Image folder or a text file with one image path per line.
        data: PathBuf,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        pre: Preprocess,
        /// Images per forward pass.
        #[arg(long, default_value_t = 2)]
        batch_size: usize,
        /// Print the report as JSON (with per-image scores) on stdout.
        #[arg(long)]
        json: bool,
    },
}

/// `imgseq vq train` options. A new run takes every option from the command line, whose
/// defaults are the shipped model's recipe (`TrainConfig::default_for`); with --resume the
/// run's train.json is used and only the options given on the command line override it (e.g.
/// `--steps` to extend a run).
#[derive(Args)]
pub struct TrainArgs {
    /// Image folder (or a .txt list of image paths); required unless resuming.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Run folder for checkpoints.
    #[arg(long, default_value = "runs/vq-small")]
    out: PathBuf,
    /// Architecture: a preset (`small`, `f16_1024`) or a config file (our config.json or
    /// taming's model.yaml).
    #[arg(long, default_value = "small")]
    config: String,
    /// Continue the run in --out from its last checkpoint.
    #[arg(long)]
    resume: bool,
    /// Total optimiser steps.
    #[arg(long, default_value_t = RECIPE.steps)]
    steps: usize,
    /// Side of the square random crops, a multiple of the downsampling factor.
    #[arg(long, default_value_t = RECIPE.crop)]
    crop: usize,
    /// Images are cached with their shorter side resized to this before cropping.
    #[arg(long, default_value_t = RECIPE.resize)]
    resize: usize,
    #[arg(long, default_value_t = RECIPE.batch_size)]
    batch_size: usize,
    /// From this step on, train on --context-crop crops in batches of --context-batch-size, so
    /// that attention and GroupNorm see eval-size latents (0: never).
    #[arg(long, default_value_t = RECIPE.context_from)]
    context_from: usize,
    #[arg(long, default_value_t = RECIPE.context_crop)]
    context_crop: usize,
    #[arg(long, default_value_t = RECIPE.context_batch_size)]
    context_batch_size: usize,
    /// Peak learning rate; warm-up then cosine decay to lr/10.
    #[arg(long, default_value_t = RECIPE.lr)]
    lr: f64,
    /// Adam β1 (taming uses 0.5, tuned for its GAN phase).
    #[arg(long, default_value_t = RECIPE.beta1)]
    beta1: f64,
    /// Adam β2.
    #[arg(long, default_value_t = RECIPE.beta2)]
    beta2: f64,
    /// Learning-rate warm-up steps.
    #[arg(long, default_value_t = RECIPE.warmup)]
    warmup: usize,
    /// Train this many steps as a plain autoencoder (quantizer bypassed), then initialise the
    /// codebook by k-means of the trained encoder's outputs (0: k-means at step 0).
    #[arg(long, default_value_t = RECIPE.ae_warmup)]
    ae_warmup: usize,
    /// Weight of the L1 reconstruction loss.
    #[arg(long, default_value_t = RECIPE.l1)]
    l1: f64,
    /// Weight of the L2 reconstruction loss.
    #[arg(long, default_value_t = RECIPE.l2)]
    l2: f64,
    /// Weight of the image-gradient L1 (sharpening) loss.
    #[arg(long, default_value_t = RECIPE.sharp)]
    sharp: f64,
    /// No random horizontal flips.
    #[arg(long)]
    no_flip: bool,
    /// Keep the colour channels in order (by default each crop gets a random order of r, g, b).
    #[arg(long)]
    no_shuffle_channels: bool,
    /// Also crop from copies of every image with its shorter side resized to these sizes,
    /// comma-separated; `none` for none.
    #[arg(long, value_delimiter = ',', default_values_t = RECIPE.extra_scales.iter().map(ToString::to_string).collect::<Vec<_>>())]
    extra_scales: Vec<String>,
    /// Encoder outputs for the k-means codebook init (0: taming's uniform init).
    #[arg(long, default_value_t = RECIPE.kmeans_rows)]
    kmeans_rows: usize,
    /// A code unused for this many steps is re-seeded from an encoder output (0: never).
    #[arg(long, default_value_t = RECIPE.dead_after)]
    dead_after: usize,
    /// Look for dead codes every this many steps.
    #[arg(long, default_value_t = RECIPE.restart_every)]
    restart_every: usize,
    /// Checkpoint every this many steps, and at the end.
    #[arg(long, default_value_t = RECIPE.checkpoint_every)]
    checkpoint_every: usize,
    /// History point (and, without a terminal, a log line) every this many steps (0: every 1%
    /// of the run).
    #[arg(long, default_value_t = RECIPE.log_every)]
    log_every: usize,
    #[arg(long, default_value_t = RECIPE.seed)]
    seed: u64,
}

/// The shipped model's recipe: the one source of `vq train`'s defaults.
static RECIPE: LazyLock<TrainConfig> = LazyLock::new(|| TrainConfig::default_for(""));

impl TrainArgs {
    /// Writes into `tc` every option given on the command line (`m`: this command's matches).
    fn apply(&self, m: &ArgMatches, tc: &mut TrainConfig) -> Result<()> {
        let given = |id: &str| m.value_source(id) == Some(ValueSource::CommandLine);
        macro_rules! take {
            ($($field:ident),*) => {$(
                if given(stringify!($field)) {
                    tc.$field = self.$field;
                }
            )*};
        }
        take!(
            steps,
            crop,
            resize,
            batch_size,
            context_from,
            context_crop,
            context_batch_size,
            beta1,
            beta2,
            warmup,
            ae_warmup,
            l1,
            l2,
            sharp,
            kmeans_rows,
            dead_after,
            restart_every,
            checkpoint_every,
            log_every,
            seed
        );
        if let Some(d) = &self.data {
            tc.data = d.clone();
        }
        if given("lr") {
            tc.lr = self.lr;
            tc.min_lr = self.lr / 10.0;
        }
        if self.no_flip {
            tc.hflip = false;
        }
        if self.no_shuffle_channels {
            tc.shuffle_channels = false;
        }
        if given("extra_scales") {
            tc.extra_scales = self
                .extra_scales
                .iter()
                .filter(|s| s.trim() != "none")
                .map(|s| match s.trim().parse::<usize>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => bail!(
                        "--extra-scales {s:?}: expected sizes in pixels like 512,640, or none"
                    ),
                })
                .collect::<Result<_>>()?;
        }
        Ok(())
    }
}

/// Which model to use.
#[derive(Args, Clone)]
pub struct ModelArgs {
    /// Weights: safetensors or a taming `.ckpt` (default: weights/vqgan/model.safetensors,
    /// under $IMGSEQ_WEIGHTS_DIR or the workspace's weights/ folder).
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Model config: our config.json or taming's model.yaml (default: beside the weights).
    #[arg(long)]
    config: Option<PathBuf>,
}

/// Input preprocessing.
#[derive(Args, Clone)]
pub struct Preprocess {
    /// Resize the shorter side to SIZE and center-crop SIZE×SIZE; a multiple of 16.
    #[arg(long, default_value_t = 384)]
    size: u32,
    /// Allow enlarging images whose shorter side is smaller than --size.
    #[arg(long)]
    upscale: bool,
}

/// Runs a `vq` command; `m` are the `vq` subcommand's matches (for what was given on the
/// command line).
pub fn run(cmd: VqCmd, m: &ArgMatches) -> Result<()> {
    match cmd {
        VqCmd::Encode {
            images,
            model,
            pre,
            batch_size,
            output,
        } => encode(&images, &model, &pre, batch_size, &output),
        VqCmd::Decode {
            tokens,
            model,
            batch_size,
            output,
        } => decode(&tokens, &model, batch_size, &output),
        VqCmd::Roundtrip {
            image,
            model,
            pre,
            output,
        } => roundtrip(&image, &model, &pre, &output),
        VqCmd::Edit {
            tokens,
            swaps,
            output,
        } => edit(&tokens, &swaps, &output),
        VqCmd::Train(a) => {
            let tm = m
                .subcommand_matches("train")
                .expect("clap parsed `vq train`");
            train(&a, tm)
        }
        VqCmd::Eval {
            data,
            model,
            pre,
            batch_size,
            json,
        } => eval(&data, &model, &pre, batch_size, json),
    }
}

fn model_config(spec: &str) -> Result<VqConfig> {
    if let Some(c) = preset(spec) {
        return Ok(c);
    }
    let p = Path::new(spec);
    if !p.exists() {
        bail!(
            "--config {spec}: neither a preset ({}) nor an existing config file",
            PRESETS.join(", ")
        );
    }
    Ok(VqConfig::from_file(p)?)
}

fn train(a: &TrainArgs, m: &ArgMatches) -> Result<()> {
    let (cfg, tc, resume) = if a.resume && train::checkpoint::has_checkpoint(&a.out) {
        let mut tc = TrainConfig::load(&a.out.join(train::TRAIN_FILE))?;
        let cfg = VqConfig::from_json_file(a.out.join(train::CONFIG_FILE))?;
        a.apply(m, &mut tc)?;
        (cfg, tc, true)
    } else {
        if a.resume {
            eprintln!(
                "{}: no checkpoint to resume yet, starting a new run",
                a.out.display()
            );
        }
        let Some(data) = &a.data else {
            bail!("--data DIR is required (an image folder or a .txt list of images)");
        };
        let cfg = model_config(&a.config)?;
        let mut tc = TrainConfig::default_for(data);
        a.apply(m, &mut tc)?;
        (cfg, tc, false)
    };
    let st = train::train(&cfg, &tc, &a.out, resume, true)?;
    let last = st.history.last();
    println!(
        "step {}/{}: loss {:.4}, PSNR {:.2} dB, codes used {}/{}, {} codes restarted in all; \
         {:.0} s of training",
        st.step,
        tc.steps,
        last.map_or(f64::NAN, |p| p.loss),
        last.map_or(f64::NAN, |p| p.psnr),
        last.map_or(0, |p| p.codes_used),
        cfg.n_embed,
        st.restarts_total,
        st.seconds
    );
    println!(
        "wrote {}/{{model.safetensors, config.json, train.json, optimizer.safetensors, state.json}}",
        a.out.display()
    );
    Ok(())
}

fn eval(data: &Path, m: &ModelArgs, pre: &Preprocess, batch: usize, json: bool) -> Result<()> {
    let paths = data::data_paths(data)?;
    let (model, weights) = load(m)?;
    let r = eval::evaluate(&model, &paths, pre.size, pre.upscale, batch, true)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!("model: {}", weights.display());
    for i in &r.per_image {
        println!(
            "  {}: PSNR {:.2} dB, SSIM {:.4}",
            i.path.display(),
            i.psnr,
            i.ssim
        );
    }
    println!("images: {} at {}x{}", r.images, r.size, r.size);
    println!("PSNR: {:.2} dB (mean)", r.psnr);
    println!("SSIM: {:.4} (mean)", r.ssim);
    println!(
        "codebook usage: {} of {} codes ({:.1}%), perplexity {:.1}, {} tokens per image",
        r.codes_used, r.n_embed, r.usage_percent, r.perplexity, r.tokens_per_image
    );
    Ok(())
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

/// The model `m` names and the weights file it came from (the shipped default when
/// `--weights` is absent), for reports.
fn load(m: &ModelArgs) -> Result<(VqModel, PathBuf)> {
    let weights = match &m.weights {
        Some(w) => w.clone(),
        None => default_weights()?,
    };
    let config = match &m.config {
        Some(c) => c.clone(),
        None => default_config_path(&weights).map_err(|e| anyhow::anyhow!("{e}; pass --config"))?,
    };
    let model = load_model(&weights, Some(&config), &Device::Cpu)?;
    Ok((model, weights))
}

fn encode(
    images: &[PathBuf],
    m: &ModelArgs,
    pre: &Preprocess,
    batch: usize,
    out: &Path,
) -> Result<()> {
    // Fail fast, before loading the model: every file must be a readable image of sufficient
    // size (headers only).
    data::check_headers(images, pre.size, pre.upscale)?;
    let (model, _) = load(m)?;
    let tokens = inference::encode_files(&model, images, pre.size, pre.upscale, batch, true)?;
    tokens.write(out)?;
    eprintln!(
        "wrote {} {:?} ({} tokens per image)",
        out.display(),
        tokens.shape(),
        tokens.h * tokens.w
    );
    Ok(())
}

fn decode(tokens: &Path, m: &ModelArgs, batch: usize, out: &Path) -> Result<()> {
    let t = TokenGrid::read(tokens)?;
    let (model, _) = load(m)?;
    t.check_codebook(tokens, model.config().n_embed)?;
    let outs: Vec<PathBuf> = if t.n == 1 {
        vec![out.to_path_buf()]
    } else {
        let stem = out
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let ext = out
            .extension()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or("png".into());
        (0..t.n)
            .map(|i| out.with_file_name(format!("{stem}_{i:03}.{ext}")))
            .collect()
    };
    let imgs = inference::decode_tokens(&model, &t, batch, true)?;
    // Write only after every image decoded, and remove partial results on failure.
    for (k, (p, img)) in outs.iter().zip(&imgs).enumerate() {
        if let Err(e) = image_io::save_png(p, img) {
            for q in &outs[..k] {
                let _ = std::fs::remove_file(q);
            }
            return Err(e.into());
        }
    }
    for p in &outs {
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

fn roundtrip(image: &Path, m: &ModelArgs, pre: &Preprocess, out: &Path) -> Result<()> {
    let img = image_io::load_rgb_square(image, pre.size, pre.upscale)?;
    let (model, weights) = load(m)?;
    let r = eval::roundtrip(&model, &img)?;
    std::fs::create_dir_all(out)
        .with_context(|| format!("{}: cannot create folder", out.display()))?;
    r.tokens.write(out.join("tokens.npy"))?;
    image_io::save_png(out.join("recon.png"), &r.reconstruction)?;
    let pair = image_io::side_by_side(&[img, r.reconstruction], 4);
    image_io::save_png(out.join("side_by_side.png"), &pair)?;
    let c = model.config();
    let (h, w) = (r.tokens.h, r.tokens.w);
    println!(
        "model: {} (f{}, {} codes)",
        weights.display(),
        c.downsample_factor(),
        c.n_embed
    );
    println!("tokens: {} ({h}x{w} grid, raster order)", h * w);
    println!("PSNR: {:.2} dB", r.psnr);
    println!("SSIM: {:.4}", r.ssim);
    println!(
        "codebook entries used: {} of {} (perplexity {:.1})",
        r.codes_used, c.n_embed, r.perplexity
    );
    println!(
        "wrote {}/{{tokens.npy, recon.png, side_by_side.png}}",
        out.display()
    );
    Ok(())
}

/// `R,C:R,C` → ((r1, c1), (r2, c2)).
fn parse_swap(s: &str) -> Result<((usize, usize), (usize, usize))> {
    let cell = |p: &str| -> Option<(usize, usize)> {
        let (r, c) = p.trim().split_once(',')?;
        Some((r.trim().parse().ok()?, c.trim().parse().ok()?))
    };
    let err = || {
        anyhow::anyhow!("--swap {s:?}: expected R1,C1:R2,C2 with 0-based row and column numbers")
    };
    let (a, b) = s.split_once(':').ok_or_else(err)?;
    Ok((cell(a).ok_or_else(err)?, cell(b).ok_or_else(err)?))
}

fn edit(tokens: &Path, swaps: &[String], out: &Path) -> Result<()> {
    let mut t = TokenGrid::read(tokens)?;
    let mut parsed = Vec::with_capacity(swaps.len());
    for s in swaps {
        let (a, b) = parse_swap(s)?;
        for (r, c) in [a, b] {
            if !t.contains(r, c) {
                bail!(
                    "--swap {s}: cell ({r}, {c}) is outside the {}x{} token grid of {}",
                    t.h,
                    t.w,
                    tokens.display()
                );
            }
        }
        parsed.push((a, b));
    }
    let plane = t.h * t.w;
    for img in 0..t.n {
        for &((r1, c1), (r2, c2)) in &parsed {
            t.data
                .swap(img * plane + r1 * t.w + c1, img * plane + r2 * t.w + c2);
        }
    }
    t.write(out)?;
    eprintln!(
        "wrote {} ({} swap(s) applied to {} image(s))",
        out.display(),
        parsed.len(),
        t.n
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_parsing() {
        assert_eq!(parse_swap("1,2:3,4").unwrap(), ((1, 2), (3, 4)));
        assert_eq!(parse_swap(" 0, 0 : 23,23").unwrap(), ((0, 0), (23, 23)));
        for bad in ["1,2", "1:2", "a,b:c,d", "-1,0:0,0", "1,2:3"] {
            assert!(parse_swap(bad).is_err(), "{bad}");
        }
    }
}
