//! What the vision towers ([`crate::clip`], [`crate::siglip`], [`crate::dinov2`]) share: the
//! MLP activations by transformers' names, multi-head attention, the pre-LN encoder block
//! CLIP and SigLIP name alike, the patch conv, reading a model folder or a full checkpoint,
//! and the tower as a tokenizer ([`Tower`]: the hidden state chosen, with or without the
//! tokens in front of the patches).
//!
//! Every block runs on the project's kernels (`ops::linear`, `ops::attention`, `ops::gelu`,
//! the layer-norm kernel).

use crate::model::{layer_norm, LayerNorm, Linear};
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;
use imgseq_core::input::Crop;
use imgseq_kernels::ops;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// An MLP's activation, by transformers' `hidden_act` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `quick_gelu`: x · σ(1.702 x) (OpenAI's CLIP).
    QuickGelu,
    /// `gelu`: the exact (erf) form.
    Gelu,
    /// `gelu_pytorch_tanh` (and `gelu_new`, the same formula): PyTorch's
    /// `gelu(approximate="tanh")`, 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))) (SigLIP's).
    GeluTanh,
}

impl Activation {
    /// The activation transformers' `ACT2FN[name]` is, where imgseq runs it.
    pub fn from_hf(name: &str) -> std::result::Result<Self, String> {
        match name {
            "quick_gelu" => Ok(Self::QuickGelu),
            "gelu" => Ok(Self::Gelu),
            "gelu_pytorch_tanh" | "gelu_new" => Ok(Self::GeluTanh),
            other => Err(format!(
                "hidden_act `{other}`: imgseq runs quick_gelu, gelu and gelu_pytorch_tanh"
            )),
        }
    }

    pub fn forward(self, x: &Tensor) -> Result<Tensor> {
        match self {
            Self::QuickGelu => x * candle_nn::ops::sigmoid(&(x * 1.702)?)?,
            Self::Gelu => ops::gelu(x),
            Self::GeluTanh => x.gelu(),
        }
    }
}

/// Multi-head attention with separate q, k, v and output projections (what every tower has;
/// `nn.MultiheadAttention`'s packed `in_proj` is cut into the three).
#[derive(Debug, Clone)]
pub struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    heads: usize,
}

impl Attention {
    /// The projections under `vb` by the names `[q, k, v, out]`, each `dim`×`dim` with a bias
    /// (q, k and v without one when `qkv_bias` is false).
    pub fn new(
        dim: usize,
        heads: usize,
        names: [&str; 4],
        qkv_bias: bool,
        vb: &VarBuilder,
    ) -> Result<Self> {
        let lin = |name: &str, bias| Linear::new(dim, dim, bias, 0.02, vb.pp(name));
        Ok(Self {
            q: lin(names[0], qkv_bias)?,
            k: lin(names[1], qkv_bias)?,
            v: lin(names[2], qkv_bias)?,
            out: lin(names[3], true)?,
            heads,
        })
    }

    /// `nn.MultiheadAttention` under `vb`: `in_proj_weight` (3·dim, dim) and `in_proj_bias`
    /// cut into q, k, v; `out_proj`.
    pub fn packed(dim: usize, heads: usize, vb: &VarBuilder) -> Result<Self> {
        let w = vb.get((3 * dim, dim), "in_proj_weight")?;
        let b = vb.get(3 * dim, "in_proj_bias")?;
        let part = |i: usize| -> Result<Linear> {
            Ok(Linear::from_weights(
                w.narrow(0, i * dim, dim)?.contiguous()?,
                Some(b.narrow(0, i * dim, dim)?.contiguous()?),
            ))
        };
        Ok(Self {
            q: part(0)?,
            k: part(1)?,
            v: part(2)?,
            out: Linear::new(dim, dim, true, 0.02, vb.pp("out_proj"))?,
            heads,
        })
    }

