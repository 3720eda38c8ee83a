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

use crate::model::{layer_norm, LayerNorm, Linear};
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;
use imgseq_kernels::ops;
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
pub const CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
pub const CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_6, 0.275_777_1];

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
        if !matches!(c.hidden_act.as_str(), "quick_gelu" | "gelu") {
            return Err(format!(
                "hidden_act `{}`: imgseq runs quick_gelu and gelu",
                c.hidden_act
            ));
        }
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

/// One pre-LN block (`encoder.layers.N`).
#[derive(Debug, Clone)]
struct ClipLayer {
    layer_norm1: LayerNorm,
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    out_proj: Linear,
    layer_norm2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
    heads: usize,
    quick_gelu: bool,
}

impl ClipLayer {
    fn new(cfg: &ClipVisionConfig, vb: VarBuilder) -> Result<Self> {
        let (h, m, eps) = (cfg.hidden_size, cfg.intermediate_size, cfg.layer_norm_eps);
        let a = vb.pp("self_attn");
        let lin = |i, o, vb| Linear::new(i, o, true, 0.02, vb);
        Ok(Self {
            layer_norm1: layer_norm(h, eps, vb.pp("layer_norm1"))?,
            q_proj: lin(h, h, a.pp("q_proj"))?,
            k_proj: lin(h, h, a.pp("k_proj"))?,
            v_proj: lin(h, h, a.pp("v_proj"))?,
            out_proj: lin(h, h, a.pp("out_proj"))?,
            layer_norm2: layer_norm(h, eps, vb.pp("layer_norm2"))?,
            fc1: lin(h, m, vb.pp("mlp").pp("fc1"))?,
            fc2: lin(m, h, vb.pp("mlp").pp("fc2"))?,
            heads: cfg.num_attention_heads,
            quick_gelu: cfg.hidden_act == "quick_gelu",
        })
    }

    /// # Shapes
    /// (b, n, D) → (b, n, D)
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, n, d) = x.dims3()?;
        let hd = d / self.heads;
        let y = self.layer_norm1.forward(x)?;
        let heads = |t: Tensor| t.reshape((b, n, self.heads, hd))?.transpose(1, 2);
        let q = heads(self.q_proj.forward(&y)?)?;
        let k = heads(self.k_proj.forward(&y)?)?;
        let v = heads(self.v_proj.forward(&y)?)?;
        let ctx = ops::attention(&q, &k, &v, 1.0 / (hd as f64).sqrt())?; // (b, heads, n, hd)
        let ctx = ctx.transpose(1, 2)?.reshape((b, n, d))?;
        let x = (x + self.out_proj.forward(&ctx)?)?;
        let h = self.fc1.forward(&self.layer_norm2.forward(&x)?)?; // (b, n, m)
        let h = if self.quick_gelu {
            // x · σ(1.702 x)
            (&h * candle_nn::ops::sigmoid(&(&h * 1.702)?)?)?
        } else {
            ops::gelu(&h)?
        };
        x + self.fc2.forward(&h)?
    }
}

/// `CLIPVisionModel`.
#[derive(Debug, Clone)]
pub struct ClipVisionModel {
    pub cfg: ClipVisionConfig,
    class_embedding: Tensor,    // (D)
    patch_embedding: Tensor,    // (D, C·p·p)
    position_embedding: Tensor, // (1 + n, D)
    pre_layrnorm: LayerNorm,
    layers: Vec<ClipLayer>,
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
        Ok(Self {
            cfg: cfg.clone(),
            class_embedding: e.get(d, "class_embedding")?,
            patch_embedding: e
                .pp("patch_embedding")
                .get((d, c, p, p), "weight")?
                .reshape((d, c * p * p))?,
            position_embedding: e.pp("position_embedding").get((n + 1, d), "weight")?,
            pre_layrnorm: layer_norm(d, cfg.layer_norm_eps, vb.pp("pre_layrnorm"))?,
            layers: (0..cfg.num_hidden_layers)
                .map(|i| ClipLayer::new(cfg, vl.pp(i)))
                .collect::<Result<_>>()?,
            post_layernorm: layer_norm(d, cfg.layer_norm_eps, vb.pp("post_layernorm"))?,
        })
    }

    /// # Shapes
    /// (b, C, S, S) → (b, 1 + n, D): the class embedding, then the patches in raster order,
    /// positions added.
    fn embeddings(&self, x: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = x.dims4()?;
        let p = self.cfg.patch_size;
        let s = self.cfg.image_size;
        if h != s || w != s {
            candle_core::bail!("the CLIP tower reads {s}×{s} pictures; got {h}×{w}");
        }
        let g = s / p;
        let patches = x
            .reshape((b, c, g, p, g, p))?
            .permute((0, 2, 4, 1, 3, 5))?
            .contiguous()?
            .reshape((b, g * g, c * p * p))?;
        let patches = ops::linear(&patches, &self.patch_embedding, None)?; // (b, n, D)
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
        let mut h = vec![self.pre_layrnorm.forward(&self.embeddings(x)?)?];
        for layer in &self.layers {
            let next = layer.forward(h.last().expect("non-empty"))?;
            h.push(next);
        }
        let last = h.last().expect("non-empty");
        let pooled = self
            .post_layernorm
            .forward(&last.narrow(1, 0, 1)?.squeeze(1)?)?;
        Ok(ClipOutput {
            hidden_states: h,
            pooled,
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
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() < 1 << 20)
        && std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|v| is_clip_config(&v))
}

