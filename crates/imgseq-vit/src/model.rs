//! The Vision Transformer, top to bottom, with HF transformers' weight names.
//!
//! pixels (b, c, 32, 32)
//!   → Embeddings: patch conv (4×4, stride 4) → prepend CLS → add positions   (b, 65, 48)
//!   → Encoder: 4 pre-LN blocks (multi-head self-attention, GELU MLP)        (b, 65, 48)
//!   → final LayerNorm → classifier on the CLS token                          (b, num_labels)
//!
//! Every block is built by `fn new(cfg, vb)`: the `vb.pp(..)` chain *is* the weight map
//! (`vit.embeddings.cls_token`, `vit.encoder.layer.0.attention.attention.query.weight`, …).

use candle_core::{Module, Result, Tensor, D};
use candle_nn::{Init, VarBuilder};
pub use imgseq_kernels::cpu::layer_norm::LayerNorm;
use imgseq_kernels::ops::{self, Bf16Kernel, Bf16Linear};
use imgseq_kernels::Precision;

use crate::config::{patch_grid, ViTConfig};
use crate::interpolate::bicubic_resize_grid;

/// A linear layer in PyTorch layout (weight (out, in)), computed by `ops::linear`, or by
/// `ops::linear_bf16` on bf16-packed weights ([`Linear::set_precision`]). Packed for bf16, it
/// can let its f32 weights go ([`Linear::release_f32`]) so an inference-only model holds one
/// copy of them.
#[derive(Debug, Clone)]
pub struct Linear {
    /// (out, in); `None` once released ([`Linear::release_f32`]).
    weight: Option<Tensor>,
    bias: Option<Tensor>,
    /// The weights packed for [`Precision::Bf16`] inference; `None`: f32.
    bf16: Option<Bf16Linear>,
}

impl Linear {
    pub(crate) fn new(
        in_dim: usize,
        out_dim: usize,
        bias: bool,
        init_std: f64,
        vb: VarBuilder,
    ) -> Result<Self> {
        let weight = vb.get_with_hints(
            (out_dim, in_dim),
            "weight",
            Init::Randn {
                mean: 0.,
                stdev: init_std,
            },
        )?;
        let bias = if bias {
            Some(vb.get_with_hints(out_dim, "bias", Init::Const(0.))?)
        } else {
            None
        };
        Ok(Self::from_weights(weight, bias))
    }

    /// A layer of weights already read (a fused projection's slice, say).
    pub(crate) fn from_weights(weight: Tensor, bias: Option<Tensor>) -> Self {
        Self {
            weight: Some(weight),
            bias,
            bf16: None,
        }
    }

    /// The f32 weight (out, in); `None` once released.
    pub fn weight(&self) -> Option<&Tensor> {
        self.weight.as_ref()
    }

    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// The arithmetic the layer runs in.
    pub fn precision(&self) -> Precision {
        if self.bf16.is_some() {
            Precision::Bf16
        } else {
            Precision::F32
        }
    }

    /// The bf16 code path its packed weights were made for (`None`: f32).
    pub fn bf16_kernel(&self) -> Option<Bf16Kernel> {
        self.bf16.as_ref().map(Bf16Linear::kernel)
    }

    /// Runs the layer in `precision`: bf16 packs the weights once (on `kernel`); f32 drops
    /// the packed copy. Both need the f32 weights, unless the layer is already packed on
    /// `kernel`.
    pub fn set_precision(&mut self, precision: Precision, kernel: Bf16Kernel) -> Result<()> {
        if precision == Precision::Bf16 && self.bf16_kernel() == Some(kernel) {
            return Ok(());
        }
        let Some(weight) = &self.weight else {
            candle_core::bail!(
                "this layer's f32 weights were let go after packing them for bf16; it runs in \
                 bf16 only"
            );
        };
        self.bf16 = match precision {
            Precision::F32 => None,
            Precision::Bf16 => Some(Bf16Linear::new(weight, self.bias.as_ref(), kernel)?),
        };
        Ok(())
    }