    /// Self-attention.
    ///
    /// # Shapes
    /// (b, n, D) → (b, n, D)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.attend(x, x)
    }

    /// Queries from `x`, keys and values from `context`, softmax(q·kᵀ/√d)·v per head.
    ///
    /// # Shapes
    /// x: (b, n, D), context: (b, m, D) → (b, n, D)
    pub fn attend(&self, x: &Tensor, context: &Tensor) -> Result<Tensor> {
        let (b, n, d) = x.dims3()?;
        let m = context.dim(1)?;
        let hd = d / self.heads;
        let split = |t: Tensor, len| t.reshape((b, len, self.heads, hd))?.transpose(1, 2);
        let q = split(self.q.forward(x)?, n)?;
        let k = split(self.k.forward(context)?, m)?;
        let v = split(self.v.forward(context)?, m)?;
        let ctx = ops::attention(&q, &k, &v, 1.0 / (hd as f64).sqrt())?; // (b, heads, n, hd)
        let ctx = ctx.transpose(1, 2)?.reshape((b, n, d))?;
        self.out.forward(&ctx)
    }
}

/// fc1 → activation → fc2.
#[derive(Debug, Clone)]
pub struct Mlp {
    fc1: Linear,
    fc2: Linear,
    act: Activation,
}

impl Mlp {
    /// `fc1` (dim → hidden) and `fc2` (hidden → dim) under `vb`.
    pub fn new(dim: usize, hidden: usize, act: Activation, vb: &VarBuilder) -> Result<Self> {
        Ok(Self {
            fc1: Linear::new(dim, hidden, true, 0.02, vb.pp("fc1"))?,
            fc2: Linear::new(hidden, dim, true, 0.02, vb.pp("fc2"))?,
            act,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.fc2.forward(&self.act.forward(&self.fc1.forward(x)?)?)
    }
}

/// The sizes of a pre-LN encoder block.
#[derive(Debug, Clone, Copy)]
pub struct BlockSizes {
    pub hidden: usize,
    pub intermediate: usize,
    pub heads: usize,
    pub eps: f64,
    pub act: Activation,
}

/// The pre-LN encoder block as CLIP and SigLIP name it (`encoder.layers.N`): `layer_norm1` →
/// `self_attn` (q, k, v, out projections) → residual; `layer_norm2` → `mlp` (fc1, fc2) →
/// residual.
#[derive(Debug, Clone)]
pub struct EncoderLayer {
    layer_norm1: LayerNorm,
    self_attn: Attention,
    layer_norm2: LayerNorm,
    mlp: Mlp,
}

impl EncoderLayer {
    pub fn new(s: BlockSizes, vb: VarBuilder) -> Result<Self> {
        let names = ["q_proj", "k_proj", "v_proj", "out_proj"];
        Ok(Self {
            layer_norm1: layer_norm(s.hidden, s.eps, vb.pp("layer_norm1"))?,
            self_attn: Attention::new(s.hidden, s.heads, names, true, &vb.pp("self_attn"))?,
            layer_norm2: layer_norm(s.hidden, s.eps, vb.pp("layer_norm2"))?,
            mlp: Mlp::new(s.hidden, s.intermediate, s.act, &vb.pp("mlp"))?,
        })
    }

    /// # Shapes
    /// (b, n, D) → (b, n, D)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = (x + self.self_attn.forward(&self.layer_norm1.forward(x)?)?)?;
        &x + self.mlp.forward(&self.layer_norm2.forward(&x)?)?
    }
}

/// A conv whose kernel and stride are the patch side (`padding="valid"`), computed as a
/// linear map of each flattened patch.
#[derive(Debug, Clone)]
pub struct PatchEmbed {
    weight: Tensor, // (D, C·p·p)
    bias: Option<Tensor>,
    channels: usize,
    patch: usize,
}

impl PatchEmbed {
    /// The conv's `weight` (D, C, p, p) (and `bias` (D)) under `vb`.
    pub fn new(
        dim: usize,
        channels: usize,
        patch: usize,
        bias: bool,
        vb: &VarBuilder,
    ) -> Result<Self> {
        let (c, p) = (channels, patch);
        Ok(Self {
            weight: vb
                .get((dim, c, p, p), "weight")?
                .reshape((dim, c * p * p))?,
            bias: if bias {
                Some(vb.get(dim, "bias")?)
            } else {
                None
            },
            channels,
            patch,
        })
    }

