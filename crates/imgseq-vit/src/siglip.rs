//! SigLIP's vision tower as transformers has it (`SiglipVisionModel`,
//! `models/siglip/modeling_siglip.py`): the image tower of SigLIP and of the VLMs that read
//! it (so400m-patch14-384: 27 blocks of 1,152 values, 27 × 27 = 729 patch tokens).
//!
//! pixels (b, 3, S, S), normalised with mean = std = 0.5
//!   → embeddings: patch conv (p×p, stride p, with bias) → add the learned positions (no
//!     class token)                                                           (b, n, D)
//!   → layers: pre-LN blocks as CLIP's ([`crate::tower::EncoderLayer`]; gelu_pytorch_tanh)
//!   → `post_layernorm`: the last hidden state
//!   → pooled = `head`: a learned probe attends to every token (`nn.MultiheadAttention`),
//!     then residual + MLP of its layer norm; the probe's output          (b, D)
//!
//! Weights: a `SiglipVisionModel.save_pretrained` folder (names as above) or a full SigLIP
//! checkpoint (`vision_model.` + name; the text tower's tensors are left out).

use crate::model::{layer_norm, LayerNorm, Linear, LinearVisitor};
use crate::processor;
use crate::tower::{
    self, Activation, Attention, BlockSizes, EncoderLayer, Keep, Mlp, PatchEmbed, TowerOutput,
};
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

/// `SiglipVisionConfig`, upstream names and defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SiglipVisionConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_channels: usize,
    pub image_size: usize,
    pub patch_size: usize,
    pub hidden_act: String,
    pub layer_norm_eps: f64,
    pub vision_use_head: bool,
}

impl Default for SiglipVisionConfig {
    fn default() -> Self {
        Self {
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            num_channels: 3,
            image_size: 224,
            patch_size: 16,
            hidden_act: "gelu_pytorch_tanh".into(),
            layer_norm_eps: 1e-6,
            vision_use_head: true,
        }
    }
}

/// SigLIP's image normalisation (`SiglipImageProcessor`'s `image_mean`, `image_std`).
pub use crate::processor::{HALF as SIGLIP_MEAN, HALF as SIGLIP_STD};

impl SiglipVisionConfig {
    /// Patches per side.
    pub fn grid(&self) -> usize {
        self.image_size / self.patch_size.max(1)
    }

