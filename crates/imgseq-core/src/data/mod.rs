//! In-memory image classification datasets (Fashion-MNIST IDX, CIFAR-10 binary, image folders)
//! and fast seeded augmentation.
//!
//! A [`Dataset`] holds all images as `u8` in `(n, c, h, w)` order, so one image is a
//! contiguous `(c, h, w)` slice ([`Dataset::image`]).

pub mod augment;
pub mod cifar;
pub mod folder;
pub mod idx;
pub mod list;

pub use augment::{augment_batch, batch_tensors, Augment, Normalize};
pub use cifar::cifar10;
pub use folder::{image_folder, list_images};
pub use idx::fashion_mnist;

use crate::{Error, Result};
use image::{DynamicImage, GrayImage, RgbImage};

/// Which part of a dataset to load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Train,
    Test,
}

/// Labelled `u8` images of one size, stored `(n, c, h, w)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// `n * channels * height * width` bytes, image after image, each `(c, h, w)`.
    pub images: Vec<u8>,
    /// One class id per image, each `< class_names.len()`.
    pub labels: Vec<u16>,
    pub n: usize,
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub class_names: Vec<String>,
}

impl Dataset {
    /// Builds a dataset, checking that sizes and labels agree.
    pub fn new(
        images: Vec<u8>,
        labels: Vec<u16>,
        (channels, height, width): (usize, usize, usize),
        class_names: Vec<String>,
    ) -> Result<Self> {
        let per = channels
            .checked_mul(height)
            .and_then(|x| x.checked_mul(width))
            .filter(|&x| x > 0)
            .ok_or_else(|| {
                Error::bad_data(format!(
                    "dataset: bad image size {channels}x{height}x{width}"
                ))
            })?;
        let n = labels.len();
        if images.len() != n * per {
            return Err(Error::bad_data(format!(
                "dataset: {} bytes of images for {n} labels of {channels}x{height}x{width}",
                images.len()
            )));
        }
        if let Some(&bad) = labels.iter().find(|&&l| l as usize >= class_names.len()) {
            return Err(Error::bad_data(format!(
                "dataset: label {bad} but only {} classes",
                class_names.len()
            )));
        }
        Ok(Self {
            images,
            labels,
            n,
            channels,
            height,
            width,
            class_names,
        })
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub fn num_classes(&self) -> usize {
        self.class_names.len()
    }

    /// `(channels, height, width)` of every image.
    pub fn dims(&self) -> (usize, usize, usize) {
        (self.channels, self.height, self.width)
    }

    /// Bytes per image (`c * h * w`).
    pub fn image_len(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// Image `i` as `(c, h, w)` bytes. Panics if `i >= n`, like slice indexing; see
    /// [`Dataset::get`].
    pub fn image(&self, i: usize) -> &[u8] {
        let l = self.image_len();
        &self.images[i * l..(i + 1) * l]
    }

    /// Image `i`, or `None` when out of range.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        (i < self.n).then(|| self.image(i))
    }

    /// Label of image `i`. Panics if `i >= n`.
    pub fn label(&self, i: usize) -> u16 {
        self.labels[i]
    }

    /// The images at `indices` (in that order, repeats allowed).
    pub fn subset(&self, indices: &[usize]) -> Result<Dataset> {
        let l = self.image_len();
        let mut images = Vec::with_capacity(indices.len() * l);
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            let img = self.get(i).ok_or_else(|| {
                Error::invalid(format!("dataset: index {i} out of range (n = {})", self.n))
            })?;
            images.extend_from_slice(img);
            labels.push(self.labels[i]);
        }
        Ok(Dataset {
            images,
            labels,
            n: indices.len(),
            channels: self.channels,
            height: self.height,
            width: self.width,
            class_names: self.class_names.clone(),
        })
    }

    /// The first `min(n, len)` images.
    pub fn take(&self, n: usize) -> Dataset {
        let n = n.min(self.n);
        Dataset {
            images: self.images[..n * self.image_len()].to_vec(),
            labels: self.labels[..n].to_vec(),
            n,
            channels: self.channels,
            height: self.height,
            width: self.width,
            class_names: self.class_names.clone(),
        }
    }

