//! What the vision towers ([`crate::clip`], [`crate::siglip`], [`crate::dinov2`]) share: the
//! MLP activations by transformers' names, multi-head attention, the pre-LN encoder block
//! CLIP and SigLIP name alike, the patch conv, reading a model folder or a full checkpoint,
//! and the tower as a tokenizer ([`Tower`]: the hidden state chosen, with or without the
//! tokens in front of the patches).
//!
//! Every block runs on the project's kernels (`ops::linear`, `ops::attention`, `ops::gelu`,
//! the layer-norm kernel). The linear layers and the patch projection are the shared
//! [`Linear`]: f32, or bf16 weights packed once with f32 sums (`ops::linear_bf16`,
//! [`set_precision`], [`pack_bf16_only`]); layer norms, softmax, the attention products,
//! activations and residuals stay f32.

use crate::model::{layer_norm, LayerNorm, Linear, LinearVisitor};
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;
use imgseq_core::input::Crop;
use imgseq_kernels::ops::{self, Bf16Kernel};
use imgseq_kernels::precision::{Agreement, PrecisionChoice, PrecisionRequest};
use imgseq_kernels::Precision;

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
            Self::QuickGelu => ops::quick_gelu(x),
            Self::Gelu => ops::gelu(x),
            Self::GeluTanh => ops::gelu_tanh(x),
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

    /// The q, k, v and output projections.
    pub fn for_each_linear(&mut self, f: &mut LinearVisitor) -> Result<()> {
        f(&mut self.q)?;
        f(&mut self.k)?;
        f(&mut self.v)?;
        f(&mut self.out)
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

    /// fc1 and fc2.
    pub fn for_each_linear(&mut self, f: &mut LinearVisitor) -> Result<()> {
        f(&mut self.fc1)?;
        f(&mut self.fc2)
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

    /// The attention's projections, then fc1 and fc2.
    pub fn for_each_linear(&mut self, f: &mut LinearVisitor) -> Result<()> {
        self.self_attn.for_each_linear(f)?;
        self.mlp.for_each_linear(f)
    }

    /// # Shapes
    /// (b, n, D) → (b, n, D)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = (x + self.self_attn.forward(&self.layer_norm1.forward(x)?)?)?;
        &x + self.mlp.forward(&self.layer_norm2.forward(&x)?)?
    }
}

/// A conv whose kernel and stride are the patch side (`padding="valid"`), computed as a
/// linear map of each flattened patch (a [`Linear`] of (D, C·p·p): f32 or bf16 as the rest).
#[derive(Debug, Clone)]
pub struct PatchEmbed {
    proj: Linear,
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
        let weight = vb
            .get((dim, c, p, p), "weight")?
            .reshape((dim, c * p * p))?;
        let bias = if bias {
            Some(vb.get(dim, "bias")?)
        } else {
            None
        };
        Ok(Self {
            proj: Linear::from_weights(weight, bias),
            channels,
            patch,
        })
    }

    /// The projection, as a linear layer of the flattened patches.
    pub fn projection(&self) -> &Linear {
        &self.proj
    }

    /// The projection, for [`VisionModel::for_each_linear`].
    pub fn projection_mut(&mut self) -> &mut Linear {
        &mut self.proj
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
        Ok((self.proj.forward(&patches)?, (gh, gw)))
    }
}

pub use crate::tower_load::{
    files_of, load_model, model_type_of, read_config, read_safetensors, tower_tensors,
};

/// Which of transformers' `hidden_states` a forward pass keeps; the others are let go as
/// soon as the next block has read them (a tower asked for one state holds two at a time,
/// not `num_hidden_layers + 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Every one: [`TowerOutput::hidden_states`] has `num_hidden_layers + 1`.
    All,
    /// State `i` only (0: the first block's input): `hidden_states` has that one.
    One(usize),
    /// None: `hidden_states` is empty (the last hidden state and the pooled output are
    /// still given).
    Nothing,
}

impl Keep {
    fn keeps(self, i: usize) -> bool {
        match self {
            Keep::All => true,
            Keep::One(k) => k == i,
            Keep::Nothing => false,
        }
    }
}

/// Runs `blocks` in turn from `first` (state 0), each by `forward`: the states `keep` asks
/// for, and the last state.
pub fn run_blocks<B>(
    first: Tensor,
    blocks: &[B],
    keep: Keep,
    forward: impl Fn(&B, &Tensor) -> Result<Tensor>,
) -> Result<(Vec<Tensor>, Tensor)> {
    let mut kept = Vec::new();
    let mut h = first;
    for (i, block) in blocks.iter().enumerate() {
        if keep.keeps(i) {
            kept.push(h.clone());
        }
        h = forward(block, &h)?;
    }
    if keep.keeps(blocks.len()) {
        kept.push(h.clone());
    }
    Ok((kept, h))
}

