//! The tokenizer layer: one interface every image tokenizer implements, whatever its family.
//!
//! A [`Tokenizer`] says what it reads as data ([`InputSpec`]: side, crop rule, channels, value
//! range), turns a batch of prepared pictures into discrete tokens ([`TokenGrid`]) or
//! continuous embeddings ([`Embeddings`]), and, where the family can, tokens back into
//! pictures. Every tokenizer also says what it is ([`Tokenizer::describe`] → a
//! [`Description`]: family, architecture, preprocessing, what it outputs, the precision of the
//! arithmetic that makes its tokens), which manifests, `run.json`, the service's `/v1/models`,
//! `weights inspect` and Python print as they get it.
//!
//! The family implementations live in the model crates; `imgseq-models` opens any of them
//! from files (`imgseq_models::open`), and the surfaces above it see only this trait.

use crate::image_io::PixelRange;
use crate::input::{Crop, InputSpec};
use crate::tokens::TokenGrid;
use crate::{Error, Result};
use candle_core::Tensor;
use image::RgbImage;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What a tokenizer gives for one image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// Codebook indices (shape: the token grid, e.g. (h, w)).
    Codes,
    /// A continuous latent map (C, h, w).
    Latents,
    /// A sequence of continuous vectors (tokens, dim).
    Embeddings,
}

impl OutputKind {
    /// The kind's name in descriptions (`codes`, `latents`, `embeddings`).
    pub fn name(self) -> &'static str {
        match self {
            OutputKind::Codes => "codes",
            OutputKind::Latents => "latents",
            OutputKind::Embeddings => "embeddings",
        }
    }
}

/// One image's output: its kind, array shape and (discrete tokenizers) codebook size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputSpec {
    pub kind: OutputKind,
    pub shape: Vec<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codebook_size: Option<usize>,
    /// Multi-scale codes (VAR): the side of each scale's square token map, smallest first.
    /// One picture's tokens are then a (1, Σ side²) row, scale after scale, each in raster
    /// order; the last scale is the latent grid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scales: Option<Vec<usize>>,
}

/// How pictures are brought to the model's input ([`InputSpec`], serialisable). In JSON the
/// crop rule is its name ([`Crop::name`]), with `resize` (the side resized to before the
/// crop) and `resample` (the Pillow filter) beside it for the rules that take them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "PreprocessingJson", try_from = "PreprocessingJson")]
pub struct Preprocessing {
    pub size: u32,
    pub crop: Crop,
    pub channels: usize,
    /// `[-1, 1]` or `[0, 1]`.
    pub range: PixelRange,
}

/// [`Preprocessing`] as JSON has it.
#[derive(Serialize, Deserialize)]
struct PreprocessingJson {
    size: u32,
    crop: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resize: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resample: Option<crate::resample::Filter>,
    channels: usize,
    range: PixelRange,
}

impl From<Preprocessing> for PreprocessingJson {
    fn from(p: Preprocessing) -> Self {
        Self {
            size: p.size,
            crop: p.crop.name().to_string(),
            resize: p.crop.resize_side(),
            resample: p.crop.filter(),
            channels: p.channels,
            range: p.range,
        }
    }
}

impl TryFrom<PreprocessingJson> for Preprocessing {
    type Error = String;

    fn try_from(j: PreprocessingJson) -> std::result::Result<Self, String> {
        let crop = Crop::from_parts(&j.crop, j.resize, j.resample).ok_or_else(|| {
            format!(
                "crop `{}`: not a crop rule imgseq knows, or without its resize and resample",
                j.crop
            )
        })?;
        Ok(Self {
            size: j.size,
            crop,
            channels: j.channels,
            range: j.range,
        })
    }
}

impl From<InputSpec> for Preprocessing {
    fn from(s: InputSpec) -> Self {
        Self {
            size: s.size,
            crop: s.crop,
            channels: s.channels,
            range: s.range,
        }
    }
}

