//! Image file or pixel array → a tokenizer's input: the one owner of that rule. A tokenizer
//! describes what it reads as data ([`InputSpec`]: square side, crop rule, channels, value
//! range); the CLI, eval, the dataset job and the Python package all bring images to it here,
//! so that one image gives one input (and one set of tokens) whichever way it arrives.
//!
//! The steps, in order: decode (RGB), check the shorter side against the size (unless
//! upscaling is allowed), the crop rule's resize and centre crop ([`Crop`]), for a gray model
//! the picture's luma kept as RGB (r = g = b, [`as_gray`]), and at the tensor its channels and
//! value range ([`InputSpec::to_tensor`]).

use crate::image_io::{self, PixelRange};
use crate::resample::Filter;
use crate::{resample, Error, Result};
use candle_core::{Device, Tensor};
use image::{DynamicImage, GrayImage, RgbImage};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// How an image becomes the model's square input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Crop {
    /// imgseq's: shorter side resized to the size (Catmull-Rom), centre crop.
    #[default]
    ShorterSide,
    /// ADM's `center_crop_arr` (LlamaGen): halve with a box filter while the shorter side is
    /// ≥ 2× the size, PIL bicubic resize of the shorter side, centre crop
    /// ([`resample::adm_center_crop`]).
    AdmCenterCrop,
    /// The ViT's: fitted inside the square keeping its aspect ratio, black around it
    /// ([`image_io::letterbox`]); the ViT's tokenizer adds its content side, canvas and
    /// normalisation at the tensor step.
    Letterbox,
    /// transformers' `JanusImageProcessor` (Janus, Janus-Pro): the longer side resized to the
    /// size with Pillow's bicubic, padded to a square with grey (127, 127, 127)
    /// ([`resample::pad_to_square`]).
    PadToSquare,
    /// transformers' `CLIPImageProcessor` and `BitImageProcessor` (DINOv2), PIL backend: the
    /// shorter side resized to `resize` (the longer `int(resize · longer / shorter)`) with
    /// Pillow's `filter`, then the centre `size`×`size` crop at ⌊(side − size) / 2⌋
    /// ([`resample::resize_center_crop`]).
    ShortestEdgeCrop { resize: u32, filter: Filter },
    /// transformers' `SiglipImageProcessor`, PIL backend: the whole picture resized to
    /// `size`×`size` with Pillow's `filter`, its aspect ratio not kept.
    ResizeSquare { filter: Filter },
}

impl Crop {
    /// The rule's name in configs (`shorter_side`, `adm_center_crop`).
    pub fn name(self) -> &'static str {
        match self {
            Crop::ShorterSide => "shorter_side",
            Crop::AdmCenterCrop => "adm_center_crop",
            Crop::Letterbox => "letterbox",
            Crop::PadToSquare => "pad_to_square",
            Crop::ShortestEdgeCrop { .. } => "shortest_edge_crop",
            Crop::ResizeSquare { .. } => "resize_square",
        }
    }

    /// The rule of `name` ([`Self::name`]), with the resize side and filter the rules
    /// `shortest_edge_crop` (both) and `resize_square` (the filter) take; `None` for an
    /// unknown name or a missing parameter.
    pub fn from_parts(name: &str, resize: Option<u32>, filter: Option<Filter>) -> Option<Self> {
        Some(match name {
            "shorter_side" => Crop::ShorterSide,
            "adm_center_crop" => Crop::AdmCenterCrop,
            "letterbox" => Crop::Letterbox,
            "pad_to_square" => Crop::PadToSquare,
            "shortest_edge_crop" => Crop::ShortestEdgeCrop {
                resize: resize?,
                filter: filter?,
            },
            "resize_square" => Crop::ResizeSquare { filter: filter? },
            _ => return None,
        })
    }

    /// The side the picture is resized to before its crop, where the rule has one apart from
    /// the input size (`shortest_edge_crop`).
    pub fn resize_side(self) -> Option<u32> {
        match self {
            Crop::ShortestEdgeCrop { resize, .. } => Some(resize),
            _ => None,
        }
    }

    /// The Pillow filter of the rule, where it is a parameter.
    pub fn filter(self) -> Option<Filter> {
        match self {
            Crop::ShortestEdgeCrop { filter, .. } | Crop::ResizeSquare { filter } => Some(filter),
            _ => None,
        }
    }

    /// The rule in words, as manifests record it.
    pub fn describe(self) -> String {
        match self {
            Crop::ShorterSide => "shorter side resized to size (Catmull-Rom), centre crop".into(),
            Crop::AdmCenterCrop => "ADM centre crop (DiT's center_crop_arr: halve while the \
                                    shorter side >= 2x size, bicubic to size, centre crop)"
                .into(),
            Crop::Letterbox => {
                "fitted inside size x size keeping its aspect ratio, black around".into()
            }
            Crop::PadToSquare => "longer side resized to size (Pillow bicubic), padded to a \
                                  square with grey (127, 127, 127)"
                .into(),
            Crop::ShortestEdgeCrop { resize, filter } => format!(
                "shorter side resized to {resize} (Pillow {}), centre crop to size \
                 (transformers' CLIPImageProcessor rule)",
                filter.name()
            ),
            Crop::ResizeSquare { filter } => format!(
                "resized to size x size, aspect ratio not kept (Pillow {}; transformers' \
                 SiglipImageProcessor rule)",
                filter.name()
            ),
        }
    }
}