/// The tower from a folder (`config.json` + `model.safetensors`) or a safetensors file with
/// its `config.json` beside it; every tensor of the tower used, a full checkpoint's others
/// left out.
pub fn load(
    source: &std::path::Path,
    device: &candle_core::Device,
) -> imgseq_core::Result<ClipVisionModel> {
    use imgseq_core::Error;
    let (file, cfg_path) = if source.is_dir() {
        (source.join("model.safetensors"), source.join("config.json"))
    } else {
        let dir = source.parent().unwrap_or(std::path::Path::new("."));
        (source.to_path_buf(), dir.join("config.json"))
    };
    let bytes = imgseq_core::weights::read_regular_file(&cfg_path, 1 << 20, "a config")?;
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::format(&cfg_path, format!("not valid JSON ({e})")))?;
    let cfg = config_from_json(&v).map_err(|m| Error::format(&cfg_path, m))?;
    let mut map = imgseq_core::weights::load_tensors(&file, device)?;
    if map.keys().any(|k| k.starts_with(FULL_PREFIX)) {
        map = map
            .into_iter()
            .filter_map(|(k, t)| k.strip_prefix(FULL_PREFIX).map(|s| (s.to_string(), t)))
            .collect();
    }
    let w = imgseq_core::weights::AuditedWeights::new(&file, map);
    let model = ClipVisionModel::new(&cfg, w.var_builder(candle_core::DType::F32, device))
        .map_err(|e| {
            Error::format(
                &file,
                format!("not the CLIP tower its config describes: {e}"),
            )
        })?;
    w.finish(&[])?;
    Ok(model)
}

/// The tower as a tokenizer: pictures (CLIP's processor: shorter side resized, centre crop,
/// [0, 1], CLIP's mean and std) → one hidden state, class token first.
pub struct ClipTower {
    pub model: ClipVisionModel,
    /// Which hidden state: −1 the last (transformers' `last_hidden_state`), −2 LLaVA's.
    pub layer: isize,
    /// The patch tokens only (LLaVA's `patch` feature), without the class token.
    pub patches_only: bool,
}

impl ClipTower {
    /// Refuses a layer the tower does not have (one line naming the range).
    pub fn check_layer(&self) -> imgseq_core::Result<()> {
        self.index(self.model.cfg.num_hidden_layers + 1).map(|_| ())
    }

    /// The hidden state `layer` names (from the end when negative), of `n` states.
    fn index(&self, n: usize) -> imgseq_core::Result<usize> {
        let n = n as isize;
        let i = if self.layer < 0 {
            n + self.layer
        } else {
            self.layer
        };
        if !(0..n).contains(&i) {
            return Err(imgseq_core::Error::invalid(format!(
                "layer {}: the tower has hidden states 0 to {} (−1 the last)",
                self.layer,
                n - 1
            )));
        }
        Ok(i as usize)
    }

    /// The chosen hidden state, with or without the class token.
    fn pick(&self, out: &ClipOutput) -> imgseq_core::Result<Tensor> {
        let h = &out.hidden_states[self.index(out.hidden_states.len())?];
        let n = h.dim(1)?;
        Ok(if self.patches_only {
            h.narrow(1, 1, n - 1)?
        } else {
            h.clone()
        })
    }
}

impl imgseq_core::tokenizer::Tokenizer for ClipTower {
    fn label(&self) -> String {
        "CLIP vision tower (transformers CLIPVisionModel)".into()
    }

    fn describe(&self) -> imgseq_core::tokenizer::Description {
        use imgseq_core::tokenizer::{Description, OutputKind, OutputSpec};
        let c = &self.model.cfg;
        let mut config = serde_json::to_value(c).unwrap_or_default();
        config["layer"] = serde_json::json!(self.layer);
        config["patches_only"] = serde_json::json!(self.patches_only);
        let tokens = c.grid() * c.grid() + usize::from(!self.patches_only);
        let mut d = Description::basic(
            "clip",
            &self.label(),
            self.input(),
            OutputSpec {
                kind: OutputKind::Embeddings,
                shape: vec![tokens, c.hidden_size],
                codebook_size: None,
                scales: None,
            },
        );
        d.config = config;
        d
    }

    fn input(&self) -> imgseq_core::input::InputSpec {
        imgseq_core::input::InputSpec {
            size: self.model.cfg.image_size as u32,
            crop: imgseq_core::input::Crop::ShorterSide,
            channels: 3,
            range: imgseq_core::image_io::PixelRange::ZeroOne,
        }
    }

    fn input_tensor(&self, imgs: &[image::RgbImage]) -> imgseq_core::Result<Tensor> {
        let x = self.input().to_tensor(imgs)?; // (b, 3, S, S) in [0, 1]
        let dev = x.device().clone();
        let mean = Tensor::from_slice(&CLIP_MEAN, (1, 3, 1, 1), &dev)?;
        let std = Tensor::from_slice(&CLIP_STD, (1, 3, 1, 1), &dev)?;
        Ok(x.broadcast_sub(&mean)?.broadcast_div(&std)?)
    }

    fn encode(&self, x: &Tensor) -> imgseq_core::Result<imgseq_core::tokenizer::Encoded> {
        let out = self.model.forward_all(x)?;
        let h = self.pick(&out)?;
        let (n, tokens, dim) = h.dims3()?;
        Ok(imgseq_core::tokenizer::Encoded::Embeddings(
            imgseq_core::tokenizer::Embeddings {
                n,
                tokens,
                dim,
                data: h.flatten_all()?.to_vec1::<f32>()?,
            },
        ))
    }
}
