//! [`DcaeTokenizer`]: an `AutoencoderDC` at an input side as an
//! [`imgseq_core::tokenizer::Tokenizer`]: per image the latent `· scaling_factor` (C, h, w),
//! or with a patch side p its sequence of p×p patches (the KL VAEs' order and helpers:
//! [`crate::kl::tokenizer::encoded_latents`]).

use super::model::DcaeModel;
use super::LABEL;
use crate::kl::tokenizer::{encoded_latents, latents_of};
use candle_core::Tensor;
use image::RgbImage;
use imgseq_core::image_io::PixelRange;
use imgseq_core::input::{Crop, InputSpec};
use imgseq_core::latent_patch::check_patch;
use imgseq_core::tokenizer::{
    Description, Encoded, LatentSpec, OutputKind, OutputSpec, Tokenizer, Work,
};
use imgseq_core::{Error, Result};

/// Input side when none is given (SANA's 512² DC-AE evaluations use 512; 256 keeps a f32
/// latent grid of 8×8).
pub const DEFAULT_SIZE: u32 = 256;

/// The model, its input side and the patch side of its sequences.
pub struct DcaeTokenizer {
    pub model: DcaeModel,
    pub size: u32,
    /// `None`: latent maps (C, h, w); `Some(p)`: sequences of p×p patches.
    pub patch: Option<usize>,
}

impl DcaeTokenizer {
    /// The model at `size` (a multiple of its compression) with `patch` (if any) dividing
    /// the latent grid.
    pub fn new(model: DcaeModel, size: u32, patch: Option<usize>) -> Result<Self> {
        let f = model.config().downsample_factor();
        if size == 0 || !(size as usize).is_multiple_of(f) || size > 1 << 14 {
            return Err(Error::setting(
                "size",
                size,
                format!(
                    "must be a positive multiple of {f} (the DC-AE's compression), at most 16384"
                ),
            ));
        }
        let g = size as usize / f;
        if let Some(p) = patch {
            check_patch(p, g, g)?;
        }
        Ok(Self { model, size, patch })
    }

    /// The latent grid side.
    pub fn grid(&self) -> usize {
        self.size as usize / self.model.config().downsample_factor()
    }

    /// One image's output shape: (C, h, w), or (h/p·w/p, p²·C).
    pub fn shape(&self) -> Vec<usize> {
        let (g, c) = (self.grid(), self.model.config().latent_channels);
        match self.patch {
            None => vec![c, g, g],
            Some(p) => vec![(g / p) * (g / p), p * p * c],
        }
    }

    fn scaling(&self) -> f64 {
        self.model.config().scaling_factor
    }
}

impl Tokenizer for DcaeTokenizer {
    fn label(&self) -> String {
        LABEL.into()
    }

    fn describe(&self) -> Description {
        let cfg = self.model.config();
        Description {
            family: super::NAME.into(),
            label: self.label(),
            config: serde_json::to_value(cfg).unwrap_or_default(),
            weights: None,
            input: self.input().into(),
            output: OutputSpec {
                kind: match self.patch {
                    None => OutputKind::Latents,
                    Some(_) => OutputKind::Embeddings,
                },
                shape: self.shape(),
                codebook_size: None,
                scales: None,
            },
            precision: "f32".into(),
            draw: None,
            decoder_precision: None,
            latent: Some(LatentSpec {
                preset: None,
                scaling_factor: cfg.scaling_factor,
                shift_factor: 0.0,
                channels: cfg.latent_channels,
                grid: [self.grid(), self.grid()],
                patch: self.patch,
            }),
        }
    }

    fn check_batch(&self, n: usize) -> Result<()> {
        let s = self.size as usize;
        imgseq_core::budget::check_memory(self.model.forward_bytes(n, s, s))
            .map_err(|m| Error::setting("size", s, format!("{m}; use a smaller batch or size")))
    }

    fn work_bytes(&self, work: Work) -> u128 {
        let f = self.model.config().downsample_factor();
        let (n, h, w) = work.pictures(self.size as usize, f);
        self.model.forward_bytes(n, h, w)
    }

    fn input(&self) -> InputSpec {
        InputSpec {
            size: self.size,
            // As the KL VAEs: DiT's `extract_features.py` (ADM's `center_crop_arr`).
            crop: Crop::AdmCenterCrop,
            channels: self.model.config().in_channels,
            range: PixelRange::MinusOneOne,
        }
    }

    fn encode(&self, x: &Tensor) -> Result<Encoded> {
        let (n, _, h, w) = x.dims4()?;
        let f = self.model.config().downsample_factor();
        if h % f != 0 || w % f != 0 {
            return Err(Error::invalid(format!(
                "a {h}x{w} picture is not a multiple of the DC-AE's compression {f}"
            )));
        }
        self.check_batch(n)?;
        let z = (self.model.encode_raw(x)? * self.scaling())?;
        encoded_latents(&z, self.patch)
    }

    /// Latent maps (C, h, w), or patch sequences of this tokenizer's patch side.
    fn decode_encoded(&self, e: &Encoded) -> Result<Vec<RgbImage>> {
        let c = self.model.config().latent_channels;
        let z = latents_of(e, c, self.grid(), self.patch).ok_or_else(|| {
            Error::invalid(format!(
                "latents of shape {:?} are not what this {} gives ({:?} per image)",
                e.item_shape(),
                self.label(),
                self.shape()
            ))
        })??;
        let x = self.model.decode_raw(&(z / self.scaling())?)?;
        (0..x.dim(0)?)
            .map(|i| imgseq_core::image_io::from_tensor_chw(&x.get(i)?, PixelRange::MinusOneOne))
            .collect()
    }
}
