//! Using a trained classifier: load it with how its inputs are prepared, turn images into
//! model input, and get tokens, class probabilities or an evaluation report out of it.
//!
//! An image goes through the same steps as the training data did: converted to the model's
//! channels, letterboxed to the content size (28 for Fashion-MNIST), optionally inverted,
//! centred on the model's canvas (32), normalised.

use candle_core::{Device, Tensor};
use image::DynamicImage;
use imgseq_core::data::Split;
use imgseq_core::image_io::{fit_dynamic, load_image, with_channels, AsChw, Fit};
use imgseq_core::resample::resize_bilinear_pil;
use imgseq_core::{Error, Result};
use imgseq_kernels::Precision;
use std::path::Path;
use std::sync::Mutex;

use crate::checkpoint::{load_classifier, load_tensors, ModelFiles};
use crate::config::ViTConfig;
use crate::data::{make_batch, pad_to, DataSource, ImageSet, Normalize};
use crate::eval::{evaluate_with, tally, EvalReport, EVAL_BATCH};
use crate::fused::FusedViT;
use crate::model::{probabilities, ViTForImageClassification};
use crate::run::{TrainConfig, TRAINING_FILE};

/// A loaded classifier (on the CPU) with how its inputs are prepared.
pub struct Classifier {
    pub cfg: ViTConfig,
    pub model: ViTForImageClassification,
    /// Side of the image content before centre padding to `image_size` (28 for Fashion-MNIST
    /// in a 32×32 model).
    pub input_size: usize,
    pub normalize: Normalize,
    /// The f32 logits at the model's own size, by the fused engine's forward over the same
    /// weights (`None`: every forward runs `model`).
    pub fast: Option<FastForward>,
    /// What `--precision auto` remembers its agreement check under (the model's files and
    /// the CPU kind: [`imgseq_kernels::check_cache::check_key`]); `None`: not remembered.
    pub check_key: Option<String>,
}

/// The fused engine's forward ([`FusedViT::logits`]) over a loaded model's weights: the same
/// function as the candle model's f32 forward (within rounding: tested to 1e-4), about twice
/// as fast on the seed model, with no tensor per op.
pub struct FastForward {
    net: Mutex<FusedViT>,
    params: Vec<f32>,
}

impl FastForward {
    /// The engine for `cfg` over the weights in `weights` (a safetensors file with HF names).
    pub fn load(cfg: &ViTConfig, weights: &Path) -> Result<Self> {
        let net = FusedViT::new(cfg)?;
        let params = net
            .layout()
            .from_tensors(&load_tensors(weights, &Device::Cpu)?, "")?;
        Ok(Self {
            net: Mutex::new(net),
            params,
        })
    }

    /// # Shapes
    /// x: (b, c, size, size) f32 → logits (b, num_labels)
    pub fn logits(&self, x: &Tensor) -> Result<Tensor> {
        let b = x.dim(0)?;
        let xv = x.flatten_all()?.to_vec1::<f32>()?;
        let mut net = self
            .net
            .lock()
            .map_err(|_| Error::invalid("a forward panicked"))?;
        let logits = net.logits(&self.params, &xv)?;
        let k = logits.len() / b.max(1);
        Ok(Tensor::from_vec(logits, (b, k), &Device::Cpu)?)
    }
}

/// The continuous tokens of a batch and the position vectors that were added to them.
pub struct Embedding {
    /// Patch embeddings with CLS prepended and positions added: (b, 1 + patches, hidden).
    pub tokens: Tensor,
    /// Position vectors for this input size: (1, 1 + patches, hidden).
    pub positions: Tensor,
}

