//! `imgseq vit ...`: continuous tokens with a Vision Transformer.

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor, D};
use clap::{Args, Subcommand, ValueEnum};
use imgseq_core::data::Split;
use imgseq_core::fsutil::Outputs;
use imgseq_core::npy::{read_npy_f32, write_npy_f32};
use imgseq_kernels::PrecisionChoice;
use imgseq_train::vit::job::{self as train_job, ModelOptions};
use imgseq_train::vit::{check_start, clear_run, TrainConfig};
use imgseq_vit::data::{Augment, Normalize};
use imgseq_vit::Classifier;
use std::path::{Path, PathBuf};

use crate::paths::default_model;
use crate::precision_arg::PrecisionArg;
use crate::vit_data_arg::DataArgs;

/// The shipped default ViT (Fashion-MNIST, seed shapes).
pub const DEFAULT_VIT: &str = "vit-fashion-mnist";

#[derive(Subcommand)]
pub enum VitCmd {
    /// Turn an image into ViT tokens: prints the token and position-embedding shapes.
    Embed(EmbedArgs),
    /// Train a ViT classifier (AdamW, warmup + cosine); resumable.
    Train(TrainArgs),
    /// Accuracy, per-class accuracy and confusion matrix on a test set (or, with
    /// `--split train`, on the training images).
    Eval(EvalArgs),
    /// Top-k labels with probabilities for images.
    Classify(ClassifyArgs),
    /// Draw the cosine similarity of the learned position embeddings (8x8 grid of 8x8 maps).
    PlotPositions(PlotArgs),
    /// Run the model on an already pre-processed (n, c, h, w) float32 .npy; writes logits .npy.
    Forward(ForwardArgs),
    /// Train a small CNN teacher and write its soft labels for `vit train --soft-labels`.
    Teacher(crate::vit_teacher_cmd::TeacherArgs),
}

#[derive(Args)]
pub struct WeightsArg {
    /// Model folder, or a .safetensors with config.json beside it (default: the shipped one).
    #[arg(long)]
    weights: Option<PathBuf>,
}

#[derive(Args)]
pub struct EmbedArgs {
    image: PathBuf,
    #[command(flatten)]
    w: WeightsArg,
    /// Input size, a multiple of the patch size (positions interpolated; default: the model's).
    #[arg(long)]
    size: Option<usize>,
    /// Write the token embeddings (1, tokens, hidden) as float32 .npy.
    #[arg(long)]
    npy: Option<PathBuf>,
    /// Also write the position embeddings (1, tokens, hidden) as float32 .npy.
    #[arg(long)]
    pos_npy: Option<PathBuf>,
    /// Invert gray levels (Fashion-MNIST is a light object on black; most photos are not).
    #[arg(long)]
    invert: bool,
    #[command(flatten)]
    prec: PrecisionArg,
}

/// The library's training defaults: the one source of the defaults `vit train --help` shows.
fn train_default() -> TrainConfig {
    TrainConfig::default()
}

