//! CLIP's vision tower as transformers has it (`CLIPVisionModel`,
//! `models/clip/modeling_clip.py`): what LLaVA-style models read.
//!
//! pixels (b, 3, S, S), normalised with CLIP's mean and std
//!   → embeddings: patch conv (p×p, stride p, no bias) → the class embedding first → add the
//!     learned positions                                                     (b, 1 + n, D)
//!   → `pre_layrnorm`
//!   → layers: pre-LN blocks (`layer_norm1` → attention (q, k, v, out projections) →
//!     residual; `layer_norm2` → fc1 → quick-GELU (OpenAI's) or GELU → fc2 → residual)
//!   → last hidden state (not normed); pooled = `post_layernorm` of its class token.
//!
//! Weights: a `CLIPVisionModel.save_pretrained` folder (names as above) or a full CLIP
//! checkpoint (`vision_model.` + name; the text tower's tensors are left out).

use crate::model::{layer_norm, LayerNorm, Linear, LinearVisitor};
use crate::processor;
use crate::tower::{self, Activation, BlockSizes, EncoderLayer, Keep, PatchEmbed, TowerOutput};
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

/// `CLIPVisionConfig`, upstream names and defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClipVisionConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_channels: usize,
    pub image_size: usize,
    pub patch_size: usize,
    pub hidden_act: String,
    pub layer_norm_eps: f64,
}

impl Default for ClipVisionConfig {
    fn default() -> Self {
        Self {
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            num_channels: 3,
            image_size: 224,
            patch_size: 32,
            hidden_act: "quick_gelu".into(),
            layer_norm_eps: 1e-5,
        }
    }
}

/// CLIP's image normalisation (`CLIPImageProcessor`'s `image_mean`, `image_std`).
pub use crate::processor::{CLIP_MEAN, CLIP_STD};

impl ClipVisionConfig {
    /// Patches per side.
    pub fn grid(&self) -> usize {
        self.image_size / self.patch_size.max(1)
    }

    /// Checks what the model relies on (one line naming the field).
    pub fn validate(&self) -> std::result::Result<(), String> {
        let c = self;
        if c.patch_size == 0 || c.image_size == 0 || !c.image_size.is_multiple_of(c.patch_size) {
            return Err(format!(
                "image_size {} is not a whole number of patches of {}",
                c.image_size, c.patch_size
            ));
        }
        if c.num_attention_heads == 0 || !c.hidden_size.is_multiple_of(c.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                c.hidden_size, c.num_attention_heads
            ));
        }
        Activation::from_hf(&c.hidden_act)?;
        let limits = [
            ("hidden_size", c.hidden_size, 8192),
            ("intermediate_size", c.intermediate_size, 32768),
            ("num_hidden_layers", c.num_hidden_layers, 128),
            ("num_channels", c.num_channels, 4),
            ("image_size", c.image_size, 4096),
        ];
        for (name, v, max) in limits {
            if v == 0 || v > max {
                return Err(format!("{name} is {v}; must be 1 to {max}"));
            }
        }
        Ok(())
    }
}

/// `CLIPVisionModel`.
#[derive(Debug, Clone)]
pub struct ClipVisionModel {
    pub cfg: ClipVisionConfig,
    class_embedding: Tensor, // (D)
    patch_embedding: PatchEmbed,
    position_embedding: Tensor, // (1 + n, D)
    pre_layrnorm: LayerNorm,
    layers: Vec<EncoderLayer>,
    post_layernorm: LayerNorm,
}

/// What a forward pass gives.
pub struct ClipOutput {
    /// The input of the first layer (after `pre_layrnorm`) and every layer's output:
    /// `num_hidden_layers + 1` tensors (b, 1 + n, D) — transformers' `hidden_states`.
    pub hidden_states: Vec<Tensor>,
    /// `post_layernorm` of the last hidden state's class token: (b, D).
    pub pooled: Tensor,
}

impl ClipVisionModel {
    pub fn new(cfg: &ClipVisionConfig, vb: VarBuilder) -> Result<Self> {
        cfg.validate().map_err(candle_core::Error::msg)?;
        let (d, c, p) = (cfg.hidden_size, cfg.num_channels, cfg.patch_size);
        let n = cfg.grid() * cfg.grid();
        let e = vb.pp("embeddings");
        let vl = vb.pp("encoder").pp("layers");
        let sizes = BlockSizes {
            hidden: d,
            intermediate: cfg.intermediate_size,
            heads: cfg.num_attention_heads,
            eps: cfg.layer_norm_eps,
            act: Activation::from_hf(&cfg.hidden_act).map_err(candle_core::Error::msg)?,
        };
        Ok(Self {
            cfg: cfg.clone(),
            class_embedding: e.get(d, "class_embedding")?,
            patch_embedding: PatchEmbed::new(d, c, p, false, &e.pp("patch_embedding"))?,
            position_embedding: e.pp("position_embedding").get((n + 1, d), "weight")?,
            pre_layrnorm: layer_norm(d, cfg.layer_norm_eps, vb.pp("pre_layrnorm"))?,
            layers: (0..cfg.num_hidden_layers)
                .map(|i| EncoderLayer::new(sizes, vl.pp(i)))
                .collect::<Result<_>>()?,
            post_layernorm: layer_norm(d, cfg.layer_norm_eps, vb.pp("post_layernorm"))?,
        })
    }

