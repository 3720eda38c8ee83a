//! `imgseq vq train`: its flags (whose defaults are the library's recipe, one source) and the
//! choice between a new run, a resumed one and an overwritten one. The loop is
//! `imgseq_train::vqgan`.

use anyhow::{bail, Result};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args};
use imgseq_train::vqgan::presets::{preset, PRESETS};
use imgseq_train::vqgan::{self as train, TrainConfig, VqConfig};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// `imgseq vq train` options. A new run takes every option from the command line, whose
/// defaults are the shipped model's recipe (`TrainConfig::default_for`); with --resume the
/// run's training.json is used and only the options given on the command line override it (e.g.
/// `--steps` to extend a run).
#[derive(Args)]
pub struct TrainArgs {
    /// Image folder, .txt image list or IDX image file (required unless resuming); docs/training.md.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Run folder for checkpoints.
    #[arg(long, default_value = "runs/vq-small")]
    out: PathBuf,
    /// Architecture: a preset (docs/training.md, "A VQGAN") or a config.json / model.yaml.
    #[arg(long, default_value = "small")]
    config: String,
    /// Continue the run in --out from its last checkpoint (there must be one).
    #[arg(long, conflicts_with = "overwrite")]
    resume: bool,
    /// Start a new run in --out even if it holds one (its run files are removed first).
    #[arg(long)]
    overwrite: bool,
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
    /// From this step on, train on --context-crop crops of --context-batch-size (0: never).
    #[arg(long, default_value_t = RECIPE.context_from)]
    context_from: usize,
    #[arg(long, default_value_t = RECIPE.context_crop)]
    context_crop: usize,
    #[arg(long, default_value_t = RECIPE.context_batch_size)]
    context_batch_size: usize,
    /// Peak learning rate; warm-up then cosine decay to lr/10.
    #[arg(long, allow_negative_numbers = true, default_value_t = RECIPE.lr)]
    lr: f64,
    /// Adam β1 (taming uses 0.5, tuned for its GAN phase).
    #[arg(long, allow_negative_numbers = true, default_value_t = RECIPE.beta1)]
    beta1: f64,
    /// Adam β2.
    #[arg(long, allow_negative_numbers = true, default_value_t = RECIPE.beta2)]
    beta2: f64,
    /// Learning-rate warm-up steps.
    #[arg(long, default_value_t = RECIPE.warmup)]
    warmup: usize,
    /// Steps as a plain autoencoder before the k-means codebook init (0: k-means at step 0).
    #[arg(long, default_value_t = RECIPE.ae_warmup)]
    ae_warmup: usize,
    /// Weight of the L1 reconstruction loss.
    #[arg(long, allow_negative_numbers = true, default_value_t = RECIPE.l1)]
    l1: f64,
    /// Weight of the L2 reconstruction loss.
    #[arg(long, allow_negative_numbers = true, default_value_t = RECIPE.l2)]
    l2: f64,
    /// Weight of the image-gradient L1 (sharpening) loss.
    #[arg(long, allow_negative_numbers = true, default_value_t = RECIPE.sharp)]
    sharp: f64,
    /// Weight of the LPIPS perceptual term; used when --lpips-vgg and --lpips-heads name its
    /// weights (docs/training.md), else the run says so and trains without it.
    #[arg(long, allow_negative_numbers = true, default_value_t = RECIPE.perceptual)]
    perceptual: f64,
    /// VGG16 weights for LPIPS (torchvision's vgg16-397923af.pth or a .safetensors).
    #[arg(long)]
    lpips_vgg: Option<PathBuf>,
    /// LPIPS linear heads (the lpips package's weights/v0.1/vgg.pth or a .safetensors).
    #[arg(long)]
    lpips_heads: Option<PathBuf>,
    /// Adversarial loss: taming's disc_weight, scaling the adaptive weight (0: no
    /// discriminator; taming's configs use 0.8 or 0.75).
    #[arg(long, allow_negative_numbers = true, default_value_t = RECIPE.gan.disc_weight)]
    disc_weight: f64,
    /// First step (0-based) of the adversarial loss and discriminator training.
    #[arg(long, default_value_t = RECIPE.gan.disc_start)]
    disc_start: usize,
    /// taming's disc_factor (multiplies the g- and d-loss once started).
    #[arg(long, allow_negative_numbers = true, default_value_t = RECIPE.gan.disc_factor)]
    disc_factor: f64,
    /// Discriminator loss: hinge or vanilla.
    #[arg(long, default_value = "hinge")]
    disc_loss: String,
    /// PatchGAN layers (taming's disc_num_layers).
    #[arg(long, default_value_t = RECIPE.gan.disc_layers)]
    disc_layers: usize,
    /// PatchGAN width of the first layer (taming's disc_ndf).
    #[arg(long, default_value_t = RECIPE.gan.disc_ndf)]
    disc_ndf: usize,
    /// Discriminator norm: batch (BatchNorm2d) or act (taming's ActNorm).
    #[arg(long, default_value = "batch")]
    disc_norm: String,
    /// Start the discriminator from a taming checkpoint's loss.discriminator.* (or main.*).
    #[arg(long)]
    disc_init: Option<PathBuf>,
    /// No random horizontal flips.
    #[arg(long)]
    no_flip: bool,
    /// Keep the colour channels in order (by default each crop gets a random order of r, g, b).
    #[arg(long)]
    no_shuffle_channels: bool,
    /// Also crop from copies resized (shorter side) to these sizes, comma-separated, or `none`.
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
    /// Copy the model to <out>/snapshots/step-NNNNN/ every this many steps (0: none).
    #[arg(long, default_value_t = RECIPE.snapshot_every)]
    snapshot_every: usize,
    /// Decay per step of a moving average of the weights, saved as the model (0: none).
    #[arg(long, default_value_t = RECIPE.ema)]
    ema: f64,
    /// History point (and log line without a terminal) every this many steps (0: every 1%).
    #[arg(long, default_value_t = RECIPE.log_every)]
    log_every: usize,
    /// Start a new run from a trained model's weights (its folder, e.g. weights/vqgan, or its
    /// .safetensors) instead of random ones: no warm-up, no codebook init, a fresh optimizer.
    /// Without --config the architecture is the folder's config.json.
    #[arg(long, value_name = "MODEL", conflicts_with = "resume")]
    init: Option<PathBuf>,
    /// Train the decoder side only (post_quant_conv + decoder): the encoder and codebook stay,
    /// so every image keeps exactly its tokens. For fine-tuning a trained model (--resume).
    #[arg(long)]
    freeze_encoder: bool,
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
            snapshot_every,
            ema,
            log_every,
            seed
        );
        if let Some(d) = &self.data {
            tc.data = d.clone();
        }
        self.apply_gan(&given, tc)?;
        if given("lr") {
            tc.lr = self.lr;
            tc.min_lr = self.lr / 10.0;
        }
        if self.no_flip {
            tc.hflip = false;
        }
        if self.freeze_encoder {
            tc.freeze_encoder = true;
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

impl TrainArgs {
    /// The perceptual and adversarial options given on the command line.
    fn apply_gan(&self, given: &dyn Fn(&str) -> bool, tc: &mut TrainConfig) -> Result<()> {
        use imgseq_train::vqgan::disc::DiscNorm;
        use imgseq_train::vqgan::gan::DiscLoss;
        let g = &mut tc.gan;
        macro_rules! take_gan {
            ($($field:ident),*) => {$(
                if given(stringify!($field)) {
                    g.$field = self.$field;
                }
            )*};
        }
        take_gan!(disc_weight, disc_start, disc_factor, disc_layers, disc_ndf);
        if given("disc_loss") {
            g.disc_loss = match self.disc_loss.as_str() {
                "hinge" => DiscLoss::Hinge,
                "vanilla" => DiscLoss::Vanilla,
                o => bail!("--disc-loss {o:?}: expected hinge or vanilla"),
            };
        }
        if given("disc_norm") {
            g.disc_norm = match self.disc_norm.as_str() {
                "batch" => DiscNorm::Batch,
                "act" => DiscNorm::Act,
                o => bail!("--disc-norm {o:?}: expected batch or act"),
            };
        }
        if let Some(p) = &self.disc_init {
            g.disc_init = Some(p.clone());
        }
        if given("perceptual") {
            tc.perceptual = self.perceptual;
        }
        for (flag, v, dst) in [
            ("--lpips-vgg", &self.lpips_vgg, &mut tc.lpips_vgg),
            ("--lpips-heads", &self.lpips_heads, &mut tc.lpips_heads),
        ] {
            if let Some(p) = v {
                if !p.is_file() {
                    bail!("{flag} {}: no such file", p.display());
                }
                *dst = Some(p.clone());
            }
        }
        Ok(())
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

/// Whether `--config` was given on the command line (else an `--init` folder's config is used).
fn given_config(m: &ArgMatches) -> bool {
    m.value_source("config") == Some(ValueSource::CommandLine)
}

/// [`train::checkpoint::check_start`] with the flags that settle it.
fn check_start(out: &Path, resume: bool) -> Result<()> {
    train::checkpoint::check_start(out, resume).map_err(|e| {
        let hint = if resume {
            "start one without --resume"
        } else {
            "--resume continues it, --overwrite starts over"
        };
        anyhow::anyhow!("{e} ({hint})")
    })
}

pub fn train(a: &TrainArgs, m: &ArgMatches) -> Result<()> {
    let (cfg, tc) = if a.resume {
        check_start(&a.out, true)?;
        let run = imgseq_core::run::RunDir::new(&a.out);
        let train_json = run.training_path();
        let mut tc = TrainConfig::load(&train_json)?;
        let cfg = VqConfig::from_json_file(run.file(train::CONFIG_FILE))?;
        a.apply(m, &mut tc)?;
        // A bad value is the flag's when it was given, else the saved recipe's.
        if let Err(e) = tc.validate(&cfg) {
            return Err(match &e {
                imgseq_core::Error::Setting { name, .. }
                    if m.value_source(name) != Some(ValueSource::CommandLine) =>
                {
                    imgseq_core::Error::format(&train_json, e.to_string()).into()
                }
                _ => e.into(),
            });
        }
        (cfg, tc)
    } else {
        let Some(data) = &a.data else {
            bail!("--data DIR is required (an image folder or a .txt list of images)");
        };
        let cfg = match &a.init {
            Some(dir) if dir.is_dir() && !given_config(m) => {
                VqConfig::from_json_file(dir.join(train::CONFIG_FILE))?
            }
            _ => model_config(&a.config)?,
        };
        // IDX images (Fashion-MNIST) start from their own recipe; flags override it.
        let mut tc = if imgseq_core::data::idx::is_idx_images_name(data) {
            TrainConfig::fmnist_for(data)
        } else {
            TrainConfig::default_for(data)
        };
        a.apply(m, &mut tc)?;
        if let Some(p) = &a.init {
            if !p.exists() {
                bail!("--init {}: no such model folder or file", p.display());
            }
            tc.init_from = Some(p.clone());
        }
        tc.validate(&cfg)?;
        if a.overwrite {
            train::checkpoint::clear_run(&a.out)?;
        }
        check_start(&a.out, false)?;
        (cfg, tc)
    };
    let st = train::train(&cfg, &tc, &a.out, a.resume, true)?;
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
        "wrote {}/{{model.safetensors, config.json, training.json, optimizer.safetensors, state.json}}",
        a.out.display()
    );
    Ok(())
}
