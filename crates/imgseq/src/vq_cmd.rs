//! `imgseq vq ...` (owned by the VQGAN work): image ↔ VQGAN tokens.
//!
//! A token file is a NumPy int64 array: (h, w) for one image, (n, h, w) for several, each
//! value a codebook index in raster order (row by row). With taming's f16 model a 384×384
//! image gives a 24×24 grid, 576 tokens.

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use clap::{Args, Subcommand};
use image::RgbImage;
use imgseq_core::image_io::{self, PixelRange};
use imgseq_core::{metrics, npy};
use imgseq_vqgan::{load_model, train, VqConfig, VqModel};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};

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

/// `imgseq vq train` options. A new run takes every option not given from the shipped
/// model's recipe (`TrainConfig::default_for`, shown as [default: ..]); with --resume the run's
/// train.json is used and only the options given override it (e.g. `--steps` to extend a run).
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
    /// Total optimiser steps [default: 7000].
    #[arg(long)]
    steps: Option<usize>,
    /// Side of the square random crops, a multiple of the downsampling factor [default: 96].
    #[arg(long)]
    crop: Option<usize>,
    /// Images are cached with their shorter side resized to this before cropping
    /// [default: 384].
    #[arg(long)]
    resize: Option<usize>,
    /// [default: 8]
    #[arg(long)]
    batch_size: Option<usize>,
    /// From this step on, train on --context-crop crops in batches of --context-batch-size, so
    /// that attention and GroupNorm see eval-size latents (0: never) [default: 4100].
    #[arg(long)]
    context_from: Option<usize>,
    /// [default: 256]
    #[arg(long)]
    context_crop: Option<usize>,
    /// [default: 2]
    #[arg(long)]
    context_batch_size: Option<usize>,
    /// Peak learning rate; warm-up then cosine decay to lr/10 [default: 0.001].
    #[arg(long)]
    lr: Option<f64>,
    /// Adam β1 (taming uses 0.5, tuned for its GAN phase) [default: 0.9].
    #[arg(long)]
    beta1: Option<f64>,
    /// Adam β2 [default: 0.99].
    #[arg(long)]
    beta2: Option<f64>,
    /// Learning-rate warm-up steps [default: 100].
    #[arg(long)]
    warmup: Option<usize>,
    /// Train this many steps as a plain autoencoder (quantizer bypassed), then initialise the
    /// codebook by k-means of the trained encoder's outputs (0: k-means at step 0)
    /// [default: 2000].
    #[arg(long)]
    ae_warmup: Option<usize>,
    /// Weight of the L1 reconstruction loss [default: 1].
    #[arg(long)]
    l1: Option<f64>,
    /// Weight of the L2 reconstruction loss [default: 1].
    #[arg(long)]
    l2: Option<f64>,
    /// Weight of the image-gradient L1 (sharpening) loss [default: 1].
    #[arg(long)]
    sharp: Option<f64>,
    /// No random horizontal flips.
    #[arg(long)]
    no_flip: bool,
    /// Keep the colour channels in order (by default each crop gets a random order of r, g, b).
    #[arg(long)]
    no_shuffle_channels: bool,
    /// Also crop from copies of every image with its shorter side resized to these sizes,
    /// comma-separated; `none` for none [default: 512,640].
    #[arg(long, value_delimiter = ',')]
    extra_scales: Option<Vec<String>>,
    /// Encoder outputs for the k-means codebook init (0: taming's uniform init)
    /// [default: 8192].
    #[arg(long)]
    kmeans_rows: Option<usize>,
    /// A code unused for this many steps is re-seeded from an encoder output (0: never)
    /// [default: 200].
    #[arg(long)]
    dead_after: Option<usize>,
    /// Look for dead codes every this many steps [default: 25].
    #[arg(long)]
    restart_every: Option<usize>,
    /// Checkpoint every this many steps, and at the end [default: 250].
    #[arg(long)]
    checkpoint_every: Option<usize>,
    /// History point (and, without a terminal, a log line) every this many steps (0: every 1%
    /// of the run) [default: 0].
    #[arg(long)]
    log_every: Option<usize>,
    /// [default: 0]
    #[arg(long)]
    seed: Option<u64>,
}

