//! A ViT training run as the command line starts it: a resumed run's configs with its
//! splits, or a new run's model sized by the options and the dataset, then the training.

use super::{load_run, train_with, Engine, TrainConfig, TrainState};
use imgseq_core::data::Split;
use imgseq_core::{Error, Result};
use imgseq_vit::checkpoint::save_preprocessor_config;
use imgseq_vit::config::{ViTConfig, SEED_IMAGE_SIZE};
use imgseq_vit::data::{channel_stats, DataSource, ImageSet, Normalize};
use imgseq_vit::inference::relabel;
use imgseq_vit::model::param_count;
use std::path::Path;

/// A run ready to train: the model config, the recipe and the two splits.
pub struct Job {
    pub cfg: ViTConfig,
    pub tc: TrainConfig,
    pub train_set: ImageSet,
    pub test_set: ImageSet,
}

/// The model of a new run.
#[derive(Debug, Clone)]
pub struct ModelOptions {
    /// Image channels (default: the dataset's).
    pub channels: Option<usize>,
    /// Image side before the canvas (default: the dataset's).
    pub input_size: Option<usize>,
    pub layers: usize,
    pub heads: usize,
    pub intermediate_size: usize,
}

impl ModelOptions {
    /// The channels and input side these options settle on for `source`, every one checked
    /// (before any data is read).
    pub fn settle(&self, source: &DataSource) -> Result<(usize, usize)> {
        let (native_channels, native_input) = source.native_shape();
        let channels = self.channels.unwrap_or(native_channels);
        let input = self.input_size.unwrap_or(native_input);
        let bad = |m: String| Err(Error::invalid(m));
        if channels == 2 {
            return bad("--channels 2: a model takes 1 (gray) or 3 (RGB) channels".into());
        }
        if self.layers > 64 || self.intermediate_size > 16384 {
            return bad(format!(
                "--layers {} / --intermediate-size {}: at most 64 layers and an MLP of 16384",
                self.layers, self.intermediate_size
            ));
        }
        if native_channels == 3 && channels == 1 {
            return bad(format!(
                "--channels {channels}: the {} data has {native_channels} channels (a gray set can \
                 feed a 3-channel model, not the other way round)",
                source.name()
            ));
        }
        if input == 0 || input > SEED_IMAGE_SIZE {
            return bad(format!(
                "--input-size {input}: must be 1..={SEED_IMAGE_SIZE} (the model's canvas)"
            ));
        }
        Ok((channels, input))
    }
}

/// The run in `out` to continue on `source` (the first `limit` images of each split), for at
/// least `epochs` epochs.
pub fn resume(out: &Path, source: &DataSource, limit: Option<usize>, epochs: usize) -> Result<Job> {
    let Some((cfg, mut tc)) = load_run(out)? else {
        return Err(Error::format(
            out,
            "no run to resume (no training.json there)",
        ));
    };
    let (input, c, size) = (tc.content_size(&cfg), cfg.num_channels, cfg.image_size);
    let tr = source.load_split(Split::Train, input, c, size, limit)?;
    let te = source.load_split(Split::Test, input, c, size, limit)?;
    let (train_set, test_set) = (relabel(tr, &cfg, source)?, relabel(te, &cfg, source)?);
    tc.epochs = epochs.max(tc.epochs);
    Ok(Job {
        cfg,
        tc,
        train_set,
        test_set,
    })
}

/// A new run of the recipe `tc` (already checked) with the model `m`, whose settled
/// `(channels, input)` come from [`ModelOptions::settle`]. The classes are the training
/// data's (its class folders' names for an image folder); the test split is labelled by name
/// with them; the normalisation is the training images' own.
pub fn new_run(
    source: &DataSource,
    limit: Option<usize>,
    m: &ModelOptions,
    (channels, input): (usize, usize),
    mut tc: TrainConfig,
) -> Result<Job> {
    let size = SEED_IMAGE_SIZE;
    let tr = source.load_split(Split::Train, input, channels, size, limit)?;
    let te = source.load_split(Split::Test, input, channels, size, limit)?;
    let names: Vec<&str> = tr.class_names.iter().map(|s| s.as_str()).collect();
    let cfg = ViTConfig {
        num_hidden_layers: m.layers,
        num_attention_heads: m.heads,
        intermediate_size: m.intermediate_size,
        ..ViTConfig::seed(channels, &names)
    };
    cfg.validate()
        .map_err(|e| Error::invalid(format!("--layers / --heads / --intermediate-size: {e}")))?;
    let te = relabel(te, &cfg, source)?;
    let (mean, std) = channel_stats(&tr);
    tc.normalize = Normalize {
        image_mean: mean,
        image_std: std,
    };
    Ok(Job {
        cfg,
        tc,
        train_set: tr,
        test_set: te,
    })
}

impl Job {
    /// Checks the sets against the recipe and trains into `out`, saying what on stderr.
    /// Whole-canvas inputs also get HF's `preprocessor_config.json` (its `ViTImageProcessor`
    /// then prepares them as imgseq does).
    pub fn run(&self, out: &Path, resume: bool, engine: Engine) -> Result<TrainState> {
        let (cfg, tc) = (&self.cfg, &self.tc);
        tc.check_sets(&self.train_set, &self.test_set)?;
        if tc.content_size(cfg) == cfg.image_size {
            save_preprocessor_config(out, cfg, &tc.normalize)?;
        }
        eprintln!(
            "training ViT ({} params) on {} images ({} test), {} epochs of batch {}, into {}",
            param_count(cfg),
            self.train_set.n,
            self.test_set.n,
            tc.epochs,
            tc.batch_size,
            out.display()
        );
        train_with(
            cfg,
            tc,
            &self.train_set,
            &self.test_set,
            out,
            resume,
            engine,
        )
    }
}
