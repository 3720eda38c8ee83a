//! Loading the served models: `NAME=PATH` → a tokenizer of any family the loader opens
//! (`imgseq_models::open`), a ViT or a token GPT (with the tokenizer that decodes its tokens),
//! told apart by the `config.json` beside the weights; the shipped defaults; what a client may
//! know of each ([`ModelInfo`]: names, descriptions and weight hashes, never the server's paths).

use crate::config::ModelSpec;
use candle_core::Device;
use imgseq_core::input::InputSpec;
use imgseq_core::shipped::default_model;
use imgseq_core::tokenizer::{Description, Tokenizer, WeightsRef};
use imgseq_core::{Error, Result};
use imgseq_gpt::config::SeqLayout;
use imgseq_gpt::model::Gpt2LMHeadModel;
use imgseq_kernels::PrecisionRequest;
use imgseq_models::{OpenOptions, Opened};
use imgseq_vit::inference::Classifier;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The shipped models served when no `--model` is given: (name, folder under `weights/`).
pub const DEFAULT_MODELS: [(&str, &str); 3] = [
    ("vqgan", "vqgan"),
    ("vit", "vit-fashion-mnist"),
    ("gpt", "gpt-fashion-mnist"),
];
/// The VQ the shipped GPT's tokens come from, when its config names none that exists.
pub const DEFAULT_GPT_VQ: &str = "vq-fashion-mnist";

/// Pixels of a VQ batch by default: 256², i.e. 256² and larger inputs run one at a time,
/// smaller ones batch while b·h·w ≤ 256² (the VQGAN's batched forward is slower per image at
/// 256² and 384² on CPU, a little faster at 128²; figures in docs/serve.md).
pub const VQ_BATCH_PIXELS: u64 = 256 * 256;
/// Images of a ViT batch by default (its forward profits up to the largest batches).
pub const VIT_BATCH_IMAGES: u64 = 256;

/// The default batch bound in pixels of a model of `kind` whose input has `input_pixels`
/// (VQ: [`VQ_BATCH_PIXELS`]; ViT: [`VIT_BATCH_IMAGES`] inputs; GPT: one sample request, whose
/// images are generated together, per run).
pub fn default_batch_pixels(kind: Kind, input_pixels: u64) -> u64 {
    match kind {
        Kind::Vq => VQ_BATCH_PIXELS,
        Kind::Vit => VIT_BATCH_IMAGES * input_pixels.max(1),
        Kind::Gpt => input_pixels.max(1),
    }
}

/// What kind of model a folder holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A tokenizer of any family the loader opens (named `vq` in the API, its first kind).
    Vq,
    Vit,
    Gpt,
}

/// A loaded model, owned by its batching worker.
pub enum Engine {
    Vq(Opened),
    Vit(Box<Classifier>),
    Gpt {
        model: Gpt2LMHeadModel,
        layout: SeqLayout,
        vq: Opened,
    },
}

/// What clients may know of a model (`GET /v1/models`).
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    pub name: String,
    pub kind: Kind,
    /// The family (`taming VQGAN`, `ViT`, `GPT`).
    pub label: String,
    /// The tokenizer's description (family, config, preprocessing, output, precision; its
    /// weights by file name and SHA-256); for a GPT, that of the tokenizer decoding its tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<Description>,
    /// Input side in pixels (VQ, ViT).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_size: Option<u32>,
    /// Codebook entries (VQ, GPT).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codebook_size: Option<usize>,
    /// Token grid (rows, columns) of one image (VQ, GPT).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grid: Option<[usize; 2]>,
    /// Class names (ViT labels, GPT classes).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<String>,
    /// Input channels (1: gray, 3: RGB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channels: Option<usize>,
}

impl Engine {
    /// Pixels of one input image of this model (GPT: of one sampled image's token grid).
    pub fn input_pixels(&self) -> u64 {
        match self {
            Engine::Vq(t) => {
                let s = t.input().size as u64;
                s * s
            }
            Engine::Vit(m) => (m.cfg.image_size * m.cfg.image_size) as u64,
            Engine::Gpt { layout, vq, .. } => {
                let f = downsample_factor(vq) as u64;
                (layout.h * layout.w) as u64 * f * f
            }
        }
    }
}

/// The specs to load: `given`, or the shipped defaults that exist when none is given (an error
/// when none does).
pub fn resolve_specs(given: &[ModelSpec]) -> Result<Vec<ModelSpec>> {
    if !given.is_empty() {
        return Ok(given.to_vec());
    }
    let found: Vec<ModelSpec> = DEFAULT_MODELS
        .iter()
        .filter_map(|&(name, dir)| {
            default_model(dir).ok().map(|path| ModelSpec {
                name: name.into(),
                path,
            })
        })
        .collect();
    if found.is_empty() {
        return Err(Error::invalid(
            "no --model given and no shipped model was found (set IMGSEQ_WEIGHTS_DIR to the \
             folder holding vqgan/, vit-fashion-mnist/ and gpt-fashion-mnist/)",
        ));
    }
    Ok(found)
}