impl Classifier {
    /// Loads a checkpoint folder (or a `.safetensors` file with `config.json` beside it) and
    /// the content size and normalisation recorded in the run's `training.json`; without
    /// one, the whole canvas and HF's default normalisation.
    pub fn load(path: &Path) -> Result<Self> {
        let (cfg, model) = load_classifier(path, &Device::Cpu)?;
        let files = ModelFiles::locate(path)?;
        let dir = files.config.parent().unwrap_or(Path::new("."));
        let tc_path = dir.join(TRAINING_FILE);
        let (input_size, normalize) = if tc_path.exists() {
            let tc = TrainConfig::load(&tc_path)?;
            (tc.content_size(&cfg), tc.normalize)
        } else {
            (cfg.image_size, Normalize::hf_default(cfg.num_channels))
        };
        let fast = Some(FastForward::load(&cfg, &files.weights)?);
        let check_key = imgseq_kernels::check_cache::check_key(
            "vit classes check",
            &[files.weights.as_path(), files.config.as_path()],
        );
        Ok(Self {
            cfg,
            model,
            input_size,
            normalize,
            fast,
            check_key,
        })
    }

    /// The fast forward when it computes what `model.forward(x, false)` would: f32, at the
    /// model's own size.
    fn fast_for(&self, x: &Tensor, interpolate: bool) -> Option<&FastForward> {
        let size = self.cfg.image_size;
        let at_size = matches!(x.dims4(), Ok((_, _, h, w)) if (h, w) == (size, size));
        (at_size && !interpolate && self.model.precision() == Precision::F32)
            .then_some(self.fast.as_ref())
            .flatten()
    }

    /// Whether inputs are whole-canvas images resized as HF's `ViTImageProcessor` does (the
    /// model was trained without padding), rather than letterboxed content on a padded canvas.
    pub fn hf_resize(&self) -> bool {
        self.input_size == self.cfg.image_size
    }

    /// Side of the image content on a `size`×`size` input: scales with the size (28 of 32,
    /// 42 of 48 for Fashion-MNIST).
    pub fn content_size(&self, size: usize) -> usize {
        self.input_size * size / self.cfg.image_size
    }

    /// One image as `(c, content, content)` bytes: brought to the model's channels
    /// ([`with_channels`]: gray → three equal channels, colour → luma, as [`load_image`] does
    /// for files), letterboxed to `content` pixels (black fill, white when inverting) and, with
    /// `invert`, gray levels inverted.
    ///
    /// A model trained on whole-canvas inputs (`input_size == image_size`, e.g. Fashion-MNIST
    /// resized 28→32) takes any image as HF's `ViTImageProcessor` does: resized to the square
    /// with Pillow's bilinear filter, aspect ratio not kept ([`resize_bilinear_pil`]), so
    /// `transformers.pipeline` with the shipped `preprocessor_config.json` sees the same pixels.
    pub fn image_bytes(&self, img: &DynamicImage, content: usize, invert: bool) -> Result<Vec<u8>> {
        let converted;
        let img = if img.color().channel_count() as usize == self.cfg.num_channels
            && matches!(
                img,
                DynamicImage::ImageLuma8(_) | DynamicImage::ImageRgb8(_)
            ) {
            img
        } else {
            converted = with_channels(img.clone(), self.cfg.num_channels)?;
            &converted
        };
        let (c, _, _, mut chw) = if self.hf_resize() {
            let (c, h, w, chw) = img.to_chw_u8();
            let chw = resize_bilinear_pil(&chw, (c, h, w), (content, content))?;
            (c, content, content, chw)
        } else {
            let fill = if invert { 255 } else { 0 };
            fit_dynamic(img, content as u32, Fit::Letterbox(fill))?.to_chw_u8()
        };
        if c != self.cfg.num_channels {
            return Err(Error::bad_data(format!(
                "the model takes {}-channel images, got {c} channels",
                self.cfg.num_channels
            )));
        }
        if invert {
            chw.iter_mut().for_each(|v| *v = 255 - *v);
        }
        Ok(chw)
    }