/// The weights a tokenizer was opened from: the source as given and the file's SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightsRef {
    pub source: String,
    pub sha256: String,
}

impl LatentSpec {
    /// One line for people, with the tokenizer's input side: `f8, 4 latent channels, scaling
    /// 0.18215` (and the shift where there is one).
    pub fn summary(&self, input_size: u32) -> String {
        let f = input_size as usize / self.grid[0].max(1);
        let shift = if self.shift_factor != 0.0 {
            format!(", shift {}", self.shift_factor)
        } else {
            String::new()
        };
        format!(
            "f{f}, {} latent channels, scaling {}{shift}",
            self.channels, self.scaling_factor
        )
    }
}

/// A tokenizer's account of itself: what manifests, `run.json`, `/v1/models`, `weights
/// inspect` and Python's `repr` print.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Description {
    /// The family's registry name (`taming`, `llamagen`, `open_magvit2`, `autoencoder_kl`).
    pub family: String,
    /// Its name as users read it (`LlamaGen VQ`).
    pub label: String,
    /// The architecture config, in the family's config form.
    pub config: Value,
    /// The weights' source and hash (set by the loader, which knows the files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<WeightsRef>,
    pub input: Preprocessing,
    pub output: OutputSpec,
    /// The arithmetic that makes the tokens (the encoder's): `f32`, `bf16`, with what else
    /// changes them (`f32, EMA weights`).
    pub precision: String,
    /// How continuous outputs are drawn, where there is a choice (`mean`, `sample SEED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draw: Option<String>,
    /// The decoder's, where the family decodes and it differs from [`Self::precision`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder_precision: Option<String>,
    /// What a continuous-latent tokenizer's values are (latent shards' manifests record it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latent: Option<LatentSpec>,
}

/// The meaning of a continuous-latent tokenizer's values: latent = (mean − shift_factor) ·
/// scaling_factor on a `grid` of `channels`-vector cells, as the diffusion pipelines feed their
/// transformer (decode with z / scaling_factor + shift_factor), as maps or p×p patch tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatentSpec {
    /// The released configuration named (`sd`, `sdxl`, `sd3`, `flux`), if one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    pub scaling_factor: f64,
    pub shift_factor: f64,
    pub channels: usize,
    /// The latent map's (h, w).
    pub grid: [usize; 2],
    /// Patch side p of (h/p·w/p, p²·C) patch tokens; `None`: (C, h, w) maps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<usize>,
}

/// Continuous tokens of `n` images: `tokens` vectors of `dim` values each.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    pub n: usize,
    pub tokens: usize,
    pub dim: usize,
    /// n·tokens·dim values, image after image, token after token.
    pub data: Vec<f32>,
}

impl Description {
    /// A description with no config, weights or decoder precision, computing in f32 (tests'
    /// stand-in models, families without a config of their own).
    pub fn basic(family: &str, label: &str, input: InputSpec, output: OutputSpec) -> Self {
        Self {
            family: family.into(),
            label: label.into(),
            config: Value::Null,
            weights: None,
            input: input.into(),
            output,
            precision: "f32".into(),
            draw: None,
            decoder_precision: None,
            latent: None,
        }
    }
}

/// Continuous latent maps of `n` images, each of `shape` (C, h, w).
#[derive(Debug, Clone, PartialEq)]
pub struct Latents {
    pub n: usize,
    pub shape: Vec<usize>,
    /// n·C·h·w values, image after image.
    pub data: Vec<f32>,
}

/// What a tokenizer makes of a batch of images.
#[derive(Debug, Clone, PartialEq)]
pub enum Encoded {
    /// Codebook indices on a grid (VQ families).
    Tokens(TokenGrid),
    /// Continuous vectors (the ViT's, continuous-latent tokenizers' patch sequences).
    Embeddings(Embeddings),
    /// Continuous latent maps (a VAE's (C, h, w)).
    Latents(Latents),
}

