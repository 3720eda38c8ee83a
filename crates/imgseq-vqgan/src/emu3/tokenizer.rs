//! Emu3's VQVAE at an input side as an [`imgseq_core::tokenizer::Tokenizer`]: a square picture
//! in [-1, 1] (Emu3's processor: pixels/255 normalised with mean = std = 0.5) → a (side/8)²
//! grid of codes, and back to the picture.

use super::{Emu3Model, LABEL, NAME};
use crate::tokens::TokenGrid;
use candle_core::Tensor;
use image::RgbImage;
use imgseq_core::image_io::{self, PixelRange};
use imgseq_core::input::{Crop, InputSpec};
use imgseq_core::tokenizer::{Description, Encoded, OutputKind, OutputSpec, Tokenizer, Work};
use imgseq_core::{Error, Result};

/// The input side when none is given: the side of Emu3's processor's smallest square
/// (`min_pixels` 512 × 512).
pub const DEFAULT_SIZE: u32 = 512;

/// An Emu3 VQVAE with the side its pictures are brought to.
pub struct Emu3Tokenizer {
    pub model: Emu3Model,
    pub size: u32,
}

impl Emu3Tokenizer {
    /// The model at `size` (a positive multiple of the model's 8 pixels per code).
    pub fn new(model: Emu3Model, size: u32) -> Result<Self> {
        model.config().vq.check_input_size(size as usize)?;
        Ok(Self { model, size })
    }
}

impl Tokenizer for Emu3Tokenizer {
    fn label(&self) -> String {
        LABEL.to_string()
    }

    fn describe(&self) -> Description {
        let c = self.model.config();
        let g = self.size as usize / c.downsample_factor();
        Description {
            family: NAME.into(),
            label: self.label(),
            config: serde_json::to_value(c).unwrap_or_default(),
            weights: None,
            input: self.input().into(),
            output: OutputSpec {
                kind: OutputKind::Codes,
                shape: vec![g, g],
                codebook_size: Some(c.codebook_size),
                scales: None,
            },
            precision: "f32".into(),
            draw: None,
            decoder_precision: None,
            latent: None,
        }
    }

    fn check_batch(&self, n: usize) -> Result<()> {
        let s = self.size as usize;
        self.model.config().vq.check_memory(n, s, s, Some(s))
    }

    fn work_bytes(&self, work: Work) -> u128 {
        let cfg = &self.model.config().vq;
        let (n, h, w) = work.pictures(self.size as usize, cfg.downsample_factor());
        cfg.forward_bytes(n, h, w)
    }

    fn input(&self) -> InputSpec {
        InputSpec {
            size: self.size,
            crop: Crop::ShorterSide,
            channels: self.model.config().in_channels,
            range: PixelRange::MinusOneOne,
        }
    }

    fn codebook_size(&self) -> Option<usize> {
        Some(self.model.config().codebook_size)
    }

    fn encode(&self, x: &Tensor) -> Result<Encoded> {
        let idx = self.model.encode(x)?;
        Ok(Encoded::Tokens(crate::inference::grid_of(&idx)?))
    }

    fn decode(&self, tokens: &TokenGrid) -> Result<Vec<RgbImage>> {
        let n = self.model.config().codebook_size;
        if let Some((at, bad)) = imgseq_core::codes::first_out_of_range(&tokens.data, n) {
            return Err(Error::invalid(format!(
                "token {bad} at position {at} is outside the codebook ({n} codes, valid 0..={})",
                n - 1
            )));
        }
        let (h, w) = (tokens.h, tokens.w);
        let f = self.model.config().downsample_factor();
        // One picture at a time.
        self.model.config().vq.check_memory(1, h * f, w * f, None)?;
        let plane = h * w;
        let mut out = Vec::with_capacity(tokens.n);
        for i in 0..tokens.n {
            let idx = Tensor::from_vec(
                tokens.data[i * plane..(i + 1) * plane].to_vec(),
                (1, h, w),
                &candle_core::Device::Cpu,
            )?;
            let x = self.model.decode_indices(&idx)?;
            out.push(image_io::from_tensor_chw(
                &x.get(0)?,
                PixelRange::MinusOneOne,
            )?);
        }
        Ok(out)
    }
}
