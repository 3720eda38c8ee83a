//! The VQ families (taming, LlamaGen, diffusers `VQModel`) as an
//! [`imgseq_core::tokenizer::Tokenizer`]: a [`VqModel`] at a chosen input side.

use crate::config::VqConfig;
use crate::model::VqModel;
use crate::tokens::TokenGrid;
use candle_core::Tensor;
use image::RgbImage;
use imgseq_core::image_io::PixelRange;
use imgseq_core::input::InputSpec;
use imgseq_core::tokenizer::{Description, Encoded, OutputKind, OutputSpec, Tokenizer, Work};
use imgseq_core::Result;

impl VqConfig {
    /// What the model reads at a `size`×`size` input: the family's crop, its channels, [-1, 1]
    /// (a [0, 1] network maps it inside [`VqModel::encode`]).
    pub fn input_spec(&self, size: u32) -> InputSpec {
        InputSpec {
            size,
            crop: self.variant.resize,
            channels: self.ddconfig.in_channels,
            range: PixelRange::MinusOneOne,
        }
    }
}

/// A VQ model with the input side its images are brought to.
pub struct VqTokenizer {
    pub model: VqModel,
    pub size: u32,
}

impl VqTokenizer {
    /// The model at `size` (which must suit it: [`VqConfig::check_input_size`]).
    pub fn new(model: VqModel, size: u32) -> Result<Self> {
        model.config().check_input_size(size as usize)?;
        Ok(Self { model, size })
    }
}

impl Tokenizer for VqTokenizer {
    fn label(&self) -> String {
        self.model.config().variant.family.label().to_string()
    }

    fn describe(&self) -> Description {
        let cfg = self.model.config();
        let g = self.size as usize / cfg.downsample_factor();
        let (enc, dec) = (self.model.encoder_precision(), self.model.precision());
        Description {
            family: cfg.variant.family.name().into(),
            label: self.label(),
            config: serde_json::from_str(&cfg.to_json_string()).unwrap_or_default(),
            weights: None,
            input: self.input().into(),
            output: OutputSpec {
                kind: OutputKind::Codes,
                shape: vec![g, g],
                codebook_size: Some(cfg.n_embed),
                scales: None,
            },
            precision: enc.name().into(),
            draw: None,
            decoder_precision: (dec != enc).then(|| dec.name().into()),
            latent: None,
        }
    }

    fn check_batch(&self, n: usize) -> Result<()> {
        let s = self.size as usize;
        self.model.config().check_memory(n, s, s, Some(s))
    }

    fn work_bytes(&self, work: Work) -> u128 {
        let cfg = self.model.config();
        let (n, h, w) = work.pictures(self.size as usize, cfg.downsample_factor());
        cfg.forward_bytes(n, h, w)
    }

    fn input(&self) -> InputSpec {
        self.model.config().input_spec(self.size)
    }

    fn codebook_size(&self) -> Option<usize> {
        Some(self.model.config().n_embed)
    }

    fn encode(&self, x: &Tensor) -> Result<Encoded> {
        let q = self.model.encode(x)?;
        Ok(Encoded::Tokens(crate::inference::grid_of(&q.indices)?))
    }

    fn decode(&self, tokens: &TokenGrid) -> Result<Vec<RgbImage>> {
        crate::inference::decode_tokens(&self.model, tokens, tokens.n.max(1), false)
    }
}
