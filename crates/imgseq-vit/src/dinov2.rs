//! DINOv2's backbone as transformers has it (`Dinov2Model`, `models/dinov2/modeling_dinov2.py`,
//! and `Dinov2WithRegistersModel`): self-supervised features (ViT-L/14 at 224²: 16 × 16 = 256
//! patch tokens and the class token, 1,024 values each).
//!
//! pixels (b, 3, h, w), normalised with ImageNet's mean and std
//!   → embeddings: patch conv (p×p, stride p, with bias) → the class token first → add the
//!     learned positions, resized to the input's grid when it is not the config's (bicubic as
//!     `interpolate_pos_encoding`) → the register tokens after the class token (with
//!     registers)                                                    (b, 1 + r + n, D)
//!   → layers: `norm1` → attention → `layer_scale1` (× lambda1) → residual; `norm2` → MLP
//!     (fc1, GELU, fc2; or SwiGLU) → `layer_scale2` → residual
//!   → `layernorm`: the last hidden state; pooled = its class token.
//!
//! The mask token (for masked pre-training) is read and left unused. Weights: a
//! `save_pretrained` folder (`config.json` of `model_type` `dinov2` or
//! `dinov2_with_registers`, `model.safetensors` in the released names:
//! `encoder.layer.N.attention.attention.query`, `…attention.output.dense`, `…mlp.fc1`).

use crate::interpolate::{bicubic_aa_resize_grid, bicubic_resize_grid};
use crate::model::{layer_norm, LayerNorm, Linear, LinearVisitor};
use crate::processor;
use crate::tower::{self, Activation, Attention, Keep, Mlp, PatchEmbed, TowerOutput};
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

/// `Dinov2Config` (and `Dinov2WithRegistersConfig`), upstream names and defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Dinov2Config {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub mlp_ratio: f64,
    pub hidden_act: String,
    pub layer_norm_eps: f64,
    pub image_size: usize,
    pub patch_size: usize,
    pub num_channels: usize,
    pub qkv_bias: bool,
    pub layerscale_value: f64,
    pub use_swiglu_ffn: bool,
    pub use_mask_token: bool,
    /// Register tokens (`Dinov2WithRegistersConfig`; 0 for plain DINOv2).
    pub num_register_tokens: usize,
}

impl Default for Dinov2Config {
    fn default() -> Self {
        Self {
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            mlp_ratio: 4.0,
            hidden_act: "gelu".into(),
            layer_norm_eps: 1e-6,
            image_size: 224,
            patch_size: 14,
            num_channels: 3,
            qkv_bias: true,
            layerscale_value: 1.0,
            use_swiglu_ffn: false,
            use_mask_token: true,
            num_register_tokens: 0,
        }
    }
}

/// ImageNet's normalisation (`BitImageProcessor`'s `image_mean`, `image_std` for DINOv2).
pub use crate::processor::{IMAGENET_MEAN as DINOV2_MEAN, IMAGENET_STD as DINOV2_STD};

/// The side DINOv2's image processor crops to (`crop_size` 224 of every released
/// checkpoint; its config's `image_size`, 518, is the grid its positions were trained on).
pub const DINOV2_INPUT_SIZE: u32 = 224;

impl Dinov2Config {
    /// Patches per side of the config's position grid.
    pub fn grid(&self) -> usize {
        self.image_size / self.patch_size.max(1)
    }

    /// The MLP's hidden width: `int(hidden_size · mlp_ratio)`, SwiGLU's rounded as upstream.
    pub fn mlp_hidden(&self) -> usize {
        let h = (self.hidden_size as f64 * self.mlp_ratio) as usize;
        if self.use_swiglu_ffn {
            ((h as f64 * 2.0 / 3.0) as usize).div_ceil(8) * 8
        } else {
            h
        }
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
        if !c.use_swiglu_ffn {
            Activation::from_hf(&c.hidden_act)?;
        }
        if !(c.mlp_ratio > 0.0 && c.mlp_ratio <= 16.0) {
            return Err(format!(
                "mlp_ratio is {}; must be above 0, at most 16",
                c.mlp_ratio
            ));
        }
        let limits = [
            ("hidden_size", c.hidden_size, 8192),
            ("num_hidden_layers", c.num_hidden_layers, 128),
            ("num_channels", c.num_channels, 4),
            ("image_size", c.image_size, 4096),
        ];
        for (name, v, max) in limits {
            if v == 0 || v > max {
                return Err(format!("{name} is {v}; must be 1 to {max}"));
            }
        }
        if c.num_register_tokens > 64 {
            return Err(format!(
                "num_register_tokens is {}; must be 0 to 64",
                c.num_register_tokens
            ));
        }
        Ok(())
    }
}