impl TrainArgs {
    /// Writes every option that was given into `tc`.
    fn apply(&self, tc: &mut train::TrainConfig) -> Result<()> {
        fn set<T: Copy>(dst: &mut T, v: Option<T>) {
            if let Some(v) = v {
                *dst = v;
            }
        }
        if let Some(d) = &self.data {
            tc.data = d.clone();
        }
        set(&mut tc.steps, self.steps);
        set(&mut tc.crop, self.crop);
        set(&mut tc.resize, self.resize);
        set(&mut tc.batch_size, self.batch_size);
        set(&mut tc.context_from, self.context_from);
        set(&mut tc.context_crop, self.context_crop);
        set(&mut tc.context_batch_size, self.context_batch_size);
        if let Some(lr) = self.lr {
            tc.lr = lr;
            tc.min_lr = lr / 10.0;
        }
        set(&mut tc.beta1, self.beta1);
        set(&mut tc.beta2, self.beta2);
        set(&mut tc.warmup, self.warmup);
        set(&mut tc.ae_warmup, self.ae_warmup);
        set(&mut tc.l1, self.l1);
        set(&mut tc.l2, self.l2);
        set(&mut tc.sharp, self.sharp);
        if self.no_flip {
            tc.hflip = false;
        }
        if self.no_shuffle_channels {
            tc.shuffle_channels = false;
        }
        if let Some(v) = &self.extra_scales {
            tc.extra_scales = v
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
        set(&mut tc.kmeans_rows, self.kmeans_rows);
        set(&mut tc.dead_after, self.dead_after);
        set(&mut tc.restart_every, self.restart_every);
        set(&mut tc.checkpoint_every, self.checkpoint_every);
        set(&mut tc.log_every, self.log_every);
        set(&mut tc.seed, self.seed);
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

pub fn run(cmd: VqCmd) -> Result<()> {
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
        VqCmd::Train(a) => train(&a),
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
    if let Some(c) = train::preset(spec) {
        return Ok(c);
    }
    let p = Path::new(spec);
    if !p.exists() {
        bail!(
            "--config {spec}: neither a preset ({}) nor an existing config file",
            train::PRESETS.join(", ")
        );
    }
    Ok(VqConfig::from_file(p)?)
}

fn train(a: &TrainArgs) -> Result<()> {
    let state_file = a.out.join(train::STATE_FILE);
    let (cfg, tc, resume) = if a.resume && state_file.is_file() {
        let mut tc = train::TrainConfig::load(&a.out.join(train::TRAIN_FILE))?;
        let cfg = VqConfig::from_json_file(a.out.join(train::CONFIG_FILE))?;
        a.apply(&mut tc)?;
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
        let mut tc = train::TrainConfig::default_for(data);
        a.apply(&mut tc)?;
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
    check_size(pre.size, None)?;
    let paths = train::data_paths(data)?;
    let (model, weights) = load(m)?;
    let r = train::evaluate(&model, &paths, pre.size, pre.upscale, batch, true)?;
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
    let model = load_model(&weights, m.config.as_deref(), &Device::Cpu)?;
    Ok((model, weights))
}

// `%` rather than `is_multiple_of`: the workspace supports Rust 1.85.
#[allow(unknown_lints, clippy::manual_is_multiple_of)]
fn check_size(size: u32, model: Option<&VqModel>) -> Result<()> {
    if size == 0 || size % 16 != 0 {
        bail!("--size {size} must be a positive multiple of 16 (VQGAN f16 downsamples by 16)");
    }
    if let Some(m) = model {
        let f = m.config().downsample_factor() as u32;
        if size % f != 0 {
            bail!("--size {size} must be a multiple of the model's downsampling factor {f}");
        }
    }
    Ok(())
}

fn load_images(paths: &[PathBuf], pre: &Preprocess) -> Result<Vec<RgbImage>> {
    paths
        .iter()
        .map(|p| Ok(image_io::load_rgb_square(p, pre.size, pre.upscale)?))
        .collect()
}

/// (n, 3, s, s) in [-1, 1].
fn batch_tensor(imgs: &[RgbImage]) -> Result<Tensor> {
    let ts = imgs
        .iter()
        .map(|i| image_io::to_tensor_chw(i, PixelRange::MinusOneOne, &Device::Cpu))
        .collect::<imgseq_core::Result<Vec<_>>>()?;
    Ok(Tensor::stack(&ts, 0)?)
}

fn progress(n: usize, what: &str) -> ProgressBar {
    if n < 2 {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(n as u64);
    pb.set_style(
        ProgressStyle::with_template(
            "{msg} {bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}]",
        )
        .expect("valid template"),
    );
    pb.set_message(what.to_string());
    pb
}

fn encode(
    images: &[PathBuf],
    m: &ModelArgs,
    pre: &Preprocess,
    batch: usize,
    out: &Path,
) -> Result<()> {
    check_size(pre.size, None)?;
    // Fail fast, before loading the model or decoding any pixels: every file must be a
    // readable image of sufficient size (headers only).
    for p in images {
        let (w, h) = image_io::image_dimensions(p)?;
        image_io::check_min_size(p, w, h, pre.size, pre.upscale)?;
    }
    let (model, _) = load(m)?;
    check_size(pre.size, Some(&model))?;
    let pb = progress(images.len(), "encoding");
    let mut tokens: Vec<i64> = Vec::new();
    let mut grid = (0, 0);
    // Images are decoded batch by batch, so a long list needs memory for one batch only.
    for chunk in images.chunks(batch.max(1)) {
        let imgs = load_images(chunk, pre)?;
        let q = model.encode(&batch_tensor(&imgs)?)?;
        let (_, h, w) = q.indices.dims3()?;
        grid = (h, w);
        tokens.extend(
            q.indices
                .to_dtype(DType::I64)?
                .flatten_all()?
                .to_vec1::<i64>()?,
        );
        pb.inc(chunk.len() as u64);
    }
    pb.finish_and_clear();
    let shape = if images.len() == 1 {
        vec![grid.0, grid.1]
    } else {
        vec![images.len(), grid.0, grid.1]
    };
    npy::write_npy_i64(out, &shape, &tokens)?;
    eprintln!(
        "wrote {} {:?} ({} tokens per image)",
        out.display(),
        shape,
        grid.0 * grid.1
    );
    Ok(())
}

/// A token file: (n, h, w) and the values (n = 1 for a 2-D file).
struct Tokens {
    two_d: bool,
    n: usize,
    h: usize,
    w: usize,
    data: Vec<i64>,
}

fn read_tokens(path: &Path) -> Result<Tokens> {
    let a = npy::read_npy(path)?;
    let Some(data) = a.as_i64() else {
        bail!(
            "{}: tokens must be an integer array, found dtype {}",
            path.display(),
            a.descr
        );
    };
    let (two_d, n, h, w) = match a.shape.as_slice() {
        [h, w] => (true, 1, *h, *w),
        [n, h, w] => (false, *n, *h, *w),
        s => bail!(
            "{}: tokens must have shape (h, w) or (n, h, w), found {s:?}",
            path.display()
        ),
    };
    if n == 0 || h == 0 || w == 0 {
        bail!(
            "{}: token array is empty (shape {:?})",
            path.display(),
            a.shape
        );
    }
    Ok(Tokens {
        two_d,
        n,
        h,
        w,
        data: data.to_vec(),
    })
}

fn write_tokens(path: &Path, t: &Tokens) -> Result<()> {
    let shape = if t.two_d {
        vec![t.h, t.w]
    } else {
        vec![t.n, t.h, t.w]
    };
    Ok(npy::write_npy_i64(path, &shape, &t.data)?)
}

fn decode(tokens: &Path, m: &ModelArgs, batch: usize, out: &Path) -> Result<()> {
    let t = read_tokens(tokens)?;
    let (model, _) = load(m)?;
    let n_embed = model.config().n_embed as i64;
    if let Some((i, &v)) = t
        .data
        .iter()
        .enumerate()
        .find(|(_, &v)| v < 0 || v >= n_embed)
    {
        let (img, r, c) = (i / (t.h * t.w), (i / t.w) % t.h, i % t.w);
        let at = if t.two_d {
            format!("[{r}, {c}]")
        } else {
            format!("[{img}, {r}, {c}]")
        };
        bail!(
            "{}: token {v} at {at} is outside the codebook (n_embed = {n_embed}, valid 0..={})",
            tokens.display(),
            n_embed - 1
        );
    }
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
    let pb = progress(t.n, "decoding");
    let mut imgs = Vec::with_capacity(t.n);
    let plane = t.h * t.w;
    let step = batch.max(1);
    for start in (0..t.n).step_by(step) {
        let k = step.min(t.n - start);
        let cells = &t.data[start * plane..(start + k) * plane];
        let idx = Tensor::from_vec(cells.to_vec(), (k, t.h, t.w), &Device::Cpu)?;
        let x = model.decode_indices(&idx)?;
        for i in 0..k {
            imgs.push(image_io::from_tensor_chw(
                &x.get(i)?,
                PixelRange::MinusOneOne,
            )?);
        }
        pb.inc(k as u64);
    }
    pb.finish_and_clear();
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
    check_size(pre.size, None)?;
    let img = image_io::load_rgb_square(image, pre.size, pre.upscale)?;
    let (model, weights) = load(m)?;
    check_size(pre.size, Some(&model))?;
    let q = model.encode(&batch_tensor(std::slice::from_ref(&img))?)?;
    let rec = model.decode(&q.quantized)?;
    let rec = image_io::from_tensor_chw(&rec, PixelRange::MinusOneOne)?;
    let (_, h, w) = q.indices.dims3()?;
    let toks = q
        .indices
        .to_dtype(DType::I64)?
        .flatten_all()?
        .to_vec1::<i64>()?;
    let n_embed = model.config().n_embed;
    let (used, perplexity) = metrics::codebook_usage(&toks, n_embed)?;
    // Metrics on the 8-bit images (what is saved), scaled to [0, 1].
    let unit = |i: &RgbImage| image_io::to_tensor_chw(i, PixelRange::ZeroOne, &Device::Cpu);
    let (a, b) = (unit(&img)?, unit(&rec)?);
    let psnr = metrics::psnr_tensor(&a, &b, 1.0)?;
    let ssim = metrics::ssim(&a, &b)?;
    std::fs::create_dir_all(out)
        .with_context(|| format!("{}: cannot create folder", out.display()))?;
    npy::write_npy_i64(out.join("tokens.npy"), &[h, w], &toks)?;
    image_io::save_png(out.join("recon.png"), &rec)?;
    let pair = image_io::side_by_side(&[img, rec], 4);
    image_io::save_png(out.join("side_by_side.png"), &pair)?;
    let c = model.config();
    println!(
        "model: {} (f{}, {} codes)",
        weights.display(),
        c.downsample_factor(),
        c.n_embed
    );
    println!("tokens: {} ({h}x{w} grid, raster order)", h * w);
    println!("PSNR: {psnr:.2} dB");
    println!("SSIM: {ssim:.4}");
    println!("codebook entries used: {used} of {n_embed} (perplexity {perplexity:.1})");
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
    let mut t = read_tokens(tokens)?;
    let mut parsed = Vec::with_capacity(swaps.len());
    for s in swaps {
        let (a, b) = parse_swap(s)?;
        for (r, c) in [a, b] {
            if r >= t.h || c >= t.w {
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
    write_tokens(out, &t)?;
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