    /// Images as a u8 set on a `size`×`size` canvas (content scaled by
    /// [`content_size`](Self::content_size), centred), before normalisation.
    pub fn image_set(
        &self,
        images: &[DynamicImage],
        size: usize,
        invert: bool,
    ) -> Result<ImageSet> {
        let content = self.content_size(size);
        let mut bytes = Vec::new();
        for img in images {
            bytes.extend(self.image_bytes(img, content, invert)?);
        }
        let set = ImageSet::new(
            bytes,
            vec![0; images.len()],
            (self.cfg.num_channels, content, content),
            vec!["?".into()],
        )?;
        pad_to(set, size)
    }

    /// Model input for images: `(n, c, size, size)` f32, prepared as the training data was.
    pub fn preprocess(&self, images: &[DynamicImage], size: usize, invert: bool) -> Result<Tensor> {
        self.cfg.check_input_size(size, size)?;
        self.cfg
            .check_memory(images.len(), size, size, false, true)?;
        let set = self.image_set(images, size, invert)?;
        let idx: Vec<usize> = (0..set.n).collect();
        let (x, _) = make_batch(&set, &idx, &self.normalize, None, &Device::Cpu)?;
        Ok(x)
    }

    /// Loads image files with the model's channels and [`preprocess`](Self::preprocess)es them.
    pub fn load_images(
        &self,
        paths: &[impl AsRef<Path>],
        size: usize,
        invert: bool,
    ) -> Result<Tensor> {
        // Refuse an absurd size before decoding anything.
        self.cfg.check_input_size(size, size)?;
        self.cfg
            .check_memory(paths.len(), size, size, false, true)?;
        let images = paths
            .iter()
            .map(|p| load_image(p, self.cfg.num_channels))
            .collect::<Result<Vec<_>>>()?;
        self.preprocess(&images, size, invert)
    }

    /// Tokens and position vectors of preprocessed images `(b, c, h, w)`; positions are
    /// interpolated when `h`×`w` is not the model's size.
    pub fn embed(&self, x: &Tensor) -> Result<Embedding> {
        let (b, _, h, w) = x.dims4()?;
        self.cfg.check_input_size(h, w)?;
        self.cfg.check_memory(b, h, w, false, false)?;
        let interpolate = (h, w) != (self.cfg.image_size, self.cfg.image_size);
        let e = &self.model.vit.embeddings;
        Ok(Embedding {
            tokens: e.forward(x, interpolate)?,
            positions: e.positions(h, w, interpolate)?,
        })
    }

    /// Logits `(n, num_labels)` of preprocessed images `(n, c, h, w)`; an input of another
    /// size than the model's needs `interpolate` (positions interpolated). The input size is
    /// checked against the patch size and the memory limit before any work.
    pub fn logits(&self, x: &Tensor, interpolate: bool) -> Result<Tensor> {
        let (b, c, h, w) = x.dims4()?;
        if c != self.cfg.num_channels {
            return Err(Error::bad_data(format!(
                "the model takes {}-channel input, got {c} channels",
                self.cfg.num_channels
            )));
        }
        self.cfg.check_input_size(h, w)?;
        if interpolate || (h, w) == (self.cfg.image_size, self.cfg.image_size) {
            self.cfg.check_memory(b, h, w, true, false)?;
        }
        match self.fast_for(x, interpolate) {
            Some(f) => f.logits(x),
            None => Ok(self.model.forward(x, interpolate)?),
        }
    }

    /// The CLS token's final hidden state (after the last LayerNorm — what the classifier
    /// head reads) of preprocessed images at the model's size: the features the Fréchet
    /// distance of generated images is measured on ([`imgseq_core::frechet`]).
    ///
    /// # Shapes
    /// (n, c, size, size) → (n, hidden)
    pub fn cls_features(&self, x: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = x.dims4()?;
        if c != self.cfg.num_channels || (h, w) != (self.cfg.image_size, self.cfg.image_size) {
            return Err(Error::bad_data(format!(
                "the judge takes ({}, {s}, {s}) images, got ({c}, {h}, {w})",
                self.cfg.num_channels,
                s = self.cfg.image_size
            )));
        }
        self.cfg.check_memory(b, h, w, true, false)?;
        let hidden = self.model.vit.forward(x, false)?; // (n, 1 + patches, hidden)
        Ok(hidden.narrow(1, 0, 1)?.squeeze(1)?) // (n, hidden)
    }

