//! The tokenizer layer: one interface every image tokenizer implements, whatever its family.
//!
//! A [`Tokenizer`] says what it reads as data ([`InputSpec`]: side, crop rule, channels, value
//! range), turns a batch of prepared pictures into discrete tokens ([`TokenGrid`]) or
//! continuous embeddings ([`Embeddings`]), and, where the family can, tokens back into
//! pictures. The VQ families (taming, LlamaGen, diffusers `VQModel`) and the ViT implement it;
//! a new family (a continuous-latent VAE, an LFQ tokenizer) only adds an implementation, and
//! the CLI, eval, the dataset job and the Python package work with it unchanged.

use crate::input::InputSpec;
use crate::tokens::TokenGrid;
use crate::{Error, Result};
use candle_core::Tensor;
use image::RgbImage;
use std::path::{Path, PathBuf};

/// Continuous tokens of `n` images: `tokens` vectors of `dim` values each.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    pub n: usize,
    pub tokens: usize,
    pub dim: usize,
    /// n·tokens·dim values, image after image, token after token.
    pub data: Vec<f32>,
}

/// What a tokenizer makes of a batch of images.
#[derive(Debug, Clone, PartialEq)]
pub enum Encoded {
    /// Codebook indices on a grid (VQ families).
    Tokens(TokenGrid),
    /// Continuous vectors (the ViT's, continuous-latent tokenizers').
    Embeddings(Embeddings),
}

impl Encoded {
    /// The token grid of a discrete tokenizer.
    pub fn into_tokens(self) -> Result<TokenGrid> {
        match self {
            Encoded::Tokens(t) => Ok(t),
            Encoded::Embeddings(_) => Err(Error::invalid(
                "this tokenizer gives continuous embeddings, not codebook tokens",
            )),
        }
    }
}

/// An image tokenizer: pictures → tokens or embeddings, and (where the family can) tokens →
/// pictures.
pub trait Tokenizer {
    /// The family's name as users see it (`taming VQGAN`, `ViT`).
    fn label(&self) -> String;

    /// What the tokenizer reads.
    fn input(&self) -> InputSpec;

    /// Codebook entries of a discrete tokenizer (tokens are `0 ≤ t < n`); `None` for a
    /// continuous one.
    fn codebook_size(&self) -> Option<usize> {
        None
    }

    /// Encodes an input tensor made by [`Self::input_tensor`].
    ///
    /// # Shapes
    /// x: (n, channels, size, size)
    fn encode(&self, x: &Tensor) -> Result<Encoded>;

    /// Pictures of tokens (all in the codebook); families that cannot decode refuse.
    fn decode(&self, tokens: &TokenGrid) -> Result<Vec<RgbImage>> {
        let _ = tokens;
        Err(Error::invalid(format!(
            "a {} cannot turn tokens back into images",
            self.label()
        )))
    }

    /// The input tensor of pictures already brought to the input ([`InputSpec::square`] or
    /// [`InputSpec::load`]).
    fn input_tensor(&self, imgs: &[RgbImage]) -> Result<Tensor> {
        self.input().to_tensor(imgs)
    }

    /// A decoded image named `name` as the tokenizer's input picture.
    fn prepare(&self, name: &Path, img: &RgbImage, upscale: bool) -> Result<RgbImage> {
        self.input().prepare(name, img, upscale)
    }

    /// Image files as the tokenizer's input pictures.
    fn load(&self, paths: &[PathBuf], upscale: bool) -> Result<Vec<RgbImage>> {
        paths
            .iter()
            .map(|p| self.prepare(p, &crate::image_io::load_rgb(p)?, upscale))
            .collect()
    }

    /// Encodes prepared pictures.
    fn encode_pictures(&self, imgs: &[RgbImage]) -> Result<Encoded> {
        self.encode(&self.input_tensor(imgs)?)
    }
}