    /// Lets the f32 weights go, keeping the bf16-packed copy (which holds the bias too): the
    /// layer then runs in bf16 only. An error for a layer not packed for bf16.
    pub fn release_f32(&mut self) -> Result<()> {
        if self.bf16.is_none() {
            candle_core::bail!("a layer not packed for bf16 keeps its f32 weights");
        }
        self.weight = None;
        Ok(())
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match (&self.bf16, &self.weight) {
            (Some(p), _) => ops::linear_bf16(x, p),
            (None, Some(w)) => ops::linear(x, w, self.bias.as_ref()),
            (None, None) => candle_core::bail!("a linear layer without weights"),
        }
    }
}

/// Every linear layer of a block, for [`ViTForImageClassification::set_precision`] and the
/// towers' ([`crate::tower::set_precision`]).
pub type LinearVisitor<'a> = dyn FnMut(&mut Linear) -> Result<()> + 'a;

/// LayerNorm `vb` (`layernorm_before`, `layernorm_after`, `layernorm`) of `dim` values.
pub(crate) fn layer_norm(dim: usize, eps: f64, vb: VarBuilder) -> Result<LayerNorm> {
    let weight = vb.get_with_hints(dim, "weight", Init::Const(1.))?;
    let bias = vb.get_with_hints(dim, "bias", Init::Const(0.))?;
    Ok(LayerNorm::new(weight, bias, eps))
}

/// Conv2d with kernel = stride = patch: cuts the image into non-overlapping patches and
/// projects each to `hidden_size` values. HF name: `patch_embeddings.projection`.
#[derive(Debug, Clone)]
pub struct PatchEmbeddings {
    weight: Tensor, // (hidden, c, p, p)
    bias: Tensor,   // (hidden)
    /// The model's one copy of the patch size (the rest of the model asks this layer).
    patch_size: usize,
    /// The projection as a (hidden, c·p·p) linear packed for bf16; `None`: f32.
    bf16: Option<Bf16Linear>,
}

impl PatchEmbeddings {
    fn new(cfg: &ViTConfig, vb: VarBuilder) -> Result<Self> {
        let vb = vb.pp("projection");
        let (h, c, p) = (cfg.hidden_size, cfg.num_channels, cfg.patch_size);
        let fan_in = (c * p * p) as f64;
        let weight = vb.get_with_hints(
            (h, c, p, p),
            "weight",
            Init::Randn {
                mean: 0.,
                stdev: (1. / fan_in).sqrt(),
            },
        )?;
        let bias = vb.get_with_hints(h, "bias", Init::Const(0.))?;
        Ok(Self {
            weight,
            bias,
            patch_size: p,
            bf16: None,
        })
    }

    /// Runs the projection in `precision` (bf16: packed once, on `kernel`).
    pub fn set_precision(&mut self, precision: Precision, kernel: Bf16Kernel) -> Result<()> {
        self.bf16 = match precision {
            Precision::F32 => None,
            Precision::Bf16 => {
                let w = self.weight.flatten_from(1)?; // (hidden, c·p·p)
                Some(Bf16Linear::new(&w, Some(&self.bias), kernel)?)
            }
        };
        Ok(())
    }

    pub fn patch_size(&self) -> usize {
        self.patch_size
    }

    /// The patch grid (rows, columns) of an `h`×`w` input; an error unless the input is a
    /// whole number of patches ([`patch_grid`]).
    pub fn grid(&self, h: usize, w: usize) -> Result<(usize, usize)> {
        patch_grid(h, w, self.patch_size).map_err(candle_core::Error::msg)
    }

