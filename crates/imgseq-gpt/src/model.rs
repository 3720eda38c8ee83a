//! GPT-2, top to bottom, with HF transformers' weight names (`GPT2LMHeadModel`).
//!
//! token ids (b, t)
//!   → wte[ids] + wpe[past..past+t]                                    (b, t, n_embd)
//!   → n_layer pre-LN blocks: x + attn(ln_1(x)), then x + mlp(ln_2(x))  (b, t, n_embd)
//!       attn: c_attn → q, k, v (n_head heads) → causal softmax(q·kᵀ/√d)·v → c_proj
//!       mlp:  c_fc → GELU → c_proj
//!   → ln_f → lm_head (tied: the rows of wte)                          (b, t, vocab)
//!
//! GPT-2's linear layers are HF `Conv1D`: weight (in, out), y = x·W + b.
//!
//! Every block is built by `fn new(cfg, vb)`: the `vb.pp(..)` chain *is* the weight map
//! (`transformer.h.0.attn.c_attn.weight`, ...). With a [`KvCache`], each forward appends the
//! new positions' keys and values, so generation computes every position once.

use candle_core::{DType, Module, Result, Tensor, D};
use candle_nn::{Init, VarBuilder};
pub use imgseq_kernels::cpu::layer_norm::LayerNorm;
use imgseq_kernels::ops;

use crate::config::GptConfig;

fn randn(std: f64) -> Init {
    Init::Randn {
        mean: 0.,
        stdev: std,
    }
}

/// HF's `Conv1D`: a linear layer whose weight is stored (in, out).
#[derive(Debug, Clone)]
pub struct Conv1D {
    pub weight: Tensor, // (in, out)
    pub bias: Tensor,   // (out)
}

impl Conv1D {
    fn new(n_in: usize, n_out: usize, std: f64, vb: VarBuilder) -> Result<Self> {
        let weight = vb.get_with_hints((n_in, n_out), "weight", randn(std))?;
        let bias = vb.get_with_hints(n_out, "bias", Init::Const(0.))?;
        Ok(Self { weight, bias })
    }
}

/// Up to this many rows (generation: one new position per sequence), a `Conv1D` multiplies by
/// its (in, out) weight as stored; above it, through `ops::linear`, whose (out, in) copy of
/// the weight is small next to the rows.
const DIRECT_ROWS: usize = 1024;

impl Module for Conv1D {
    /// # Shapes
    /// (..., in) → (..., out)
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (n_in, n_out) = self.weight.dims2()?;
        let rows = x.elem_count() / n_in.max(1);
        if rows <= DIRECT_ROWS {
            let mut dims = x.dims().to_vec();
            *dims.last_mut().expect("rank ≥ 1") = n_out;
            let y = x.reshape((rows, n_in))?.matmul(&self.weight)?; // (rows, out)
            return y.broadcast_add(&self.bias)?.reshape(dims);
        }
        ops::linear(x, &self.weight.t()?, Some(&self.bias))
    }
}

/// LayerNorm `vb` (`ln_1`, `ln_2`, `ln_f`) of `dim` values.
fn layer_norm(dim: usize, eps: f64, vb: VarBuilder) -> Result<LayerNorm> {
    let weight = vb.get_with_hints(dim, "weight", Init::Const(1.))?;
    let bias = vb.get_with_hints(dim, "bias", Init::Const(0.))?;
    Ok(LayerNorm::new(weight, bias, eps))
}

/// One layer's keys and values: buffers (b, n_head, n_positions, head_dim) filled up to `len`.
#[derive(Debug, Clone)]
pub struct LayerKv {
    k: Tensor,
    v: Tensor,
    len: usize,
}

/// The keys and values of the positions seen so far, per layer (preallocated for the model's
/// n_positions, written in place: a step copies only its own keys and values).
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    layers: Vec<Option<LayerKv>>,
}

impl KvCache {
    pub fn new(n_layer: usize) -> Self {
        Self {
            layers: vec![None; n_layer],
        }
    }