    /// The classifier as a judge of images (real, reconstructed or generated) on the model's
    /// canvas: the evaluation report against `set`'s labels and the CLS features of every
    /// image ([`cls_features`](Self::cls_features)), from one forward pass per batch.
    ///
    /// # Shapes
    /// set: n images (c, size, size) u8 → features (n · hidden) row after row
    pub fn judge(&self, set: &ImageSet, progress: bool) -> Result<(EvalReport, Vec<f32>)> {
        if set.n == 0 {
            return Err(Error::invalid("the set to judge has no images"));
        }
        let k = self.cfg.num_labels();
        let mut confusion = vec![vec![0usize; k]; k];
        let mut features = Vec::with_capacity(set.n * self.cfg.hidden_size);
        let pb = progress.then(|| imgseq_core::progress::bar(set.n as u64, 0, "judge"));
        let idx: Vec<usize> = (0..set.n).collect();
        for chunk in idx.chunks(EVAL_BATCH) {
            let (x, _) = make_batch(set, chunk, &self.normalize, None, &Device::Cpu)?;
            let hidden = self.model.vit.forward(&x, false)?; // (b, n, hidden)
            let cls = hidden.narrow(1, 0, 1)?.squeeze(1)?; // (b, hidden)
            features.extend(cls.flatten_all()?.to_vec1::<f32>()?);
            let pred = self
                .model
                .classify(&hidden)?
                .argmax(candle_core::D::Minus1)?
                .to_vec1::<u32>()?;
            tally(&mut confusion, set, chunk, &pred)?;
            if let Some(pb) = &pb {
                pb.inc(chunk.len() as u64);
            }
        }
        if let Some(pb) = pb {
            pb.finish_and_clear();
        }
        Ok((EvalReport::from_confusion(confusion), features))
    }

    /// Class probabilities `(n, num_labels)` of preprocessed images at the model's size.
    pub fn probabilities(&self, x: &Tensor) -> Result<Tensor> {
        Ok(probabilities(&self.logits(x, false)?)?)
    }

    /// The `k` (at least 1; more than the number of labels gives all) most probable labels of
    /// each image, best first, as (label index, probability).
    pub fn top_k(&self, x: &Tensor, k: usize) -> Result<Vec<Vec<(usize, f32)>>> {
        if k == 0 {
            return Err(Error::setting("top_k", k, "must be positive"));
        }
        let probs = self.probabilities(x)?;
        let k = k.min(self.cfg.num_labels());
        let mut out = Vec::with_capacity(probs.dim(0)?);
        for i in 0..probs.dim(0)? {
            let row = probs.get(i)?.to_vec1::<f32>()?;
            let mut order: Vec<usize> = (0..row.len()).collect();
            order.sort_by(|&x, &y| row[y].total_cmp(&row[x]));
            out.push(order[..k].iter().map(|&j| (j, row[j])).collect());
        }
        Ok(out)
    }

    /// One split of `source` as this model saw its data: at the content size, centred on the
    /// canvas, the first `limit` images, labelled with the model's label ids
    /// ([`relabel`]).
    pub fn load_split(
        &self,
        source: &DataSource,
        split: Split,
        limit: Option<usize>,
    ) -> Result<ImageSet> {
        let set = source.load_split(
            split,
            self.input_size,
            self.cfg.num_channels,
            self.cfg.image_size,
            limit,
        )?;
        relabel(set, &self.cfg, source)
    }

