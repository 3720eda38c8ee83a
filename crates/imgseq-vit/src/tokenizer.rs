//! The ViT's continuous tokens as an [`imgseq_core::tokenizer::Tokenizer`]: pictures →
//! patch embeddings with the CLS token first and positions added ((n, 1 + patches, hidden):
//! (1, 65, 48) for the shipped Fashion-MNIST model), prepared as its training data was
//! ([`Classifier::preprocess`]). The ViT does not decode.

use crate::inference::Classifier;
use candle_core::Tensor;
use image::{DynamicImage, RgbImage};
use imgseq_core::image_io::{rgb_to_gray, PixelRange};
use imgseq_core::input::{Crop, InputSpec};
use imgseq_core::tokenizer::{
    Description, Embeddings, Encoded, OutputKind, OutputSpec, Tokenizer, Work,
};
use imgseq_core::Result;
use std::path::Path;

impl Tokenizer for Classifier {
    fn label(&self) -> String {
        "ViT".into()
    }

    fn describe(&self) -> Description {
        let c = &self.cfg;
        let patches = (c.image_size / c.patch_size).pow(2);
        Description {
            family: "vit".into(),
            label: self.label(),
            config: serde_json::to_value(c).unwrap_or_default(),
            weights: None,
            input: self.input().into(),
            output: OutputSpec {
                kind: OutputKind::Embeddings,
                shape: vec![1 + patches, c.hidden_size],
                codebook_size: None,
                scales: None,
            },
            precision: "f32".into(),
            draw: None,
            decoder_precision: None,
            latent: None,
        }
    }

    /// The whole encoder's estimate (embedding alone needs less; classification needs this).
    fn work_bytes(&self, work: Work) -> u128 {
        let s = self.cfg.image_size;
        match work {
            Work::Encode(n) => self.cfg.forward_bytes(n, s, s, true),
            Work::Decode { .. } => 0,
        }
    }

    /// The model's canvas, letterboxed content, its channels; values x/255 before the
    /// model's own normalisation (`training.json`'s mean and std).
    fn input(&self) -> InputSpec {
        InputSpec {
            size: self.cfg.image_size as u32,
            crop: Crop::Letterbox,
            channels: self.cfg.num_channels,
            range: PixelRange::ZeroOne,
        }
    }

    fn encode(&self, x: &Tensor) -> Result<Encoded> {
        let tokens = self.embed(x)?.tokens;
        let (n, t, dim) = tokens.dims3()?;
        let data = tokens.flatten_all()?.to_vec1::<f32>()?;
        Ok(Encoded::Embeddings(Embeddings {
            n,
            tokens: t,
            dim,
            data,
        }))
    }

    /// The decoded image as it is: the content side, canvas and any size are the tensor
    /// step's ([`Classifier::preprocess`]).
    fn prepare(&self, _name: &Path, img: &RgbImage, _upscale: bool) -> Result<RgbImage> {
        Ok(img.clone())
    }

    fn input_tensor(&self, imgs: &[RgbImage]) -> Result<Tensor> {
        let imgs: Vec<DynamicImage> = imgs
            .iter()
            .map(|i| match self.cfg.num_channels {
                1 => DynamicImage::ImageLuma8(rgb_to_gray(i)),
                _ => DynamicImage::ImageRgb8(i.clone()),
            })
            .collect();
        self.preprocess(&imgs, self.cfg.image_size, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vit_tokens_through_the_trait_equal_embed_of_the_files() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let m = Classifier::load(&repo.join("weights/vit-fashion-mnist")).unwrap();
        let png = repo.join("assets/fmnist-t10k-00001.png");
        let pics = m.load(std::slice::from_ref(&png), false).unwrap();
        let Encoded::Embeddings(e) = m.encode_pictures(&pics).unwrap() else {
            panic!("the ViT gives embeddings");
        };
        assert_eq!((e.n, e.tokens, e.dim), (1, 65, 48));
        let x = m.load_images(&[png], m.cfg.image_size, false).unwrap();
        let want = m.embed(&x).unwrap().tokens.flatten_all().unwrap();
        assert_eq!(e.data, want.to_vec1::<f32>().unwrap());
        assert!(m.codebook_size().is_none());
        assert!(m
            .decode(&imgseq_core::tokens::TokenGrid {
                n: 1,
                h: 1,
                w: 1,
                batched: true,
                data: vec![0]
            })
            .is_err());
    }
}