/// The feed-forward part: fc1 → activation → fc2, or SwiGLU (`weights_in` cut in two,
/// silu(x₁)·x₂, `weights_out`).
#[derive(Debug, Clone)]
enum Ffn {
    Mlp(Mlp),
    SwiGlu {
        weights_in: Linear,
        weights_out: Linear,
    },
}

impl Ffn {
    fn for_each_linear(&mut self, f: &mut LinearVisitor) -> Result<()> {
        match self {
            Ffn::Mlp(m) => m.for_each_linear(f),
            Ffn::SwiGlu {
                weights_in,
                weights_out,
            } => {
                f(weights_in)?;
                f(weights_out)
            }
        }
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Ffn::Mlp(m) => m.forward(x),
            Ffn::SwiGlu {
                weights_in,
                weights_out,
            } => {
                let h = weights_in.forward(x)?;
                let half = h.dim(candle_core::D::Minus1)? / 2;
                let x1 = h.narrow(candle_core::D::Minus1, 0, half)?;
                let x2 = h.narrow(candle_core::D::Minus1, half, half)?;
                weights_out.forward(&(candle_nn::ops::silu(&x1)? * x2)?)
            }
        }
    }
}

/// One block (`encoder.layer.N`).
#[derive(Debug, Clone)]
struct Dinov2Layer {
    norm1: LayerNorm,
    attention: Attention,
    lambda1: Tensor, // (D)
    norm2: LayerNorm,
    ffn: Ffn,
    lambda2: Tensor, // (D)
}

impl Dinov2Layer {
    fn new(cfg: &Dinov2Config, vb: VarBuilder) -> Result<Self> {
        let (d, eps) = (cfg.hidden_size, cfg.layer_norm_eps);
        let names = [
            "attention.query",
            "attention.key",
            "attention.value",
            "output.dense",
        ];
        let m = cfg.mlp_hidden();
        let ffn = if cfg.use_swiglu_ffn {
            let v = vb.pp("mlp");
            Ffn::SwiGlu {
                weights_in: Linear::new(d, 2 * m, true, 0.02, v.pp("weights_in"))?,
                weights_out: Linear::new(m, d, true, 0.02, v.pp("weights_out"))?,
            }
        } else {
            let act = Activation::from_hf(&cfg.hidden_act).map_err(candle_core::Error::msg)?;
            Ffn::Mlp(Mlp::new(d, m, act, &vb.pp("mlp"))?)
        };
        Ok(Self {
            norm1: layer_norm(d, eps, vb.pp("norm1"))?,
            attention: Attention::new(
                d,
                cfg.num_attention_heads,
                names,
                cfg.qkv_bias,
                &vb.pp("attention"),
            )?,
            lambda1: vb.pp("layer_scale1").get(d, "lambda1")?,
            norm2: layer_norm(d, eps, vb.pp("norm2"))?,
            ffn,
            lambda2: vb.pp("layer_scale2").get(d, "lambda1")?,
        })
    }

    fn for_each_linear(&mut self, f: &mut LinearVisitor) -> Result<()> {
        self.attention.for_each_linear(f)?;
        self.ffn.for_each_linear(f)
    }

    /// # Shapes
    /// (b, n, D) → (b, n, D)
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let a = self.attention.forward(&self.norm1.forward(x)?)?;
        let x = (a.broadcast_mul(&self.lambda1)? + x)?;
        let f = self.ffn.forward(&self.norm2.forward(&x)?)?;
        f.broadcast_mul(&self.lambda2)? + x
    }
}

