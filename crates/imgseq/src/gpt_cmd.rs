//! `imgseq gpt ...`: the class-conditional GPT over VQ token sequences (HF GPT-2 layout).

use anyhow::{bail, Context, Result};
use candle_core::Device;
use clap::{Args, Subcommand};
use image::{Rgb, RgbImage};
use imgseq_core::fsutil::Outputs;
use imgseq_core::tokenizer::{decode_batches, downsample_factor, Tokenizer};
use imgseq_gpt::config::{GptConfig, SeqLayout};
use imgseq_gpt::data;
use imgseq_gpt::grid::labelled_grid;
use imgseq_gpt::sample::{generate, Request, SampleOptions};
use imgseq_gpt::Gpt2LMHeadModel;
use imgseq_kernels::PrecisionRequest;
use imgseq_models::{OpenOptions, Opened};
use imgseq_train::gpt::{self as gtrain, job, TrainConfig};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::paths::default_model;

/// The shipped GPT and the VQ it was trained on (`weights/<name>`).
pub const DEFAULT_GPT: &str = "gpt-fashion-mnist";
pub const DEFAULT_VQ: &str = "vq-fashion-mnist";

#[derive(Subcommand)]
pub enum GptCmd {
    /// Train a GPT on token shards (AdamW, warm-up + cosine, class dropout for guidance);
    /// resumable exactly.
    Train(Box<TrainArgs>),
    /// Generate images of the given classes (KV cache, temperature, top-k/top-p, guidance);
    /// writes a labelled grid (one row per class) and the tokens (.npy).
    Sample(Box<SampleArgs>),
    /// Keep the first K token rows of a real image and generate the rest; writes
    /// original | kept rows | completion(s) side by side.
    Complete(Box<CompleteArgs>),
    /// Bits per image token of a model on held-out token shards; with --judge, also the
    /// ViT judge's figures (reconstruction and class faithfulness, Fréchet distances).
    Eval(Box<EvalArgs>),
}

#[derive(Args)]
pub struct ModelArgs {
    /// GPT folder (config.json + model.safetensors). Default: the shipped gpt-fashion-mnist.
    #[arg(long)]
    weights: Option<PathBuf>,
}

#[derive(Args)]
pub struct VqArgs {
    /// VQ weights that decode the tokens (default: the GPT config's VQ, else vq-fashion-mnist).
    #[arg(long)]
    vq: Option<PathBuf>,
}

#[derive(Args)]
pub struct DrawArgs {
    /// Softmax temperature: 0 (greedy) or 0.001 to 1000.
    #[arg(long, default_value_t = 1.0)]
    temperature: f64,
    /// Sample from the k most likely codes only.
    #[arg(long)]
    top_k: Option<usize>,
    /// Sample from the smallest set of codes whose probability reaches p.
    #[arg(long)]
    top_p: Option<f64>,
    /// Classifier-free guidance scale, -100 to 100 (1: none).
    #[arg(long, default_value_t = 2.0)]
    guidance: f64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Images generated together (for `eval`: also the sequences per forward pass).
    #[arg(long, default_value_t = 100)]
    batch: usize,
}

impl DrawArgs {
    fn options(&self) -> SampleOptions {
        SampleOptions {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            guidance: self.guidance,
            seed: self.seed,
            batch: self.batch,
        }
    }
}

#[derive(Args)]
pub struct SampleArgs {
    #[command(flatten)]
    m: ModelArgs,
    #[command(flatten)]
    vq: VqArgs,
    /// Class name or index (repeatable); default: every class.
    #[arg(long = "class")]
    classes: Vec<String>,
    /// Images per class.
    #[arg(short, default_value_t = 10)]
    n: usize,
    /// The labelled grid (.png).
    #[arg(short, long)]
    out: PathBuf,
    /// Tokens out as (n_classes·n, h, w) int64 .npy (default: the grid's path with .npy).
    #[arg(long)]
    tokens_out: Option<PathBuf>,
    /// Pixel enlargement of the grid.
    #[arg(long, default_value_t = 2)]
    scale: u32,
    #[command(flatten)]
    draw: DrawArgs,
}

