//! Evaluation of a classifier over an image set: the confusion matrix and accuracies.

use candle_core::{Device, Tensor, D};
use imgseq_core::progress::bar;
use imgseq_core::{Error, Result};
use serde::Serialize;

use crate::config::ViTConfig;
use crate::data::{make_batch, ImageSet, Normalize};
use crate::model::ViTForImageClassification;

/// Images per forward pass when evaluating.
pub const EVAL_BATCH: usize = 500;

/// Accuracy, per-class accuracy and the confusion matrix (rows: true, columns: predicted).
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub accuracy: f64,
    pub per_class: Vec<f64>,
    pub confusion: Vec<Vec<usize>>,
    pub n: usize,
}

impl EvalReport {
    /// Accuracy and per-class accuracy (NaN for a class with no images) from a confusion
    /// matrix `[true][predicted]`.
    pub fn from_confusion(confusion: Vec<Vec<usize>>) -> Self {
        let k = confusion.len();
        let n: usize = confusion.iter().flatten().sum();
        let correct: usize = (0..k).map(|i| confusion[i][i]).sum();
        let per_class = (0..k)
            .map(|i| {
                let tot: usize = confusion[i].iter().sum();
                if tot == 0 {
                    f64::NAN
                } else {
                    confusion[i][i] as f64 / tot as f64
                }
            })
            .collect();
        Self {
            accuracy: correct as f64 / n.max(1) as f64,
            per_class,
            confusion,
            n,
        }
    }
}

/// Adds the predictions `pred` of the images `chunk` of `set` to `confusion` (true class ×
/// predicted class), refusing a label the model has no class for.
pub(crate) fn tally(
    confusion: &mut [Vec<usize>],
    set: &ImageSet,
    chunk: &[usize],
    pred: &[u32],
) -> Result<()> {
    let k = confusion.len();
    for (&i, &p) in chunk.iter().zip(pred) {
        let t = set.labels[i] as usize;
        if t >= k {
            return Err(Error::bad_data(format!(
                "label {t} out of range for a {k}-class model"
            )));
        }
        confusion[t][p as usize] += 1;
    }
    Ok(())
}

/// The confusion matrix of `predict` (a batch (b, c, h, w) → one class per image) over `set`.
pub fn evaluate_with(
    k: usize,
    set: &ImageSet,
    norm: &Normalize,
    batch_size: usize,
    progress: bool,
    mut predict: impl FnMut(&Tensor) -> Result<Vec<u32>>,
) -> Result<EvalReport> {
    if set.n == 0 {
        return Err(Error::invalid("the evaluation set has no images"));
    }
    if batch_size == 0 {
        return Err(Error::setting("batch_size", batch_size, "must be positive"));
    }
    let mut confusion = vec![vec![0usize; k]; k];
    let dev = Device::Cpu;
    let pb = progress.then(|| bar(set.n as u64, 0, "eval"));
    let idx: Vec<usize> = (0..set.n).collect();
    for chunk in idx.chunks(batch_size) {
        let (x, _) = make_batch(set, chunk, norm, None, &dev)?;
        tally(&mut confusion, set, chunk, &predict(&x)?)?;
        if let Some(pb) = &pb {
            pb.inc(chunk.len() as u64);
        }
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    Ok(EvalReport::from_confusion(confusion))
}

/// Classifies every image of `set` and reports accuracy, per-class accuracy and confusion.
pub fn evaluate(
    model: &ViTForImageClassification,
    cfg: &ViTConfig,
    set: &ImageSet,
    norm: &Normalize,
    batch_size: usize,
    progress: bool,
) -> Result<EvalReport> {
    evaluate_with(cfg.num_labels(), set, norm, batch_size, progress, |x| {
        Ok(model
            .forward(x, false)?
            .argmax(D::Minus1)?
            .to_vec1::<u32>()?)
    })
}

/// Index of the first largest value.
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_counts_true_by_predicted_and_refuses_a_label_the_model_lacks() {
        let set =
            ImageSet::new(vec![0u8; 3], vec![0, 1, 2], (1, 1, 1), vec!["a".into(); 3]).unwrap();
        let mut confusion = vec![vec![0usize; 3]; 3];
        tally(&mut confusion, &set, &[0, 1, 2], &[0, 2, 2]).unwrap();
        assert_eq!(confusion, vec![vec![1, 0, 0], vec![0, 0, 1], vec![0, 0, 1]]);
        let mut two = vec![vec![0usize; 2]; 2];
        let e = tally(&mut two, &set, &[2], &[0]).unwrap_err().to_string();
        assert!(
            e.contains("label 2 out of range for a 2-class model"),
            "{e}"
        );
    }
}