    /// # Shapes
    /// (b, c, h, w) → (b, (h/p)·(w/p), hidden), patches in raster order.
    ///
    /// A conv whose kernel equals its stride is a linear map of each flattened patch, so it is
    /// computed as one: cut into patches, flatten each in (c, p, p) order, multiply.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = x.dims4()?;
        let p = self.patch_size;
        let (gh, gw) = self.grid(h, w)?;
        let patches = x
            .reshape((b, c, gh, p, gw, p))?
            .permute((0, 2, 4, 1, 3, 5))? // (b, gh, gw, c, p, p)
            .contiguous()?
            .reshape((b, gh * gw, c * p * p))?; // (b, 64, c·16)
        if let Some(packed) = &self.bf16 {
            return ops::linear_bf16(&patches, packed); // (b, 64, hidden)
        }
        let hidden = self.weight.dim(0)?;
        let w = self.weight.reshape((hidden, c * p * p))?; // (hidden, c·16)
        ops::linear(&patches, &w, Some(&self.bias)) // (b, 64, hidden)
    }
}

/// CLS token + patch embeddings + learned absolute positions.
#[derive(Debug, Clone)]
pub struct Embeddings {
    pub cls_token: Tensor,           // (1, 1, hidden)
    pub position_embeddings: Tensor, // (1, n + 1, hidden)
    pub patch_embeddings: PatchEmbeddings,
}

impl Embeddings {
    pub fn new(cfg: &ViTConfig, vb: VarBuilder) -> Result<Self> {
        let init = Init::Randn {
            mean: 0.,
            stdev: cfg.initializer_range,
        };
        let cls_token = vb.get_with_hints((1, 1, cfg.hidden_size), "cls_token", init)?;
        let position_embeddings = vb.get_with_hints(
            (1, cfg.num_tokens(), cfg.hidden_size),
            "position_embeddings",
            init,
        )?;
        let patch_embeddings = PatchEmbeddings::new(cfg, vb.pp("patch_embeddings"))?;
        Ok(Self {
            cls_token,
            position_embeddings,
            patch_embeddings,
        })
    }

    /// The seed's three steps: patch conv → prepend CLS → add positions.
    ///
    /// With `interpolate_pos_encoding`, an input of another size (e.g. 48×48 → 145 tokens) gets
    /// position vectors resized bicubically on the patch grid (CLS slot kept), as HF does;
    /// without it a size mismatch is an error.
    ///
    /// # Shapes
    /// (b, c, h, w) → (b, 1 + (h/p)·(w/p), hidden)
    pub fn forward(&self, pixel_values: &Tensor, interpolate_pos_encoding: bool) -> Result<Tensor> {
        let (b, _c, h, w) = pixel_values.dims4()?;
        let patches = self.patch_embeddings.forward(pixel_values)?; // (b, 64, 48)
        let cls = self
            .cls_token
            .broadcast_as((b, 1, self.cls_token.dim(2)?))?; // (b, 1, 48)
        let tokens = Tensor::cat(&[&cls, &patches], 1)?; // (b, 65, 48)
        tokens.broadcast_add(&self.positions(h, w, interpolate_pos_encoding)?) // (b, 65, 48)
    }

    /// The position vectors for an `h`×`w` input: (1, 1 + (h/p)·(w/p), hidden).
    pub fn positions(&self, h: usize, w: usize, interpolate: bool) -> Result<Tensor> {
        let (gh, gw) = self.patch_embeddings.grid(h, w)?;
        let n_pos = self.position_embeddings.dim(1)? - 1;
        if gh * gw == n_pos && gh == gw {
            return Ok(self.position_embeddings.clone());
        }
        let side = (n_pos as f64).sqrt().round() as usize;
        if !interpolate {
            candle_core::bail!(
                "input {h}x{w} gives {} patches but the model has positions for {side}x{side}; \
                 enable position interpolation to run at another size",
                gh * gw
            )
        }
        let hidden = self.position_embeddings.dim(2)?;
        let cls_pos = self.position_embeddings.narrow(1, 0, 1)?; // (1, 1, hidden)
        let grid = self
            .position_embeddings
            .narrow(1, 1, n_pos)?
            .reshape((side, side, hidden))?;
        let resized = bicubic_resize_grid(&grid, gh, gw)?; // (gh, gw, hidden)
        Tensor::cat(&[cls_pos, resized.reshape((1, gh * gw, hidden))?], 1)
    }