/// The kind of model at `path` from its `config.json` (in the folder, or beside the file):
/// `model_type` `vit` or `gpt2`; anything else is a VQ (whose loader checks it).
pub fn kind_of(path: &Path) -> Result<Kind> {
    // Hub models are tokenizers (the loader fetches them).
    if imgseq_models::hub::names_hub(path) {
        return Ok(Kind::Vq);
    }
    let cfg = if path.is_dir() {
        path.join("config.json")
    } else {
        path.with_file_name("config.json")
    };
    if !path.exists() {
        return Err(Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
        ));
    }
    let Ok(meta) = std::fs::metadata(&cfg) else {
        return Ok(Kind::Vq);
    };
    if meta.len() > 1 << 20 {
        return Err(Error::format(&cfg, "a config.json over 1 MiB"));
    }
    let text = std::fs::read_to_string(&cfg).map_err(|e| Error::io(&cfg, e))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::format(&cfg, e.to_string()))?;
    Ok(match v.get("model_type").and_then(|t| t.as_str()) {
        Some("vit") => Kind::Vit,
        Some("gpt2") => Kind::Gpt,
        _ => Kind::Vq,
    })
}

pub use imgseq_core::tokenizer::downsample_factor;

/// Opens a tokenizer as `imgseq` does (the loader's default size unless `side`, precision
/// `auto`), described with its weights' file name and hash (never the server's path).
pub fn open_tokenizer(path: &Path, side: Option<u32>) -> Result<(Opened, Description)> {
    let o = OpenOptions {
        size: side,
        precision: PrecisionRequest::Auto,
        ..OpenOptions::default()
    };
    let t = imgseq_models::open(path, &o)?;
    let mut d = t.describe_with_weights()?;
    // A Hub model by its public name at its commit; a local one by its file's name only.
    let source = t.source.to_string_lossy();
    let source = if source.starts_with("hf:") {
        source.into_owned()
    } else {
        t.weights
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    d.weights = Some(WeightsRef {
        source,
        sha256: t.weights_sha256()?,
    });
    Ok((t, d))
}

/// Loads the model of `spec` (a VQ at input side `vq_size`, default [`vq_size`]).
pub fn load(spec: &ModelSpec, vq_side: Option<u32>) -> Result<(Engine, ModelInfo)> {
    let kind = kind_of(&spec.path)?;
    let mut info = ModelInfo {
        name: spec.name.clone(),
        kind,
        label: String::new(),
        description: None,
        input_size: None,
        codebook_size: None,
        grid: None,
        classes: Vec::new(),
        channels: None,
    };
    let engine = match kind {
        Kind::Vq => {
            let (tok, d) = open_tokenizer(&spec.path, vq_side)?;
            describe_input(&mut info, &tok.input(), tok.label());
            info.codebook_size = tok.codebook_size();
            if let (Some(_), &[h, w]) = (d.output.codebook_size, &d.output.shape[..]) {
                info.grid = Some([h, w]);
            }
            info.description = Some(d);
            Engine::Vq(tok)
        }
        Kind::Vit => {
            let mut m = Classifier::load(&spec.path)?;
            m.choose_precision(PrecisionRequest::Auto)?;
            describe_input(&mut info, &m.input(), m.label());
            info.description = Some(m.describe());
            info.classes = (0..m.cfg.num_labels()).map(|i| m.cfg.label(i)).collect();
            Engine::Vit(Box::new(m))
        }
        Kind::Gpt => {
            let (cfg, model) = imgseq_gpt::checkpoint::load(&spec.path, &Device::Cpu)?;
            let layout = cfg.layout()?;
            let (vq, d) = open_tokenizer(&gpt_vq_path(cfg.imgseq_vq.as_deref())?, None)?;
            if vq.codebook_size() != Some(layout.n_codes) {
                return Err(Error::invalid(format!(
                    "{}: the GPT's VQ has {:?} codes but the GPT was trained on {}",
                    spec.path.display(),
                    vq.codebook_size(),
                    layout.n_codes
                )));
            }
            info.description = Some(d);
            info.label = "GPT".into();
            info.codebook_size = Some(layout.n_codes);
            info.grid = Some([layout.h, layout.w]);
            info.classes = layout.class_names.clone();
            Engine::Gpt { model, layout, vq }
        }
    };
    Ok((engine, info))
}

fn describe_input(info: &mut ModelInfo, spec: &InputSpec, label: String) {
    info.label = label;
    info.input_size = Some(spec.size);
    info.channels = Some(spec.channels);
}

/// The VQ that decodes a GPT's tokens: the one its config records when that file exists,
/// else the shipped `vq-fashion-mnist` (as `imgseq gpt sample` finds it).
fn gpt_vq_path(recorded: Option<&str>) -> Result<PathBuf> {
    match recorded {
        Some(rec) if Path::new(rec).exists() => Ok(PathBuf::from(rec)),
        _ => default_model(DEFAULT_GPT_VQ),
    }
}