#[derive(Args)]
pub struct TrainArgs {
    #[command(flatten)]
    data: DataArgs,
    /// Run folder: checkpoints, config.json, training.json, state.json.
    #[arg(short, long, default_value = "runs/vit")]
    out: PathBuf,
    #[arg(long, default_value_t = train_default().epochs)]
    epochs: usize,
    #[arg(long, default_value_t = train_default().batch_size)]
    batch_size: usize,
    #[arg(long, allow_negative_numbers = true, default_value_t = train_default().lr)]
    lr: f64,
    #[arg(long, allow_negative_numbers = true, default_value_t = train_default().weight_decay)]
    weight_decay: f64,
    #[arg(long, allow_negative_numbers = true, default_value_t = train_default().warmup_epochs)]
    warmup_epochs: f64,
    #[arg(long, allow_negative_numbers = true, default_value_t = train_default().label_smoothing)]
    label_smoothing: f64,
    /// Max random shift in pixels (augmentation).
    #[arg(long, default_value_t = train_default().augment.shift)]
    shift: usize,
    /// Disable random horizontal flips.
    #[arg(long)]
    no_flip: bool,
    /// Probability of random erasing.
    #[arg(long, allow_negative_numbers = true, default_value_t = train_default().augment.erase_prob)]
    erase_prob: f32,
    #[arg(long, default_value_t = train_default().seed)]
    seed: u64,
    /// Continue the run in --out from its last checkpoint (there must be one).
    #[arg(long, conflicts_with = "overwrite")]
    resume: bool,
    /// Start a new run in --out even if it holds one (its run files are removed first).
    #[arg(long)]
    overwrite: bool,
    /// Training engine: `fused` (hand-written, faster) or `autograd` (the reference); docs/training.md.
    #[arg(long, value_enum, default_value = "fused")]
    engine: EngineArg,
    /// Decay of a moving average of the weights, evaluated and saved as the model (0: off).
    #[arg(long, allow_negative_numbers = true, default_value_t = train_default().ema)]
    ema: f64,
    /// Distil a teacher's `soft_labels.npy` (from `vit teacher` on the same data and --limit).
    #[arg(long)]
    soft_labels: Option<PathBuf>,
    /// Weight of the teacher's probabilities in each target (with --soft-labels).
    #[arg(long, allow_negative_numbers = true, default_value_t = train_default().distill)]
    distill: f64,
    /// New model: encoder layers (the seed has 4; width stays 48, tokens stay 65).
    #[arg(long, default_value_t = 4)]
    layers: usize,
    /// New model: attention heads (must divide the width, 48).
    #[arg(long, default_value_t = 4)]
    heads: usize,
    /// New model: MLP width (HF `intermediate_size`).
    #[arg(long, default_value_t = 192)]
    intermediate_size: usize,
    /// New model: image channels (default: the dataset's; gray data feeds 3 equal channels).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=3))]
    channels: Option<u8>,
    /// New model: image side before the 32×32 canvas (default: the dataset's own); docs/training.md.
    #[arg(long)]
    input_size: Option<usize>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum EngineArg {
    Fused,
    Autograd,
}

#[derive(Args)]
pub struct EvalArgs {
    #[command(flatten)]
    data: DataArgs,
    #[command(flatten)]
    w: WeightsArg,
    /// Split to score: `test` (held out) or `train` (the training images, unaugmented).
    #[arg(long, value_enum, default_value_t = SplitArg::Test)]
    split: SplitArg,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    #[command(flatten)]
    prec: PrecisionArg,
}

#[derive(Clone, Copy, ValueEnum)]
enum SplitArg {
    Test,
    Train,
}

#[derive(Args)]
pub struct ClassifyArgs {
    #[arg(required = true)]
    images: Vec<PathBuf>,
    #[command(flatten)]
    w: WeightsArg,
    #[arg(short = 'k', long, default_value_t = 3)]
    top_k: usize,
    /// Invert gray levels before classifying (see `vit embed --help`).
    #[arg(long)]
    invert: bool,
    #[command(flatten)]
    prec: PrecisionArg,
}

#[derive(Args)]
pub struct PlotArgs {
    #[command(flatten)]
    w: WeightsArg,
    /// Output image (png, jpg, jpeg, webp or bmp, by extension).
    #[arg(short, long, default_value = "positions.png")]
    output: PathBuf,
}

#[derive(Args)]
pub struct ForwardArgs {
    input: PathBuf,
    #[command(flatten)]
    w: WeightsArg,
    #[arg(short, long)]
    output: PathBuf,
    /// Interpolate positions when the input size differs from the model's.
    #[arg(long)]
    interpolate_pos_encoding: bool,
    #[command(flatten)]
    prec: PrecisionArg,
}

pub fn run(cmd: VitCmd) -> Result<()> {
    match cmd {
        VitCmd::Embed(a) => embed(a),
        VitCmd::Train(a) => train(a),
        VitCmd::Eval(a) => eval(a),
        VitCmd::Classify(a) => classify(a),
        VitCmd::PlotPositions(a) => plot_positions(a),
        VitCmd::Forward(a) => forward(a),
        VitCmd::Teacher(a) => crate::vit_teacher_cmd::teacher(a),
    }
}

impl WeightsArg {
    fn resolve(&self) -> Result<PathBuf> {
        match &self.weights {
            Some(p) => Ok(p.clone()),
            None => default_model(DEFAULT_VIT),
        }
    }