    /// The learned position vectors of the patches, CLS slot excluded: (n, hidden).
    pub fn patch_positions(&self) -> Result<Tensor> {
        let n = self.position_embeddings.dim(1)? - 1;
        self.position_embeddings.squeeze(0)?.narrow(0, 1, n)
    }
}

/// Multi-head self-attention (`attention.attention.{query,key,value}` + `attention.output.dense`).
#[derive(Debug, Clone)]
pub struct SelfAttention {
    query: Linear,
    key: Linear,
    value: Linear,
    output: Linear,
    num_heads: usize,
}

impl SelfAttention {
    fn new(cfg: &ViTConfig, vb: VarBuilder) -> Result<Self> {
        let h = cfg.hidden_size;
        let std = cfg.initializer_range;
        let vba = vb.pp("attention");
        Ok(Self {
            query: Linear::new(h, h, cfg.qkv_bias, std, vba.pp("query"))?,
            key: Linear::new(h, h, cfg.qkv_bias, std, vba.pp("key"))?,
            value: Linear::new(h, h, cfg.qkv_bias, std, vba.pp("value"))?,
            output: Linear::new(h, h, true, std, vb.pp("output").pp("dense"))?,
            num_heads: cfg.num_attention_heads,
        })
    }

    fn for_each_linear(&mut self, f: &mut LinearVisitor) -> Result<()> {
        f(&mut self.query)?;
        f(&mut self.key)?;
        f(&mut self.value)?;
        f(&mut self.output)
    }

    /// # Shapes
    /// (b, n, hidden) → (b, n, hidden)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, n, hidden) = x.dims3()?;
        let (nh, d) = (self.num_heads, hidden / self.num_heads);
        let heads = |t: Tensor| t.reshape((b, n, nh, d))?.transpose(1, 2); // (b, nh, n, d) strided view
        let q = heads(self.query.forward(x)?)?;
        let k = heads(self.key.forward(x)?)?;
        let v = heads(self.value.forward(x)?)?;
        let ctx = ops::attention(&q, &k, &v, 1.0 / (d as f64).sqrt())?; // (b, nh, n, d)
        let ctx = ctx.transpose(1, 2)?.reshape((b, n, hidden))?; // (b, n, hidden)
        self.output.forward(&ctx)
    }
}

/// One pre-LN transformer block (`vit.encoder.layer.N`).
#[derive(Debug, Clone)]
pub struct Layer {
    layernorm_before: LayerNorm,
    attention: SelfAttention,
    layernorm_after: LayerNorm,
    intermediate: Linear, // intermediate.dense
    output: Linear,       // output.dense
}

impl Layer {
    fn new(cfg: &ViTConfig, vb: VarBuilder) -> Result<Self> {
        let (h, m, std) = (
            cfg.hidden_size,
            cfg.intermediate_size,
            cfg.initializer_range,
        );
        Ok(Self {
            layernorm_before: layer_norm(h, cfg.layer_norm_eps, vb.pp("layernorm_before"))?,
            attention: SelfAttention::new(cfg, vb.pp("attention"))?,
            layernorm_after: layer_norm(h, cfg.layer_norm_eps, vb.pp("layernorm_after"))?,
            intermediate: Linear::new(h, m, true, std, vb.pp("intermediate").pp("dense"))?,
            output: Linear::new(m, h, true, std, vb.pp("output").pp("dense"))?,
        })
    }

    fn for_each_linear(&mut self, f: &mut LinearVisitor) -> Result<()> {
        self.attention.for_each_linear(f)?;
        f(&mut self.intermediate)?;
        f(&mut self.output)
    }

