//! [`KlTokenizer`]: an `AutoencoderKL` at an input side as an
//! [`imgseq_core::tokenizer::Tokenizer`] whose tokens are the scaled latents in p×p patches
//! ([`super::patch`]; p = 1: one token of C values per latent cell).

use super::model::{Draw, KlModel};
use super::patch;
use candle_core::Tensor;
use image::RgbImage;
use imgseq_core::image_io::PixelRange;
use imgseq_core::input::{Crop, InputSpec};
use imgseq_core::tokenizer::{Description, Embeddings, Encoded, OutputKind, OutputSpec, Tokenizer};
use imgseq_core::Result;

/// The model, its input side, the patch side of its sequences and how latents are drawn.
pub struct KlTokenizer {
    pub model: KlModel,
    pub size: u32,
    pub patch: usize,
    pub draw: Draw,
    /// Tile side in pixels for tiled encode/decode; `None`: untiled.
    pub tile: Option<usize>,
}

impl KlTokenizer {
    /// The model at `size` (a multiple of its downsampling factor) with `patch` dividing the
    /// latent grid.
    pub fn new(model: KlModel, size: u32, patch: usize) -> Result<Self> {
        let cfg = model.config();
        cfg.check_side("size", size as usize)?;
        let g = size as usize / cfg.downsample_factor();
        patch::check_patch(patch, g, g)?;
        Ok(Self {
            model,
            size,
            patch,
            draw: Draw::Mean,
            tile: None,
        })
    }

    /// The latent grid side.
    pub fn grid(&self) -> usize {
        self.size as usize / self.model.config().downsample_factor()
    }

    /// Tokens (b, n, p²·C) → pictures, through [`KlModel::decode`].
    pub fn decode_embeddings(&self, e: &Embeddings) -> Result<Vec<RgbImage>> {
        let g = self.grid();
        let c = self.model.config().latent_channels();
        let t = Tensor::from_slice(&e.data, (e.n, e.tokens, e.dim), &candle_core::Device::Cpu)?;
        let z = patch::unpatchify(&t, c, g, g, self.patch)?;
        let x = self.model.decode(&z, self.tile)?;
        (0..e.n)
            .map(|i| imgseq_core::image_io::from_tensor_chw(&x.get(i)?, PixelRange::MinusOneOne))
            .collect()
    }
}

impl Tokenizer for KlTokenizer {
    fn label(&self) -> String {
        "AutoencoderKL".into()
    }

    fn describe(&self) -> Description {
        let c = self.model.config();
        let g = self.grid() / self.patch;
        Description {
            family: "autoencoder_kl".into(),
            label: self.label(),
            config: c.to_json(),
            weights: None,
            input: self.input().into(),
            output: OutputSpec {
                kind: OutputKind::Embeddings,
                shape: vec![g * g, self.patch * self.patch * c.latent_channels()],
                codebook_size: None,
            },
            precision: "f32".into(),
            decoder_precision: None,
        }
    }

    fn input(&self) -> InputSpec {
        InputSpec {
            size: self.size,
            // DiT's `extract_features.py` (ADM's `center_crop_arr`).
            crop: Crop::AdmCenterCrop,
            channels: self.model.config().ddconfig.in_channels,
            range: PixelRange::MinusOneOne,
        }
    }

    fn encode(&self, x: &Tensor) -> Result<Encoded> {
        let (n, _, h, w) = x.dims4()?;
        self.model.check_input(n, h, w, self.tile)?;
        let z = self.model.encode(x, self.draw, self.tile)?;
        let t = patch::patchify(&z, self.patch)?;
        let (n, tokens, dim) = t.dims3()?;
        Ok(Encoded::Embeddings(Embeddings {
            n,
            tokens,
            dim,
            data: t.flatten_all()?.to_vec1()?,
        }))
    }
}
