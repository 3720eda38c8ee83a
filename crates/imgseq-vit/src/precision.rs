//! The arithmetic a loaded classifier runs in: `--precision f32|bf16|auto`.
//!
//! bf16 ([`Precision::Bf16`]) runs the patch projection and every linear layer on bf16
//! weights and activations with f32 accumulation; `auto` takes it only where it is native
//! ([`PrecisionRequest::resolve`]: no timing decides it) and only when the predictions on built-in
//! pictures ([`check_images`]) equal the f32 ones ([`Classifier::bf16_agreement`]).

use crate::inference::Classifier;
use candle_core::{Tensor, D};
use image::{DynamicImage, GrayImage, RgbImage};
use imgseq_core::Result;
use imgseq_kernels::check_cache::CheckCache;
use imgseq_kernels::precision::{Agreement, Bf16Model, PrecisionChoice, PrecisionRequest};
use imgseq_kernels::Precision;

/// Number of built-in check pictures.
pub const CHECK_IMAGES: usize = 64;

/// Least share of the check pictures whose predicted class must equal f32's for `auto` to
/// take bf16 (the accuracy bar on Fashion-MNIST is 99.9%: on 64 pictures, all of them).
pub const MIN_ARGMAX_AGREEMENT: f64 = 0.999;

/// `n` deterministic `size`² pictures with `channels` channels (1 or 3): a light object
/// (an ellipse, a bar shape or a textured block, in the middle, of varying size and
/// brightness) on black, like Fashion-MNIST.
pub fn check_images(n: usize, size: u32, channels: usize) -> Vec<DynamicImage> {
    let s = size.max(1) as f64;
    (0..n)
        .map(|i| {
            let t = i as f64;
            let (rx, ry) = (0.18 + 0.05 * (t * 1.7).sin(), 0.22 + 0.08 * (t * 0.9).cos());
            let level = 0.55 + 0.4 * (t * 2.3).sin().abs();
            let shape = i % 3;
            let val = move |x: u32, y: u32| -> f64 {
                let (u, v) = ((x as f64 + 0.5) / s - 0.5, (y as f64 + 0.5) / s - 0.5);
                let inside = match shape {
                    0 => (u / rx).powi(2) + (v / ry).powi(2) < 1.0,
                    1 => u.abs() < rx && v.abs() < ry && !(v > 0.0 && u.abs() < 0.3 * rx),
                    _ => u.abs() < rx * 1.2 && v.abs() < ry * 0.8,
                };
                if !inside {
                    return 0.0;
                }
                let texture = 0.15 * ((u * 37.0 + t).sin() * (v * 23.0 - t).cos());
                (level + texture).clamp(0.0, 1.0)
            };
            let byte = |f: f64| (f * 255.0).round() as u8;
            if channels == 1 {
                DynamicImage::ImageLuma8(GrayImage::from_fn(size, size, |x, y| {
                    image::Luma([byte(val(x, y))])
                }))
            } else {
                let tint = [
                    1.0,
                    0.7 + 0.3 * (t * 0.5).cos().abs(),
                    0.5 + 0.5 * (t * 0.3).sin().abs(),
                ];
                DynamicImage::ImageRgb8(RgbImage::from_fn(size, size, |x, y| {
                    let v = val(x, y);
                    image::Rgb(tint.map(|k| byte(v * k)))
                }))
            }
        })
        .collect()
}

impl Classifier {
    /// Classifies the check pictures in f32 and in bf16 and says how well the predicted
    /// classes agree (and the logits' normwise relative difference). The model keeps its
    /// precision.
    pub fn bf16_agreement(&mut self) -> Result<Agreement> {
        Bf16Model::bf16_agreement(self)
    }

    /// Resolves `--precision` for this model on this CPU and sets it: `f32` and `bf16` as
    /// asked; `auto` as [`PrecisionRequest::resolve`] decides, with [`Self::bf16_agreement`]
    /// as the model's check. Says which precision runs and why.
    ///
    /// `auto`'s check is remembered across runs under [`Classifier::check_key`] in the user's
    /// [`CheckCache`].
    pub fn choose_precision(&mut self, request: PrecisionRequest) -> Result<PrecisionChoice> {
        let cache = CheckCache::user();
        let key = self.check_key.clone();
        Bf16Model::choose_precision_remembered(self, request, cache.as_ref().zip(key.as_deref()))
    }
}

impl Bf16Model for Classifier {
    type Error = imgseq_core::Error;

    fn precision(&self) -> Precision {
        self.model.precision()
    }

    fn set_precision(&mut self, precision: Precision) -> Result<()> {
        Ok(self.model.set_precision(precision)?)
    }

