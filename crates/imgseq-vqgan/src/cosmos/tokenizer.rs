//! [`CosmosTokenizer`]: a Cosmos image tokenizer at an input side as an
//! [`imgseq_core::tokenizer::Tokenizer`]. Pictures in [-1, 1] (upstream's `numpy2tensor`:
//! pixels/255·2 − 1). DI: a (side/f)² grid of FSQ indices, decoded back to pictures; CI: the
//! 16-channel latent maps (C, h, w) as they come out of `quant_conv` (no scaling), or with a
//! patch side p their p×p patch tokens (the KL VAEs' order,
//! [`crate::kl::tokenizer::encoded_latents`]).

use super::config::{check_side, Kind};
use super::model::CosmosModel;
use super::{LABEL, NAME};
use crate::kl::tokenizer::{encoded_latents, latents_of};
use crate::tokens::TokenGrid;
use candle_core::{Device, Tensor};
use image::RgbImage;
use imgseq_core::image_io::{self, PixelRange};
use imgseq_core::input::{Crop, InputSpec};
use imgseq_core::latent_patch::check_patch;
use imgseq_core::tokenizer::{
    Description, Encoded, LatentSpec, OutputKind, OutputSpec, Tokenizer, Work,
};
use imgseq_core::{Error, Result};

/// Input side when none is given (the 256² protocol the published DI16x16 figures use).
pub const DEFAULT_SIZE: u32 = 256;

/// The model, its input side and (CI) the patch side of its sequences.
pub struct CosmosTokenizer {
    pub model: CosmosModel,
    pub size: u32,
    /// CI only: `None` latent maps (C, h, w); `Some(p)` sequences of p×p patches.
    pub patch: Option<usize>,
}

impl CosmosTokenizer {
    /// The model at `size` (a multiple of its compression); `patch` (CI only) dividing the
    /// latent grid.
    pub fn new(model: CosmosModel, size: u32, patch: Option<usize>) -> Result<Self> {
        let cfg = model.config();
        check_side(cfg, "size", size as usize)?;
        if let Some(p) = patch {
            if cfg.codebook_size().is_some() {
                return Err(Error::setting(
                    "patch",
                    p,
                    "applies to continuous latents (Cosmos CI); a Cosmos DI gives FSQ codes",
                ));
            }
            let g = size as usize / cfg.spatial_compression;
            check_patch(p, g, g)?;
        }
        Ok(Self { model, size, patch })
    }

    /// The token / latent grid side.
    pub fn grid(&self) -> usize {
        self.size as usize / self.model.config().spatial_compression
    }

    /// One image's output shape: DI (g, g); CI (C, g, g) or (g/p·g/p, p²·C).
    pub fn shape(&self) -> Vec<usize> {
        let (g, c) = (self.grid(), self.model.config().embedding_dim());
        match (&self.model.config().kind, self.patch) {
            (Kind::Discrete { .. }, _) => vec![g, g],
            (Kind::Continuous { .. }, None) => vec![c, g, g],
            (Kind::Continuous { .. }, Some(p)) => vec![(g / p) * (g / p), p * p * c],
        }
    }

    fn check_picture(&self, h: usize, w: usize) -> Result<()> {
        let f = self.model.config().spatial_compression;
        if !h.is_multiple_of(f) || !w.is_multiple_of(f) || h == 0 || w == 0 {
            return Err(Error::invalid(format!(
                "a {h}x{w} picture is not a multiple of the Cosmos tokenizer's compression {f}"
            )));
        }
        Ok(())
    }

    fn pictures(&self, x: &Tensor) -> Result<Vec<RgbImage>> {
        (0..x.dim(0)?)
            .map(|i| image_io::from_tensor_chw(&x.get(i)?, PixelRange::MinusOneOne))
            .collect()
    }
}

impl Tokenizer for CosmosTokenizer {
    fn label(&self) -> String {
        format!(
            "{LABEL} {}{f}x{f}",
            self.model.config().name,
            f = self.model.config().spatial_compression
        )
    }