impl Encoded {
    /// The token grid of a discrete tokenizer.
    pub fn into_tokens(self) -> Result<TokenGrid> {
        match self {
            Encoded::Tokens(t) => Ok(t),
            Encoded::Embeddings(_) | Encoded::Latents(_) => Err(Error::invalid(
                "this tokenizer gives continuous values, not codebook tokens",
            )),
        }
    }

    /// Appends the next batch's output (of the same kind and per-image shape).
    pub fn extend(&mut self, next: Encoded) -> Result<()> {
        if self.item_shape() != next.item_shape() {
            return Err(Error::invalid(format!(
                "a batch of {:?} after batches of {:?}: the tokenizer changed its output shape",
                next.item_shape(),
                self.item_shape()
            )));
        }
        match (self, next) {
            (Encoded::Tokens(a), Encoded::Tokens(b)) => {
                a.n += b.n;
                a.data.extend(b.data);
            }
            (Encoded::Embeddings(a), Encoded::Embeddings(b)) => {
                a.n += b.n;
                a.data.extend(b.data);
            }
            (Encoded::Latents(a), Encoded::Latents(b)) => {
                a.n += b.n;
                a.data.extend(b.data);
            }
            _ => {
                return Err(Error::invalid(
                    "the tokenizer changed its output kind between batches",
                ))
            }
        }
        Ok(())
    }

    /// Images encoded.
    pub fn len(&self) -> usize {
        match self {
            Encoded::Tokens(t) => t.n,
            Encoded::Embeddings(e) => e.n,
            Encoded::Latents(l) => l.n,
        }
    }

    /// Whether no image was encoded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One image's array shape: (h, w) tokens, (tokens, dim) embeddings, (C, h, w) latents.
    pub fn item_shape(&self) -> Vec<usize> {
        match self {
            Encoded::Tokens(t) => vec![t.h, t.w],
            Encoded::Embeddings(e) => vec![e.tokens, e.dim],
            Encoded::Latents(l) => l.shape.clone(),
        }
    }

    /// Every image's continuous values, image after image (`None` for tokens).
    pub fn into_values(self) -> Option<Vec<f32>> {
        match self {
            Encoded::Tokens(_) => None,
            Encoded::Embeddings(e) => Some(e.data),
            Encoded::Latents(l) => Some(l.data),
        }
    }

    /// Image `i`'s continuous values (`None` for tokens).
    pub fn values(&self, i: usize) -> Option<&[f32]> {
        let (per, data) = match self {
            Encoded::Tokens(_) => return None,
            Encoded::Embeddings(e) => (e.tokens * e.dim, &e.data),
            Encoded::Latents(l) => (l.shape.iter().product(), &l.data),
        };
        data.get(i * per..(i + 1) * per)
    }
}

/// An image tokenizer: pictures → tokens or embeddings, and (where the family can) tokens →
/// pictures.
pub trait Tokenizer: Send + Sync {
    /// The family's name as users see it (`taming VQGAN`, `ViT`).
    fn label(&self) -> String;

    /// What the tokenizer is ([`Description`]; its `weights` are the loader's to fill).
    fn describe(&self) -> Description;

    /// Refuses a batch of `n` inputs whose forward pass would not fit the memory budget
    /// (checked before any image is read).
    fn check_batch(&self, n: usize) -> Result<()> {
        let _ = n;
        Ok(())
    }

    /// About how many bytes `work` needs while it runs (its forward pass), what
    /// [`admit`] holds of the process-wide budget; 0 for a tokenizer without an estimate.
    fn work_bytes(&self, work: Work) -> u128 {
        let _ = work;
        0
    }

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