/// `Dinov2Model` / `Dinov2WithRegistersModel`.
#[derive(Debug, Clone)]
pub struct Dinov2Model {
    pub cfg: Dinov2Config,
    cls_token: Tensor,               // (1, 1, D)
    register_tokens: Option<Tensor>, // (1, r, D)
    position_embeddings: Tensor,     // (1, 1 + g·g, D)
    patch_embeddings: PatchEmbed,
    layers: Vec<Dinov2Layer>,
    layernorm: LayerNorm,
}

impl Dinov2Model {
    pub fn new(cfg: &Dinov2Config, vb: VarBuilder) -> Result<Self> {
        cfg.validate().map_err(candle_core::Error::msg)?;
        let (d, c, p) = (cfg.hidden_size, cfg.num_channels, cfg.patch_size);
        let n = cfg.grid() * cfg.grid();
        let e = vb.pp("embeddings");
        let r = cfg.num_register_tokens;
        let vl = vb.pp("encoder").pp("layer");
        Ok(Self {
            cfg: cfg.clone(),
            cls_token: e.get((1, 1, d), "cls_token")?,
            register_tokens: if r > 0 {
                Some(e.get((1, r, d), "register_tokens")?)
            } else {
                None
            },
            position_embeddings: e.get((1, n + 1, d), "position_embeddings")?,
            patch_embeddings: PatchEmbed::new(
                d,
                c,
                p,
                true,
                &e.pp("patch_embeddings").pp("projection"),
            )?,
            layers: (0..cfg.num_hidden_layers)
                .map(|i| Dinov2Layer::new(cfg, vl.pp(i)))
                .collect::<Result<_>>()?,
            layernorm: layer_norm(d, cfg.layer_norm_eps, vb.pp("layernorm"))?,
        })
    }

    /// The positions for a `gh`×`gw` patch grid (1, 1 + gh·gw, D): the config's own when the
    /// grid is its; else its patch positions resized bicubically (align_corners false; with
    /// antialiasing for DINOv2 with registers, as each model's `interpolate_pos_encoding`),
    /// the class position kept.
    pub fn positions(&self, gh: usize, gw: usize) -> Result<Tensor> {
        let g = self.cfg.grid();
        if (gh, gw) == (g, g) {
            return Ok(self.position_embeddings.clone());
        }
        let d = self.cfg.hidden_size;
        let cls = self.position_embeddings.narrow(1, 0, 1)?;
        let grid = self
            .position_embeddings
            .narrow(1, 1, g * g)?
            .reshape((g, g, d))?;
        let resized = if self.register_tokens.is_some() {
            bicubic_aa_resize_grid(&grid, gh, gw)?
        } else {
            bicubic_resize_grid(&grid, gh, gw)?
        };
        Tensor::cat(&[&cls, &resized.reshape((1, gh * gw, d))?], 1)
    }

    /// # Shapes
    /// (b, C, h, w) → (b, 1 + r + (h/p)·(w/p), D)
    fn embeddings(&self, x: &Tensor) -> Result<Tensor> {
        let b = x.dim(0)?;
        let d = self.cfg.hidden_size;
        let (patches, (gh, gw)) = self.patch_embeddings.forward(x)?;
        let cls = self.cls_token.broadcast_as((b, 1, d))?;
        let x = Tensor::cat(&[&cls, &patches], 1)?.broadcast_add(&self.positions(gh, gw)?)?;
        match &self.register_tokens {
            Some(r) => {
                let r = r.broadcast_as((b, r.dim(1)?, d))?;
                let n = x.dim(1)?;
                Tensor::cat(&[&x.narrow(1, 0, 1)?, &r, &x.narrow(1, 1, n - 1)?], 1)
            }
            None => Ok(x),
        }
    }

    /// Every hidden state, the last one through `layernorm`, and the pooled output (the
    /// class token of the last).
    pub fn forward_all(&self, x: &Tensor) -> Result<TowerOutput> {
        self.forward_states(x, Keep::All)
    }