    /// The patches in raster order and the grid (rows, columns); rows and columns past the
    /// last whole patch are left out, as the conv does.
    ///
    /// # Shapes
    /// (b, C, h, w) → (b, (h/p)·(w/p), D)
    pub fn forward(&self, x: &Tensor) -> Result<(Tensor, (usize, usize))> {
        let (b, c, h, w) = x.dims4()?;
        let p = self.patch;
        if c != self.channels || h < p || w < p {
            candle_core::bail!(
                "the patch conv reads {} channels of at least {p}×{p}; got {c} of {h}×{w}",
                self.channels
            );
        }
        let (gh, gw) = (h / p, w / p);
        let x = x.narrow(2, 0, gh * p)?.narrow(3, 0, gw * p)?;
        let patches = x
            .reshape((b, c, gh, p, gw, p))?
            .permute((0, 2, 4, 1, 3, 5))? // (b, gh, gw, c, p, p)
            .contiguous()?
            .reshape((b, gh * gw, c * p * p))?;
        Ok((
            ops::linear(&patches, &self.weight, self.bias.as_ref())?,
            (gh, gw),
        ))
    }
}

/// A model folder's or a weights file's `(weights, config.json)`: `model.safetensors` and
/// `config.json` inside a folder; the file and the `config.json` beside it.
pub fn files_of(source: &Path) -> (PathBuf, PathBuf) {
    if source.is_dir() {
        (source.join("model.safetensors"), source.join("config.json"))
    } else {
        (source.to_path_buf(), source.with_file_name("config.json"))
    }
}

/// The `model_type` of the `config.json` at `path` (at most 1 MiB; `None` when it is no
/// readable JSON object with one): how a family tells a tower's folder is its own.
pub fn model_type_of(path: &Path) -> Option<String> {
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() < 1 << 20) {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    Some(v.get("model_type")?.as_str()?.to_string())
}

/// The JSON of the config at `path` (one-line errors naming the file).
pub fn read_config(path: &Path) -> imgseq_core::Result<serde_json::Value> {
    let bytes = imgseq_core::weights::read_regular_file(path, 1 << 20, "a config")?;
    serde_json::from_slice(&bytes)
        .map_err(|e| imgseq_core::Error::format(path, format!("not valid JSON ({e})")))
}

/// The tensors of `file`; those of a full checkpoint (names starting `prefix`, e.g. a CLIP
/// or SigLIP model's `vision_model.`) with the prefix taken off and the others left out.
pub fn tower_tensors(
    file: &Path,
    prefix: &str,
    device: &candle_core::Device,
) -> imgseq_core::Result<HashMap<String, Tensor>> {
    let map = imgseq_core::weights::load_tensors(file, device)?;
    if !map.keys().any(|k| k.starts_with(prefix)) {
        return Ok(map);
    }
    Ok(map
        .into_iter()
        .filter_map(|(k, t)| k.strip_prefix(prefix).map(|s| (s.to_string(), t)))
        .collect())
}

/// The loading every tower shares, from a folder (`config.json` + `model.safetensors`) or a
/// safetensors file with its `config.json` beside it: the config parsed by `parse`, the
/// tensors (a full checkpoint's under `prefix` with it taken off, [`tower_tensors`]; `None`:
/// the file's as they are), the model built by `build` (`what` names it in errors), and every
/// tensor used but those in `unused`.
pub fn load_model<C, M>(
    source: &Path,
    device: &candle_core::Device,
    prefix: Option<&str>,
    what: &str,
    parse: impl FnOnce(&serde_json::Value) -> std::result::Result<C, String>,
    build: impl FnOnce(&C, VarBuilder) -> Result<M>,
    unused: &[&str],
) -> imgseq_core::Result<M> {
    use imgseq_core::Error;
    let (file, cfg_path) = files_of(source);
    let v = read_config(&cfg_path)?;
    let cfg = parse(&v).map_err(|m| Error::format(&cfg_path, m))?;
    let map = match prefix {
        Some(p) => tower_tensors(&file, p, device)?,
        None => imgseq_core::weights::load_tensors(&file, device)?,
    };
    let w = imgseq_core::weights::AuditedWeights::new(&file, map);
    let model = build(&cfg, w.var_builder(candle_core::DType::F32, device))
        .map_err(|e| Error::format(&file, format!("not the {what} its config describes: {e}")))?;
    w.finish(unused)?;
    Ok(model)
}

/// What a forward pass of a tower gives.
pub struct TowerOutput {
    /// transformers' `hidden_states`: the input of the first block and every block's
    /// output, `num_hidden_layers + 1` tensors (b, tokens, D).
    pub hidden_states: Vec<Tensor>,
    /// transformers' `last_hidden_state` (for SigLIP and DINOv2 the last state through the
    /// final layer norm; for CLIP the last state itself).
    pub last_hidden_state: Tensor,
    /// transformers' `pooler_output` (b, D), where the model has one.
    pub pooled: Option<Tensor>,
}

/// How a tower's pictures are made: `size`×`size` by `crop`, each byte times `rescale` (in
/// f64, then f32), normalised by `mean` and `std` per channel (in f32): transformers' image
/// processors' steps ([`crate::processor`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pixels {
    pub size: u32,
    pub crop: Crop,
    pub rescale: f64,
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

impl Pixels {
    /// The tensor value of byte `v` of channel `c` (0, 1, 2): numpy's
    /// `(astype(float64) · rescale).astype(float32)`, then `(x − mean) / std` in f32.
    pub fn value(&self, c: usize, v: u8) -> f32 {
        ((v as f64 * self.rescale) as f32 - self.mean[c]) / self.std[c]
    }

