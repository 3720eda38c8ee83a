//! `imgseq vit teacher`: trains the small CNN whose soft labels `vit train --soft-labels` (with `--distill`)
//! distils into a ViT (see `imgseq_train::vit::teacher`).

use anyhow::Result;
use clap::Args;
use imgseq_train::vit::teacher::{TeacherConfig, SOFT_LABELS_FILE};
use imgseq_train::vit::teacher_job::{self, TeacherOptions};
use imgseq_vit::data::{Augment, Normalize};
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
    let o = TeacherOptions {
        channels: a.channels.map(usize::from),
        input_size: a.input_size,
        widths: a.widths.clone(),
        // Channels, widths, labels and normalisation are settled from the data.
        recipe: TeacherConfig {
            channels: 0,
            widths: [0; 3],
            num_labels: 0,
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
                image_mean: vec![],
                image_std: vec![],
            },
        },
    };
    let r = teacher_job::teacher(&source, a.data.limit, &o, &a.out, a.resume)?;
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
