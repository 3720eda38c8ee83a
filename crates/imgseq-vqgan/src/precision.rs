//! The arithmetic a loaded tokenizer runs in: `--precision f32|bf16|auto`.
//!
//! bf16 ([`Precision::Bf16`]) runs the decoding convs on bf16 weights and activations with
//! f32 accumulation; the encoder stays f32, so the tokens are the f32 tokens
//! ([`VqModel::set_precision`] says why). `auto` takes bf16 only where it is native
//! ([`PrecisionRequest::resolve_convs`]: no timing decides it; AMX counts) and the model decodes a built-in picture
//! ([`check_image`]) within [`MIN_CHECK_PSNR`] of its f32 decode
//! ([`VqModel::bf16_agreement`]).

use crate::data;
use crate::model::{Half, VqModel};
use image::RgbImage;
use imgseq_core::image_io::{self, PixelRange};
use imgseq_core::{metrics, Result};
use imgseq_kernels::ops::Bf16Kernel;
use imgseq_kernels::precision::{
    bf16_conv_support, Agreement, Bf16Model, Bf16Support, PrecisionChoice, PrecisionRequest,
};
use imgseq_kernels::Precision;

/// Side of the check picture in tokens: 8 × 8 = 64 tokens (128² pixels for an f16 model).
pub const CHECK_GRID: usize = 8;

/// Least PSNR (dB) of the bf16 decode of the check picture's tokens against the f32 decode
/// for `auto` to take bf16 (the accuracy bar on real photos).
pub const MIN_CHECK_PSNR: f64 = 35.0;

/// The built-in check picture, `size`² pixels: smooth colour fields, hard-edged shapes and
/// fine stripes, so that the latents cover flat and busy regions (deterministic).
pub fn check_image(size: u32) -> RgbImage {
    let s = size.max(1) as f64;
    RgbImage::from_fn(size, size, |x, y| {
        let (u, v) = (x as f64 / s, y as f64 / s);
        let mut c = [
            0.5 + 0.3 * (6.3 * u + 2.0 * v).sin() + 0.1 * (40.0 * u * v).sin(),
            0.5 + 0.3 * (4.0 * v - 3.0 * u).cos(),
            0.5 + 0.3 * (9.0 * (u - v)).sin(),
        ];
        if (u - 0.62).powi(2) + (v - 0.38).powi(2) < 0.04 {
            c = [0.85 * c[0], 0.2 + 0.5 * c[1], 0.15];
        }
        if (0.1..0.45).contains(&u) && (0.55..0.85).contains(&v) {
            c = [0.9, 0.85, 0.7 + 0.1 * (30.0 * u).sin()];
        }
        if v > 0.88 {
            let stripe = if (u * s / 3.0).floor() as i64 % 2 == 0 {
                0.15
            } else {
                -0.15
            };
            c = c.map(|ch| ch + stripe);
        }
        image::Rgb(c.map(|ch| (ch.clamp(0.0, 1.0) * 255.0).round() as u8))
    })
}

impl VqModel {
    /// Encodes the check picture (f32) and decodes its tokens in f32 and in bf16: passes when
    /// the two pictures are within [`MIN_CHECK_PSNR`]. The model keeps its precision.
    pub fn bf16_agreement(&mut self) -> Result<Agreement> {
        Bf16Model::bf16_agreement(self)
    }

    /// Resolves `--precision` for this model on this CPU and sets it: `f32` and `bf16` as
    /// asked; `auto` as [`PrecisionRequest::resolve_convs`] decides, with
    /// [`Self::bf16_agreement`] as the model's check. Says which precision runs and why.
    pub fn choose_precision(&mut self, request: PrecisionRequest) -> Result<PrecisionChoice> {
        if !self.has_decoder() && request != PrecisionRequest::Bf16 {
            // An encoder-only model: the precision is the decoder's, and the encoder is f32.
            return Ok(PrecisionChoice {
                precision: Precision::F32,
                native: false,
                reason: "an encoder-only model: no decoder to run in bf16".into(),
            });
        }
        Bf16Model::choose_precision(self, request)
    }

    /// The arithmetic the decoding convs run in.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Runs the decoding convs (`post_quant_conv` and the decoder) in `precision` (bf16:
    /// weights packed once, here; inference only — no gradients flow through bf16 layers), on
    /// the best bf16 code path of this CPU.
    ///
    /// The encoder and `quant_conv` stay f32, so the tokens are the f32 path's: with bf16
    /// encoder convs only 98.7% of the tokens of the shipped model on the held-out photos
    /// (99.5% on `assets/coffee.png`) equalled f32's, below the 99.5% bar, while the bf16
    /// decoder is at 57–59 dB PSNR against the f32 decode.
    pub fn set_precision(&mut self, precision: Precision) -> candle_core::Result<()> {
        self.set_precision_on(precision, Bf16Kernel::best())
    }

