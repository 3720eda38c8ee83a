//! Images in, tensors out: image lists and preprocessing for the tokenizer (the training
//! images and their random crops are `imgseq_train::vqgan::data`'s).

use candle_core::Tensor;
use image::RgbImage;
use imgseq_core::image_io::PixelRange;
use imgseq_core::input::{self, Crop, InputSpec};
use imgseq_core::Result;
use std::path::PathBuf;

pub use imgseq_core::data::list::image_set as data_paths;

/// Reads only the headers of `paths`: every file must be an image of at least `size` pixels
/// on its shorter side (or `upscale`), so that a bad file fails before any compute.
pub fn check_headers(paths: &[PathBuf], size: u32, upscale: bool) -> Result<()> {
    rgb_shorter(size).check_headers(paths, upscale)
}

/// imgseq's own RGB input at `size` (shorter side resized, centre crop).
fn rgb_shorter(size: u32) -> InputSpec {
    InputSpec {
        size,
        crop: Crop::ShorterSide,
        channels: 3,
        range: PixelRange::MinusOneOne,
    }
}

/// The tokenizer's preprocessing of image files: shorter side resized to `size`, centre crop.
pub fn load_square(paths: &[PathBuf], size: u32, upscale: bool) -> Result<Vec<RgbImage>> {
    rgb_shorter(size).load_all(paths, upscale)
}

/// The tokenizer's preprocessing for a model with `channels` input channels: [`load_square`],
/// then, for a gray model (1), each picture as its luma ([`as_gray`]), so that scores
/// compare a reconstruction with what the model saw.
pub fn load_square_for(
    paths: &[PathBuf],
    size: u32,
    upscale: bool,
    channels: usize,
) -> Result<Vec<RgbImage>> {
    InputSpec {
        channels,
        ..rgb_shorter(size)
    }
    .load_all(paths, upscale)
}

pub use imgseq_core::input::as_gray;

/// A picture as the model's input tensor for `channels` (1: its luma, 3: RGB), in [-1, 1].
///
/// # Shapes
/// n images of s×s → (n, channels, s, s)
pub fn to_input(imgs: &[RgbImage], channels: usize) -> Result<Tensor> {
    input::to_tensor(imgs, channels, PixelRange::MinusOneOne)
}

/// Images as the model's input, scaled to [-1, 1] (taming's `x/127.5 − 1`).
///
/// # Shapes
/// n images of s×s → (n, 3, s, s)
pub fn to_batch(imgs: &[RgbImage]) -> Result<Tensor> {
    to_input(imgs, 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_lists_resolve_relative_paths() {
        let d = tempfile::tempdir().unwrap();
        let list = d.path().join("l.txt");
        std::fs::write(&list, "# comment\n\na/x.png\n/abs/y.jpg\n").unwrap();
        let p = data_paths(&list).unwrap();
        assert_eq!(
            p,
            vec![d.path().join("a/x.png"), PathBuf::from("/abs/y.jpg")]
        );
        let png = d.path().join("x.png");
        RgbImage::new(2, 2).save(&png).unwrap();
        assert_eq!(data_paths(&png).unwrap(), vec![png.clone()]);
        std::fs::write(&list, b"\xff\xfe\x00binary").unwrap();
        let e = data_paths(&list).unwrap_err().to_string();
        assert!(e.contains("l.txt") && e.contains("not UTF-8"), "{e}");
        std::fs::write(&list, "# nothing\n").unwrap();
        let e = data_paths(&list).unwrap_err().to_string();
        assert!(e.contains("l.txt") && e.contains("empty"), "{e}");
        let e = data_paths(&d.path().join("missing.txt"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.txt"), "{e}");
    }
}
