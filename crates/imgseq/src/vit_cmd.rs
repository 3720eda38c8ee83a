//! `imgseq vit ...`: continuous tokens with a Vision Transformer.

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor, D};
use clap::{Args, Subcommand, ValueEnum};
use imgseq_core::image_io::{fit_dynamic, load_image, Fit};
use imgseq_core::npy::{read_npy_f32, write_npy_f32};
use imgseq_vit::checkpoint::load_classifier;
use imgseq_vit::data::{channel_stats, make_batch, pad_to, ImageSet, Normalize};
use imgseq_vit::train::{evaluate, TrainConfig};
use imgseq_vit::{ViTConfig, ViTForImageClassification};
use std::path::{Path, PathBuf};

use crate::paths::default_model;

/// The shipped default ViT (Fashion-MNIST, seed shapes).
pub const DEFAULT_VIT: &str = "vit-fashion-mnist";

#[derive(Subcommand)]
pub enum VitCmd {
    /// Turn an image into ViT tokens: prints the token and position-embedding shapes.
    Embed(EmbedArgs),
    /// Train a ViT classifier (AdamW, warmup + cosine); resumable.
    Train(TrainArgs),
    /// Accuracy, per-class accuracy and confusion matrix on a test set.
    Eval(EvalArgs),
    /// Top-k labels with probabilities for images.
    Classify(ClassifyArgs),
    /// Draw the cosine similarity of the learned position embeddings (8x8 grid of 8x8 maps).
    PlotPositions(PlotArgs),
    /// Run the model on an already pre-processed (n, c, h, w) float32 .npy; writes logits .npy.
    Forward(ForwardArgs),
}

#[derive(Args)]
pub struct WeightsArg {
    /// Checkpoint folder (config.json + model.safetensors) or a .safetensors file with
    /// config.json beside it. Default: the shipped Fashion-MNIST model.
    #[arg(long)]
    weights: Option<PathBuf>,
}

#[derive(Args)]
pub struct EmbedArgs {
    image: PathBuf,
    #[command(flatten)]
    w: WeightsArg,
    /// Run at this input size (a multiple of the patch size) with interpolated positions,
    /// e.g. 48 → 145 tokens. Default: the model's image_size.
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
}

#[derive(Clone, Copy, ValueEnum)]
pub enum DatasetKind {
    FashionMnist,
    Cifar10,
    Folder,
}

#[derive(Args)]
pub struct DataArgs {
    /// Which dataset.
    #[arg(long, value_enum, default_value = "fashion-mnist")]
    dataset: DatasetKind,
    /// Dataset folder. Fashion-MNIST default: /usr/share/datasets/fashion-mnist (Debian package
    /// dataset-fashion-mnist). CIFAR-10: the folder with data_batch_*.bin / test_batch.bin.
    /// Folder: a folder with `train/` and `test/`, each with one subfolder per class.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Use only the first N images of each split (quick experiments).
    #[arg(long)]
    limit: Option<usize>,
}

#[derive(Args)]
pub struct TrainArgs {
    #[command(flatten)]
    data: DataArgs,
    /// Run folder: checkpoints, config.json, training.json, state.json.
    #[arg(short, long, default_value = "runs/vit")]
    out: PathBuf,
    #[arg(long, default_value_t = 30)]
    epochs: usize,
    #[arg(long, default_value_t = 128)]
    batch_size: usize,
    #[arg(long, default_value_t = 2e-3)]
    lr: f64,
    #[arg(long, default_value_t = 0.05)]
    weight_decay: f64,
    #[arg(long, default_value_t = 2.0)]
    warmup_epochs: f64,
    #[arg(long, default_value_t = 0.1)]
    label_smoothing: f64,
    /// Max random shift in pixels (augmentation).
    #[arg(long, default_value_t = 2)]
    shift: usize,
    /// Disable random horizontal flips.
    #[arg(long)]
    no_flip: bool,
    /// Probability of random erasing.
    #[arg(long, default_value_t = 0.25)]
    erase_prob: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Continue the run in --out from its last checkpoint.
    #[arg(long)]
    resume: bool,
}

#[derive(Args)]
pub struct EvalArgs {
    #[command(flatten)]
    data: DataArgs,
    #[command(flatten)]
    w: WeightsArg,
    /// Also write the report as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
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
}

