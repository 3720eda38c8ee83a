//! An Open-MAGVIT2 model at an input side as an [`imgseq_core::tokenizer::Tokenizer`]:
//! pictures in [-1, 1] (shorter side resized and centre-cropped) → one token of `bits` bits
//! per latent position → pictures.

use crate::model::LfqModel;
use candle_core::Tensor;
use image::RgbImage;
use imgseq_core::image_io::{self, PixelRange};
use imgseq_core::input::{Crop, InputSpec};
use imgseq_core::tokenizer::{Description, Encoded, OutputKind, OutputSpec, Tokenizer, Work};
use imgseq_core::tokens::TokenGrid;
use imgseq_core::{progress, Result};

/// Images per decoder pass in [`Tokenizer::decode`].
const DECODE_BATCH: usize = 2;

/// A model with the side its input pictures are brought to.
pub struct LfqTokenizer {
    pub model: LfqModel,
    pub size: u32,
}

impl LfqTokenizer {
    /// The model at `size` (a multiple of its downsampling factor; `None`: the config's test
    /// size, else 256).
    pub fn new(model: LfqModel, size: Option<u32>) -> Result<Self> {
        let size = size.unwrap_or_else(|| model.config().default_size());
        model.config().check_input_size(size as usize)?;
        Ok(Self { model, size })
    }

    /// Decodes `tokens` `batch` images at a time, with a progress bar when `show_progress`.
    pub fn decode_batched(
        &self,
        tokens: &TokenGrid,
        batch: usize,
        show_progress: bool,
    ) -> Result<Vec<RgbImage>> {
        let batch = batch.max(1);
        let f = self.model.config().downsample_factor();
        self.model
            .config()
            .check_memory(batch.min(tokens.n), tokens.h * f, tokens.w * f)?;
        let pb = if show_progress {
            progress::items(tokens.n, "decoding")
        } else {
            indicatif::ProgressBar::hidden()
        };
        let plane = tokens.h * tokens.w;
        let mut out = Vec::with_capacity(tokens.n);
        for start in (0..tokens.n).step_by(batch) {
            let k = batch.min(tokens.n - start);
            let part = TokenGrid {
                n: k,
                data: tokens.data[start * plane..(start + k) * plane].to_vec(),
                ..tokens.clone()
            };
            let x = self.model.decode(&part)?;
            for i in 0..k {
                out.push(image_io::from_tensor_chw(
                    &x.get(i)?,
                    PixelRange::MinusOneOne,
                )?);
            }
            pb.inc(k as u64);
        }
        pb.finish_and_clear();
        Ok(out)
    }
}

impl Tokenizer for LfqTokenizer {
    fn label(&self) -> String {
        crate::FAMILY.to_string()
    }

    fn describe(&self) -> Description {
        let c = self.model.config();
        let g = self.size as usize / c.downsample_factor();
        Description {
            family: crate::NAME.into(),
            label: self.label(),
            config: c.to_json(),
            weights: None,
            input: self.input().into(),
            output: OutputSpec {
                kind: OutputKind::Codes,
                shape: vec![g, g],
                codebook_size: Some(c.codebook_size()),
                scales: None,
            },
            // Which weight set runs changes the tokens as much as the arithmetic does.
            precision: format!(
                "f32, {} weights",
                if self.model.ema { "EMA" } else { "raw" }
            ),
            draw: None,
            decoder_precision: None,
            latent: None,
        }
    }

    fn check_batch(&self, n: usize) -> Result<()> {
        let s = self.size as usize;
        self.model.config().check_memory(n, s, s)
    }

    fn work_bytes(&self, work: Work) -> u128 {
        let cfg = self.model.config();
        let (n, h, w) = work.pictures(self.size as usize, cfg.downsample_factor());
        cfg.forward_bytes(n, h, w)
    }

    fn input(&self) -> InputSpec {
        InputSpec {
            size: self.size,
            crop: Crop::ShorterSide,
            channels: 3,
            range: PixelRange::MinusOneOne,
        }
    }

    fn codebook_size(&self) -> Option<usize> {
        Some(self.model.config().codebook_size())
    }

    fn encode(&self, x: &Tensor) -> Result<Encoded> {
        Ok(Encoded::Tokens(self.model.encode(x)?))
    }

    fn decode(&self, tokens: &TokenGrid) -> Result<Vec<RgbImage>> {
        self.decode_batched(tokens, DECODE_BATCH, false)
    }
}