    /// Pictures of one size as the tower's input.
    ///
    /// # Shapes
    /// n pictures of h×w → (n, 3, h, w)
    pub fn tensor(&self, imgs: &[image::RgbImage]) -> imgseq_core::Result<Tensor> {
        let lut: Vec<[f32; 256]> = (0..3)
            .map(|c| std::array::from_fn(|v| self.value(c, v as u8)))
            .collect();
        let (w, h) = imgs.first().map_or((0, 0), |i| i.dimensions());
        let mut data = Vec::with_capacity(imgs.len() * 3 * (w * h) as usize);
        for img in imgs {
            if img.dimensions() != (w, h) {
                return Err(imgseq_core::Error::invalid(format!(
                    "pictures of {}x{} and {w}x{h} in one batch",
                    img.width(),
                    img.height()
                )));
            }
            for (c, lut) in lut.iter().enumerate() {
                data.extend(img.pixels().map(|p| lut[p.0[c] as usize]));
            }
        }
        Ok(Tensor::from_vec(
            data,
            (imgs.len(), 3, h as usize, w as usize),
            &candle_core::Device::Cpu,
        )?)
    }
}

/// A vision tower as [`Tower`] runs it.
pub trait VisionModel: Send + Sync {
    /// Its registry name (`clip`, `siglip`, `dinov2`).
    fn family(&self) -> &'static str;
    /// Its name as users read it.
    fn label(&self) -> String;
    /// Its config as a JSON value (upstream names).
    fn config_value(&self) -> serde_json::Value;
    fn hidden_size(&self) -> usize;
    fn num_hidden_layers(&self) -> usize;
    fn patch_size(&self) -> usize;
    /// Tokens in front of the patches (a class token, registers).
    fn prefix_tokens(&self) -> usize;
    /// Whether [`TowerOutput::pooled`] is there (SigLIP without its head has none).
    fn has_pooled(&self) -> bool {
        true
    }
    /// The hidden states, the last (normed) state and the pooled output of normalised
    /// pixels (b, C, S, S).
    fn forward_tower(&self, x: &Tensor) -> Result<TowerOutput>;
}

/// A tower as a tokenizer: pictures (its processor's normalisation) → one hidden state.
pub struct Tower<M> {
    pub model: M,
    /// Which state: `None` transformers' `last_hidden_state`; `Some(k)` its
    /// `hidden_states[k]` (from the end when negative: −1 the last block's output, −2 LLaVA's
    /// `mm_vision_select_layer`).
    pub layer: Option<isize>,
    /// The patch tokens only (LLaVA's `patch` feature): the class token and registers left
    /// out.
    pub patches_only: bool,
    /// transformers' `pooler_output` instead of a hidden state: one token per picture.
    pub pooled: bool,
    /// The pictures the tower reads.
    pub pixels: Pixels,
}

impl<M: VisionModel> Tower<M> {
    /// Refuses a layer the tower does not have (one line naming the range), and the pooled
    /// output with a layer or patches chosen, or where the tower has none.
    pub fn check_layer(&self) -> imgseq_core::Result<()> {
        if self.pooled && (self.layer.is_some() || self.patches_only) {
            return Err(imgseq_core::Error::invalid(
                "pooled: the tower's pooled output is one vector; it takes no layer or \
                 patches_only",
            ));
        }
        if self.pooled && !self.model.has_pooled() {
            return Err(imgseq_core::Error::invalid(format!(
                "pooled: this {} has no pooled output (its config has no pooling head)",
                self.model.label()
            )));
        }
        match self.layer {
            Some(l) => hidden_state_index(l, self.model.num_hidden_layers() + 1).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Tokens per picture.
    pub fn tokens(&self) -> usize {
        if self.pooled {
            return 1;
        }
        let g = self.pixels.size as usize / self.model.patch_size().max(1);
        g * g
            + if self.patches_only {
                0
            } else {
                self.model.prefix_tokens()
            }
    }

    /// The chosen state of a forward pass, with or without the tokens in front (the pooled
    /// output as one token).
    pub fn pick(&self, out: &TowerOutput) -> imgseq_core::Result<Tensor> {
        if self.pooled {
            let p = out.pooled.as_ref().ok_or_else(|| {
                imgseq_core::Error::invalid("pooled: the tower gave no pooled output")
            })?;
            return Ok(p.unsqueeze(1)?);
        }
        let h = match self.layer {
            Some(l) => &out.hidden_states[hidden_state_index(l, out.hidden_states.len())?],
            None => &out.last_hidden_state,
        };
        let (skip, n) = (self.model.prefix_tokens(), h.dim(1)?);
        Ok(if self.patches_only && skip > 0 {
            h.narrow(1, skip, n - skip)?
        } else {
            h.clone()
        })
    }
}

/// The index of hidden state `layer` (from the end when negative) among `n`.
pub fn hidden_state_index(layer: isize, n: usize) -> imgseq_core::Result<usize> {
    let n = n as isize;
    let i = if layer < 0 { n + layer } else { layer };
    if !(0..n).contains(&i) {
        return Err(imgseq_core::Error::invalid(format!(
            "layer {layer}: the tower has hidden states 0 to {} (−1 the last)",
            n - 1
        )));
    }
    Ok(i as usize)
}

impl<M: VisionModel> imgseq_core::tokenizer::Tokenizer for Tower<M> {
    fn label(&self) -> String {
        self.model.label()
    }

    fn describe(&self) -> imgseq_core::tokenizer::Description {
        use imgseq_core::tokenizer::{Description, OutputKind, OutputSpec};
        let mut config = self.model.config_value();
        config["layer"] = serde_json::json!(self.layer);
        config["output"] = serde_json::json!(match self.layer {
            _ if self.pooled => "pooler_output".to_string(),
            None => "last_hidden_state".to_string(),
            Some(l) => format!("hidden_states[{l}]"),
        });
        config["patches_only"] = serde_json::json!(self.patches_only);
        config["input_size"] = serde_json::json!(self.pixels.size);
        // f32 values by their shortest decimal (0.485, not 0.48500001430511475).
        let short = |v: [f32; 3]| v.map(|x| x.to_string().parse::<f64>().unwrap_or(x as f64));
        config["image_mean"] = serde_json::json!(short(self.pixels.mean));
        config["image_std"] = serde_json::json!(short(self.pixels.std));
        config["rescale_factor"] = serde_json::json!(self.pixels.rescale);
        let mut d = Description::basic(
            self.model.family(),
            &self.label(),
            self.input(),
            OutputSpec {
                kind: OutputKind::Embeddings,
                shape: vec![self.tokens(), self.model.hidden_size()],
                codebook_size: None,
                scales: None,
            },
        );
        d.config = config;
        d
    }

    fn input(&self) -> imgseq_core::input::InputSpec {
        imgseq_core::input::InputSpec {
            size: self.pixels.size,
            crop: self.pixels.crop,
            channels: 3,
            range: imgseq_core::image_io::PixelRange::ZeroOne,
        }
    }

    fn input_tensor(&self, imgs: &[image::RgbImage]) -> imgseq_core::Result<Tensor> {
        self.pixels.tensor(imgs)
    }

    fn encode(&self, x: &Tensor) -> imgseq_core::Result<imgseq_core::tokenizer::Encoded> {
        let out = self.model.forward_tower(x)?;
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