    /// [`Self::set_precision`] on a given bf16 code path (tests compare the two).
    pub fn set_precision_on(
        &mut self,
        precision: Precision,
        kernel: Bf16Kernel,
    ) -> candle_core::Result<()> {
        if precision == self.precision
            && (precision == Precision::F32 || kernel == self.bf16_kernel)
        {
            return Ok(()); // already packed (or not needed)
        }
        self.set_convs(Half::Decoding, precision, kernel)?;
        self.precision = precision;
        if kernel != self.bf16_kernel && self.encoder_precision == Precision::Bf16 {
            // The encoder's packed weights follow the code path too.
            self.set_convs(Half::Encoding, Precision::Bf16, kernel)?;
        }
        self.bf16_kernel = kernel;
        Ok(())
    }

    /// The arithmetic the encoding convs run in.
    pub fn encoder_precision(&self) -> Precision {
        self.encoder_precision
    }

    /// Runs the encoding convs (the encoder and `quant_conv`) in `precision`, on the same
    /// bf16 code path as the decoding convs — an opt-in: bf16 encoder convs move some latents
    /// across a codebook boundary, so the tokens are no longer always the f32 tokens
    /// ([`Self::set_precision`] says how many; [`Self::encoder_token_agreement`] measures it on
    /// a built-in picture). Norms, attention and the search stay f32.
    pub fn set_encoder_precision(&mut self, precision: Precision) -> candle_core::Result<()> {
        if precision == self.encoder_precision {
            return Ok(());
        }
        self.set_convs(Half::Encoding, precision, self.bf16_kernel)?;
        self.encoder_precision = precision;
        Ok(())
    }

    /// How many tokens of the built-in check picture ([`check_image`], [`ENCODER_CHECK_GRID`]²
    /// tokens) the bf16 encoder gives as the f32 encoder does: (equal, of). For the user who
    /// opts in to [`VqModel::set_encoder_precision`]; the model keeps its encoder precision.
    pub fn encoder_token_agreement(&mut self) -> Result<(usize, usize)> {
        let kept = self.encoder_precision();
        let agreement = self.use_bf16_encoder()?;
        self.set_encoder_precision(kept)?;
        Ok(agreement)
    }

    /// Switches the encoder to bf16 (the user's opt-in) and says how far its tokens are from
    /// f32's, as [`Self::encoder_token_agreement`] measures, packing the weights once.
    pub fn use_bf16_encoder(&mut self) -> Result<(usize, usize)> {
        let side = ENCODER_CHECK_GRID * self.config().downsample_factor();
        let img = check_image(side as u32);
        let x = data::to_input(&[img], self.config().ddconfig.in_channels)?;
        let tokens = |m: &mut VqModel, p: Precision| -> Result<Vec<u32>> {
            m.set_encoder_precision(p)?;
            let t = m.encode(&x)?.indices.flatten_all()?;
            Ok(t.to_dtype(candle_core::DType::U32)?.to_vec1::<u32>()?)
        };
        let t32 = tokens(self, Precision::F32)?;
        let t16 = tokens(self, Precision::Bf16)?; // left in bf16
        let equal = t32.iter().zip(&t16).filter(|(a, b)| a == b).count();
        Ok((equal, t32.len()))
    }
}

/// Side of the picture [`VqModel::encoder_token_agreement`] encodes, in tokens: 16 × 16 = 256
/// tokens (256² pixels for an f16 model).
pub const ENCODER_CHECK_GRID: usize = 16;

impl Bf16Model for VqModel {
    type Error = imgseq_core::Error;

    fn precision(&self) -> Precision {
        VqModel::precision(self)
    }

    fn set_precision(&mut self, precision: Precision) -> Result<()> {
        Ok(VqModel::set_precision(self, precision)?)
    }

    /// Its convs count AMX as faster ([`bf16_conv_support`]).
    fn bf16_support(&self) -> Bf16Support {
        bf16_conv_support()
    }

    /// [`VqModel::bf16_agreement`], leaving the model in bf16 (`auto` keeps it when it passes,
    /// without packing the weights twice).
    fn agreement_ending_in_bf16(&mut self) -> Result<Agreement> {
        let side = CHECK_GRID * self.config().downsample_factor();
        let img = check_image(side as u32);
        let x = data::to_input(&[img], self.config().ddconfig.in_channels)?;
        self.set_precision(Precision::F32)?;
        let q = self.encode(&x)?.quantized; // (1, d, 8, 8)
        let picture = |m: &VqModel| -> Result<candle_core::Tensor> {
            let y = m.decode(&q)?.get(0)?; // (out_ch, side, side)
            let rgb = image_io::from_tensor_chw(&y, PixelRange::MinusOneOne)?;
            image_io::to_tensor_chw(&rgb, PixelRange::ZeroOne, &candle_core::Device::Cpu)
        };
        let p32 = picture(self)?;
        self.set_precision(Precision::Bf16)?;
        let p16 = picture(self)?;
        let psnr = metrics::psnr_tensor(&p16, &p32, 1.0)?;
        Ok(Agreement {
            passed: psnr >= MIN_CHECK_PSNR,
            summary: format!(
                "the {side}x{side} check picture decodes at {:.1} dB PSNR against f32 (bar \
                 {MIN_CHECK_PSNR} dB)",
                psnr.min(99.0)
            ),
        })
    }
}