    /// [`Self::forward_all`] keeping the hidden states `keep` asks for.
    fn forward_states(&self, x: &Tensor, keep: Keep) -> Result<TowerOutput> {
        let first = self.embeddings(x)?;
        let (kept, last) = tower::run_blocks(first, &self.layers, keep, Dinov2Layer::forward)?;
        let last = self.layernorm.forward(&last)?;
        let pooled = last.narrow(1, 0, 1)?.squeeze(1)?;
        Ok(TowerOutput {
            hidden_states: kept,
            last_hidden_state: last,
            pooled: Some(pooled),
        })
    }
}

/// The config from a `config.json` value of `model_type` `dinov2` or `dinov2_with_registers`
/// (4 registers unless it says otherwise).
pub fn config_from_json(v: &serde_json::Value) -> std::result::Result<Dinov2Config, String> {
    let registers = match v.get("model_type").and_then(|t| t.as_str()) {
        Some("dinov2") => false,
        Some("dinov2_with_registers") => true,
        other => return Err(format!("model_type {other:?} is not DINOv2's")),
    };
    let mut c: Dinov2Config =
        serde_json::from_value(v.clone()).map_err(|e| format!("not a Dinov2Config ({e})"))?;
    if !registers {
        c.num_register_tokens = 0;
    } else if v.get("num_register_tokens").is_none() {
        c.num_register_tokens = 4;
    }
    c.validate()?;
    Ok(c)
}

/// Whether the file at `path` is a DINOv2 `config.json` (at most 1 MiB, else no).
pub fn is_dinov2_config_file(path: &std::path::Path) -> bool {
    matches!(
        tower::model_type_of(path).as_deref(),
        Some("dinov2" | "dinov2_with_registers")
    )
}

/// The model from a folder (`config.json` + `model.safetensors`) or a safetensors file with
/// its `config.json` beside it; every tensor used but the mask token.
pub fn load(
    source: &std::path::Path,
    device: &candle_core::Device,
) -> imgseq_core::Result<Dinov2Model> {
    tower::load_model(
        source,
        device,
        None,
        "DINOv2 model",
        config_from_json,
        Dinov2Model::new,
        &["embeddings.mask_token"],
    )
}

/// The model as a tokenizer: pictures at the input side (the processor's crop, 224, unless
/// asked), rescaled, ImageNet's mean and std → one hidden state, class token (and registers)
/// first.
pub type Dinov2Tower = tower::Tower<Dinov2Model>;

/// What [`Dinov2Tower`] of the model at `source` reads: its `preprocessor_config.json`'s
/// `BitImageProcessor` where it has one, else the released models' (shortest edge 256,
/// Pillow bicubic, centre crop 224, ImageNet's mean and std) ([`crate::processor`]); at
/// `size` when asked, the shortest edge in the processor's proportion (518: 592) and the
/// positions resized to the grid.
pub fn pixels(source: &std::path::Path, size: Option<u32>) -> imgseq_core::Result<tower::Pixels> {
    processor::read_pixels(
        source,
        processor::Processor::dinov2(DINOV2_INPUT_SIZE),
        size,
    )
}

impl tower::VisionModel for Dinov2Model {
    fn family(&self) -> &'static str {
        "dinov2"
    }

    fn label(&self) -> String {
        if self.cfg.num_register_tokens > 0 {
            "DINOv2 with registers (transformers Dinov2WithRegistersModel)".into()
        } else {
            "DINOv2 (transformers Dinov2Model)".into()
        }
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
        1 + self.cfg.num_register_tokens
    }

    fn forward_kept(&self, x: &Tensor, keep: Keep) -> Result<TowerOutput> {
        self.forward_states(x, keep)
    }

    fn patch_projection(&self) -> &Linear {
        self.patch_embeddings.projection()
    }

    fn for_each_linear(&mut self, f: &mut LinearVisitor) -> Result<()> {
        f(self.patch_embeddings.projection_mut())?;
        self.layers
            .iter_mut()
            .try_for_each(|l| l.for_each_linear(f))
    }
}
