//! TiTok as an [`imgseq_core::tokenizer::Tokenizer`]: a square picture of `crop_size` in [0, 1]
//! (pixels/255, as upstream's demo feeds it) → one row of `num_latent_tokens` codes, stored as
//! a (1, N) grid like VAR's rows, and back to the picture (clamped to [0, 1] as the demo does).

use super::{TitokModel, LABEL, NAME};
use candle_core::Tensor;
use image::RgbImage;
use imgseq_core::image_io::{self, PixelRange};
use imgseq_core::input::{Crop, InputSpec};
use imgseq_core::tokenizer::{Description, Encoded, OutputKind, OutputSpec, Tokenizer, Work};
use imgseq_core::tokens::TokenGrid;
use imgseq_core::{Error, Result};

/// Pictures per decoder pass.
const DECODE_BATCH: usize = 4;

/// A TiTok model at its `crop_size`.
pub struct TitokTokenizer {
    pub model: TitokModel,
}

impl TitokTokenizer {
    /// The model at `size`, which must be its `crop_size` (its positional embeddings are that
    /// grid's); `None`: the `crop_size`.
    pub fn new(model: TitokModel, size: Option<u32>) -> Result<Self> {
        let s = model.config().crop_size;
        if let Some(size) = size.filter(|&x| x as usize != s) {
            return Err(Error::setting(
                "size",
                size,
                format!("a TiTok reads {s}×{s} pictures only (its `crop_size`)"),
            ));
        }
        Ok(Self { model })
    }

    fn tokens(&self) -> usize {
        self.model.config().num_latent_tokens
    }

    /// Bytes one picture's pass holds at most: the ViTs' activations and attention scores,
    /// and the pixel decoder's maps.
    fn picture_bytes(&self) -> u128 {
        let c = self.model.config();
        let s = c.crop_size as u128;
        let vit = |(w, _, heads): (usize, usize, usize), patch: usize| {
            let l = (c.crop_size / patch).pow(2) as u128 + 1 + c.num_latent_tokens as u128;
            4 * (l * w as u128 * 12 + l * l * heads as u128 * 2)
        };
        let enc = vit(c.encoder_size(), c.vit_enc_patch_size);
        let dec = vit(c.decoder_size(), c.vit_dec_patch_size);
        let pix = c
            .pixel_decoder
            .as_ref()
            .map_or(0, |p| p.vq().forward_bytes(1, s as usize, s as usize));
        enc.max(dec).max(pix)
    }
}

impl Tokenizer for TitokTokenizer {
    fn label(&self) -> String {
        LABEL.to_string()
    }

    fn describe(&self) -> Description {
        let c = self.model.config();
        Description {
            family: NAME.into(),
            label: self.label(),
            config: serde_json::to_value(c).unwrap_or_default(),
            weights: None,
            input: self.input().into(),
            output: OutputSpec {
                kind: OutputKind::Codes,
                shape: vec![1, self.tokens()],
                codebook_size: Some(c.codebook_size),
                scales: None,
            },
            precision: "f32".into(),
            draw: None,
            decoder_precision: None,
            latent: None,
        }
    }

    fn work_bytes(&self, work: Work) -> u128 {
        let n = match work {
            Work::Encode(n) => n,
            Work::Decode { n, .. } => n.min(DECODE_BATCH),
        };
        self.picture_bytes().saturating_mul(n as u128)
    }

    fn input(&self) -> InputSpec {
        InputSpec {
            size: self.model.config().crop_size as u32,
            crop: Crop::ShorterSide,
            channels: 3,
            range: PixelRange::ZeroOne,
        }
    }

    fn codebook_size(&self) -> Option<usize> {
        Some(self.model.config().codebook_size)
    }

    fn encode(&self, x: &Tensor) -> Result<Encoded> {
        let idx = self.model.encode(x)?; // (b, 1, N)
        Ok(Encoded::Tokens(crate::inference::grid_of(&idx)?))
    }

    fn decode(&self, tokens: &TokenGrid) -> Result<Vec<RgbImage>> {
        let n = self.tokens();
        if (tokens.h, tokens.w) != (1, n) {
            return Err(Error::invalid(format!(
                "TiTok tokens are one row of {n} per picture (1 × {n}); got {} × {}",
                tokens.h, tokens.w
            )));
        }
        let v = self.model.config().codebook_size;
        if let Some((at, bad)) = imgseq_core::codes::first_out_of_range(&tokens.data, v) {
            return Err(Error::invalid(format!(
                "token {bad} at position {at} is outside the codebook ({v} codes, valid 0..={})",
                v - 1
            )));
        }
        let mut out = Vec::with_capacity(tokens.n);
        for rows in tokens.data.chunks(n * DECODE_BATCH) {
            let k = rows.len() / n;
            let idx = Tensor::from_vec(rows.to_vec(), (k, 1, n), &candle_core::Device::Cpu)?;
            let x = self.model.decode_tokens(&idx)?;
            for i in 0..k {
                out.push(image_io::from_tensor_chw(&x.get(i)?, PixelRange::ZeroOne)?);
            }
        }
        Ok(out)
    }
}
