//! The teacher as the command line starts it: the options checked against the dataset, its
//! splits loaded on the model's canvas, the recipe completed with the training images'
//! statistics, then [`train_teacher`].

use crate::config::SEED_IMAGE_SIZE;
use crate::data::{channel_stats, Augment, DataSource, Normalize};
use crate::teacher::{train_teacher, TeacherConfig, TeacherReport};
use imgseq_core::data::Split;
use imgseq_core::{Error, Result};
use std::path::Path;

/// What a teacher run is asked for besides its data.
#[derive(Debug, Clone)]
pub struct TeacherOptions {
    /// Image channels (default: the dataset's); must be the student's.
    pub channels: Option<usize>,
    /// Image side before the canvas (default: the dataset's); must be the student's.
    pub input_size: Option<usize>,
    pub widths: Vec<usize>,
    pub epochs: usize,
    pub batch_size: usize,
    pub lr: f64,
    pub weight_decay: f64,
    pub label_smoothing: f64,
    pub temperature: f64,
    /// Max random shift in pixels (augmentation).
    pub shift: usize,
    pub seed: u64,
}

/// The channels and input side `o` settles on for `source`, every option checked.
fn settle(source: &DataSource, o: &TeacherOptions) -> Result<(usize, usize)> {
    let (native_channels, native_input) = source.native_shape();
    let channels = o.channels.unwrap_or(native_channels);
    let input = o.input_size.unwrap_or(native_input);
    let bad = |m: String| Err(Error::invalid(m));
    if channels == 2 || (native_channels == 3 && channels == 1) {
        return bad(format!(
            "--channels {channels}: 1 for gray data, 3 for gray or RGB data"
        ));
    }
    if input == 0 || input > SEED_IMAGE_SIZE {
        return bad(format!(
            "--input-size {input}: must be 1..={SEED_IMAGE_SIZE} (the model's canvas)"
        ));
    }
    if o.widths.len() != 3 {
        return bad(format!(
            "--widths: three stage widths, e.g. 16,32,64 (got {})",
            o.widths.len()
        ));
    }
    if o.widths.contains(&0) {
        return bad("--widths: every stage needs at least one channel".into());
    }
    if !(o.temperature > 0.0 && o.temperature.is_finite()) {
        return bad(format!(
            "--temperature {}: must be a positive number",
            o.temperature
        ));
    }
    Ok((channels, input))
}

/// Trains the teacher of `o` on `source` (the first `limit` images of each split) into `out`
/// (continuing the run there with `resume`), with a progress bar.
pub fn teacher(
    source: &DataSource,
    limit: Option<usize>,
    o: &TeacherOptions,
    out: &Path,
    resume: bool,
) -> Result<TeacherReport> {
    let (channels, input) = settle(source, o)?;
    let size = SEED_IMAGE_SIZE;
    let tr = source.load_split(Split::Train, input, channels, size, limit)?;
    let te = source.load_split(Split::Test, input, channels, size, limit)?;
    let (image_mean, image_std) = channel_stats(&tr);
    let cfg = TeacherConfig {
        channels,
        widths: [o.widths[0], o.widths[1], o.widths[2]],
        num_labels: tr.class_names.len(),
        epochs: o.epochs,
        batch_size: o.batch_size,
        lr: o.lr,
        weight_decay: o.weight_decay,
        label_smoothing: o.label_smoothing,
        temperature: o.temperature,
        seed: o.seed,
        augment: Augment {
            shift: o.shift,
            hflip: true,
            erase_prob: 0.0,
        },
        normalize: Normalize {
            image_mean,
            image_std,
        },
    };
    train_teacher(&cfg, &tr, &te, out, true, resume)
}
