//! Each family's image preprocessing ([`Resize`]): imgseq's shorter-side resize and centre
//! crop, or ADM's `center_crop_arr` that LlamaGen uses, bit-exact with Pillow's resampling.
//! The rule and the resampler are [`imgseq_core::input`]'s and [`imgseq_core::resample`]'s;
//! these are their RGB forms by family.

use crate::family::Resize;
use image::RgbImage;
use imgseq_core::image_io::PixelRange;
use imgseq_core::input::InputSpec;
pub use imgseq_core::resample::{adm_center_crop, pil_resize, Filter};
use imgseq_core::Result;
use std::path::{Path, PathBuf};

/// The RGB input of `size` cropped by `resize`.
fn rgb(size: u32, resize: Resize) -> InputSpec {
    InputSpec {
        size,
        crop: resize,
        channels: 3,
        range: PixelRange::MinusOneOne,
    }
}

/// The model's square input from a decoded image: `resize`'s way to `size`×`size`.
pub fn square(img: &RgbImage, size: u32, resize: Resize) -> Result<RgbImage> {
    rgb(size, resize).square(img)
}

/// Loads an image file as the model's square input (the shorter side must be at least
/// `size` unless `upscale`), errors naming the file.
pub fn load_square(path: &Path, size: u32, upscale: bool, resize: Resize) -> Result<RgbImage> {
    rgb(size, resize).load(path, upscale)
}

/// [`load_square`] of every path.
pub fn load_squares(
    paths: &[PathBuf],
    size: u32,
    upscale: bool,
    resize: Resize,
) -> Result<Vec<RgbImage>> {
    rgb(size, resize).load_all(paths, upscale)
}
