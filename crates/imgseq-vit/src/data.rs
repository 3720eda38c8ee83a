//! From a dataset on disk ([`DataSource`]) to a labelled u8 [`Dataset`] on the model's canvas,
//! and from there to model-ready batches.
//!
//! Datasets smaller than the model (Fashion-MNIST's 28×28 in a 32×32 ViT) are centred on a zero
//! background once, at load time ([`pad_to`]); shifts, flips and erasing then come from
//! `imgseq_core::data::augment`, and pixels are normalised as `(x/255 − mean)/std`.

use candle_core::{Device, Tensor};
use imgseq_core::data::{
    batch_tensors, cifar10, fashion_mnist, image_folder, Augment as CoreAugment, Dataset,
    Normalize as CoreNormalize, Split,
};
use imgseq_core::image_io::Fit;
use imgseq_core::resample::resize_bilinear_pil;
use imgseq_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub use imgseq_core::data::Dataset as ImageSet;

/// Training-time augmentation (saved in `training.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Augment {
    /// Random translation by up to this many pixels in x and y (zero fill).
    pub shift: usize,
    /// Random horizontal flip with probability 0.5.
    pub hflip: bool,
    /// Probability of random erasing (one rectangle of 2–33% of the image set to zero).
    pub erase_prob: f32,
}

impl Default for Augment {
    fn default() -> Self {
        Self {
            shift: 2,
            hflip: true,
            erase_prob: 0.25,
        }
    }
}

impl Augment {
    fn to_core(&self) -> CoreAugment {
        CoreAugment {
            hflip: self.hflip,
            ..CoreAugment::standard(self.shift, self.erase_prob)
        }
    }
}

/// How pixels become model input: `(x/255 − mean)/std` per channel (HF `image_mean`/`image_std`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Normalize {
    pub image_mean: Vec<f32>,
    pub image_std: Vec<f32>,
}

impl Normalize {
    /// HF `ViTImageProcessor`'s defaults (mean 0.5, std 0.5 per channel), for checkpoints
    /// that come without a `training.json`.
    pub fn hf_default(channels: usize) -> Self {
        Self {
            image_mean: vec![0.5; channels],
            image_std: vec![0.5; channels],
        }
    }

    fn to_core(&self) -> Result<CoreNormalize> {
        CoreNormalize::new(self.image_mean.clone(), self.image_std.clone())
    }
}

/// Where a training or test set comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataSource {
    /// Fashion-MNIST IDX files (gzipped or not) in a folder; `None`: the Debian package's
    /// folder ([`imgseq_core::data::idx::FASHION_MNIST_DIR`]).
    FashionMnist(Option<PathBuf>),
    /// The folder with CIFAR-10's `data_batch_*.bin` / `test_batch.bin`.
    Cifar10(PathBuf),
    /// A folder with `train/` and `test/`, each with one subfolder per class.
    ImageFolder(PathBuf),
}

impl DataSource {
    /// The name recorded in `training.json`.
    pub fn name(&self) -> &'static str {
        match self {
            DataSource::FashionMnist(_) => "fashion-mnist",
            DataSource::Cifar10(_) => "cifar-10",
            DataSource::ImageFolder(_) => "image-folder",
        }
    }

    /// `(channels, side)` of the images a new model is trained on: the dataset's own size
    /// (28×28 gray for Fashion-MNIST), or 32×32 RGB for image folders.
    pub fn native_shape(&self) -> (usize, usize) {
        match self {
            DataSource::FashionMnist(_) => (1, 28),
            DataSource::Cifar10(_) | DataSource::ImageFolder(_) => (3, 32),
        }
    }

    /// Loads one split with `channels` at `input`×`input` pixels (image folders are
    /// letterboxed to it, the fixed-size datasets must have it), keeps the first `limit`
    /// images, and centres them on the model's `size`×`size` canvas ([`pad_to`]).
    pub fn load_split(
        &self,
        split: Split,
        input: usize,
        channels: usize,
        size: usize,
        limit: Option<usize>,
    ) -> Result<Dataset> {
        if limit == Some(0) {
            return Err(Error::setting("limit", 0, "must be positive"));
        }
        let mut set = match self {
            DataSource::FashionMnist(dir) => fashion_mnist(dir.as_deref(), split)?,
            DataSource::Cifar10(dir) => cifar10(dir, split)?,
            DataSource::ImageFolder(dir) => {
                let sub = dir.join(match split {
                    Split::Train => "train",
                    Split::Test => "test",
                });
                image_folder(&sub, input as u32, channels, Fit::Letterbox(0))?
            }
        };
        // Gray datasets feed an RGB model as three equal channels (what HF's pipeline does with
        // a gray PNG: `convert("RGB")`); fixed-size datasets are resized to `input` exactly as
        // Pillow's bilinear resize does (what HF's `ViTImageProcessor` does).
        if set.channels == 1 && channels == 3 {
            set = gray_to_rgb(set)?;
        }
        if set.channels == channels && (set.height, set.width) != (input, input) {
            set = resize_to(set, input)?;
        }
        if (set.channels, set.height) != (channels, input) {
            return Err(Error::bad_data(format!(
                "the {} data is {}x{}x{} but the model expects {}x{}x{}",
                match split {
                    Split::Train => "training",
                    Split::Test => "test",
                },
                set.channels,
                set.height,
                set.width,
                channels,
                input,
                input
            )));
        }
        if let Some(l) = limit {
            let l = l.min(set.n);
            set.images.truncate(l * set.image_len());
            set.labels.truncate(l);
            set.n = l;
        }
        pad_to(set, size)
    }
}

