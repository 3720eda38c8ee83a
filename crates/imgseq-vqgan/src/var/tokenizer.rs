//! VAR's VQVAE at an input side as an [`imgseq_core::tokenizer::Tokenizer`]: a picture is one
//! row of Σ pn² tokens (680 at 256²), scale after scale — stored as a (1, 680) grid, the
//! description's `config.v_patch_nums` giving the scales. A shorter row of the first k scales
//! decodes to what those scales alone draw.

use super::{VarModel, NAME};
use candle_core::Tensor;
use image::RgbImage;
use imgseq_core::image_io::{self, PixelRange};
use imgseq_core::input::{Crop, InputSpec};
use imgseq_core::tokenizer::{Description, Encoded, OutputKind, OutputSpec, Tokenizer, Work};
use imgseq_core::tokens::TokenGrid;
use imgseq_core::{Error, Result};

/// Pictures per decoder pass.
const DECODE_BATCH: usize = 2;

/// A VAR VQVAE with the side its input pictures are brought to.
pub struct VarTokenizer {
    pub model: VarModel,
    pub size: u32,
    /// The scales at this size.
    pub patch_nums: Vec<usize>,
}

impl VarTokenizer {
    /// The model at `size` (`None`: the side of a 16×16 latent grid, 256 for the released
    /// model), which must give a grid VAR has scales for.
    pub fn new(model: VarModel, size: Option<u32>) -> Result<Self> {
        let f = model.config().vq.downsample_factor();
        let size = size.unwrap_or(16 * f as u32);
        model.config().vq.check_input_size(size as usize)?;
        let patch_nums = model.config().patch_nums(size as usize / f)?;
        Ok(Self {
            model,
            size,
            patch_nums,
        })
    }

    /// Tokens per picture.
    pub fn tokens(&self) -> usize {
        super::VarConfig::tokens(&self.patch_nums)
    }
}

impl Tokenizer for VarTokenizer {
    fn label(&self) -> String {
        super::LABEL.to_string()
    }

    fn describe(&self) -> Description {
        let c = self.model.config();
        let mut config = serde_json::to_value(c).unwrap_or_default();
        config["v_patch_nums"] = serde_json::json!(self.patch_nums);
        Description {
            family: NAME.into(),
            label: self.label(),
            config,
            weights: None,
            input: self.input().into(),
            output: OutputSpec {
                kind: OutputKind::Codes,
                shape: vec![1, self.tokens()],
                codebook_size: Some(c.vocab_size),
                scales: Some(self.patch_nums.clone()),
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
            channels: 3,
            range: PixelRange::MinusOneOne,
        }
    }

    fn codebook_size(&self) -> Option<usize> {
        Some(self.model.config().vocab_size)
    }

    fn encode(&self, x: &Tensor) -> Result<Encoded> {
        let rows = self.model.encode(x)?;
        let n = rows.len();
        Ok(Encoded::Tokens(TokenGrid {
            n,
            h: 1,
            w: self.tokens(),
            batched: n > 1,
            data: rows.concat(),
        }))
    }

    fn decode(&self, tokens: &TokenGrid) -> Result<Vec<RgbImage>> {
        let len = tokens.h * tokens.w;
        if tokens.h != 1 {
            return Err(Error::invalid(format!(
                "VAR tokens are one row per picture (1 × {}); got {} × {}",
                self.tokens(),
                tokens.h,
                tokens.w
            )));
        }
        super::scales_in(len, &self.patch_nums)?;
        let v = self.model.config().vocab_size;
        if let Some((at, bad)) = imgseq_core::codes::first_out_of_range(&tokens.data, v) {
            return Err(Error::invalid(format!(
                "token {bad} at position {at} is outside the codebook ({v} codes, valid 0..={})",
                v - 1
            )));
        }
        let rows: Vec<&[i64]> = tokens.data.chunks(len).collect();
        let mut out = Vec::with_capacity(rows.len());
        for part in rows.chunks(DECODE_BATCH) {
            let x = self.model.decode(part, &self.patch_nums)?;
            for i in 0..part.len() {
                out.push(image_io::from_tensor_chw(
                    &x.get(i)?,
                    PixelRange::MinusOneOne,
                )?);
            }
        }
        Ok(out)
    }
}