    /// Positions cached so far.
    pub fn len(&self) -> usize {
        match self.layers.first() {
            Some(Some(kv)) => kv.len,
            _ => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Causal multi-head self-attention (`attn`).
#[derive(Debug, Clone)]
pub struct Attention {
    pub c_attn: Conv1D,
    pub c_proj: Conv1D,
    n_head: usize,
    n_positions: usize,
}

impl Attention {
    fn new(cfg: &GptConfig, vb: VarBuilder) -> Result<Self> {
        let d = cfg.n_embd;
        let std = cfg.initializer_range;
        // GPT-2 scales the residual projections by 1/√(2·n_layer) at init.
        let proj_std = std / ((2 * cfg.n_layer) as f64).sqrt();
        Ok(Self {
            c_attn: Conv1D::new(d, 3 * d, std, vb.pp("c_attn"))?,
            c_proj: Conv1D::new(d, d, proj_std, vb.pp("c_proj"))?,
            n_head: cfg.n_head,
            n_positions: cfg.n_positions,
        })
    }

    /// # Shapes
    /// x: (b, t, d) → (b, t, d). With `cache`, the new positions follow the cached ones.
    fn forward(&self, x: &Tensor, cache: Option<&mut Option<LayerKv>>) -> Result<Tensor> {
        let (b, t, d) = x.dims3()?;
        let (nh, hd) = (self.n_head, d / self.n_head);
        let scale = 1.0 / (hd as f64).sqrt();
        let qkv = self
            .c_attn
            .forward(x)? // (b, t, 3d)
            .reshape((b, t, 3, nh, hd))?
            .permute((2, 0, 3, 1, 4))?; // (3, b, nh, t, hd)
        let (q, k, v) = (qkv.get(0)?, qkv.get(1)?, qkv.get(2)?); // (b, nh, t, hd) each
        let y = match cache {
            None => ops::causal_attention(&q, &k, &v, scale)?,
            Some(slot) => {
                let kv = match slot {
                    Some(kv) => kv,
                    None => {
                        let buf =
                            Tensor::zeros((b, nh, self.n_positions, hd), x.dtype(), x.device())?;
                        slot.insert(LayerKv {
                            k: buf.clone(),
                            v: buf.zeros_like()?,
                            len: 0,
                        })
                    }
                };
                if kv.k.dim(0)? != b || kv.len + t > self.n_positions {
                    candle_core::bail!(
                        "KV cache of batch {} with {} positions cannot take {b} × {t} more (n_positions {})",
                        kv.k.dim(0)?,
                        kv.len,
                        self.n_positions
                    );
                }
                let past = kv.len;
                kv.k.slice_set(&k.contiguous()?, 2, past)?;
                kv.v.slice_set(&v.contiguous()?, 2, past)?;
                kv.len += t;
                let (k, v) = (kv.k.narrow(2, 0, kv.len)?, kv.v.narrow(2, 0, kv.len)?); // (b, nh, past + t, hd)
                if past == 0 {
                    ops::causal_attention(&q, &k, &v, scale)?
                } else {
                    cached_attention(&q, &k, &v, past, scale)?
                }
            }
        }; // (b, nh, t, hd)
        let y = y.transpose(1, 2)?.reshape((b, t, d))?; // (b, t, d)
        self.c_proj.forward(&y)
    }
}

/// Attention of `t` new queries at positions past..past+t over all past + t keys: query i
/// sees keys 0..=past+i.
///
/// # Shapes
/// q: (b, nh, t, hd), k, v: (b, nh, past + t, hd) → (b, nh, t, hd)
fn cached_attention(q: &Tensor, k: &Tensor, v: &Tensor, past: usize, scale: f64) -> Result<Tensor> {
    let t = q.dim(2)?;
    let n = k.dim(2)?;
    let att = (q.contiguous()?.matmul(&k.t()?)? * scale)?; // (b, nh, t, n)
    let att = if t > 1 {
        let mask: Vec<f32> = (0..t)
            .flat_map(|i| (0..n).map(move |j| if j > past + i { f32::NEG_INFINITY } else { 0.0 }))
            .collect();
        let mask = Tensor::from_vec(mask, (t, n), q.device())?.to_dtype(att.dtype())?;
        att.broadcast_add(&mask)?
    } else {
        att
    };
    let att = ops::softmax_last_dim(&att)?;
    att.matmul(v)
}

/// The feed-forward block (`mlp`).
#[derive(Debug, Clone)]
pub struct Mlp {
    pub c_fc: Conv1D,
    pub c_proj: Conv1D,
    act: Activation,
}

#[derive(Debug, Clone, Copy)]
enum Activation {
    /// Exact erf GELU (HF `gelu`).
    Gelu,
    /// tanh approximation (HF `gelu_new`, `gelu_pytorch_tanh`).
    GeluTanh,
    Relu,
}

impl Mlp {
    fn new(cfg: &GptConfig, vb: VarBuilder) -> Result<Self> {
        let (d, inner) = (cfg.n_embd, cfg.n_inner());
        let std = cfg.initializer_range;
        let proj_std = std / ((2 * cfg.n_layer) as f64).sqrt();
        let act = match cfg.activation_function.as_str() {
            "gelu" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" => Activation::GeluTanh,
            "relu" => Activation::Relu,
            other => candle_core::bail!("activation_function {other:?} is not supported"),
        };
        Ok(Self {
            c_fc: Conv1D::new(d, inner, std, vb.pp("c_fc"))?,
            c_proj: Conv1D::new(inner, d, proj_std, vb.pp("c_proj"))?,
            act,
        })
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.c_fc.forward(x)?; // (b, t, inner)
        let h = match self.act {
            Activation::Gelu => ops::gelu(&h)?,
            Activation::GeluTanh => h.gelu()?,
            Activation::Relu => h.relu()?,
        };
        self.c_proj.forward(&h) // (b, t, d)
    }
}

/// One pre-LN transformer block (`transformer.h.{i}`).
#[derive(Debug, Clone)]
pub struct Block {
    pub ln_1: LayerNorm,
    pub attn: Attention,
    pub ln_2: LayerNorm,
    pub mlp: Mlp,
}

impl Block {
    fn new(cfg: &GptConfig, vb: VarBuilder) -> Result<Self> {
        let (d, eps) = (cfg.n_embd, cfg.layer_norm_epsilon);
        Ok(Self {
            ln_1: layer_norm(d, eps, vb.pp("ln_1"))?,
            attn: Attention::new(cfg, vb.pp("attn"))?,
            ln_2: layer_norm(d, eps, vb.pp("ln_2"))?,
            mlp: Mlp::new(cfg, vb.pp("mlp"))?,
        })
    }

    fn forward(&self, x: &Tensor, cache: Option<&mut Option<LayerKv>>) -> Result<Tensor> {
        let x = (x + self.attn.forward(&self.ln_1.forward(x)?, cache)?)?;
        &x + self.mlp.forward(&self.ln_2.forward(&x)?)?
    }
}

/// `GPT2LMHeadModel`: the transformer and its (tied) language-model head.
#[derive(Debug, Clone)]
pub struct Gpt2LMHeadModel {
    pub wte: Tensor, // (vocab, d)
    pub wpe: Tensor, // (n_positions, d)
    pub h: Vec<Block>,
    pub ln_f: LayerNorm,
    /// `lm_head.weight` (vocab, d) when the embeddings are not tied; else the head is `wte`.
    pub lm_head: Option<Tensor>,
    n_positions: usize,
}

impl Gpt2LMHeadModel {
    pub fn new(cfg: &GptConfig, vb: VarBuilder) -> Result<Self> {
        let t = vb.pp("transformer");
        let (d, std) = (cfg.n_embd, cfg.initializer_range);
        let wte = t
            .pp("wte")
            .get_with_hints((cfg.vocab_size, d), "weight", randn(std))?;
        let wpe = t
            .pp("wpe")
            .get_with_hints((cfg.n_positions, d), "weight", randn(std))?;
        let h = (0..cfg.n_layer)
            .map(|i| Block::new(cfg, t.pp("h").pp(i.to_string())))
            .collect::<Result<Vec<_>>>()?;
        let ln_f = layer_norm(d, cfg.layer_norm_epsilon, t.pp("ln_f"))?;
        let lm_head = if cfg.tie_word_embeddings {
            None
        } else {
            Some(
                vb.pp("lm_head")
                    .get_with_hints((cfg.vocab_size, d), "weight", randn(std))?,
            )
        };
        Ok(Self {
            wte,
            wpe,
            h,
            ln_f,
            lm_head,
            n_positions: cfg.n_positions,
        })
    }

    /// The final hidden states (after `ln_f`). With `cache`, `ids` are the positions after
    /// the cached ones, and their keys/values are appended to it.
    ///
    /// # Shapes
    /// ids: (b, t) u32 → (b, t, d)
    pub fn hidden(&self, ids: &Tensor, mut cache: Option<&mut KvCache>) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let past = cache.as_ref().map_or(0, |c| c.len());
        if past + t > self.n_positions {
            candle_core::bail!(
                "{} positions exceed the model's n_positions {}",
                past + t,
                self.n_positions
            );
        }
        let d = self.wte.dim(1)?;
        let tok = self
            .wte
            .index_select(&ids.flatten_all()?, 0)?
            .reshape((b, t, d))?; // (b, t, d)
        let pos = self.wpe.narrow(0, past, t)?; // (t, d)
        let mut x = tok.broadcast_add(&pos)?; // (b, t, d)
        for (i, block) in self.h.iter().enumerate() {
            let slot = match cache.as_mut() {
                Some(c) => {
                    if c.layers.len() != self.h.len() {
                        c.layers = vec![None; self.h.len()];
                    }
                    Some(&mut c.layers[i])
                }
                None => None,
            };
            x = block.forward(&x, slot)?;
        }
        self.ln_f.forward(&x)
    }

    /// The head's rows (vocab, d).
    pub fn head(&self) -> &Tensor {
        self.lm_head.as_ref().unwrap_or(&self.wte)
    }

    /// Logits over the whole vocabulary, as `GPT2LMHeadModel(ids).logits`.
    ///
    /// # Shapes
    /// ids: (b, t) u32 → (b, t, vocab)
    pub fn forward(&self, ids: &Tensor, cache: Option<&mut KvCache>) -> Result<Tensor> {
        let x = self.hidden(ids, cache)?;
        ops::linear(&x, self.head(), None)
    }

    /// Logits over the first `n` vocabulary entries only (the codebook entries: what image
    /// positions predict).
    ///
    /// # Shapes
    /// ids: (b, t) u32 → (b, t, n)
    pub fn forward_first(
        &self,
        ids: &Tensor,
        n: usize,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        let x = self.hidden(ids, cache)?;
        ops::linear(&x, &self.head().narrow(0, 0, n)?, None)
    }

    /// Mean cross-entropy (nats) of predicting `targets` from `ids` over the first `n`
    /// vocabulary entries: position i of `ids` predicts `targets[i]`.
    ///
    /// # Shapes
    /// ids, targets: (b, t) u32 → scalar
    pub fn loss(&self, ids: &Tensor, targets: &Tensor, n: usize) -> Result<Tensor> {
        let logits = self.forward_first(ids, n, None)?; // (b, t, n)
        let logits = logits.flatten_to(1)?; // (b·t, n)
        let logp = candle_nn::ops::log_softmax(&logits, D::Minus1)?;
        let targets = targets.flatten_all()?.to_dtype(DType::U32)?;
        logp.gather(&targets.unsqueeze(1)?, 1)?.neg()?.mean_all()
    }
}