    /// The model's files (inputs an output must not replace): the weights path and, for a
    /// folder, the files in it.
    fn inputs(&self) -> Vec<PathBuf> {
        let Ok(p) = self.resolve() else {
            return Vec::new();
        };
        let mut v = vec![p.clone()];
        let dir = if p.is_dir() {
            p
        } else {
            p.parent().map(Path::to_path_buf).unwrap_or_default()
        };
        for f in imgseq_train::vit::RUN_FILES {
            v.push(dir.join(f));
        }
        v
    }
}

/// Loads the classifier at `path` in the precision `prec` asks for (said with --verbose).
fn load_classifier(path: &Path, prec: &PrecisionArg) -> Result<(Classifier, PrecisionChoice)> {
    let mut m = Classifier::load(path)?;
    let choice = m
        .choose_precision(prec.precision)
        .with_context(|| format!("{}: cannot set precision", path.display()))?;
    prec.report(&choice);
    Ok((m, choice))
}

fn embed(a: EmbedArgs) -> Result<()> {
    let mut outs = Outputs::new(std::iter::once(a.image.clone()).chain(a.w.inputs()));
    for p in a.npy.iter().chain(&a.pos_npy) {
        outs.check(p)?;
    }
    if a.npy.is_some() && a.npy == a.pos_npy {
        bail!("--npy and --pos-npy name the same file");
    }
    let (m, _) = load_classifier(&a.w.resolve()?, &a.prec)?;
    let size = a.size.unwrap_or(m.cfg.image_size);
    let (gh, gw) = m.cfg.check_input_size(size, size)?;
    let x = m.load_images(std::slice::from_ref(&a.image), size, a.invert)?; // (1, c, size, size)
    let e = m.embed(&x)?;
    let (tokens, pos) = (&e.tokens, &e.positions); // (1, 65, 48) each
    let (_, n, hdim) = tokens.dims3()?;
    println!(
        "image: {} -> {}x{}x{} input",
        a.image.display(),
        m.cfg.num_channels,
        size,
        size
    );
    println!(
        "patches: {gh}x{gw} of {}x{} px = {} + 1 CLS = {n} tokens",
        m.cfg.patch_size,
        m.cfg.patch_size,
        n - 1
    );
    println!("token embeddings:    {:?}", tokens.dims());
    println!("position embeddings: {:?}", pos.dims());
    if let Some(p) = &a.npy {
        let v = tokens.flatten_all()?.to_vec1::<f32>()?;
        outs.write(p, |p| write_npy_f32(p, &[1, n, hdim], &v))?;
    }
    if let Some(p) = &a.pos_npy {
        let v = pos.flatten_all()?.to_vec1::<f32>()?;
        outs.write(p, |p| write_npy_f32(p, &[1, n, hdim], &v))?;
    }
    outs.finish();
    for p in a.npy.iter().chain(&a.pos_npy) {
        println!("wrote {}", p.display());
    }
    Ok(())
}

/// [`check_start`] with the flags that settle it.
fn check_run_folder(out: &Path, resume: bool) -> Result<()> {
    check_start(out, resume).map_err(|e| {
        let hint = if resume {
            "start one without --resume"
        } else {
            "--resume continues it, --overwrite starts over"
        };
        anyhow::anyhow!("{e} ({hint})")
    })
}

fn train(a: TrainArgs) -> Result<()> {
    let source = a.data.source()?;
    let limit = a.data.limit;
    let job = if a.resume {
        check_run_folder(&a.out, true)?;
        train_job::resume(&a.out, &source, limit, a.epochs)?
    } else {
        let m = ModelOptions {
            channels: a.channels.map(usize::from),
            input_size: a.input_size,
            layers: a.layers,
            heads: a.heads,
            intermediate_size: a.intermediate_size,
        };
        let (channels, input) = m.settle(&source)?;
        // The options are checked before any data is read.
        let tc = TrainConfig {
            dataset: source.name().into(),
            input_size: Some(input),
            epochs: a.epochs,
            batch_size: a.batch_size,
            lr: a.lr,
            weight_decay: a.weight_decay,
            warmup_epochs: a.warmup_epochs,
            label_smoothing: a.label_smoothing,
            seed: a.seed,
            ema: a.ema,
            soft_labels: a.soft_labels.as_ref().map(|p| p.display().to_string()),
            distill: a.distill,
            augment: Augment {
                shift: a.shift,
                hflip: !a.no_flip,
                erase_prob: a.erase_prob,
            },
            normalize: Normalize::hf_default(channels),
            ..TrainConfig::default()
        };
        tc.validate()?;
        if a.overwrite {
            clear_run(&a.out)?;
        }
        check_run_folder(&a.out, false)?;
        train_job::new_run(&source, limit, &m, (channels, input), tc)?
    };
    let engine = match a.engine {
        EngineArg::Fused => imgseq_train::vit::Engine::Fused,
        EngineArg::Autograd => imgseq_train::vit::Engine::Autograd,
    };
    let state = job.run(&a.out, a.resume, engine)?;
    println!(
        "done: {} epochs, test accuracy {:.2}%, checkpoint in {}",
        state.epochs_done,
        100.0 * state.test_accuracy.last().copied().unwrap_or(0.0),
        a.out.display()
    );
    Ok(())
}

fn eval(a: EvalArgs) -> Result<()> {
    let mut outs = Outputs::new(a.w.inputs());
    if let Some(j) = &a.json {
        outs.check(j)?;
    }
    let path = a.w.resolve()?;
    let (m, precision) = load_classifier(&path, &a.prec)?;
    let source = a.data.source()?;
    let (split, what) = match a.split {
        SplitArg::Test => (Split::Test, "test"),
        SplitArg::Train => (Split::Train, "train"),
    };
    let set = m.load_split(&source, split, a.data.limit)?;
    // An empty split is the library's error; here it gets the data's name.
    let r = m.evaluate(&set, true).map_err(|e| match &a.data.data {
        Some(d) if set.n == 0 => anyhow::anyhow!("{}: {e}", d.display()),
        _ => e.into(),
    })?;
    println!("model: {}", path.display());
    println!("precision: {precision}");
    println!("{what} images: {}", r.n);
    println!("accuracy: {:.2}%", 100.0 * r.accuracy);
    println!("per-class accuracy:");
    let k = m.cfg.num_labels();
    for i in 0..k {
        let acc = if r.per_class[i].is_nan() {
            format!("  (no {what} images)")
        } else {
            format!("{:6.2}%", 100.0 * r.per_class[i])
        };
        println!("  {:>2} {:<14} {acc}", i, m.cfg.label(i));
    }
    println!("confusion matrix (rows: true, columns: predicted):");
    print!("     ");
    for j in 0..k {
        print!("{j:>6}");
    }
    println!();
    for i in 0..k {
        print!("  {i:>2} ");
        for j in 0..k {
            print!("{:>6}", r.confusion[i][j]);
        }
        println!();
    }
    if let Some(j) = &a.json {
        let text = serde_json::to_string_pretty(&r)?;
        outs.write_bytes(j, text.as_bytes())?;
    }
    outs.finish();
    Ok(())
}

fn classify(a: ClassifyArgs) -> Result<()> {
    let (m, _) = load_classifier(&a.w.resolve()?, &a.prec)?;
    let x = m.load_images(&a.images, m.cfg.image_size, a.invert)?;
    for (p, top) in a.images.iter().zip(m.top_k(&x, a.top_k)?) {
        let top: Vec<String> = top
            .iter()
            .map(|&(j, prob)| format!("{} {:.3}", m.cfg.label(j), prob))
            .collect();
        println!("{}: {}", p.display(), top.join(", "));
    }
    Ok(())
}

fn plot_positions(a: PlotArgs) -> Result<()> {
    let mut outs = Outputs::new(a.w.inputs());
    imgseq_core::image_io::output_format(&a.output)?;
    outs.check(&a.output)?;
    let m = Classifier::load(&a.w.resolve()?)?;
    let pos = m.model.vit.embeddings.patch_positions()?; // (64, hidden), CLS excluded
    let (n, d) = pos.dims2()?;
    let plot = imgseq_vit::position_plot::plot_positions(&pos.flatten_all()?.to_vec1()?, n, d)?;
    outs.write(&a.output, |p| {
        imgseq_core::image_io::save_image(p, &plot.image)
    })?;
    let side = plot.side;
    println!(
        "wrote {} ({side}x{side} maps of {side}x{side}; colour: cosine similarity -1 (dark) .. 1 (yellow))",
        a.output.display()
    );
    println!(
        "mean cosine similarity: neighbouring patches {:.3}, patches >= {} apart {:.3}",
        plot.near,
        side / 2,
        plot.far
    );
    outs.finish();
    Ok(())
}

fn forward(a: ForwardArgs) -> Result<()> {
    let mut outs = Outputs::new(std::iter::once(a.input.clone()).chain(a.w.inputs()));
    outs.check(&a.output)?;
    let (m, _) = load_classifier(&a.w.resolve()?, &a.prec)?;
    let (shape, data) = read_npy_f32(&a.input)?;
    if shape.len() != 4 || shape[1] != m.cfg.num_channels {
        bail!(
            "{}: expected a float32 array (n, {}, h, w), got shape {:?}",
            a.input.display(),
            m.cfg.num_channels,
            shape
        );
    }
    let x = Tensor::from_vec(data, (shape[0], shape[1], shape[2], shape[3]), &Device::Cpu)?;
    let logits = m
        .logits(&x, a.interpolate_pos_encoding)
        .with_context(|| format!("{}: cannot run the model on this input", a.input.display()))?;
    let dims = logits.dims().to_vec();
    let v = logits
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    outs.write(&a.output, |p| write_npy_f32(p, &dims, &v))?;
    outs.finish();
    let pred = logits.argmax(D::Minus1)?.to_vec1::<u32>()?;
    println!(
        "logits {:?} -> {}; predictions {:?}",
        dims,
        a.output.display(),
        pred
    );
    Ok(())
}