    /// [`Classifier::bf16_agreement`], leaving the model in bf16.
    fn agreement_ending_in_bf16(&mut self) -> Result<Agreement> {
        let size = self.cfg.image_size;
        let imgs = check_images(
            CHECK_IMAGES,
            self.content_size(size) as u32,
            self.cfg.num_channels,
        );
        let x = self.preprocess(&imgs, size, false)?; // (64, c, size, size)
        let run = |c: &Classifier| -> Result<(Tensor, Vec<u32>)> {
            let logits = c.model.forward(&x, false)?; // (64, labels)
            let pred = logits.argmax(D::Minus1)?.to_vec1::<u32>()?;
            Ok((logits, pred))
        };
        self.model.set_precision(Precision::F32)?;
        let (l32, p32) = run(self)?;
        self.model.set_precision(Precision::Bf16)?;
        let (l16, p16) = run(self)?;
        let equal = p32.iter().zip(&p16).filter(|(a, b)| a == b).count();
        let n = p32.len();
        let diff = (&l16 - &l32)?.sqr()?.sum_all()?.to_scalar::<f32>()? as f64;
        let norm = l32.sqr()?.sum_all()?.to_scalar::<f32>()? as f64;
        let rel = (diff / norm.max(f64::MIN_POSITIVE)).sqrt();
        Ok(Agreement {
            passed: equal as f64 >= MIN_ARGMAX_AGREEMENT * n as f64,
            summary: format!(
                "{equal}/{n} check pictures get f32's class (logits differ by {:.2}%)",
                100.0 * rel
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{make_batch, DataSource};
    use candle_core::Device;
    use imgseq_core::data::idx::FASHION_MNIST_DIR;
    use imgseq_core::data::Split;
    use imgseq_kernels::ops::Bf16Kernel;
    use std::path::{Path, PathBuf};

    fn shipped() -> Classifier {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../weights/vit-fashion-mnist");
        Classifier::load(&dir).unwrap()
    }

    /// Predicted classes of every image of `set` in the model's current precision.
    fn predictions(c: &Classifier, set: &crate::data::ImageSet) -> Vec<u32> {
        let idx: Vec<usize> = (0..set.n).collect();
        let mut out = Vec::with_capacity(set.n);
        for chunk in idx.chunks(500) {
            let (x, _) = make_batch(set, chunk, &c.normalize, None, &Device::Cpu).unwrap();
            let logits = c.logits(&x, false).unwrap(); // f32: the fast forward users get
            out.extend(logits.argmax(D::Minus1).unwrap().to_vec1::<u32>().unwrap());
        }
        out
    }

    #[test]
    fn bf16_predictions_match_f32_on_the_fashion_mnist_test_set() {
        if !Path::new(FASHION_MNIST_DIR).is_dir() {
            eprintln!(
                "note: {FASHION_MNIST_DIR} absent (Debian package dataset-fashion-mnist); skipped"
            );
            return;
        }
        let mut c = shipped();
        let set = c
            .load_split(&DataSource::FashionMnist(None), Split::Test, None)
            .unwrap();
        assert_eq!(set.n, 10_000);
        let p32 = predictions(&c, &set);
        c.model.set_precision(Precision::Bf16).unwrap();
        let p16 = predictions(&c, &set);
        let same = p32.iter().zip(&p16).filter(|(a, b)| a == b).count();
        let acc = |p: &[u32]| {
            p.iter()
                .zip(&set.labels)
                .filter(|(a, b)| **a == **b as u32)
                .count() as f64
                / set.n as f64
        };
        println!(
            "bf16 ({:?}): {same}/{} predictions equal to f32's; accuracy f32 {:.2}%, bf16 {:.2}%",
            Bf16Kernel::best(),
            set.n,
            100.0 * acc(&p32),
            100.0 * acc(&p16)
        );
        assert!(
            same as f64 >= 0.999 * set.n as f64,
            "{same}/{} bf16 predictions equal to f32's",
            set.n
        );
    }

    #[test]
    fn bf16_native_logits_equal_the_portable_ones_bit_for_bit() {
        if !Bf16Kernel::native_available() {
            eprintln!("note: this CPU has no AVX512-BF16; the native vdpbf16ps path is not tested");
            return;
        }
        let mut c = shipped();
        let imgs = check_images(37, c.content_size(32) as u32, 1);
        let x = c.preprocess(&imgs, 32, false).unwrap();
        let mut run = |k| {
            c.model.set_precision_on(Precision::Bf16, k).unwrap();
            let l = c.model.forward(&x, false).unwrap();
            l.flatten_all().unwrap().to_vec1::<f32>().unwrap()
        };
        let (n, p) = (run(Bf16Kernel::Native), run(Bf16Kernel::Portable));
        assert!(n.iter().zip(&p).all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    #[test]
    fn auto_precision_takes_bf16_where_the_cpu_runs_it_faster_and_the_check_passes() {
        let mut c = shipped();
        let a = c.bf16_agreement().unwrap();
        println!("agreement check: {a:?}");
        // The shipped model gives f32's class on all 64 check pictures (its
        // predecessor, 63 of 64: one near-tie); whichever way, `passed` means all 64.
        assert!(
            a.summary.starts_with("64/64 check pictures") == a.passed,
            "passed only with all 64: {a:?}"
        );
        assert_eq!(
            c.model.precision(),
            Precision::F32,
            "the check keeps the precision"
        );
        let choice = c.choose_precision(PrecisionRequest::Auto).unwrap();
        // bf16 exactly where the CPU kind runs it faster than f32 and the check passed: no
        // timing decides it.
        let want = if a.passed
            && imgseq_kernels::precision::bf16_support()
                == imgseq_kernels::precision::Bf16Support::FasterThanF32
        {
            Precision::Bf16
        } else {
            Precision::F32
        };
        assert_eq!(
            (choice.precision, c.model.precision()),
            (want, want),
            "{choice}"
        );
    }
}