#[derive(Args)]
pub struct CompleteArgs {
    /// The image to complete (docs/generation.md says how it is fitted to the VQ).
    image: PathBuf,
    #[command(flatten)]
    m: ModelArgs,
    #[command(flatten)]
    vq: VqArgs,
    /// Token rows of the image to keep.
    #[arg(long)]
    keep_rows: usize,
    /// The class to complete as (name or index); default: unconditional.
    #[arg(long = "class")]
    class: Option<String>,
    /// Completions to draw.
    #[arg(short, default_value_t = 4)]
    n: usize,
    #[arg(short, long)]
    out: PathBuf,
    #[arg(long, default_value_t = 4)]
    scale: u32,
    #[command(flatten)]
    draw: DrawArgs,
}

#[derive(Args)]
pub struct EvalArgs {
    #[command(flatten)]
    m: ModelArgs,
    /// Token inputs (shard folders, shard .tar files, .npy token files).
    #[arg(long, num_args = 1.., required = true)]
    tokens: Vec<PathBuf>,
    #[command(flatten)]
    judge: crate::gpt_judge::JudgeArgs,
    #[command(flatten)]
    vq: VqArgs,
    #[command(flatten)]
    draw: DrawArgs,
}

#[derive(Args)]
pub struct TrainArgs {
    /// Token inputs: shard folders, shard .tar files or .npy files (--resume: the run's own).
    #[arg(long, num_args = 1..)]
    tokens: Vec<PathBuf>,
    /// Held-out token inputs, scored in bits per token every --eval-every steps.
    #[arg(long, num_args = 1..)]
    val: Vec<PathBuf>,
    /// Run folder (config.json + model.safetensors, optimizer, state, eval.jsonl).
    #[arg(short, long)]
    out: PathBuf,
    /// Continue the run in --out (its training.json and config.json; other flags ignored).
    #[arg(long)]
    resume: bool,
    /// Width, depth and heads of the transformer.
    #[arg(long, default_value_t = 256)]
    n_embd: usize,
    #[arg(long, default_value_t = 4)]
    n_layer: usize,
    #[arg(long, default_value_t = 4)]
    n_head: usize,
    /// Codebook size, when the inputs do not say (.npy token files).
    #[arg(long)]
    n_codes: Option<usize>,
    /// Class names, comma-separated, when the shards carry labels without names.
    #[arg(long, value_delimiter = ',')]
    class_names: Vec<String>,
    /// The VQ the tokens were made with (recorded in config.json; default: from the manifest).
    #[arg(long)]
    vq: Option<String>,
    #[arg(long)]
    steps: Option<usize>,
    /// Sequences per step.
    #[arg(long)]
    batch_size: Option<usize>,
    #[arg(long)]
    lr: Option<f64>,
    #[arg(long)]
    min_lr: Option<f64>,
    #[arg(long)]
    warmup_steps: Option<usize>,
    #[arg(long)]
    weight_decay: Option<f64>,
    /// Global gradient-norm clip (0: off).
    #[arg(long)]
    grad_clip: Option<f64>,
    /// Probability of training a sample as unconditional (for classifier-free guidance).
    #[arg(long)]
    class_dropout: Option<f64>,
    #[arg(long)]
    seed: Option<u64>,
    #[arg(long)]
    eval_every: Option<usize>,
    #[arg(long)]
    checkpoint_every: Option<usize>,
    /// Periodic evaluations score the first N held-out sequences (0: all; default 2000).
    #[arg(long)]
    val_limit: Option<usize>,
    /// Stop after this step with a checkpoint (the schedule stays that of --steps).
    #[arg(long)]
    stop_at: Option<usize>,
}

pub fn run(cmd: GptCmd) -> Result<()> {
    match cmd {
        GptCmd::Train(a) => train(*a),
        GptCmd::Sample(a) => sample(*a),
        GptCmd::Complete(a) => complete(*a),
        GptCmd::Eval(a) => eval(*a),
    }
}

impl ModelArgs {
    fn resolve(&self) -> Result<PathBuf> {
        match &self.weights {
            Some(p) => Ok(p.clone()),
            None => default_model(DEFAULT_GPT),
        }
    }

    /// The model, its config and sequence layout.
    fn load(&self, outs: &mut Outputs) -> Result<(GptConfig, SeqLayout, Gpt2LMHeadModel)> {
        let p = self.resolve()?;
        let (cfg_path, weights) = imgseq_gpt::checkpoint::locate(&p)?;
        outs.add_input(&cfg_path);
        outs.add_input(&weights);
        let (cfg, model) = imgseq_gpt::checkpoint::load(&p, &Device::Cpu)?;
        let layout = cfg
            .layout()
            .map_err(|e| anyhow::anyhow!("{}: {e}", cfg_path.display()))?;
        Ok((cfg, layout, model))
    }
}

