//! The teacher as the command line starts it: the options checked against the dataset, its
//! splits loaded on the model's canvas, the recipe completed with the training images'
//! statistics, then [`train_teacher`].

use super::teacher::{train_teacher, TeacherConfig, TeacherReport};
use imgseq_core::data::Split;
use imgseq_core::{Error, Result};
use imgseq_vit::config::SEED_IMAGE_SIZE;
use imgseq_vit::data::{channel_stats, DataSource, Normalize};
use std::path::Path;

/// What a teacher run is asked for besides its data.
#[derive(Debug, Clone)]
pub struct TeacherOptions {
    /// Image channels (default: the dataset's); must be the student's.
    pub channels: Option<usize>,
    /// Image side before the canvas (default: the dataset's); must be the student's.
    pub input_size: Option<usize>,
    /// The three stage widths, as given.
    pub widths: Vec<usize>,
    /// The recipe; its channels, widths, number of labels and normalisation are settled here.
    pub recipe: TeacherConfig,
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
    let t = o.recipe.temperature;
    if !(t > 0.0 && t.is_finite()) {
        return bad(format!("--temperature {t}: must be a positive number"));
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
        normalize: Normalize {
            image_mean,
            image_std,
        },
        ..o.recipe.clone()
    };
    train_teacher(&cfg, &tr, &te, out, true, resume)
}