    /// Checks what the model relies on (one line naming the field).
    pub fn validate(&self) -> std::result::Result<(), String> {
        let c = self;
        if c.patch_size == 0 || c.image_size < c.patch_size {
            return Err(format!(
                "image_size {} holds no patch of {}",
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

    fn block_sizes(&self) -> std::result::Result<BlockSizes, String> {
        Ok(BlockSizes {
            hidden: self.hidden_size,
            intermediate: self.intermediate_size,
            heads: self.num_attention_heads,
            eps: self.layer_norm_eps,
            act: Activation::from_hf(&self.hidden_act)?,
        })
    }
}

/// `SiglipMultiheadAttentionPoolingHead` (`head`).
#[derive(Debug, Clone)]
struct PoolingHead {
    probe: Tensor, // (1, 1, D)
    attention: Attention,
    layernorm: LayerNorm,
    mlp: Mlp,
}

impl PoolingHead {
    fn new(s: BlockSizes, vb: VarBuilder) -> Result<Self> {
        let d = s.hidden;
        Ok(Self {
            probe: vb.get((1, 1, d), "probe")?,
            attention: Attention::packed(d, s.heads, &vb.pp("attention"))?,
            layernorm: layer_norm(d, s.eps, vb.pp("layernorm"))?,
            mlp: Mlp::new(d, s.intermediate, s.act, &vb.pp("mlp"))?,
        })
    }

    fn for_each_linear(&mut self, f: &mut LinearVisitor) -> Result<()> {
        self.attention.for_each_linear(f)?;
        self.mlp.for_each_linear(f)
    }

    /// # Shapes
    /// (b, n, D) → (b, D)
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, _, d) = x.dims3()?;
        let probe = self.probe.broadcast_as((b, 1, d))?.contiguous()?;
        let h = self.attention.attend(&probe, x)?; // (b, 1, D)
        let h = (&h + self.mlp.forward(&self.layernorm.forward(&h)?)?)?;
        h.squeeze(1)
    }
}

/// `SiglipVisionModel`.
#[derive(Debug, Clone)]
pub struct SiglipVisionModel {
    pub cfg: SiglipVisionConfig,
    patch_embedding: PatchEmbed,
    position_embedding: Tensor, // (n, D)
    layers: Vec<EncoderLayer>,
    post_layernorm: LayerNorm,
    head: Option<PoolingHead>,
}

impl SiglipVisionModel {
    pub fn new(cfg: &SiglipVisionConfig, vb: VarBuilder) -> Result<Self> {
        cfg.validate().map_err(candle_core::Error::msg)?;
        let sizes = cfg.block_sizes().map_err(candle_core::Error::msg)?;
        let (d, c, p) = (cfg.hidden_size, cfg.num_channels, cfg.patch_size);
        let n = cfg.grid() * cfg.grid();
        let e = vb.pp("embeddings");
        let vl = vb.pp("encoder").pp("layers");
        Ok(Self {
            cfg: cfg.clone(),
            patch_embedding: PatchEmbed::new(d, c, p, true, &e.pp("patch_embedding"))?,
            position_embedding: e.pp("position_embedding").get((n, d), "weight")?,
            layers: (0..cfg.num_hidden_layers)
                .map(|i| EncoderLayer::new(sizes, vl.pp(i)))
                .collect::<Result<_>>()?,
            post_layernorm: layer_norm(d, cfg.layer_norm_eps, vb.pp("post_layernorm"))?,
            head: if cfg.vision_use_head {
                Some(PoolingHead::new(sizes, vb.pp("head"))?)
            } else {
                None
            },
        })
    }

    /// # Shapes
    /// (b, C, S, S) → (b, n, D): the patches in raster order, positions added.
    fn embeddings(&self, x: &Tensor) -> Result<Tensor> {
        let (_, _, h, w) = x.dims4()?;
        let s = self.cfg.image_size;
        if h != s || w != s {
            candle_core::bail!("the SigLIP tower reads {s}×{s} pictures; got {h}×{w}");
        }
        let (patches, _) = self.patch_embedding.forward(x)?;
        patches.broadcast_add(&self.position_embedding.unsqueeze(0)?)
    }

    /// Every hidden state, the last one through `post_layernorm`, and the pooled output
    /// (`None` for a config with `vision_use_head` false).
    pub fn forward_all(&self, x: &Tensor) -> Result<TowerOutput> {
        self.forward_states(x, Keep::All)
    }

    /// [`Self::forward_all`] keeping the hidden states `keep` asks for.
    fn forward_states(&self, x: &Tensor, keep: Keep) -> Result<TowerOutput> {
        let first = self.embeddings(x)?;
        let (kept, last) = tower::run_blocks(first, &self.layers, keep, EncoderLayer::forward)?;
        let last = self.post_layernorm.forward(&last)?;
        let pooled = match &self.head {
            Some(head) => Some(head.forward(&last)?),
            None => None,
        };
        Ok(TowerOutput {
            hidden_states: kept,
            last_hidden_state: last,
            pooled,
        })
    }
}

/// Where a full SigLIP checkpoint keeps its vision tower.
const FULL_PREFIX: &str = "vision_model.";

/// The tower's config from a `config.json` value: a `siglip_vision_model`'s own, or a full
/// `siglip` model's `vision_config`.
pub fn config_from_json(v: &serde_json::Value) -> std::result::Result<SiglipVisionConfig, String> {
    let v = match v.get("model_type").and_then(|t| t.as_str()) {
        Some("siglip") => v
            .get("vision_config")
            .ok_or("a `siglip` config.json without `vision_config`")?,
        Some("siglip_vision_model") => v,
        other => return Err(format!("model_type {other:?} is not SigLIP's")),
    };
    let c: SiglipVisionConfig =
        serde_json::from_value(v.clone()).map_err(|e| format!("not a SiglipVisionConfig ({e})"))?;
    c.validate()?;
    Ok(c)
}

/// Whether the file at `path` is a SigLIP `config.json` (the vision tower's or a full
/// model's; at most 1 MiB, else no).
pub fn is_siglip_config_file(path: &std::path::Path) -> bool {
    matches!(
        tower::model_type_of(path).as_deref(),
        Some("siglip" | "siglip_vision_model")
    )
}

/// The tower from a folder (`config.json` + `model.safetensors`) or a safetensors file with
/// its `config.json` beside it; every tensor of the tower used, a full checkpoint's others
/// left out.
pub fn load(
    source: &std::path::Path,
    device: &candle_core::Device,
) -> imgseq_core::Result<SiglipVisionModel> {
    tower::load_model(
        source,
        device,
        Some(FULL_PREFIX),
        "SigLIP tower",
        config_from_json,
        SiglipVisionModel::new,
        &[],
    )
}

/// The tower as a tokenizer: pictures at `image_size`, rescaled, mean = std = 0.5 → one
/// hidden state (no class token: every token is a patch).
pub type SiglipTower = tower::Tower<SiglipVisionModel>;

/// What [`SiglipTower`] of the model at `source` reads: its `preprocessor_config.json`'s
/// `SiglipImageProcessor` where it has one, else the released models' at the tower's
/// `image_size` (the whole picture resized to the square with Pillow's bicubic, no crop,
/// mean = std = 0.5) ([`crate::processor`]). A processor whose pictures are not
/// `image_size`² is refused.
pub fn pixels(
    cfg: &SiglipVisionConfig,
    source: &std::path::Path,
) -> imgseq_core::Result<tower::Pixels> {
    let side = cfg.image_size as u32;
    let p = processor::read_pixels(source, processor::Processor::siglip(side), None)?;
    processor::check_side(&p, side, source, "SigLIP vision tower")?;
    Ok(p)
}

impl tower::VisionModel for SiglipVisionModel {
    fn family(&self) -> &'static str {
        "siglip"
    }

    fn label(&self) -> String {
        "SigLIP vision tower (transformers SiglipVisionModel)".into()
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
        0
    }

    fn has_pooled(&self) -> bool {
        self.head.is_some()
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
            .try_for_each(|l| l.for_each_linear(f))?;
        match &mut self.head {
            Some(head) => head.for_each_linear(f),
            None => Ok(()),
        }
    }
}