/// What a forward pass of a tower gives.
pub struct TowerOutput {
    /// transformers' `hidden_states`, as many as [`Keep`] asked for: all of them are the
    /// input of the first block and every block's output, `num_hidden_layers + 1` tensors
    /// (b, tokens, D).
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
    /// The hidden states `keep` asks for, the last (normed) state and the pooled output of
    /// normalised pixels (b, C, S, S).
    fn forward_kept(&self, x: &Tensor, keep: Keep) -> Result<TowerOutput>;
    /// [`Self::forward_kept`] keeping every hidden state.
    fn forward_tower(&self, x: &Tensor) -> Result<TowerOutput> {
        self.forward_kept(x, Keep::All)
    }
    /// The patch projection: its precision is the model's ([`set_precision`] sets every
    /// linear layer alike).
    fn patch_projection(&self) -> &Linear;
    /// Every linear layer, the patch projection first.
    fn for_each_linear(&mut self, f: &mut LinearVisitor) -> Result<()>;
}

/// The arithmetic of a tower's linear layers.
pub fn precision_of<M: VisionModel + ?Sized>(m: &M) -> Precision {
    m.patch_projection().precision()
}

/// Runs every linear layer of `m` (and the patch projection) in `precision` (bf16: packed
/// once, on `kernel`; the f32 weights kept, so it can go back).
pub fn set_precision<M: VisionModel + ?Sized>(
    m: &mut M,
    precision: Precision,
    kernel: Bf16Kernel,
) -> Result<()> {
    m.for_each_linear(&mut |l: &mut Linear| l.set_precision(precision, kernel))
}

/// Runs `m` in bf16 for good: each linear layer packed (on `kernel`) and its f32 weights let
/// go before the next is packed, so loading in bf16 never holds both copies of the model.
pub fn pack_bf16_only<M: VisionModel + ?Sized>(m: &mut M, kernel: Bf16Kernel) -> Result<()> {
    m.for_each_linear(&mut |l: &mut Linear| {
        l.set_precision(Precision::Bf16, kernel)?;
        l.release_f32()
    })
}

pub use crate::agreement::{StateAgreement, MIN_BF16_COSINE};

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

    /// The hidden states a forward pass must keep for [`Self::pick`]: the chosen layer's
    /// only.
    pub fn keep(&self) -> imgseq_core::Result<Keep> {
        Ok(match self.layer {
            Some(l) if !self.pooled => {
                Keep::One(hidden_state_index(l, self.model.num_hidden_layers() + 1)?)
            }
            _ => Keep::Nothing,
        })
    }

    /// The chosen state of a forward pass that kept [`Self::keep`]'s states, with or without
    /// the tokens in front (the pooled output as one token).
    pub fn pick(&self, out: &TowerOutput) -> imgseq_core::Result<Tensor> {
        if self.pooled {
            let p = out.pooled.as_ref().ok_or_else(|| {
                imgseq_core::Error::invalid("pooled: the tower gave no pooled output")
            })?;
            return Ok(p.unsqueeze(1)?);
        }
        let h = match self.layer {
            Some(_) => out.hidden_states.first().ok_or_else(|| {
                imgseq_core::Error::invalid("the tower kept no hidden state for the layer asked")
            })?,
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

impl<M: VisionModel> Tower<M> {
    /// Resolves `--precision` for this tower and sets it, for inference: `f32` as asked;
    /// `bf16` as asked (on the best code path of this CPU; the portable emulation where it
    /// has no AVX512-BF16), the f32 weights let go ([`pack_bf16_only`]); `auto` keeps f32.
    ///
    /// Why `auto` never picks bf16 for a tower: a tower's output is the features users
    /// store, and bf16 changes them (every token within cosine [`MIN_BF16_COSINE`] of
    /// f32's, not f32's bits). Picking it by CPU kind would make the features of one dataset
    /// depend on the machine that made each shard (and the resume check refuses a folder
    /// whose precision differs). The VQ families' `auto` likewise never changes tokens.
    pub fn choose_precision(
        &mut self,
        request: PrecisionRequest,
    ) -> imgseq_core::Result<PrecisionChoice> {
        let choice = match request {
            PrecisionRequest::Auto => PrecisionChoice {
                precision: Precision::F32,
                native: false,
                reason: "auto: a tower's output is its features, which bf16 changes (within \
                         cosine 0.999 of f32's), so auto keeps f32; --precision bf16 runs it"
                    .into(),
            },
            r => r.resolve(|| -> imgseq_core::Result<Agreement> {
                Err(imgseq_core::Error::invalid(
                    "a tower's precision runs no agreement check",
                ))
            })?,
        };
        match choice.precision {
            Precision::F32 => set_precision(&mut self.model, Precision::F32, Bf16Kernel::best())?,
            Precision::Bf16 => pack_bf16_only(&mut self.model, Bf16Kernel::best())?,
        }
        Ok(choice)
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
        d.precision = precision_of(&self.model).name().into();
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
        let out = self.model.forward_kept(x, self.keep()?)?;
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