impl VqArgs {
    /// The VQ tokenizer (any discrete family the loader opens, in f32; with `size`, at that
    /// input side), checked against the GPT's codebook size.
    fn load(
        &self,
        cfg: &GptConfig,
        layout: &SeqLayout,
        size: Option<u32>,
        outs: &mut Outputs,
    ) -> Result<Opened> {
        let path = match (&self.vq, &cfg.imgseq_vq) {
            (Some(p), _) => p.clone(),
            (None, Some(rec)) if Path::new(rec).exists() => PathBuf::from(rec),
            (None, _) => default_model(DEFAULT_VQ)?,
        };
        let options = OpenOptions {
            size,
            precision: PrecisionRequest::F32,
            ..OpenOptions::default()
        };
        let vq = imgseq_models::open(&path, &options)
            .with_context(|| format!("loading the VQ {}", path.display()))?;
        for f in &vq.files {
            outs.add_input(f);
        }
        match vq.codebook_size() {
            Some(n) if n == layout.n_codes => Ok(vq),
            Some(n) => bail!(
                "the VQ {} has {n} codes but the GPT was trained on {} (a different tokenizer)",
                path.display(),
                layout.n_codes
            ),
            None => bail!(
                "{} makes continuous latents, not the codebook tokens the GPT was trained on",
                path.display()
            ),
        }
    }
}

/// Decodes token sequences (each h·w codes) into pictures, 100 at a time.
fn decode(vq: &Opened, layout: &SeqLayout, seqs: &[Vec<u32>]) -> Result<Vec<RgbImage>> {
    let grid = layout.grid(seqs);
    Ok(decode_batches(vq, &grid, 100, |_| ())?)
}

fn sample(a: SampleArgs) -> Result<()> {
    let mut outs = Outputs::default();
    let tokens_out = a
        .tokens_out
        .clone()
        .unwrap_or_else(|| a.out.with_extension("npy"));
    if tokens_out == a.out {
        bail!("--tokens-out and --out name the same file");
    }
    if a.n == 0 {
        bail!("-n 0: nothing to sample");
    }
    imgseq_gpt::grid::check_scale(a.scale)?;
    let o = a.draw.options();
    o.validate()?;
    let (cfg, layout, model) = a.m.load(&mut outs)?;
    outs.check(&a.out)?;
    outs.check(&tokens_out)?;
    let classes: Vec<usize> = if a.classes.is_empty() {
        (0..layout.n_classes()).collect()
    } else {
        a.classes
            .iter()
            .map(|c| layout.class_index(c))
            .collect::<imgseq_core::Result<_>>()?
    };
    if classes.is_empty() {
        bail!("the model has no classes: nothing to condition on");
    }
    let vq = a.vq.load(&cfg, &layout, None, &mut outs)?;
    // The grid and the memory of every image, checked before sampling.
    let f = downsample_factor(&vq);
    let side = ((layout.h * f) as u32, (layout.w * f) as u32);
    let label = classes
        .iter()
        .map(|&c| layout.class_names[c].chars().count())
        .max();
    imgseq_gpt::grid::check_grid(classes.len(), a.n, side, label.unwrap_or(0), a.scale)?;
    let images = classes.len().saturating_mul(a.n);
    let picture = u128::from(side.0) * u128::from(side.1) * 3;
    imgseq_gpt::sample::check_memory(&cfg, images, o.batch, picture)?;
    let requests: Vec<Request> = classes
        .iter()
        .flat_map(|&c| {
            (0..a.n).map(move |_| Request {
                class: Some(c),
                prefix: vec![],
            })
        })
        .collect();
    let t0 = Instant::now();
    let seqs = generate(&model, &layout, &requests, &o, true)?;
    let t_sample = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let pics = decode(&vq, &layout, &seqs)?;
    let t_decode = t1.elapsed().as_secs_f64();
    let rows: Vec<(String, Vec<RgbImage>)> = classes
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            (
                layout.class_names[c].clone(),
                pics[i * a.n..(i + 1) * a.n].to_vec(),
            )
        })
        .collect();
    let grid = labelled_grid(&rows, a.scale)?;
    outs.write(&a.out, |p| imgseq_core::image_io::save_image(p, &grid))?;
    let data: Vec<i64> = seqs.iter().flatten().map(|&t| t as i64).collect();
    outs.write(&tokens_out, |p| {
        imgseq_core::npy::write_npy_i64(p, &[seqs.len(), layout.h, layout.w], &data)
    })?;
    outs.finish();
    eprintln!(
        "sampled {} images ({} per class, guidance {}) in {t_sample:.2} s, decoded in {t_decode:.2} s; wrote {} and {}",
        seqs.len(),
        a.n,
        o.guidance,
        a.out.display(),
        tokens_out.display()
    );
    Ok(())
}