#[derive(Args)]
pub struct PlotArgs {
    #[command(flatten)]
    w: WeightsArg,
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
}

pub fn run(cmd: VitCmd) -> Result<()> {
    match cmd {
        VitCmd::Embed(a) => embed(a),
        VitCmd::Train(a) => train(a),
        VitCmd::Eval(a) => eval(a),
        VitCmd::Classify(a) => classify(a),
        VitCmd::PlotPositions(a) => crate::vit_plot::plot_positions(&a.w.resolve()?, &a.output),
        VitCmd::Forward(a) => forward(a),
    }
}

impl WeightsArg {
    fn resolve(&self) -> Result<PathBuf> {
        match &self.weights {
            Some(p) => Ok(p.clone()),
            None => default_model(DEFAULT_VIT),
        }
    }
}

/// A loaded classifier with how its inputs are prepared.
pub struct Loaded {
    pub cfg: ViTConfig,
    pub model: ViTForImageClassification,
    /// Size of the image content before centre padding to `image_size` (28 for Fashion-MNIST).
    pub input_size: usize,
    pub normalize: Normalize,
}

pub fn load(path: &Path) -> Result<Loaded> {
    let (cfg, model) = load_classifier(path, &Device::Cpu)?;
    let dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().unwrap_or(Path::new(".")).to_path_buf()
    };
    let tc_path = dir.join("training.json");
    let (input_size, normalize) = if tc_path.exists() {
        let tc = TrainConfig::load(&tc_path)?;
        (tc.input_size.unwrap_or(cfg.image_size), tc.normalize)
    } else {
        // HF ViTImageProcessor defaults.
        (
            cfg.image_size,
            Normalize {
                image_mean: vec![0.5; cfg.num_channels],
                image_std: vec![0.5; cfg.num_channels],
            },
        )
    };
    Ok(Loaded {
        cfg,
        model,
        input_size,
        normalize,
    })
}

/// Loads images, converts channels, letterboxes them to `content` pixels (black fill), and
/// centres them on the model's `size`×`size` canvas.
fn image_set(
    paths: &[PathBuf],
    channels: usize,
    content: usize,
    size: usize,
    invert: bool,
) -> Result<ImageSet> {
    let mut images = Vec::new();
    for p in paths {
        let img = load_image(p, channels)?;
        let img = fit_dynamic(
            &img,
            content as u32,
            Fit::Letterbox(if invert { 255 } else { 0 }),
        )?;
        let (w, h) = (img.width() as usize, img.height() as usize);
        let raw = img.into_bytes(); // HWC interleaved
        let mut chw = vec![0u8; raw.len()];
        for y in 0..h {
            for x in 0..w {
                for c in 0..channels {
                    let v = raw[(y * w + x) * channels + c];
                    chw[c * h * w + y * w + x] = if invert { 255 - v } else { v };
                }
            }
        }
        images.extend(chw);
    }
    let ds = ImageSet::new(
        images,
        vec![0; paths.len()],
        (channels, content, content),
        vec!["?".into()],
    )?;
    Ok(pad_to(ds, size)?)
}

fn embed(a: EmbedArgs) -> Result<()> {
    let m = load(&a.w.resolve()?)?;
    let size = a.size.unwrap_or(m.cfg.image_size);
    if !size.is_multiple_of(m.cfg.patch_size) {
        bail!(
            "--size {size} is not a multiple of the patch size {}",
            m.cfg.patch_size
        );
    }
    // Content scales with the requested size (28 of 32 for Fashion-MNIST).
    let content = m.input_size * size / m.cfg.image_size;
    let set = image_set(
        std::slice::from_ref(&a.image),
        m.cfg.num_channels,
        content,
        size,
        a.invert,
    )?;
    let (x, _) = make_batch(&set, &[0], &m.normalize, None, &Device::Cpu)?; // (1, c, size, size)
    let interpolate = size != m.cfg.image_size;
    let tokens = m.model.vit.embeddings.forward(&x, interpolate)?; // (1, 65, 48)
    let pos = m.model.vit.embeddings.positions(size, size, interpolate)?; // (1, 65, 48)
    let (_, n, hdim) = tokens.dims3()?;
    println!(
        "image: {} -> {}x{}x{} input",
        a.image.display(),
        m.cfg.num_channels,
        size,
        size
    );
    println!(
        "patches: {}x{} of {}x{} px = {} + 1 CLS = {n} tokens",
        size / m.cfg.patch_size,
        size / m.cfg.patch_size,
        m.cfg.patch_size,
        m.cfg.patch_size,
        n - 1
    );
    println!("token embeddings:    {:?}", tokens.dims());
    println!("position embeddings: {:?}", pos.dims());
    if let Some(p) = &a.npy {
        write_npy_f32(p, &[1, n, hdim], &tokens.flatten_all()?.to_vec1::<f32>()?)?;
        println!("wrote {}", p.display());
    }
    if let Some(p) = &a.pos_npy {
        write_npy_f32(p, &[1, n, hdim], &pos.flatten_all()?.to_vec1::<f32>()?)?;
        println!("wrote {}", p.display());
    }
    Ok(())
}