    /// Pictures of anything [`Self::encode`] gives: tokens through [`Self::decode`], continuous
    /// outputs where the family decodes them; others refuse.
    fn decode_encoded(&self, e: &Encoded) -> Result<Vec<RgbImage>> {
        match e {
            Encoded::Tokens(t) => self.decode(t),
            _ => Err(Error::invalid(format!(
                "a {} cannot turn these values back into images",
                self.label()
            ))),
        }
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

    /// Encodes prepared pictures (admitted to the memory budget by their estimate).
    fn encode_pictures(&self, imgs: &[RgbImage]) -> Result<Encoded> {
        let _admitted = admit(self, Work::Encode(imgs.len()))?;
        self.encode(&self.input_tensor(imgs)?)
    }

    /// [`Self::decode`], admitted to the memory budget by its estimate (the counterpart of
    /// [`Self::encode_pictures`]).
    fn decode_admitted(&self, tokens: &TokenGrid) -> Result<Vec<RgbImage>> {
        let work = Work::Decode {
            n: tokens.n,
            h: tokens.h,
            w: tokens.w,
        };
        let _admitted = admit(self, work)?;
        self.decode(tokens)
    }
}

/// A batch of work a tokenizer does, for its memory estimate ([`Tokenizer::work_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// `n` pictures at the input size.
    Encode(usize),
    /// `n` token grids of `h`×`w`.
    Decode { n: usize, h: usize, w: usize },
}

impl Work {
    /// The pictures the work's forward pass sees, (n, h, w) pixels, for a tokenizer whose
    /// input side is `size` and whose tokens are `factor` pixels a side.
    pub fn pictures(self, size: usize, factor: usize) -> (usize, usize, usize) {
        match self {
            Work::Encode(n) => (n, size, size),
            Work::Decode { n, h, w } => (n, h * factor, w * factor),
        }
    }
}

/// Holds `work`'s estimate in the process-wide memory budget ([`crate::budget::admit`]) while
/// the returned value lives: work running beside it (image decodes, other requests' passes)
/// waits until the sum fits.
pub fn admit<T: Tokenizer + ?Sized>(t: &T, work: Work) -> Result<crate::budget::Reserved> {
    crate::budget::admit(t.work_bytes(work))
        .map_err(|why| Error::invalid(format!("{}: this batch {why}", t.label())))
}

/// Pixels per token row and column of a tokenizer with a 2-D output (its input side over the
/// output grid's; multi-scale codes: over the last scale's), 1 for any other.
pub fn downsample_factor<T: Tokenizer + ?Sized>(t: &T) -> usize {
    let d = t.describe();
    if let Some(&g) = d.output.scales.as_ref().and_then(|s| s.last()) {
        return (d.input.size as usize / g.max(1)).max(1);
    }
    match d.output.shape.first() {
        Some(&g) if g > 0 && d.output.shape.len() == 2 => (d.input.size as usize / g).max(1),
        _ => 1,
    }
}

/// Refuses a batch size of 0 (`batch_size 0 must be positive`; the CLI names its flag).
pub fn check_batch_size(batch: usize) -> Result<()> {
    if batch == 0 {
        return Err(Error::setting("batch_size", batch, "must be positive"));
    }
    Ok(())
}

/// Pictures of token grids through `t`, `batch` images at a time (each batch's memory checked
/// by the tokenizer's decode), `done(k)` told after each batch of `k`.
pub fn decode_batches<T: Tokenizer + ?Sized>(
    t: &T,
    g: &TokenGrid,
    batch: usize,
    mut done: impl FnMut(usize),
) -> Result<Vec<RgbImage>> {
    check_batch_size(batch)?;
    let plane = g.h * g.w;
    let mut out = Vec::with_capacity(g.n);
    for start in (0..g.n).step_by(batch) {
        let k = batch.min(g.n - start);
        let part = TokenGrid {
            n: k,
            data: g.data[start * plane..(start + k) * plane].to_vec(),
            ..g.clone()
        };
        out.extend(t.decode_admitted(&part)?);
        done(k);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_kind_names_are_their_serialised_names() {
        for k in [
            OutputKind::Codes,
            OutputKind::Latents,
            OutputKind::Embeddings,
        ] {
            assert_eq!(serde_json::to_value(k).unwrap(), k.name());
        }
    }
}
