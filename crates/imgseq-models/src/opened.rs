//! [`Opened`]: the tokenizer a family's loader made, with the files it read; it is itself a
//! [`Tokenizer`] whose description carries the weights' source and SHA-256.

use candle_core::Tensor;
use image::RgbImage;
use imgseq_core::input::InputSpec;
use imgseq_core::tokenizer::{Description, Encoded, Tokenizer, WeightsRef, Work};
use imgseq_core::tokens::TokenGrid;
use imgseq_core::Result;
use imgseq_kernels::PrecisionChoice;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A loaded tokenizer and where it came from.
pub struct Opened {
    tokenizer: Box<dyn Tokenizer>,
    /// The source as the user named it (a file or a folder).
    pub source: PathBuf,
    /// The weights file read (the folder's file for a folder source).
    pub weights: PathBuf,
    /// Every file read (weights and config): inputs an output must never replace.
    pub files: Vec<PathBuf>,
    /// The precision `--precision` resolved to and why, where the family has the choice.
    pub precision: Option<PrecisionChoice>,
    /// What else changes the tokens, added to the description's precision (`EMA weights` /
    /// `raw weights` of a Lightning checkpoint whose family's model does not say it itself).
    pub weight_set: Option<String>,
    /// What the loader has to tell the user (settings read off the weights, the bf16 encoder's
    /// agreement): one line each, for stderr.
    pub notes: Vec<String>,
    sha256: OnceLock<String>,
}

impl Opened {
    /// `tokenizer` read from `weights` (named `source` by the user) and `files`.
    pub fn new(
        tokenizer: Box<dyn Tokenizer>,
        source: &Path,
        weights: &Path,
        files: Vec<PathBuf>,
    ) -> Self {
        Self {
            tokenizer,
            source: source.to_path_buf(),
            weights: weights.to_path_buf(),
            files,
            precision: None,
            weight_set: None,
            notes: Vec::new(),
            sha256: OnceLock::new(),
        }
    }

    /// The weights file's SHA-256 (hashed once, when first asked).
    pub fn weights_sha256(&self) -> Result<String> {
        if let Some(s) = self.sha256.get() {
            return Ok(s.clone());
        }
        let s = imgseq_shards::wds::sha256_file(&self.weights)?;
        Ok(self.sha256.get_or_init(|| s).clone())
    }

    /// The description with the weights' source and hash (the hash read now if not yet).
    pub fn describe_with_weights(&self) -> Result<Description> {
        let mut d = self.describe_model();
        d.weights = Some(WeightsRef {
            source: self.source.display().to_string(),
            sha256: self.weights_sha256()?,
        });
        Ok(d)
    }

    /// The tokenizer's description with the weight set the loader chose.
    fn describe_model(&self) -> Description {
        let mut d = self.tokenizer.describe();
        if let Some(w) = &self.weight_set {
            d.precision = format!("{}, {w}", d.precision);
        }
        d
    }

    /// The tokenizer itself.
    pub fn tokenizer(&self) -> &dyn Tokenizer {
        self.tokenizer.as_ref()
    }
}

impl Tokenizer for Opened {
    fn label(&self) -> String {
        self.tokenizer.label()
    }

    /// The tokenizer's description, with the weights' source (and their hash once
    /// [`Opened::weights_sha256`] has read it; [`Opened::describe_with_weights`] reads it).
    fn describe(&self) -> Description {
        let mut d = self.describe_model();
        d.weights = Some(WeightsRef {
            source: self.source.display().to_string(),
            sha256: self.sha256.get().cloned().unwrap_or_default(),
        });
        d
    }

    fn check_batch(&self, n: usize) -> Result<()> {
        self.tokenizer.check_batch(n)
    }

    fn work_bytes(&self, work: Work) -> u128 {
        self.tokenizer.work_bytes(work)
    }

    fn input(&self) -> InputSpec {
        self.tokenizer.input()
    }

    fn codebook_size(&self) -> Option<usize> {
        self.tokenizer.codebook_size()
    }

    fn encode(&self, x: &Tensor) -> Result<Encoded> {
        self.tokenizer.encode(x)
    }

    fn decode(&self, tokens: &TokenGrid) -> Result<Vec<RgbImage>> {
        self.tokenizer.decode(tokens)
    }

    fn decode_encoded(&self, e: &Encoded) -> Result<Vec<RgbImage>> {
        self.tokenizer.decode_encoded(e)
    }

    fn input_tensor(&self, imgs: &[RgbImage]) -> Result<Tensor> {
        self.tokenizer.input_tensor(imgs)
    }

    fn prepare(&self, name: &Path, img: &RgbImage, upscale: bool) -> Result<RgbImage> {
        self.tokenizer.prepare(name, img, upscale)
    }

    fn encode_pictures(&self, imgs: &[RgbImage]) -> Result<Encoded> {
        self.tokenizer.encode_pictures(imgs)
    }
}
