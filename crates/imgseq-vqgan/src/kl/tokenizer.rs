//! [`KlTokenizer`]: an `AutoencoderKL` at an input side as an
//! [`imgseq_core::tokenizer::Tokenizer`]: per image the scaled latent map (C, h, w), or with a
//! patch side p its sequence of p×p patches ([`super::patch`]: (h/p·w/p, p²·C), FLUX's order).

use super::model::{Draw, KlModel};
use super::patch;
use candle_core::{Device, Tensor};
use image::RgbImage;
use imgseq_core::image_io::PixelRange;
use imgseq_core::input::{Crop, InputSpec};
use imgseq_core::tokenizer::{
    Description, Embeddings, Encoded, LatentSpec, Latents, OutputKind, OutputSpec, Tokenizer, Work,
};
use imgseq_core::{Error, Result};

/// The model, its input side, the patch side of its sequences and how latents are drawn.
pub struct KlTokenizer {
    pub model: KlModel,
    pub size: u32,
    /// `None`: latent maps (C, h, w); `Some(p)`: sequences of p×p patches.
    pub patch: Option<usize>,
    pub draw: Draw,
    /// Tile side in pixels for tiled encode/decode; `None`: untiled.
    pub tile: Option<usize>,
    /// The released configuration the model was named by, if it was (`sd`, `flux`, ...).
    pub preset: Option<String>,
}

impl KlTokenizer {
    /// The model at `size` (a multiple of its downsampling factor) with `patch` (if any)
    /// dividing the latent grid.
    pub fn new(model: KlModel, size: u32, patch: Option<usize>) -> Result<Self> {
        let cfg = model.config();
        cfg.check_side("size", size as usize)?;
        let f = cfg.output_factor();
        if !(size as usize).is_multiple_of(f) {
            return Err(Error::setting(
                "size",
                size,
                format!("must be a multiple of {f} (the latent cell with its patch)"),
            ));
        }
        let g = size as usize / f;
        if let Some(p) = patch {
            patch::check_patch(p, g, g)?;
        }
        Ok(Self {
            model,
            size,
            patch,
            draw: Draw::Mean,
            tile: None,
            preset: None,
        })
    }

    /// The latent grid side.
    pub fn grid(&self) -> usize {
        self.size as usize / self.model.config().output_factor()
    }

    /// One image's output shape: (C, h, w), or (h/p·w/p, p²·C).
    pub fn shape(&self) -> Vec<usize> {
        let (g, c) = (self.grid(), self.model.config().output_channels());
        match self.patch {
            None => vec![c, g, g],
            Some(p) => vec![(g / p) * (g / p), p * p * c],
        }
    }

    /// Latents (n, C, h, w) → pictures, through [`KlModel::decode`].
    pub fn decode_latents(&self, z: &Tensor) -> Result<Vec<RgbImage>> {
        let x = self.model.decode(z, self.tile)?;
        (0..x.dim(0)?)
            .map(|i| imgseq_core::image_io::from_tensor_chw(&x.get(i)?, PixelRange::MinusOneOne))
            .collect()
    }
}

impl Tokenizer for KlTokenizer {
    fn label(&self) -> String {
        match self.model.config().latent_bn {
            Some(_) => "AutoencoderKLFlux2".into(),
            None => "AutoencoderKL".into(),
        }
    }

    fn describe(&self) -> Description {
        Description {
            family: "autoencoder_kl".into(),
            label: self.label(),
            config: self.model.config().to_json(),
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
            draw: Some(match self.draw {
                Draw::Mean => "mean".into(),
                Draw::Sample(seed) => format!("sample {seed}"),
            }),
            decoder_precision: None,
            latent: Some(LatentSpec {
                preset: self.preset.clone(),
                scaling_factor: self.model.config().scaling_factor,
                shift_factor: self.model.config().shift_factor.unwrap_or(0.0),
                channels: self.model.config().output_channels(),
                grid: [self.grid(), self.grid()],
                patch: self.patch,
            }),
        }
    }

    fn check_batch(&self, n: usize) -> Result<()> {
        let s = self.size as usize;
        self.model.check_input(n, s, s, self.tile)
    }

    fn work_bytes(&self, work: Work) -> u128 {
        let f = self.model.config().downsample_factor();
        let (n, h, w) = work.pictures(self.size as usize, f);
        let (h, w) = match self.tile {
            Some(t) => (h.min(t), w.min(t)),
            None => (h, w),
        };
        self.model.forward_bytes(n, h, w)
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
        encoded_latents(&z, self.patch)
    }

    /// Latent maps (C, h, w), or patch sequences of this tokenizer's patch side.
    fn decode_encoded(&self, e: &Encoded) -> Result<Vec<RgbImage>> {
        let c = self.model.config().output_channels();
        let z = latents_of(e, c, self.grid(), self.patch).ok_or_else(|| {
            Error::invalid(format!(
                "latents of shape {:?} are not what this {} gives ({:?} per image)",
                e.item_shape(),
                self.label(),
                self.shape()
            ))
        })??;
        self.decode_latents(&z)
    }
}

/// Latent maps (n, C, h, w) as a continuous-latent tokenizer gives them: the maps, or with
/// a patch side p the sequences of p×p patches.
pub fn encoded_latents(z: &Tensor, patch: Option<usize>) -> Result<Encoded> {
    let n = z.dim(0)?;
    Ok(match patch {
        None => Encoded::Latents(Latents {
            n,
            shape: z.dims()[1..].to_vec(),
            data: z.flatten_all()?.to_vec1()?,
        }),
        Some(p) => {
            let t = patch::patchify(z, p)?;
            let (n, tokens, dim) = t.dims3()?;
            Encoded::Embeddings(Embeddings {
                n,
                tokens,
                dim,
                data: t.flatten_all()?.to_vec1()?,
            })
        }
    })
}

/// The latent maps (n, `c`, h, w) of what [`encoded_latents`] gave with `patch` (maps of any
/// side; patch sequences of the `g`×`g` grid); `None` when `e` is not of that shape.
pub fn latents_of(e: &Encoded, c: usize, g: usize, patch: Option<usize>) -> Option<Result<Tensor>> {
    match (e, patch) {
        (Encoded::Latents(l), None) if l.shape.len() == 3 && l.shape[0] == c => {
            let (h, w) = (l.shape[1], l.shape[2]);
            Some(Tensor::from_slice(&l.data, (l.n, c, h, w), &Device::Cpu).map_err(Into::into))
        }
        (Encoded::Embeddings(s), Some(p)) if s.dim == c * p * p && s.tokens * p * p == g * g => {
            Some((|| {
                let t = Tensor::from_slice(&s.data, (s.n, s.tokens, s.dim), &Device::Cpu)?;
                patch::unpatchify(&t, c, g, g, p)
            })())
        }
        _ => None,
    }
}
