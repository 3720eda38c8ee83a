//! An `AutoencoderKL` in the dataset job ([`imgseq_shards::job::run`]): per image the scaled
//! latent (C, h, w), or with a patch side p its (N, p²·C) patch tokens, written to latent
//! shards as float16, with the latent settings recorded in the manifest.

use super::patch;
use super::tokenizer::KlTokenizer;
use image::RgbImage;
use imgseq_core::input::InputSpec;
use imgseq_core::tokenizer::Tokenizer;
use imgseq_core::Result;
use imgseq_shards::job::SampleEncoder;
use imgseq_shards::manifest::LatentInfo;
use imgseq_shards::{Payload, ShardKind};

use super::model::Draw;

/// The model and what a sample's array is: the latent map (`patch` `None`) or patch tokens.
pub struct LatentEncoder<'a> {
    pub tok: &'a KlTokenizer,
    pub patch: Option<usize>,
}

impl LatentEncoder<'_> {
    /// Every sample's array shape: (C, h, w), or (N, p²·C).
    pub fn shape(&self) -> Vec<usize> {
        let (g, c) = (self.tok.grid(), self.tok.model.config().latent_channels());
        match self.patch {
            None => vec![c, g, g],
            Some(p) => vec![(g / p) * (g / p), p * p * c],
        }
    }

    /// The manifest's account of the latents (`preset`: the released configuration named).
    pub fn info(&self, preset: Option<&str>) -> LatentInfo {
        let c = self.tok.model.config();
        LatentInfo {
            preset: preset.map(str::to_string),
            scaling_factor: c.scaling_factor,
            shift_factor: c.shift_factor.unwrap_or(0.0),
            patch: self.patch,
            dtype: "float16".into(),
            shape: self.shape(),
            draw: match self.tok.draw {
                Draw::Mean => "mean".into(),
                Draw::Sample(seed) => format!("sample {seed}"),
            },
        }
    }
}

impl SampleEncoder for LatentEncoder<'_> {
    fn input(&self) -> InputSpec {
        self.tok.input()
    }

    fn kind(&self) -> ShardKind {
        ShardKind::Latents
    }

    fn encode_batch(&self, imgs: &[RgbImage]) -> Result<Vec<Payload>> {
        let x = self.tok.input_tensor(imgs)?;
        let (n, _, h, w) = x.dims4()?;
        self.tok.model.check_input(n, h, w, self.tok.tile)?;
        let z = self.tok.model.encode(&x, self.tok.draw, self.tok.tile)?;
        let t = match self.patch {
            Some(p) => patch::patchify(&z, p)?,
            None => z,
        };
        let shape = t.dims()[1..].to_vec();
        (0..n)
            .map(|i| {
                Ok(Payload::Latent {
                    shape: shape.clone(),
                    values: t.get(i)?.flatten_all()?.to_vec1()?,
                })
            })
            .collect()
    }
}