/// Every image of `ds` as three equal channels.
pub fn gray_to_rgb(ds: Dataset) -> Result<Dataset> {
    let (c, h, w) = ds.dims();
    if c != 1 {
        return Err(Error::bad_data(format!(
            "gray_to_rgb: images have {c} channels, not 1"
        )));
    }
    let mut images = Vec::with_capacity(ds.n * 3 * h * w);
    for i in 0..ds.n {
        let img = ds.image(i);
        for _ in 0..3 {
            images.extend_from_slice(img);
        }
    }
    Dataset::new(images, ds.labels, (3, h, w), ds.class_names)
}

/// Every image of `ds` resized to `size`×`size` with Pillow's bilinear filter, bit for bit
/// ([`resize_bilinear_pil`]): Fashion-MNIST's 28×28 becomes the model's 32×32 as HF's
/// `ViTImageProcessor` would make it.
pub fn resize_to(ds: Dataset, size: usize) -> Result<Dataset> {
    let (c, h, w) = ds.dims();
    let mut images = Vec::with_capacity(ds.n * c * size * size);
    for i in 0..ds.n {
        images.extend(resize_bilinear_pil(ds.image(i), (c, h, w), (size, size))?);
    }
    Dataset::new(images, ds.labels, (c, size, size), ds.class_names)
}

/// Centres every image of `ds` on a zero `size`×`size` canvas (no-op when already that size).
pub fn pad_to(ds: Dataset, size: usize) -> Result<Dataset> {
    let (c, h, w) = ds.dims();
    if (h, w) == (size, size) {
        return Ok(ds);
    }
    if h > size || w > size {
        return Err(Error::bad_data(format!(
            "images are {h}x{w}, larger than the model's {size}x{size}"
        )));
    }
    let (oy, ox) = ((size - h) / 2, (size - w) / 2);
    let mut images = vec![0u8; ds.n * c * size * size];
    for i in 0..ds.n {
        let src = ds.image(i);
        let dst = &mut images[i * c * size * size..(i + 1) * c * size * size];
        for ch in 0..c {
            for y in 0..h {
                let d = ch * size * size + (y + oy) * size + ox;
                dst[d..d + w].copy_from_slice(&src[ch * h * w + y * w..ch * h * w + (y + 1) * w]);
            }
        }
    }
    Dataset::new(images, ds.labels, (c, size, size), ds.class_names)
}

/// Per-channel mean and standard deviation of the pixels in [0, 1].
pub fn channel_stats(ds: &Dataset) -> (Vec<f32>, Vec<f32>) {
    let (c, h, w) = ds.dims();
    let mut sum = vec![0f64; c];
    let mut sq = vec![0f64; c];
    for i in 0..ds.n {
        let img = ds.image(i);
        for ch in 0..c {
            for &p in &img[ch * h * w..(ch + 1) * h * w] {
                let v = p as f64 / 255.0;
                sum[ch] += v;
                sq[ch] += v * v;
            }
        }
    }
    let cnt = (ds.n * h * w).max(1) as f64;
    let mean: Vec<f32> = sum.iter().map(|s| (s / cnt) as f32).collect();
    let std = sq
        .iter()
        .zip(&mean)
        .map(|(q, m)| (q / cnt - (*m as f64).powi(2)).max(1e-12).sqrt() as f32)
        .collect();
    (mean, std)
}

/// One batch: images `(b, c, h, w)` f32 (augmented when `aug` is given, with `seed`) and labels `(b,)` u32.
pub fn make_batch(
    ds: &Dataset,
    idx: &[usize],
    norm: &Normalize,
    aug: Option<(&Augment, u64)>,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let (a, seed) = match aug {
        Some((a, s)) => (a.to_core(), s),
        None => (CoreAugment::none(), 0),
    };
    batch_tensors(ds, idx, &a, &norm.to_core()?, seed, device)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> Dataset {
        let mut images = vec![0u8; 2 * 28 * 28];
        images[0] = 255; // image 0: top-left pixel
        images[28 * 28 + 27] = 255; // image 1: top-right pixel
        Dataset::new(
            images,
            vec![0, 1],
            (1, 28, 28),
            vec!["a".into(), "b".into()],
        )
        .unwrap()
    }

    #[test]
    fn fashion_28px_is_centred_in_32px() {
        let ds = pad_to(set(), 32).unwrap();
        let norm = Normalize {
            image_mean: vec![0.0],
            image_std: vec![1.0],
        };
        let (b, y) = make_batch(&ds, &[0, 1], &norm, None, &Device::Cpu).unwrap();
        assert_eq!(y.to_vec1::<u32>().unwrap(), vec![0, 1]);
        let v = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(v[2 * 32 + 2], 1.0);
        assert_eq!(v[1024 + 2 * 32 + 29], 1.0);
        assert_eq!(v.iter().filter(|x| **x != 0.0).count(), 2);
    }

    #[test]
    fn augmentation_is_reproducible_with_a_seed() {
        let ds = pad_to(set(), 32).unwrap();
        let norm = Normalize {
            image_mean: vec![0.5],
            image_std: vec![0.5],
        };
        let a = Augment::default();
        let (b1, _) = make_batch(&ds, &[0, 1], &norm, Some((&a, 7)), &Device::Cpu).unwrap();
        let (b2, _) = make_batch(&ds, &[0, 1], &norm, Some((&a, 7)), &Device::Cpu).unwrap();
        let d = (b1 - b2)
            .unwrap()
            .abs()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert_eq!(d, 0.0);
    }
}