    /// # Shapes
    /// (b, n, hidden) → (b, n, hidden)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = (x + self.attention.forward(&self.layernorm_before.forward(x)?)?)?; // (b, n, 48)
        let mlp = ops::gelu(
            &self
                .intermediate
                .forward(&self.layernorm_after.forward(&x)?)?,
        )?; // (b, n, 192)
        x + self.output.forward(&mlp)? // (b, n, 48)
    }
}

/// `ViTModel` without pooler (as inside HF `ViTForImageClassification`).
#[derive(Debug, Clone)]
pub struct ViTModel {
    pub embeddings: Embeddings,
    layers: Vec<Layer>,
    layernorm: LayerNorm,
}

/// Everything a forward pass can report.
pub struct ViTOutput {
    /// Output of the embeddings and of every layer: `num_hidden_layers + 1` tensors (b, n, hidden).
    pub hidden_states: Vec<Tensor>,
    /// Final LayerNorm applied to the last hidden state: (b, n, hidden).
    pub last_hidden_state: Tensor,
}

impl ViTModel {
    pub fn new(cfg: &ViTConfig, vb: VarBuilder) -> Result<Self> {
        let embeddings = Embeddings::new(cfg, vb.pp("embeddings"))?;
        let vbl = vb.pp("encoder").pp("layer");
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::new(cfg, vbl.pp(i)))
            .collect::<Result<Vec<_>>>()?;
        let layernorm = layer_norm(cfg.hidden_size, cfg.layer_norm_eps, vb.pp("layernorm"))?;
        Ok(Self {
            embeddings,
            layers,
            layernorm,
        })
    }

    /// # Shapes
    /// (b, c, h, w) → last_hidden_state (b, n, hidden)
    pub fn forward(&self, pixel_values: &Tensor, interpolate_pos_encoding: bool) -> Result<Tensor> {
        let mut x = self
            .embeddings
            .forward(pixel_values, interpolate_pos_encoding)?;
        for layer in &self.layers {
            x = layer.forward(&x)?;
        }
        self.layernorm.forward(&x)
    }

    /// Like [`forward`](Self::forward) but keeps every intermediate hidden state.
    pub fn forward_all(
        &self,
        pixel_values: &Tensor,
        interpolate_pos_encoding: bool,
    ) -> Result<ViTOutput> {
        let mut hidden_states = vec![self
            .embeddings
            .forward(pixel_values, interpolate_pos_encoding)?];
        for layer in &self.layers {
            let next = layer.forward(hidden_states.last().expect("non-empty"))?;
            hidden_states.push(next);
        }
        let last_hidden_state = self
            .layernorm
            .forward(hidden_states.last().expect("non-empty"))?;
        Ok(ViTOutput {
            hidden_states,
            last_hidden_state,
        })
    }
}

/// `ViTForImageClassification`: `vit.*` + `classifier` reading the CLS token.
#[derive(Debug, Clone)]
pub struct ViTForImageClassification {
    pub vit: ViTModel,
    classifier: Linear,
    /// The arithmetic of the patch projection and every linear layer
    /// ([`Self::set_precision`]); layer norms, softmax and attention's products are f32.
    precision: Precision,
    /// The bf16 code path the packed weights were made for.
    bf16_kernel: Bf16Kernel,
}

impl ViTForImageClassification {
    pub fn new(cfg: &ViTConfig, vb: VarBuilder) -> Result<Self> {
        let vit = ViTModel::new(cfg, vb.pp("vit"))?;
        let classifier = Linear::new(
            cfg.hidden_size,
            cfg.num_labels(),
            true,
            cfg.initializer_range,
            vb.pp("classifier"),
        )?;
        Ok(Self {
            vit,
            classifier,
            precision: Precision::F32,
            bf16_kernel: Bf16Kernel::best(),
        })
    }