    /// Accuracy, per-class accuracy and confusion matrix on `set` (as from
    /// [`load_split`](Self::load_split)).
    pub fn evaluate(&self, set: &ImageSet, progress: bool) -> Result<EvalReport> {
        let k = self.cfg.num_labels();
        evaluate_with(k, set, &self.normalize, EVAL_BATCH, progress, |x| {
            Ok(self
                .logits(x, false)?
                .argmax(candle_core::D::Minus1)?
                .to_vec1::<u32>()?)
        })
    }
}

/// Gives `set` the label ids and class names of the model `cfg`. When every class name of
/// the data is one of the model's labels, classes are matched by name (an image folder with
/// classes `b/` and `a/` is scored against the model's labels `a` and `b` whatever their
/// order). Otherwise the data's classes must be the model's by index: an image folder, whose
/// classes are only names, is then an error naming the class the model does not know; a
/// built-in dataset (Fashion-MNIST, CIFAR-10) is taken by index when it has no more classes
/// than the model.
pub fn relabel(mut set: ImageSet, cfg: &ViTConfig, source: &DataSource) -> Result<ImageSet> {
    let model_names: Vec<String> = (0..cfg.num_labels()).map(|i| cfg.label(i)).collect();
    let by_name: Option<Vec<u16>> = set
        .class_names
        .iter()
        .map(|n| model_names.iter().position(|m| m == n).map(|i| i as u16))
        .collect();
    match by_name {
        Some(map) => {
            for l in &mut set.labels {
                *l = map[*l as usize];
            }
        }
        None => {
            if let DataSource::ImageFolder(dir) = source {
                let missing = set
                    .class_names
                    .iter()
                    .find(|n| !model_names.contains(n))
                    .expect("some name is missing");
                return Err(Error::format(
                    dir,
                    format!(
                        "class folder `{missing}` is not one of the model's labels ({})",
                        model_names.join(", ")
                    ),
                ));
            }
            if set.class_names.len() > model_names.len() {
                return Err(Error::invalid(format!(
                    "the data has {} classes, the model only {}",
                    set.class_names.len(),
                    model_names.len()
                )));
            }
        }
    }
    set.class_names = model_names;
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::DType;
    use candle_nn::VarBuilder;
    use image::{GrayImage, RgbImage};

    fn classifier(channels: usize) -> Classifier {
        let cfg = ViTConfig::seed(channels, &["a", "b", "c"]);
        let model =
            ViTForImageClassification::new(&cfg, VarBuilder::zeros(DType::F32, &Device::Cpu))
                .unwrap();
        Classifier {
            input_size: 28,
            normalize: Normalize::hf_default(channels),
            cfg,
            model,
            fast: None,
            check_key: None,
        }
    }

    #[test]
    fn fast_f32_logits_are_the_candle_models_and_bf16_bypasses_them() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../weights/vit-fashion-mnist");
        let mut c = Classifier::load(&dir).unwrap();
        assert!(c.fast.is_some());
        // 37 images: not a whole number of the fused engine's 8-image shards.
        let imgs = crate::precision::check_images(37, 32, c.cfg.num_channels);
        let x = c.preprocess(&imgs, 32, false).unwrap();
        let flat = |t: Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let (fast, slow) = (
            flat(c.logits(&x, false).unwrap()),
            flat(c.model.forward(&x, false).unwrap()),
        );
        assert_eq!(fast.len(), 37 * c.cfg.num_labels());
        let scale = slow.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = fast
            .iter()
            .zip(&slow)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(worst <= 1e-4 * scale, "fast vs candle: {worst} of {scale}");
        c.model.set_precision(Precision::Bf16).unwrap();
        let bf16 = flat(c.logits(&x, false).unwrap());
        assert_eq!(
            bf16,
            flat(c.model.forward(&x, false).unwrap()),
            "bf16 runs the model"
        );
    }

    /// The interleaved-to-planar loop the CLI used before `AsChw` took over.
    fn reference_chw(img: &DynamicImage, channels: usize, invert: bool) -> Vec<u8> {
        let (w, h) = (img.width() as usize, img.height() as usize);
        let raw = img.clone().into_bytes();
        let mut chw = vec![0u8; raw.len()];
        for y in 0..h {
            for x in 0..w {
                for c in 0..channels {
                    let v = raw[(y * w + x) * channels + c];
                    chw[c * h * w + y * w + x] = if invert { 255 - v } else { v };
                }
            }
        }
        chw
    }

    #[test]
    fn image_bytes_are_those_of_the_planar_loop() {
        let rgb = DynamicImage::ImageRgb8(RgbImage::from_fn(50, 40, |x, y| {
            image::Rgb([(x * 7) as u8, (y * 5) as u8, ((x * y) % 251) as u8])
        }));
        let gray = DynamicImage::ImageLuma8(GrayImage::from_fn(37, 61, |x, y| {
            image::Luma([((x * 13 + y * 3) % 256) as u8])
        }));
        for (img, c) in [(rgb, 3), (gray, 1)] {
            let m = classifier(c);
            for invert in [false, true] {
                let fitted =
                    fit_dynamic(&img, 28, Fit::Letterbox(if invert { 255 } else { 0 })).unwrap();
                assert_eq!(
                    m.image_bytes(&img, 28, invert).unwrap(),
                    reference_chw(&fitted, c, invert)
                );
            }
        }
    }

    #[test]
    fn preprocess_scales_content_with_size_and_embed_interpolates() {
        let m = classifier(1);
        let img = DynamicImage::ImageLuma8(GrayImage::from_pixel(10, 10, image::Luma([255])));
        let x = m.preprocess(&[img.clone(), img], 48, false).unwrap();
        assert_eq!(x.dims(), &[2, 1, 48, 48]);
        assert_eq!(m.content_size(48), 42);
        let e = m.embed(&x).unwrap();
        assert_eq!(e.tokens.dims(), &[2, 145, 48]);
        assert_eq!(e.positions.dims(), &[1, 145, 48]);
        let x = Tensor::zeros((1, 1, 30, 30), DType::F32, &Device::Cpu).unwrap();
        let err = m.embed(&x).err().unwrap().to_string();
        assert_eq!(err, "size 30 is not a multiple of the patch size 4");
    }

    #[test]
    fn images_are_brought_to_the_models_channels() {
        // Gray into a 3-channel model: three equal channels (PIL's convert("RGB"), what HF's
        // pipeline feeds); colour into a gray model: the luma load_gray gives a file.
        let g = GrayImage::from_fn(28, 28, |x, y| image::Luma([(x * 9 + y) as u8]));
        let rgb3 = classifier(3)
            .image_bytes(&DynamicImage::ImageLuma8(g.clone()), 28, false)
            .unwrap();
        assert_eq!(rgb3.len(), 3 * 28 * 28);
        for c in 0..3 {
            assert_eq!(
                &rgb3[c * 784..(c + 1) * 784],
                g.as_raw().as_slice(),
                "channel {c}"
            );
        }
        let rgb =
            image::RgbImage::from_fn(28, 28, |x, y| image::Rgb([x as u8 * 9, y as u8 * 9, 77]));
        let gray = classifier(1)
            .image_bytes(&DynamicImage::ImageRgb8(rgb.clone()), 28, false)
            .unwrap();
        assert_eq!(gray, imgseq_core::image_io::rgb_to_gray(&rgb).into_raw());
    }

    #[test]
    fn top_k_is_clamped_and_sorted() {
        let m = classifier(1);
        let x = Tensor::zeros((2, 1, 32, 32), DType::F32, &Device::Cpu).unwrap();
        let t = m.top_k(&x, 99).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].len(), 3);
        assert!(t[0].windows(2).all(|w| w[0].1 >= w[1].1));
        let e = m.top_k(&x, 0).unwrap_err().to_string();
        assert_eq!(e, "top_k 0 must be positive");
    }
}