    fn describe(&self) -> Description {
        let cfg = self.model.config();
        let g = self.grid();
        let (kind, latent) = match (&cfg.kind, self.patch) {
            (Kind::Discrete { .. }, _) => (OutputKind::Codes, None),
            (Kind::Continuous { latent_channels }, p) => (
                match p {
                    None => OutputKind::Latents,
                    Some(_) => OutputKind::Embeddings,
                },
                Some(LatentSpec {
                    preset: None,
                    scaling_factor: 1.0,
                    shift_factor: 0.0,
                    channels: *latent_channels,
                    grid: [g, g],
                    patch: p,
                }),
            ),
        };
        Description {
            family: NAME.into(),
            label: self.label(),
            config: serde_json::to_value(cfg).unwrap_or_default(),
            weights: None,
            input: self.input().into(),
            output: OutputSpec {
                kind,
                shape: self.shape(),
                codebook_size: cfg.codebook_size(),
                scales: None,
            },
            precision: "f32".into(),
            draw: None,
            decoder_precision: None,
            latent,
        }
    }

    fn check_batch(&self, n: usize) -> Result<()> {
        let s = self.size as usize;
        imgseq_core::budget::check_memory(self.model.forward_bytes(n, s, s))
            .map_err(|m| Error::setting("size", s, format!("{m}; use a smaller batch or size")))
    }

    fn work_bytes(&self, work: Work) -> u128 {
        let f = self.model.config().spatial_compression;
        let (n, h, w) = work.pictures(self.size as usize, f);
        self.model.forward_bytes(n, h, w)
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
        self.model.config().codebook_size()
    }

    fn encode(&self, x: &Tensor) -> Result<Encoded> {
        let (n, _, h, w) = x.dims4()?;
        self.check_picture(h, w)?;
        self.check_batch(n)?;
        match self.model.fsq() {
            Some(_) => {
                let idx = self.model.encode_indices(x)?;
                Ok(Encoded::Tokens(crate::inference::grid_of(&idx)?))
            }
            None => encoded_latents(&self.model.encode_latents(x)?, self.patch),
        }
    }

    fn decode(&self, tokens: &TokenGrid) -> Result<Vec<RgbImage>> {
        let Some(fsq) = self.model.fsq() else {
            return Err(Error::invalid(format!(
                "a {} gives continuous latents, not tokens",
                self.label()
            )));
        };
        let n = fsq.size();
        if let Some((at, bad)) = imgseq_core::codes::first_out_of_range(&tokens.data, n) {
            return Err(Error::invalid(format!(
                "token {bad} at position {at} is outside the codebook ({n} codes, valid 0..={})",
                n - 1
            )));
        }
        let f = self.model.config().spatial_compression;
        let (h, w) = (tokens.h, tokens.w);
        if h == 0 || w == 0 {
            return Err(Error::invalid("an empty token grid"));
        }
        // One picture at a time.
        imgseq_core::budget::check_memory(self.model.forward_bytes(1, h * f, w * f))
            .map_err(Error::invalid)?;
        let plane = h * w;
        let mut out = Vec::with_capacity(tokens.n);
        for i in 0..tokens.n {
            let idx = Tensor::from_vec(
                tokens.data[i * plane..(i + 1) * plane].to_vec(),
                (1, h, w),
                &Device::Cpu,
            )?;
            out.extend(self.pictures(&self.model.decode_indices(&idx)?)?);
        }
        Ok(out)
    }

    /// DI: tokens; CI: latent maps (C, h, w), or patch sequences of this tokenizer's patch side.
    fn decode_encoded(&self, e: &Encoded) -> Result<Vec<RgbImage>> {
        if let Encoded::Tokens(t) = e {
            return self.decode(t);
        }
        let c = self.model.config().embedding_dim();
        let z = match self.model.fsq() {
            Some(_) => None,
            None => latents_of(e, c, self.grid(), self.patch),
        };
        let z = z.ok_or_else(|| {
            Error::invalid(format!(
                "values of shape {:?} are not what this {} gives ({:?} per image)",
                e.item_shape(),
                self.label(),
                self.shape()
            ))
        })??;
        self.pictures(&self.model.decode_latents(&z)?)
    }
}
