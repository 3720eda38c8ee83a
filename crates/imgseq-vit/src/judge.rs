//! A ViT classifier as the judge of pictures other models made: the one evaluation behind
//! `vq eval --judge` (do a tokenizer's reconstructions keep what the classifier sees?) and
//! `gpt judge` (that, and: are generated pictures of the requested class, how far are their
//! features from real ones?).
//!
//! Every picture is judged on the classifier's own canvas (Fashion-MNIST: 28×28 centred on
//! 32×32), as an 8-bit picture — gray ones as r = g = b — so that any tokenizer's
//! reconstructions and any generator's samples are judged as they come out.

use crate::data::ImageSet;
use crate::eval::EvalReport;
use crate::inference::Classifier;
use image::RgbImage;
use imgseq_core::frechet::{frechet_distance, GaussianStats};
use imgseq_core::image_io::rgb_to_gray;
use imgseq_core::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A classifier loaded to judge.
pub struct Judge {
    /// Where it was loaded from (for reports).
    pub dir: PathBuf,
    pub clf: Classifier,
}

/// What the judge saw in a set: its accuracy against the set's labels and each image's CLS
/// feature (the Fréchet distances' input).
pub struct Scored {
    pub report: EvalReport,
    pub features: Vec<f32>,
}

/// The judge on originals and on their reconstructions.
#[derive(Debug, Clone, Serialize)]
pub struct ReconstructionFigures {
    pub judge: PathBuf,
    pub images: usize,
    /// Accuracies in [0, 1].
    pub original_accuracy: f64,
    pub reconstruction_accuracy: f64,
    /// `reconstruction_accuracy − original_accuracy`.
    pub gap: f64,
    /// Fréchet distance between the CLS features of the reconstructions and the originals'.
    pub fd_reconstructions: f64,
}

impl Judge {
    /// The classifier in `dir` (a checkpoint folder, as [`Classifier::load`]).
    pub fn load(dir: &Path) -> Result<Self> {
        let clf = Classifier::load(dir)
            .map_err(|e| Error::invalid(format!("loading the judge {}: {e}", dir.display())))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            clf,
        })
    }

    /// The canvas side and channels the judge reads.
    pub fn canvas(&self) -> (usize, usize) {
        (self.clf.cfg.image_size, self.clf.cfg.num_channels)
    }

    /// Refuses pictures of another size than the judge's canvas (naming `whose` they are).
    pub fn check_side(&self, w: usize, h: usize, whose: &str) -> Result<()> {
        let (side, _) = self.canvas();
        if (w, h) != (side, side) {
            return Err(Error::invalid(format!(
                "the judge {} reads {side}x{side} images, {whose} are {w}x{h}",
                self.dir.display()
            )));
        }
        Ok(())
    }

    /// The judge's class names, by label id.
    pub fn class_names(&self) -> Vec<String> {
        (0..self.clf.cfg.num_labels())
            .map(|i| self.clf.cfg.label(i))
            .collect()
    }

    /// `pics` (on the canvas; a gray judge reads their luma) labelled `labels` (label ids of
    /// `class_names`), as a set.
    pub fn set_of(
        &self,
        pics: &[RgbImage],
        labels: Vec<u16>,
        class_names: Vec<String>,
    ) -> Result<ImageSet> {
        let (side, channels) = self.canvas();
        let mut bytes = Vec::with_capacity(pics.len() * channels * side * side);
        for p in pics {
            self.check_side(p.width() as usize, p.height() as usize, "the pictures")?;
            if channels == 1 {
                bytes.extend(rgb_to_gray(p).into_raw());
            } else {
                for c in 0..3 {
                    bytes.extend(p.pixels().map(|px| px.0[c]));
                }
            }
        }
        ImageSet::new(bytes, labels, (channels, side, side), class_names)
    }

    /// The pictures of `set` as the 8-bit pictures a tokenizer reads (gray: r = g = b).
    pub fn pictures(set: &ImageSet) -> Vec<RgbImage> {
        let (c, h, w) = (set.channels, set.height as u32, set.width as u32);
        (0..set.n)
            .map(|i| {
                let img = set.image(i);
                let plane = (h * w) as usize;
                RgbImage::from_fn(w, h, |x, y| {
                    let at = (y * w + x) as usize;
                    let v = |ch: usize| img[ch.min(c - 1) * plane + at];
                    image::Rgb([v(0), v(1), v(2)])
                })
            })
            .collect()
    }

    /// Accuracy and CLS features on `set`.
    pub fn score(&self, set: &ImageSet) -> Result<Scored> {
        let (report, features) = self.clf.judge(set, true)?;
        Ok(Scored { report, features })
    }

    /// Fréchet distance between the CLS features of two scored sets.
    pub fn frechet(&self, a: &Scored, b: &Scored) -> Result<f64> {
        let dim = self.clf.cfg.hidden_size;
        frechet_distance(
            &GaussianStats::from_features(&a.features, dim)?,
            &GaussianStats::from_features(&b.features, dim)?,
        )
    }

    /// The judge on `originals` (already scored) and on `recons`, their reconstructions in
    /// the same order.
    pub fn reconstructions(
        &self,
        originals: &ImageSet,
        scored: &Scored,
        recons: &[RgbImage],
    ) -> Result<(ReconstructionFigures, Scored)> {
        let set = self.set_of(
            recons,
            originals.labels.clone(),
            originals.class_names.clone(),
        )?;
        let on_recons = self.score(&set)?;
        let figures = ReconstructionFigures {
            judge: self.dir.clone(),
            images: originals.n,
            original_accuracy: scored.report.accuracy,
            reconstruction_accuracy: on_recons.report.accuracy,
            gap: on_recons.report.accuracy - scored.report.accuracy,
            fd_reconstructions: self.frechet(&on_recons, scored)?,
        };
        Ok((figures, on_recons))
    }
}