/// The image as the VQ sees it: smaller ones centred on a black `size` canvas, larger ones
/// resized (shorter side) and centre-cropped.
fn load_for_vq(path: &Path, size: u32, channels: usize) -> Result<RgbImage> {
    let img = imgseq_core::image_io::load_rgb(path)?;
    let img = if img.width() <= size && img.height() <= size {
        let mut c = RgbImage::from_pixel(size, size, Rgb([0, 0, 0]));
        let (x, y) = ((size - img.width()) / 2, (size - img.height()) / 2);
        image::imageops::replace(&mut c, &img, x as i64, y as i64);
        c
    } else {
        imgseq_core::image_io::load_rgb_square(path, size, false)?
    };
    Ok(if channels == 1 {
        imgseq_core::input::as_gray(&img)
    } else {
        img
    })
}

fn complete(a: CompleteArgs) -> Result<()> {
    let mut outs = Outputs::new([a.image.clone()]);
    outs.check(&a.out)?;
    if a.n == 0 {
        bail!("-n 0: nothing to complete");
    }
    imgseq_gpt::grid::check_scale(a.scale)?;
    let o = a.draw.options();
    o.validate()?;
    let (cfg, layout, model) = a.m.load(&mut outs)?;
    if a.keep_rows > layout.h {
        bail!(
            "--keep-rows {} is more than the {} token rows of an image",
            a.keep_rows,
            layout.h
        );
    }
    let class = a
        .class
        .as_deref()
        .map(|c| layout.class_index(c))
        .transpose()?;
    // The VQ at the side its grid of the GPT's shape needs.
    let first = a.vq.load(&cfg, &layout, None, &mut outs)?;
    let f = downsample_factor(&first);
    let size = (layout.h * f) as u32;
    let vq = if first.input().size == size {
        first
    } else {
        a.vq.load(&cfg, &layout, Some(size), &mut outs)?
    };
    let side = (size, (layout.w * f) as u32);
    let label = class.map_or(0, |c| layout.class_names[c].chars().count());
    imgseq_gpt::grid::check_grid(1, a.n.saturating_add(2), side, label, a.scale)?;
    let picture = u128::from(side.0) * u128::from(side.1) * 3;
    imgseq_gpt::sample::check_memory(&cfg, a.n, o.batch, picture)?;
    let original = load_for_vq(&a.image, size, vq.input().channels)?;
    let grid = vq
        .encode_pictures(std::slice::from_ref(&original))?
        .into_tokens()?;
    let recon = vq.decode(&grid)?;
    if (grid.h, grid.w) != (layout.h, layout.w) {
        bail!(
            "the VQ gives a {}x{} grid for this image but the GPT expects {}x{}",
            grid.h,
            grid.w,
            layout.h,
            layout.w
        );
    }
    let keep = a.keep_rows * layout.w;
    let prefix: Vec<u32> = grid.data[..keep].iter().map(|&t| t as u32).collect();
    let requests: Vec<Request> = (0..a.n)
        .map(|_| Request {
            class,
            prefix: prefix.clone(),
        })
        .collect();
    let t0 = Instant::now();
    let seqs = generate(&model, &layout, &requests, &o, false)?;
    let secs = t0.elapsed().as_secs_f64();
    let completions = decode(&vq, &layout, &seqs)?;
    // The kept rows: the reconstruction above the cut, mid-gray below.
    let cut = (a.keep_rows * f) as u32;
    let mut kept = recon[0].clone();
    for y in cut..kept.height() {
        for x in 0..kept.width() {
            kept.put_pixel(x, y, Rgb([128, 128, 128]));
        }
    }
    let mut row = vec![original, kept];
    row.extend(completions);
    let label = match class {
        Some(c) => layout.class_names[c].clone(),
        None => String::new(),
    };
    let img = labelled_grid(&[(label, row)], a.scale)?;
    outs.write(&a.out, |p| imgseq_core::image_io::save_image(p, &img))?;
    outs.finish();
    eprintln!(
        "kept {} of {} token rows, generated {} completions in {secs:.2} s; wrote {} (original | kept | completions)",
        a.keep_rows,
        layout.h,
        a.n,
        a.out.display()
    );
    Ok(())
}