    /// # Shapes
    /// (b, C, S, S) → (b, 1 + n, D): the class embedding, then the patches in raster order,
    /// positions added.
    fn embeddings(&self, x: &Tensor) -> Result<Tensor> {
        let (b, _, h, w) = x.dims4()?;
        let s = self.cfg.image_size;
        if h != s || w != s {
            candle_core::bail!("the CLIP tower reads {s}×{s} pictures; got {h}×{w}");
        }
        let (patches, _) = self.patch_embedding.forward(x)?; // (b, n, D)
        let d = self.cfg.hidden_size;
        let cls = self
            .class_embedding
            .reshape((1, 1, d))?
            .broadcast_as((b, 1, d))?;
        let x = Tensor::cat(&[&cls, &patches], 1)?; // (b, 1 + n, D)
        x.broadcast_add(&self.position_embedding.unsqueeze(0)?)
    }

    /// Every hidden state and the pooled output.
    pub fn forward_all(&self, x: &Tensor) -> Result<ClipOutput> {
        let out = self.forward_states(x, Keep::All)?;
        Ok(ClipOutput {
            hidden_states: out.hidden_states,
            pooled: out
                .pooled
                .ok_or_else(|| candle_core::Error::msg("the CLIP tower gave no pooled output"))?,
        })
    }

    /// The hidden states `keep` asks for, the last one and the pooled output.
    fn forward_states(&self, x: &Tensor, keep: Keep) -> Result<TowerOutput> {
        let first = self.pre_layrnorm.forward(&self.embeddings(x)?)?;
        let (kept, last) = tower::run_blocks(first, &self.layers, keep, EncoderLayer::forward)?;
        let pooled = self
            .post_layernorm
            .forward(&last.narrow(1, 0, 1)?.squeeze(1)?)?;
        Ok(TowerOutput {
            hidden_states: kept,
            last_hidden_state: last,
            pooled: Some(pooled),
        })
    }
}

/// Where a full CLIP checkpoint keeps its vision tower.
const FULL_PREFIX: &str = "vision_model.";

/// The tower's config from a `config.json` value: a `clip_vision_model`'s own, or a full
/// `clip` model's `vision_config`.
pub fn config_from_json(v: &serde_json::Value) -> std::result::Result<ClipVisionConfig, String> {
    let v = match v.get("model_type").and_then(|t| t.as_str()) {
        Some("clip") => v
            .get("vision_config")
            .ok_or("a `clip` config.json without `vision_config`")?,
        Some("clip_vision_model") => v,
        other => return Err(format!("model_type {other:?} is not CLIP's")),
    };
    let c: ClipVisionConfig =
        serde_json::from_value(v.clone()).map_err(|e| format!("not a CLIPVisionConfig ({e})"))?;
    c.validate()?;
    Ok(c)
}

/// Whether a `config.json` value is CLIP's (the vision tower's or a full model's).
pub fn is_clip_config(v: &serde_json::Value) -> bool {
    matches!(
        v.get("model_type").and_then(|t| t.as_str()),
        Some("clip" | "clip_vision_model")
    )
}

/// Whether the file at `path` is a CLIP `config.json` (at most 1 MiB, else no).
pub fn is_clip_config_file(path: &std::path::Path) -> bool {
    matches!(
        tower::model_type_of(path).as_deref(),
        Some("clip" | "clip_vision_model")
    )
}

/// The tower from a folder (`config.json` + `model.safetensors`) or a safetensors file with
/// its `config.json` beside it; every tensor of the tower used, a full checkpoint's others
/// left out.
pub fn load(
    source: &std::path::Path,
    device: &candle_core::Device,
) -> imgseq_core::Result<ClipVisionModel> {
    tower::load_model(
        source,
        device,
        Some(FULL_PREFIX),
        "CLIP tower",
        config_from_json,
        ClipVisionModel::new,
        &[],
    )
}

/// The tower as a tokenizer: pictures (CLIP's processor: shorter side resized, centre crop,
/// rescaled, CLIP's mean and std) → one hidden state, class token first.
pub type ClipTower = tower::Tower<ClipVisionModel>;

/// What [`ClipTower`] of the model at `source` reads: its `preprocessor_config.json`'s
/// `CLIPImageProcessor` where it has one, else the released models' at the tower's
/// `image_size` (shortest edge and crop both that side, Pillow bicubic, CLIP's mean and std)
/// ([`crate::processor`]). A processor whose pictures are not `image_size`² is refused.
pub fn pixels(
    cfg: &ClipVisionConfig,
    source: &std::path::Path,
) -> imgseq_core::Result<tower::Pixels> {
    let side = cfg.image_size as u32;
    let p = processor::read_pixels(source, processor::Processor::clip(side), None)?;
    processor::check_side(&p, side, source, "CLIP vision tower")?;
    Ok(p)
}

impl tower::VisionModel for ClipVisionModel {
    fn family(&self) -> &'static str {
        "clip"
    }

    fn label(&self) -> String {
        "CLIP vision tower (transformers CLIPVisionModel)".into()
    }

    fn config_value(&self) -> serde_json::Value {
        serde_json::to_value(&self.cfg).unwrap_or_default()
    }

    fn hidden_size(&self) -> usize {
        self.cfg.hidden_size
    }

    fn num_hidden_layers(&self) -> usize {
        self.cfg.num_hidden_layers
    }

    fn patch_size(&self) -> usize {
        self.cfg.patch_size
    }

    fn prefix_tokens(&self) -> usize {
        1
    }

    fn forward_kept(&self, x: &Tensor, keep: Keep) -> Result<TowerOutput> {
        self.forward_states(x, keep)
    }

    fn patch_projection(&self) -> &Linear {
        self.patch_embedding.projection()
    }

    fn for_each_linear(&mut self, f: &mut LinearVisitor) -> Result<()> {
        f(self.patch_embedding.projection_mut())?;
        self.layers
            .iter_mut()
            .try_for_each(|l| l.for_each_linear(f))
    }
}