/// What a tokenizer reads: `size`×`size` pictures cropped by `crop`, with `channels` channels
/// (1: luma, 3: RGB), as tensor values in `range`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputSpec {
    pub size: u32,
    pub crop: Crop,
    pub channels: usize,
    pub range: PixelRange,
}

/// A picture as its ITU-R 601 luma ([`image_io::rgb_to_gray`]), kept as RGB (r = g = b): how
/// a gray model's inputs and outputs travel through the RGB pipeline.
pub fn as_gray(img: &RgbImage) -> RgbImage {
    DynamicImage::ImageLuma8(image_io::rgb_to_gray(img)).to_rgb8()
}

/// Refuses a channel count no image has.
pub fn check_channels(channels: usize) -> Result<()> {
    match channels {
        1 | 3 => Ok(()),
        c => Err(Error::invalid(format!(
            "a model with {c} input channels cannot read images (1: gray, 3: RGB)"
        ))),
    }
}

/// Pictures as an input tensor of `channels` (1: their luma, 3: RGB) in `range`.
///
/// # Shapes
/// n images of h×w → (n, channels, h, w)
pub fn to_tensor(imgs: &[RgbImage], channels: usize, range: PixelRange) -> Result<Tensor> {
    check_channels(channels)?;
    let ts = imgs
        .iter()
        .map(|i| match channels {
            1 => image_io::to_tensor_chw(&image_io::rgb_to_gray(i), range, &Device::Cpu),
            _ => image_io::to_tensor_chw(i, range, &Device::Cpu),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Tensor::stack(&ts, 0)?)
}

/// An 8-bit pixel array of `h`×`w` with `c` channels (1: gray, 3: RGB; rows of pixels,
/// channels last) as an RGB picture (a gray one with r = g = b).
pub fn rgb_from_pixels(data: &[u8], (h, w, c): (usize, usize, usize)) -> Result<RgbImage> {
    let (w32, h32) = (w as u32, h as u32);
    let bad = || {
        Error::bad_data(format!(
            "a {h}x{w}x{c} image needs {} bytes, got {}",
            h * w * c,
            data.len()
        ))
    };
    match c {
        1 => GrayImage::from_raw(w32, h32, data.to_vec())
            .map(|g| DynamicImage::ImageLuma8(g).to_rgb8())
            .ok_or_else(bad),
        3 => RgbImage::from_raw(w32, h32, data.to_vec()).ok_or_else(bad),
        c => Err(Error::bad_data(format!(
            "images have 1 (gray) or 3 (RGB) channels, got {c}"
        ))),
    }
}

impl InputSpec {
    /// The crop rule's `size`×`size` picture of a decoded image (for a gray model, its luma
    /// as r = g = b).
    pub fn square(&self, img: &RgbImage) -> Result<RgbImage> {
        let sq = match self.crop {
            Crop::ShorterSide => image_io::resize_shorter_center_crop(img, self.size)?,
            Crop::AdmCenterCrop => resample::adm_center_crop(img, self.size)?,
            Crop::Letterbox => image_io::letterbox(img, self.size, image::Rgb([0, 0, 0]))?,
            Crop::PadToSquare => resample::pad_to_square(img, self.size, resample::JANUS_FILL)?,
            Crop::ShortestEdgeCrop { resize, filter } => {
                let to = resample::shortest_edge_size(img.width(), img.height(), resize);
                resample::resize_center_crop(img, to, self.size, filter)?
            }
            Crop::ResizeSquare { filter } => {
                resample::resize_center_crop(img, (self.size, self.size), self.size, filter)?
            }
        };
        Ok(self.channels_of(sq))
    }

    /// A picture already at the input size as the model sees it (a gray model: its luma).
    pub fn channels_of(&self, img: RgbImage) -> RgbImage {
        if self.channels == 1 {
            as_gray(&img)
        } else {
            img
        }
    }

    /// [`Self::square`] of a decoded image named `name` (a file, `image 3` of an array),
    /// whose shorter side must be at least the size unless `upscale`; errors name it.
    pub fn prepare(&self, name: &Path, img: &RgbImage, upscale: bool) -> Result<RgbImage> {
        image_io::check_min_size(name, img.width(), img.height(), self.size, upscale)?;
        match self.crop {
            Crop::AdmCenterCrop | Crop::ShortestEdgeCrop { .. } | Crop::ResizeSquare { .. } => self
                .square(img)
                .map_err(|e| Error::format(name, e.to_string())),
            _ => self.square(img),
        }
    }

    /// Loads an image file as the model's input picture ([`Self::prepare`]).
    pub fn load(&self, path: &Path, upscale: bool) -> Result<RgbImage> {
        self.prepare(path, &image_io::load_rgb(path)?, upscale)
    }

    /// [`Self::load`] of every path.
    pub fn load_all(&self, paths: &[PathBuf], upscale: bool) -> Result<Vec<RgbImage>> {
        paths.iter().map(|p| self.load(p, upscale)).collect()
    }

    /// Reads only the headers of `paths`: every file must be an image whose shorter side is
    /// at least the size (or `upscale`), so that a bad file fails before any compute.
    pub fn check_headers(&self, paths: &[PathBuf], upscale: bool) -> Result<()> {
        for p in paths {
            let (w, h) = image_io::image_dimensions(p)?;
            image_io::check_min_size(p, w, h, self.size, upscale)?;
        }
        Ok(())
    }

    /// Image `i` of a pixel array ([`rgb_from_pixels`]) as the model's input picture; errors
    /// name it `image {i}`.
    pub fn from_pixels(
        &self,
        i: usize,
        data: &[u8],
        hwc: (usize, usize, usize),
        upscale: bool,
    ) -> Result<RgbImage> {
        let name = format!("image {i}");
        let img =
            rgb_from_pixels(data, hwc).map_err(|e| Error::bad_data(format!("{name}: {e}")))?;
        self.prepare(Path::new(&name), &img, upscale)
    }

    /// The model's input tensor of prepared pictures ([`to_tensor`] with this spec's channels
    /// and range).
    ///
    /// # Shapes
    /// n images of s×s → (n, channels, s, s)
    pub fn to_tensor(&self, imgs: &[RgbImage]) -> Result<Tensor> {
        to_tensor(imgs, self.channels, self.range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(crop: Crop, channels: usize) -> InputSpec {
        InputSpec {
            size: 16,
            crop,
            channels,
            range: PixelRange::MinusOneOne,
        }
    }

    const HF_RULES: [Crop; 2] = [
        Crop::ShortestEdgeCrop {
            resize: 20,
            filter: Filter::Bicubic,
        },
        Crop::ResizeSquare {
            filter: Filter::Bilinear,
        },
    ];

    #[test]
    fn crop_names_are_their_config_names() {
        for c in [
            Crop::ShorterSide,
            Crop::AdmCenterCrop,
            Crop::Letterbox,
            Crop::PadToSquare,
        ] {
            assert_eq!(serde_json::to_value(c).unwrap(), c.name());
            assert_eq!(Crop::from_parts(c.name(), None, None), Some(c));
        }
        for c in HF_RULES {
            assert_eq!(
                Crop::from_parts(c.name(), c.resize_side(), c.filter()),
                Some(c)
            );
            assert_eq!(Crop::from_parts(c.name(), None, None), None);
        }
    }

    /// In a description the rule stays its name, the resize side and filter beside it, and
    /// reads back as the same rule; the other rules' JSON is as it was.
    #[test]
    fn preprocessing_json_keeps_the_crop_a_name() {
        use crate::tokenizer::Preprocessing;
        let p = |crop| Preprocessing::from(spec(crop, 3));
        let v = serde_json::to_value(p(HF_RULES[0])).unwrap();
        assert_eq!(v["crop"], "shortest_edge_crop");
        assert_eq!(
            (v["resize"].as_u64(), v["resample"].as_str()),
            (Some(20), Some("bicubic"))
        );
        for c in HF_RULES.into_iter().chain([Crop::AdmCenterCrop]) {
            let back: Preprocessing =
                serde_json::from_value(serde_json::to_value(p(c)).unwrap()).unwrap();
            assert_eq!(back, p(c));
        }
        let old = serde_json::to_value(p(Crop::ShorterSide)).unwrap();
        assert_eq!(
            old,
            serde_json::json!({"size": 16, "crop": "shorter_side", "channels": 3,
                "range": "[-1, 1]"})
        );
        let bad = serde_json::json!({"size": 16, "crop": "shortest_edge_crop", "channels": 3,
            "range": "[-1, 1]"});
        assert!(serde_json::from_value::<Preprocessing>(bad).is_err());
    }

    /// transformers' rules: the shorter side to `resize` (the longer truncated), centre crop
    /// at ⌊(side − size) / 2⌋, black where the resize is smaller than the crop; the whole
    /// picture squashed to the square.
    #[test]
    fn hf_rules_resize_then_crop_as_transformers_does() {
        let img = RgbImage::from_fn(45, 30, |x, y| image::Rgb([(x * 5) as u8, (y * 8) as u8, 9]));
        assert_eq!(resample::shortest_edge_size(45, 30, 20), (30, 20));
        assert_eq!(resample::shortest_edge_size(30, 47, 20), (20, 31));
        let got = spec(HF_RULES[0], 3).square(&img).unwrap();
        let whole = resample::pil_resize(&img, 30, 20, Filter::Bicubic);
        let want = image::imageops::crop_imm(&whole, 7, 2, 16, 16).to_image();
        assert_eq!(got, want);
        // A resize (15×10) smaller than the crop: black around, offsets ⌊(15 − 16) / 2⌋ = −1
        // and ⌊(10 − 16) / 2⌋ = −3.
        let small = InputSpec {
            size: 16,
            crop: Crop::ShortestEdgeCrop {
                resize: 10,
                filter: Filter::Bicubic,
            },
            channels: 3,
            range: PixelRange::ZeroOne,
        };
        let got = small.square(&img).unwrap();
        let whole = resample::pil_resize(&img, 15, 10, Filter::Bicubic);
        assert_eq!(got.get_pixel(0, 0).0, [0, 0, 0]);
        assert_eq!(got.get_pixel(3, 3), whole.get_pixel(2, 0));
        assert_eq!(got.get_pixel(15, 12), whole.get_pixel(14, 9));
        assert_eq!(got.get_pixel(15, 15).0, [0, 0, 0]);
        let squashed = spec(HF_RULES[1], 3).square(&img).unwrap();
        assert_eq!(
            squashed,
            resample::pil_resize(&img, 16, 16, Filter::Bilinear)
        );
    }

    #[test]
    fn gray_input_is_the_luma_of_the_rgb_crop() {
        let img = RgbImage::from_fn(40, 24, |x, y| {
            image::Rgb([(x * 6) as u8, (y * 9) as u8, 77])
        });
        for crop in [
            Crop::ShorterSide,
            Crop::AdmCenterCrop,
            HF_RULES[0],
            HF_RULES[1],
        ] {
            let rgb = spec(crop, 3).square(&img).unwrap();
            let gray = spec(crop, 1).square(&img).unwrap();
            assert_eq!(gray, as_gray(&rgb));
            assert_eq!(
                spec(crop, 1).to_tensor(&[gray]).unwrap().dims(),
                &[1, 1, 16, 16]
            );
        }
    }

    #[test]
    fn arrays_and_files_give_the_same_input() {
        let d = tempfile::tempdir().unwrap();
        let img = RgbImage::from_fn(30, 20, |x, y| {
            image::Rgb([(x * 8) as u8, (y * 12) as u8, 5])
        });
        let p = d.path().join("a.png");
        img.save(&p).unwrap();
        for crop in [
            Crop::ShorterSide,
            Crop::AdmCenterCrop,
            HF_RULES[0],
            HF_RULES[1],
        ] {
            for ch in [1, 3] {
                let s = spec(crop, ch);
                let from_file = s.load(&p, false).unwrap();
                let from_array = s.from_pixels(0, img.as_raw(), (20, 30, 3), false).unwrap();
                assert_eq!(from_file, from_array, "{crop:?} {ch}");
            }
        }
        // A gray array reads as r = g = b.
        let g = image_io::rgb_to_gray(&img);
        let s = spec(Crop::ShorterSide, 1);
        let from_gray = s.from_pixels(0, g.as_raw(), (20, 30, 1), false).unwrap();
        assert_eq!(from_gray, s.square(&as_gray(&img)).unwrap());
    }

    #[test]
    fn too_small_and_bad_channels_are_errors_naming_the_image() {
        let s = spec(Crop::AdmCenterCrop, 3);
        let e = s
            .from_pixels(2, &[0; 8 * 8 * 3], (8, 8, 3), false)
            .unwrap_err();
        assert!(e.to_string().contains("image 2"), "{e}");
        assert!(s.from_pixels(0, &[0; 8 * 8 * 3], (8, 8, 3), true).is_ok());
        assert!(s.from_pixels(0, &[0; 8 * 8 * 2], (8, 8, 2), true).is_err());
        assert!(to_tensor(&[], 4, PixelRange::ZeroOne).is_err());
    }
}