/// Loads one split at `input` pixels with `channels`, optionally truncated, centred on the
/// model's `size`×`size` canvas.
fn load_split(
    d: &DataArgs,
    train: bool,
    input: usize,
    channels: usize,
    size: usize,
) -> Result<ImageSet> {
    use imgseq_core::data::{cifar10, fashion_mnist, image_folder, Split};
    let split = if train { Split::Train } else { Split::Test };
    let mut set = match d.dataset {
        DatasetKind::FashionMnist => fashion_mnist(d.data.as_deref(), split)?,
        DatasetKind::Cifar10 => {
            let dir = d.data.as_deref().context(
                "--data DIR is required for CIFAR-10 (the folder with data_batch_1.bin ...)",
            )?;
            cifar10(dir, split)?
        }
        DatasetKind::Folder => {
            let dir = d
                .data
                .as_deref()
                .context("--data DIR is required for an image folder")?;
            let sub = dir.join(if train { "train" } else { "test" });
            image_folder(&sub, input as u32, channels, Fit::Letterbox(0))?
        }
    };
    if (set.channels, set.height) != (channels, input) {
        bail!(
            "the {} data is {}x{}x{} but the model expects {}x{}x{}",
            if train { "training" } else { "test" },
            set.channels,
            set.height,
            set.width,
            channels,
            input,
            input
        );
    }
    if let Some(l) = d.limit {
        let l = l.min(set.n);
        set.images.truncate(l * set.image_len());
        set.labels.truncate(l);
        set.n = l;
    }
    Ok(pad_to(set, size)?)
}

fn train(a: TrainArgs) -> Result<()> {
    let tc_path = a.out.join("training.json");
    let (model_cfg, tc, train_set, test_set) = if a.resume && tc_path.exists() {
        let tc = TrainConfig::load(&tc_path)?;
        let cfg = ViTConfig::load(a.out.join("config.json"))?;
        let input = tc.input_size.unwrap_or(cfg.image_size);
        let tr = load_split(&a.data, true, input, cfg.num_channels, cfg.image_size)?;
        let te = load_split(&a.data, false, input, cfg.num_channels, cfg.image_size)?;
        (cfg, tc, tr, te)
    } else {
        let (channels, input) = match a.data.dataset {
            DatasetKind::FashionMnist => (1, 28),
            DatasetKind::Cifar10 => (3, 32),
            DatasetKind::Folder => (3, 32),
        };
        let tr = load_split(&a.data, true, input, channels, 32)?;
        let te = load_split(&a.data, false, input, channels, 32)?;
        let names: Vec<&str> = tr.class_names.iter().map(|s| s.as_str()).collect();
        let cfg = ViTConfig::seed(channels, &names);
        let (mean, std) = channel_stats(&tr);
        let mut tc = TrainConfig::fashion_mnist_default(Normalize {
            image_mean: mean,
            image_std: std,
        });
        tc.dataset = match a.data.dataset {
            DatasetKind::FashionMnist => "fashion-mnist",
            DatasetKind::Cifar10 => "cifar-10",
            DatasetKind::Folder => "image-folder",
        }
        .into();
        tc.input_size = Some(input);
        tc.epochs = a.epochs;
        tc.batch_size = a.batch_size;
        tc.lr = a.lr;
        tc.weight_decay = a.weight_decay;
        tc.warmup_epochs = a.warmup_epochs;
        tc.label_smoothing = a.label_smoothing;
        tc.seed = a.seed;
        tc.augment.shift = a.shift;
        tc.augment.hflip = !a.no_flip;
        tc.augment.erase_prob = a.erase_prob;
        (cfg, tc, tr, te)
    };
    let mut tc = tc;
    if a.resume {
        tc.epochs = a.epochs.max(tc.epochs);
    }
    if train_set.n < tc.batch_size {
        bail!(
            "the training set has {} images, fewer than one batch of {}",
            train_set.n,
            tc.batch_size
        );
    }
    eprintln!(
        "training ViT ({} params) on {} images ({} test), {} epochs of batch {}, into {}",
        param_count(&model_cfg),
        train_set.n,
        test_set.n,
        tc.epochs,
        tc.batch_size,
        a.out.display()
    );
    let state = imgseq_vit::train::train(&model_cfg, &tc, &train_set, &test_set, &a.out, a.resume)?;
    println!(
        "done: {} epochs, test accuracy {:.2}%, checkpoint in {}",
        state.epochs_done,
        100.0 * state.test_accuracy.last().copied().unwrap_or(0.0),
        a.out.display()
    );
    Ok(())
}

