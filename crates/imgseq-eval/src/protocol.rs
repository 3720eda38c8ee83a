//! The evaluation protocols: how an image file becomes the picture a tokenizer reconstructs
//! and against which every figure is computed (docs/evaluation.md).
//!
//! Whatever the protocol, the reference side is the originals at the protocol's crop (the
//! pictures the tokenizer reads), never the uncropped files: rFID compares the Inception
//! features of those pictures with the features of their reconstructions, PSNR and SSIM are
//! on the 8-bit pictures scaled to [0, 1], LPIPS on them scaled to [−1, 1].

use crate::inception::resize_bilinear;
use candle_core::{Device, Tensor};
use image::RgbImage;
use imgseq_core::input::InputSpec;
use imgseq_core::{resample, Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A named preprocessing of the originals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// The tokenizer's own input rule and size (its description's crop).
    Native,
    /// LlamaGen's and ADM's reconstruction tables: ADM's `center_crop_arr` to 256×256 (halve
    /// with a box filter while the shorter side is ≥ 512, Pillow bicubic of the shorter side to
    /// 256, centre crop).
    Llamagen,
    /// taming-transformers' ImageNet validation: albumentations `SmallestMaxSize(256)`
    /// (OpenCV bilinear, no antialiasing) then `CenterCrop(256)`.
    Taming,
}

/// What a report records of its protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProtocolInfo {
    pub name: String,
    /// The side of the pictures the figures are computed on.
    pub size: u32,
    pub preprocessing: String,
    pub reference: String,
    pub fid_features: String,
    pub pixel_metrics: String,
}

/// Names accepted by [`Protocol::parse`].
pub const NAMES: [&str; 3] = ["native", "llamagen", "taming"];

impl Protocol {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "native" => Ok(Self::Native),
            "llamagen" | "adm" => Ok(Self::Llamagen),
            "taming" => Ok(Self::Taming),
            _ => Err(Error::setting(
                "protocol",
                s,
                format!("is not one of {}", NAMES.join(", ")),
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Llamagen => "llamagen",
            Self::Taming => "taming",
        }
    }

    /// The input side the protocol fixes (`None`: the tokenizer's).
    pub fn size(self) -> Option<u32> {
        match self {
            Self::Native => None,
            Self::Llamagen | Self::Taming => Some(256),
        }
    }

    /// The protocol as a report records it, for a tokenizer reading `spec`.
    pub fn info(self, spec: &InputSpec) -> ProtocolInfo {
        let preprocessing = match self {
            Self::Native => format!(
                "the tokenizer's own: {} to {s}x{s}",
                spec.crop.describe(),
                s = spec.size
            ),
            Self::Llamagen => "ADM centre crop to 256x256 (center_crop_arr: halve with a box \
                               filter while the shorter side >= 512, Pillow bicubic of the \
                               shorter side to 256, centre crop)"
                .into(),
            Self::Taming => "taming-transformers ImageNet validation: shorter side to 256 \
                             (bilinear, half-pixel centres, no antialiasing, as OpenCV \
                             INTER_LINEAR), centre crop 256x256"
                .into(),
        };
        ProtocolInfo {
            name: self.name().into(),
            size: self.size().unwrap_or(spec.size),
            preprocessing,
            reference: "the originals at the same crop (the pictures the tokenizer reads)".into(),
            fid_features: "pytorch-fid InceptionV3 pool3 (2048-d, FID Inception weights \
                           pt_inception-2015-12-05) of the 8-bit pictures / 255, its bilinear \
                           resize to 299x299; Frechet distance in float64"
                .into(),
            pixel_metrics: "PSNR and SSIM on the 8-bit pictures scaled to [0, 1]; LPIPS (VGG) \
                            on them scaled to [-1, 1]"
                .into(),
        }
    }

    /// Checks that a tokenizer reading `spec` can be evaluated under the protocol.
    pub fn check(self, spec: &InputSpec) -> Result<()> {
        match self.size() {
            Some(s) if s != spec.size => Err(Error::invalid(format!(
                "the {} protocol evaluates {s}x{s} pictures; the tokenizer reads {t}x{t} \
                 (give --size {s}, or --protocol native)",
                self.name(),
                t = spec.size
            ))),
            _ => Ok(()),
        }
    }

    /// A decoded image named `name` as the protocol's picture (for a gray tokenizer, its luma
    /// as r = g = b).
    pub fn prepare(
        self,
        spec: &InputSpec,
        name: &Path,
        img: &RgbImage,
        upscale: bool,
    ) -> Result<RgbImage> {
        let size = spec.size;
        let crop = match self {
            Self::Native => return spec.prepare(name, img, upscale),
            Self::Llamagen => {
                imgseq_core::image_io::check_min_size(
                    name,
                    img.width(),
                    img.height(),
                    size,
                    upscale,
                )?;
                resample::adm_center_crop(img, size)
                    .map_err(|e| Error::format(name, e.to_string()))?
            }
            Self::Taming => taming_crop(img, size)?,
        };
        Ok(spec.channels_of(crop))
    }
}

/// albumentations `SmallestMaxSize(size)` (OpenCV `INTER_LINEAR`: half-pixel centres, two
/// taps, no antialiasing; the longer side `int(side · size / shorter)`) then
/// `CenterCrop(size)` (offsets rounded down). Values are rounded from the float blend, which
/// can differ by one level from OpenCV's fixed-point arithmetic.
pub fn taming_crop(img: &RgbImage, size: u32) -> Result<RgbImage> {
    let (w, h) = img.dimensions();
    if w == 0 || h == 0 || size == 0 {
        return Err(Error::bad_data("taming crop: an empty image or size"));
    }
    let scale = size as f64 / w.min(h) as f64;
    let (nw, nh) = if w <= h {
        (size, ((h as f64 * scale) as u32).max(size))
    } else {
        (((w as f64 * scale) as u32).max(size), size)
    };
    let v: Vec<f32> = img.as_raw().iter().map(|&p| p as f32).collect();
    let t = Tensor::from_vec(v, (h as usize, w as usize, 3), &Device::Cpu)?
        .permute((2, 0, 1))?
        .unsqueeze(0)?;
    let r = resize_bilinear(&t, nh as usize, nw as usize)?;
    let (x0, y0) = ((nw - size) / 2, (nh - size) / 2);
    let r = r
        .narrow(2, y0 as usize, size as usize)?
        .narrow(3, x0 as usize, size as usize)?
        .squeeze(0)?
        .permute((1, 2, 0))?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let px = r
        .iter()
        .map(|&x| x.round().clamp(0.0, 255.0) as u8)
        .collect();
    RgbImage::from_raw(size, size, px).ok_or_else(|| Error::bad_data("taming crop: bad size"))
}
