//! The MaskGIT-VQGAN at an input side as an [`imgseq_core::tokenizer::Tokenizer`]: a square
//! picture in [0, 1] (pixels/255, as TiTok's code feeds it) → a (side/16)² grid of codes, and
//! back to the picture (clamped to [0, 1]).

use super::{MaskGitModel, LABEL, NAME};
use crate::tokens::TokenGrid;
use candle_core::Tensor;
use image::RgbImage;
use imgseq_core::image_io::{self, PixelRange};
use imgseq_core::input::{Crop, InputSpec};
use imgseq_core::tokenizer::{Description, Encoded, OutputKind, OutputSpec, Tokenizer, Work};
use imgseq_core::{Error, Result};

/// A MaskGIT-VQGAN with the side its pictures are brought to.
pub struct MaskGitTokenizer {
    pub model: MaskGitModel,
    pub size: u32,
}

impl MaskGitTokenizer {
    /// The model at `size` (`None`: the config's `resolution`, 256 released), a positive
    /// multiple of its pixels per code.
    pub fn new(model: MaskGitModel, size: Option<u32>) -> Result<Self> {
        let size = size.unwrap_or(model.config().resolution as u32);
        model.config().vq().check_input_size(size as usize)?;
        Ok(Self { model, size })
    }
}

impl Tokenizer for MaskGitTokenizer {
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
                codebook_size: Some(c.num_embeddings),
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
        self.model.config().vq().check_memory(n, s, s, Some(s))
    }

    fn work_bytes(&self, work: Work) -> u128 {
        let cfg = self.model.config().vq();
        let (n, h, w) = work.pictures(self.size as usize, cfg.downsample_factor());
        cfg.forward_bytes(n, h, w)
    }

    fn input(&self) -> InputSpec {
        InputSpec {
            size: self.size,
            crop: Crop::ShorterSide,
            channels: self.model.config().num_channels,
            range: PixelRange::ZeroOne,
        }
    }

    fn codebook_size(&self) -> Option<usize> {
        Some(self.model.config().num_embeddings)
    }

    fn encode(&self, x: &Tensor) -> Result<Encoded> {
        let idx = self.model.encode(x)?;
        Ok(Encoded::Tokens(crate::inference::grid_of(&idx)?))
    }

    fn decode(&self, tokens: &TokenGrid) -> Result<Vec<RgbImage>> {
        let n = self.model.config().num_embeddings;
        if let Some((at, bad)) = imgseq_core::codes::first_out_of_range(&tokens.data, n) {
            return Err(Error::invalid(format!(
                "token {bad} at position {at} is outside the codebook ({n} codes, valid 0..={})",
                n - 1
            )));
        }
        let (h, w) = (tokens.h, tokens.w);
        let f = self.model.config().downsample_factor();
        self.model
            .config()
            .vq()
            .check_memory(1, h * f, w * f, None)?;
        let plane = h * w;
        let mut out = Vec::with_capacity(tokens.n);
        for i in 0..tokens.n {
            let idx = Tensor::from_vec(
                tokens.data[i * plane..(i + 1) * plane].to_vec(),
                (1, h, w),
                &candle_core::Device::Cpu,
            )?;
            let x = self.model.decode_indices(&idx)?;
            out.push(image_io::from_tensor_chw(&x.get(0)?, PixelRange::ZeroOne)?);
        }
        Ok(out)
    }
}