fn param_count(cfg: &ViTConfig) -> usize {
    let (h, m, c, p, l) = (
        cfg.hidden_size,
        cfg.intermediate_size,
        cfg.num_channels,
        cfg.patch_size,
        cfg.num_hidden_layers,
    );
    let emb = h + cfg.num_tokens() * h + h * c * p * p + h;
    let layer = 4 * (h * h + h) + 2 * 2 * h + (h * m + m) + (m * h + h);
    emb + l * layer + 2 * h + h * cfg.num_labels() + cfg.num_labels()
}

fn eval(a: EvalArgs) -> Result<()> {
    let path = a.w.resolve()?;
    let m = load(&path)?;
    let set = load_split(
        &a.data,
        false,
        m.input_size,
        m.cfg.num_channels,
        m.cfg.image_size,
    )?;
    let r = evaluate(&m.model, &m.cfg, &set, &m.normalize, 500, true)?;
    println!("model: {}", path.display());
    println!("test images: {}", r.n);
    println!("accuracy: {:.2}%", 100.0 * r.accuracy);
    println!("per-class accuracy:");
    let k = m.cfg.num_labels();
    for i in 0..k {
        println!(
            "  {:>2} {:<14} {:6.2}%",
            i,
            m.cfg.label(i),
            100.0 * r.per_class[i]
        );
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
        imgseq_core::fsutil::write_bytes_atomic(j, text.as_bytes())?;
    }
    Ok(())
}

fn classify(a: ClassifyArgs) -> Result<()> {
    let m = load(&a.w.resolve()?)?;
    let set = image_set(
        &a.images,
        m.cfg.num_channels,
        m.input_size,
        m.cfg.image_size,
        a.invert,
    )?;
    let idx: Vec<usize> = (0..set.n).collect();
    let (x, _) = make_batch(&set, &idx, &m.normalize, None, &Device::Cpu)?;
    let probs = imgseq_vit::model::probabilities(&m.model.forward(&x, false)?)?;
    let k = a.top_k.clamp(1, m.cfg.num_labels());
    for (i, p) in a.images.iter().enumerate() {
        let row = probs.get(i)?.to_vec1::<f32>()?;
        let mut order: Vec<usize> = (0..row.len()).collect();
        order.sort_by(|&x, &y| row[y].total_cmp(&row[x]));
        let top: Vec<String> = order[..k]
            .iter()
            .map(|&j| format!("{} {:.3}", m.cfg.label(j), row[j]))
            .collect();
        println!("{}: {}", p.display(), top.join(", "));
    }
    Ok(())
}

fn forward(a: ForwardArgs) -> Result<()> {
    let m = load(&a.w.resolve()?)?;
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
        .model
        .forward(&x, a.interpolate_pos_encoding)
        .with_context(|| format!("{}: cannot run the model on this input", a.input.display()))?;
    let dims = logits.dims().to_vec();
    write_npy_f32(
        &a.output,
        &dims,
        &logits
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?,
    )?;
    let pred = logits.argmax(D::Minus1)?.to_vec1::<u32>()?;
    println!(
        "logits {:?} -> {}; predictions {:?}",
        dims,
        a.output.display(),
        pred
    );
    Ok(())
}