/// The files of token inputs (a shard folder's own files included): what an output may never
/// replace.
fn token_input_files(tokens: &[PathBuf]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for t in tokens {
        files.push(t.clone());
        if let Ok(rd) = std::fs::read_dir(t) {
            files.extend(rd.flatten().map(|e| e.path()));
        }
    }
    files
}

fn eval(a: EvalArgs) -> Result<()> {
    let mut outs = Outputs::new(token_input_files(&a.tokens));
    let (cfg, layout, model) = a.m.load(&mut outs)?;
    let o = a.draw.options();
    o.validate()?;
    if let Some(p) = &a.judge.json {
        outs.check(p)?;
    }
    // Refuse a bad VQ or judge before the minutes of measuring.
    let vq = match &a.judge.judge {
        Some(_) => Some(a.vq.load(&cfg, &layout, None, &mut outs)?),
        None => None,
    };
    if a.draw.batch == 0 {
        bail!("--batch 0 must be positive");
    }
    imgseq_gpt::sample::check_memory(&cfg, a.draw.batch, a.draw.batch, 0)?;
    let set = data::load(&a.tokens)?;
    let t0 = Instant::now();
    let bpt = gtrain::bits_per_token(&model, &layout, &set, a.draw.batch, true)?;
    let labelled = set.labels.iter().filter(|l| l.is_some()).count();
    eprintln!(
        "{} sequences ({labelled} labelled) of {} tokens in {:.1} s",
        set.len(),
        layout.n_tokens(),
        t0.elapsed().as_secs_f64()
    );
    let figures = serde_json::json!({
        "bits_per_token": bpt,
        "sequences": set.len(),
        "tokens_per_sequence": layout.n_tokens(),
        "labelled": labelled,
    });
    println!("{figures}");
    let figures = match (&a.judge.judge, &vq) {
        (Some(dir), Some(vq)) => {
            crate::gpt_judge::judge(dir, &a.judge, &model, &layout, vq, &o, Some(bpt))?
        }
        _ => figures,
    };
    if let Some(p) = &a.judge.json {
        outs.write(p, |p| imgseq_core::fsutil::write_json(p, &figures))?;
    }
    outs.finish();
    Ok(())
}

fn strings(p: &[PathBuf]) -> Vec<String> {
    p.iter().map(|p| p.display().to_string()).collect()
}

/// A new run's recipe: the library's defaults, overridden by the flags given.
fn recipe(a: &TrainArgs) -> TrainConfig {
    let d = TrainConfig::default();
    TrainConfig {
        tokens: strings(&a.tokens),
        val: strings(&a.val),
        steps: a.steps.unwrap_or(d.steps),
        batch_size: a.batch_size.unwrap_or(d.batch_size),
        lr: a.lr.unwrap_or(d.lr),
        min_lr: a.min_lr.unwrap_or(d.min_lr),
        warmup_steps: a.warmup_steps.unwrap_or(d.warmup_steps),
        weight_decay: a.weight_decay.unwrap_or(d.weight_decay),
        grad_clip: a.grad_clip.unwrap_or(d.grad_clip),
        class_dropout: a.class_dropout.unwrap_or(d.class_dropout),
        seed: a.seed.unwrap_or(d.seed),
        eval_every: a.eval_every.unwrap_or(d.eval_every),
        checkpoint_every: a.checkpoint_every.unwrap_or(d.checkpoint_every),
        val_limit: a.val_limit.unwrap_or(d.val_limit),
    }
}

fn train(a: TrainArgs) -> Result<()> {
    let job = if a.resume {
        job::resume(&a.out, &a.tokens, &a.val)?
    } else {
        gtrain::check_start(&a.out, false)?;
        if a.tokens.is_empty() {
            bail!("--tokens is required for a new run");
        }
        let spec = job::ModelSpec {
            n_embd: a.n_embd,
            n_layer: a.n_layer,
            n_head: a.n_head,
            n_codes: a.n_codes,
            class_names: a.class_names.clone(),
            vq: a.vq.clone(),
        };
        job::new_run(recipe(&a), &a.tokens, &a.val, &spec)?
    };
    eprintln!("{}", job.describe()?);
    let state = job
        .run(&a.out, a.resume, a.stop_at)
        .with_context(|| format!("training into {}", a.out.display()))?;
    eprintln!("{}", job::summary(&state));
    Ok(())
}
