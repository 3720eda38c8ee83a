//! `imgseq vit teacher`: trains the small CNN whose soft labels `vit train --soft-labels` (with `--distill`)
//! distils into a ViT (see `imgseq_vit::teacher`).

use anyhow::{bail, Result};
use clap::Args;
use imgseq_core::data::Split;
use imgseq_vit::config::SEED_IMAGE_SIZE;
use imgseq_vit::data::{channel_stats, Augment, Normalize};
use imgseq_vit::teacher::{train_teacher, TeacherConfig, SOFT_LABELS_FILE};
use std::path::PathBuf;

use crate::vit_data_arg::DataArgs;

#[derive(Args)]
pub struct TeacherArgs {
    #[command(flatten)]
    data: DataArgs,
    /// Output folder: teacher weights, soft_labels.npy, teacher.json, per-epoch checkpoints.
    #[arg(short, long, default_value = "runs/teacher")]
    out: PathBuf,
    /// Continue the interrupted run in --out (same flags and data as it was started with).
    #[arg(long)]
    resume: bool,
    #[arg(long, default_value_t = 12)]
    epochs: usize,
    #[arg(long, default_value_t = 128)]
    batch_size: usize,
    #[arg(long, default_value_t = 3e-3)]
    lr: f64,
    #[arg(long, default_value_t = 0.05)]
    weight_decay: f64,
    #[arg(long, default_value_t = 0.1)]
    label_smoothing: f64,
    /// Widths of the three convolution stages: `16,32,64` or `16 32 64`.
    #[arg(long, value_delimiter = ',', num_args = 1..=3, default_values_t = [16, 32, 64])]
    widths: Vec<usize>,
    /// Soft labels are the probabilities of logits / temperature.
    #[arg(long, default_value_t = 1.0)]
    temperature: f64,
    /// Max random shift in pixels (augmentation).
    #[arg(long, default_value_t = 2)]
    shift: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Image channels: must be the student's (`vit train --channels`).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=3))]
    channels: Option<u8>,
    /// Image side before the 32×32 canvas: must be the student's (`vit train --input-size`).
    #[arg(long)]
    input_size: Option<usize>,
}

pub fn teacher(a: TeacherArgs) -> Result<()> {
    let source = a.data.source()?;
    let (native_channels, native_input) = source.native_shape();
    let channels = a.channels.map_or(native_channels, usize::from);
    let input = a.input_size.unwrap_or(native_input);
    if channels == 2 || (native_channels == 3 && channels == 1) {
        bail!("--channels {channels}: 1 for gray data, 3 for gray or RGB data");
    }
    if input == 0 || input > SEED_IMAGE_SIZE {
        bail!("--input-size {input}: must be 1..={SEED_IMAGE_SIZE} (the model's canvas)");
    }
    if a.widths.len() != 3 {
        bail!(
            "--widths: three stage widths, e.g. 16,32,64 (got {})",
            a.widths.len()
        );
    }
    if a.widths.contains(&0) {
        bail!("--widths: every stage needs at least one channel");
    }
    if !(a.temperature > 0.0 && a.temperature.is_finite()) {
        bail!("--temperature {}: must be a positive number", a.temperature);
    }
    let size = SEED_IMAGE_SIZE;
    let tr = source.load_split(Split::Train, input, channels, size, a.data.limit)?;
    let te = source.load_split(Split::Test, input, channels, size, a.data.limit)?;
    let (image_mean, image_std) = channel_stats(&tr);
    let cfg = TeacherConfig {
        channels,
        widths: [a.widths[0], a.widths[1], a.widths[2]],
        num_labels: tr.class_names.len(),
        epochs: a.epochs,
        batch_size: a.batch_size,
        lr: a.lr,
        weight_decay: a.weight_decay,
        label_smoothing: a.label_smoothing,
        temperature: a.temperature,
        seed: a.seed,
        augment: Augment {
            shift: a.shift,
            hflip: true,
            erase_prob: 0.0,
        },
        normalize: Normalize {
            image_mean,
            image_std,
        },
    };
    let r = train_teacher(&cfg, &tr, &te, &a.out, true, a.resume)?;
    println!(
        "teacher: {} parameters, test accuracy {:.2}%, training-image accuracy {:.2}%, {:.0} s",
        r.parameters,
        100.0 * r.test_accuracy.last().copied().unwrap_or(0.0),
        100.0 * r.train_accuracy,
        r.seconds
    );
    println!("wrote {}", a.out.join(SOFT_LABELS_FILE).display());
    Ok(())
}