    /// The arithmetic the patch projection and the linear layers run in.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Runs the patch projection and every linear layer in `precision` (bf16: weights packed
    /// once, here; inference only — no gradients flow through bf16 layers), on the best bf16
    /// code path of this CPU.
    pub fn set_precision(&mut self, precision: Precision) -> Result<()> {
        self.set_precision_on(precision, Bf16Kernel::best())
    }

    /// [`Self::set_precision`] on a given bf16 code path (tests compare the two).
    pub fn set_precision_on(&mut self, precision: Precision, kernel: Bf16Kernel) -> Result<()> {
        if precision == self.precision
            && (precision == Precision::F32 || kernel == self.bf16_kernel)
        {
            return Ok(()); // already packed (or not needed)
        }
        self.vit
            .embeddings
            .patch_embeddings
            .set_precision(precision, kernel)?;
        let mut set = |l: &mut Linear| l.set_precision(precision, kernel);
        for layer in &mut self.vit.layers {
            layer.for_each_linear(&mut set)?;
        }
        set(&mut self.classifier)?;
        self.precision = precision;
        self.bf16_kernel = kernel;
        Ok(())
    }

    /// # Shapes
    /// (b, c, h, w) → logits (b, num_labels)
    pub fn forward(&self, pixel_values: &Tensor, interpolate_pos_encoding: bool) -> Result<Tensor> {
        let h = self.vit.forward(pixel_values, interpolate_pos_encoding)?; // (b, n, hidden)
        self.classify(&h)
    }

    /// Classifier on the CLS token of a final hidden state (b, n, hidden) → (b, num_labels).
    pub fn classify(&self, last_hidden_state: &Tensor) -> Result<Tensor> {
        let cls = last_hidden_state.narrow(1, 0, 1)?.squeeze(1)?; // (b, hidden)
        self.classifier.forward(&cls)
    }
}

/// Number of parameters of the model [`ViTForImageClassification::new`] builds from `cfg`.
pub fn param_count(cfg: &ViTConfig) -> usize {
    let (h, m, c, p, l) = (
        cfg.hidden_size,
        cfg.intermediate_size,
        cfg.num_channels,
        cfg.patch_size,
        cfg.num_hidden_layers,
    );
    let emb = h + cfg.num_tokens() * h + h * c * p * p + h;
    let layer = 4 * (h * h + h) + 2 * 2 * h + (h * m + m) + (m * h + h);
    emb + l * layer + 2 * h + h * cfg.num_labels() + cfg.num_labels()
}

/// Softmax probabilities of logits (b, k) (inference only).
pub fn probabilities(logits: &Tensor) -> Result<Tensor> {
    candle_nn::ops::softmax(logits, D::Minus1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};
    use candle_nn::VarMap;

    #[test]
    fn param_count_matches_the_built_model() {
        let cfg = ViTConfig::fashion_mnist();
        let vars = VarMap::new();
        let vb = VarBuilder::from_varmap(&vars, DType::F32, &Device::Cpu);
        ViTForImageClassification::new(&cfg, vb).unwrap();
        let n: usize = vars.all_vars().iter().map(|v| v.elem_count()).sum();
        assert_eq!(param_count(&cfg), n);
    }

    #[test]
    fn inputs_that_are_not_whole_patches_are_rejected_by_the_config_rule() {
        let cfg = ViTConfig::fashion_mnist();
        let vb = VarBuilder::zeros(DType::F32, &Device::Cpu);
        let e = Embeddings::new(&cfg, vb).unwrap();
        let x = Tensor::zeros((1, 1, 30, 30), DType::F32, &Device::Cpu).unwrap();
        let msg = e.forward(&x, true).unwrap_err().to_string();
        assert!(
            msg.contains("size 30 is not a multiple of the patch size 4"),
            "{msg}"
        );
        let msg = e.positions(32, 30, true).unwrap_err().to_string();
        assert!(msg.contains("input 32x30 is not a multiple"), "{msg}");
        assert_eq!(e.patch_positions().unwrap().dims(), &[64, 48]);
    }
}