    /// Per-channel mean and standard deviation of the pixel values scaled to `[0, 1]`
    /// (population std), e.g. for [`Normalize`].
    pub fn channel_mean_std(&self) -> (Vec<f32>, Vec<f32>) {
        let c = self.channels;
        let plane = self.height * self.width;
        let mut hist = vec![[0u64; 256]; c];
        for img in self.images.chunks_exact(self.image_len().max(1)) {
            for (ch, h) in hist.iter_mut().enumerate() {
                for &v in &img[ch * plane..(ch + 1) * plane] {
                    h[v as usize] += 1;
                }
            }
        }
        let mut mean = Vec::with_capacity(c);
        let mut std = Vec::with_capacity(c);
        for h in &hist {
            let cnt: u64 = h.iter().sum();
            if cnt == 0 {
                mean.push(0.0);
                std.push(1.0);
                continue;
            }
            let (mut s, mut s2) = (0f64, 0f64);
            for (v, &k) in h.iter().enumerate() {
                let x = v as f64 / 255.0;
                s += x * k as f64;
                s2 += x * x * k as f64;
            }
            let m = s / cnt as f64;
            mean.push(m as f32);
            std.push((s2 / cnt as f64 - m * m).max(0.0).sqrt() as f32);
        }
        (mean, std)
    }

    /// Number of images per class.
    pub fn class_counts(&self) -> Vec<usize> {
        let mut c = vec![0; self.class_names.len()];
        for &l in &self.labels {
            if let Some(x) = c.get_mut(l as usize) {
                *x += 1;
            }
        }
        c
    }

    /// Image `i` as a gray (1 channel) or RGB (3 channels) image, e.g. to save it as PNG.
    pub fn to_image(&self, i: usize) -> Result<DynamicImage> {
        let img = self.get(i).ok_or_else(|| {
            Error::invalid(format!("dataset: index {i} out of range (n = {})", self.n))
        })?;
        let (w, h) = (self.width as u32, self.height as u32);
        let plane = self.height * self.width;
        match self.channels {
            1 => Ok(DynamicImage::ImageLuma8(
                GrayImage::from_raw(w, h, img.to_vec()).expect("size checked"),
            )),
            3 => {
                let mut hwc = Vec::with_capacity(3 * plane);
                for p in 0..plane {
                    hwc.extend_from_slice(&[img[p], img[plane + p], img[2 * plane + p]]);
                }
                Ok(DynamicImage::ImageRgb8(
                    RgbImage::from_raw(w, h, hwc).expect("size checked"),
                ))
            }
            c => Err(Error::invalid(format!(
                "dataset: cannot make an image of {c} channels"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Dataset {
        let images: Vec<u8> = (0..3 * 2 * 2 * 2).map(|i| i as u8).collect();
        Dataset::new(
            images,
            vec![0, 1, 1],
            (2, 2, 2),
            vec!["a".into(), "b".into()],
        )
        .unwrap()
    }

    #[test]
    fn accessors() {
        let d = tiny();
        assert_eq!(d.len(), 3);
        assert_eq!(d.image_len(), 8);
        assert_eq!(d.image(1), &[8, 9, 10, 11, 12, 13, 14, 15]);
        assert!(d.get(3).is_none());
        assert_eq!(d.class_counts(), vec![1, 2]);
        let s = d.subset(&[2, 0]).unwrap();
        assert_eq!(s.labels, vec![1, 0]);
        assert_eq!(s.image(1), d.image(0));
        assert!(d.subset(&[5]).is_err());
        assert_eq!(d.take(10).len(), 3);
        assert_eq!(d.take(1).images.len(), 8);
        assert!(d.to_image(0).is_err()); // 2 channels
    }

    #[test]
    fn new_validates() {
        let names = vec!["a".to_string()];
        assert!(Dataset::new(vec![0; 5], vec![0], (1, 2, 2), names.clone()).is_err());
        assert!(Dataset::new(vec![0; 4], vec![1], (1, 2, 2), names.clone()).is_err());
        assert!(Dataset::new(vec![], vec![], (0, 2, 2), names.clone()).is_err());
        assert!(Dataset::new(vec![0; 4], vec![0], (1, 2, 2), names).is_ok());
    }

    #[test]
    fn mean_std_and_images() {
        let d = Dataset::new(
            vec![0, 255, 0, 255, 51, 51, 51, 51, 0, 0, 0, 0],
            vec![0],
            (3, 2, 2),
            vec!["x".into()],
        )
        .unwrap();
        let (m, s) = d.channel_mean_std();
        assert!((m[0] - 0.5).abs() < 1e-6 && (s[0] - 0.5).abs() < 1e-6);
        assert!((m[1] - 0.2).abs() < 1e-6 && s[1].abs() < 1e-6);
        let img = d.to_image(0).unwrap();
        let rgb = img.as_rgb8().unwrap();
        assert_eq!(rgb.get_pixel(1, 0).0, [255, 51, 0]);
    }
}
