//! The small set of tensor ops the models are written against.
//!
//! Every function here is differentiable through candle's autograd. On the CPU, for f32 and
//! f64, they run our own kernels ([`crate::custom`]); elsewhere (CUDA/Metal, f16/bf16) they fall
//! back to the plain candle composites in [`crate::reference`].

use crate::custom;
pub use crate::padding::Padding;
use crate::reference;
use candle_core::{DType, Result, Tensor};

/// Whether `ts` can go through the custom CPU kernels: all on the CPU, all f32 or all f64.
fn fast(ts: &[&Tensor]) -> bool {
    let dt = ts[0].dtype();
    matches!(dt, DType::F32 | DType::F64)
        && ts.iter().all(|t| t.device().is_cpu() && t.dtype() == dt)
}

/// 2-D convolution (cross-correlation, as PyTorch).
///
/// # Shapes
/// x: (b, c_in, h, w), weight: (c_out, c_in, kh, kw), bias: (c_out) → (b, c_out, h', w')
pub fn conv2d(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: usize,
    pad: Padding,
) -> Result<Tensor> {
    let fast_ok = match bias {
        Some(b) => fast(&[x, weight, b]),
        None => fast(&[x, weight]),
    };
    if fast_ok && x.rank() == 4 && weight.rank() == 4 && stride > 0 {
        let op = custom::Conv2d {
            stride,
            pad: (pad.left, pad.right, pad.top, pad.bottom),
        };
        let (x, w) = (x.contiguous()?, weight.contiguous()?);
        return match bias {
            Some(b) => x.apply_op3(&w, &b.flatten_all()?.contiguous()?, op),
            None => x.apply_op2(&w, op),
        };
    }
    reference::conv2d(x, weight, bias, stride, pad)
}

/// Depthwise convolution, stride 1, `pad` zero pixels on every side (PyTorch's
/// `Conv2d(c, c, k, padding=pad, groups=c)`; differentiable).
///
/// # Shapes
/// x: (b, c, h, w), weight: (c, 1, k, k), bias: (c) → (b, c, h + 2·pad − k + 1, ...)
pub fn depthwise_conv2d(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    pad: usize,
) -> Result<Tensor> {
    let y = if fast(&[x, weight]) && x.rank() == 4 && weight.rank() == 4 {
        let (x, w) = (x.contiguous()?, weight.contiguous()?);
        x.apply_op2(&w, custom::DepthwiseConv2d { pad })?
    } else {
        reference::depthwise_conv2d(x, weight, pad)?
    };
    match bias {
        Some(b) => y.broadcast_add(&b.reshape((1, b.elem_count(), 1, 1))?),
        None => Ok(y),
    }
}

/// Group normalisation over (c/groups, h, w) per sample and group, with affine weight and bias,
/// optionally followed by SiLU (x·sigmoid(x)) — the pair taming uses before every conv.
///
/// # Shapes
/// x: (b, c, h, w), weight/bias: (c) → (b, c, h, w)
pub fn group_norm(
    x: &Tensor,
    num_groups: usize,
    weight: &Tensor,
    bias: &Tensor,
    eps: f64,
    fuse_silu: bool,
) -> Result<Tensor> {
    if fast(&[x, weight, bias]) && x.rank() == 4 && num_groups > 0 && x.dim(1)? % num_groups == 0 {
        let (x, w, b) = (x.contiguous()?, weight.contiguous()?, bias.contiguous()?);
        return x.apply_op3(
            &w,
            &b,
            custom::GroupNorm {
                groups: num_groups,
                eps,
                silu: fuse_silu,
            },
        );
    }
    reference::group_norm(x, num_groups, weight, bias, eps, fuse_silu)
}

/// GroupNorm (+ SiLU when `silu`) then a conv, plus `residual` when given: [`group_norm`],
/// [`conv2d`] and `residual + conv` with the same arguments, in one op where that is faster.
/// On the CPU in f32, when none of the tensors tracks a gradient (inference) and the conv runs
/// by Winograd, the normalisation is folded into the conv's input packing and the residual
/// into its output, so neither the normalised map nor the conv's own output is written out;
/// the result has the bits of the separate ops. Otherwise it is the separate ops
/// (differentiable).
///
/// # Shapes
/// x: (b, c_in, h, w), norm (groups, weight (c_in), bias (c_in), eps, silu),
/// weight: (c_out, c_in, kh, kw), bias: (c_out), residual: (b, c_out, h', w')
/// → (b, c_out, h', w')
pub fn group_norm_conv2d(
    x: &Tensor,
    norm: (usize, &Tensor, &Tensor, f64, bool),
    (weight, bias): (&Tensor, Option<&Tensor>),
    residual: Option<&Tensor>,
    stride: usize,
    pad: Padding,
) -> Result<Tensor> {
    let (groups, nw, nb, eps, silu) = norm;
    let mut ts = vec![x, nw, nb, weight];
    ts.extend(bias);
    ts.extend(residual);
    let inference = x.dtype() == DType::F32 && fast(&ts) && ts.iter().all(|t| !t.track_op());
    if inference && x.rank() == 4 && weight.rank() == 4 && stride > 0 {
        let op = crate::fused::NormConv2d {
            groups,
            eps,
            silu,
            norm_weight: nw.contiguous()?,
            norm_bias: nb.contiguous()?,
            weight: weight.contiguous()?,
            bias: bias.map(|b| b.flatten_all()?.contiguous()).transpose()?,
            residual: residual.map(|r| r.contiguous()).transpose()?,
            stride,
            pad: (pad.left, pad.right, pad.top, pad.bottom),
        };
        return x.contiguous()?.apply_op1_no_bwd(&op);
    }
    let h = group_norm(x, groups, nw, nb, eps, silu)?;
    let y = conv2d(&h, weight, bias, stride, pad)?;
    match residual {
        Some(r) => r + y,
        None => Ok(y),
    }
}

/// SiLU / swish: x·sigmoid(x).
pub fn silu(x: &Tensor) -> Result<Tensor> {
    if fast(&[x]) {
        return x
            .contiguous()?
            .apply_op1(custom::Activation(custom::Act::Silu));
    }
    reference::silu(x)
}

/// GELU in its tanh form (PyTorch's `gelu(approximate="tanh")`, transformers'
/// `gelu_pytorch_tanh`), differentiable, multi-threaded.
pub fn gelu_tanh(x: &Tensor) -> Result<Tensor> {
    if fast(&[x]) {
        return x
            .contiguous()?
            .apply_op1(custom::Activation(custom::Act::GeluTanh));
    }
    reference::gelu_tanh(x)
}

/// Quick GELU, x·σ(1.702·x) (OpenAI's CLIP, transformers' `quick_gelu`), differentiable,
/// multi-threaded.
pub fn quick_gelu(x: &Tensor) -> Result<Tensor> {
    if fast(&[x]) {
        return x
            .contiguous()?
            .apply_op1(custom::Activation(custom::Act::QuickGelu));
    }
    reference::quick_gelu(x)
}

/// Nearest-neighbour 2× upsampling (taming's `Upsample` before its conv), differentiable.
///
/// # Shapes
/// x: (b, c, h, w) → (b, c, 2h, 2w)
pub fn upsample_nearest2x(x: &Tensor) -> Result<Tensor> {
    if fast(&[x]) && x.rank() == 4 {
        return x.contiguous()?.apply_op1(custom::Upsample2x);
    }
    reference::upsample_nearest2x(x)
}

/// Layer normalisation over the last dimension (differentiable).
///
/// # Shapes
/// x: (..., d), weight/bias: (d) → (..., d)
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
    if fast(&[x, weight, bias]) && weight.rank() == 1 && bias.rank() == 1 {
        let (x, w, b) = (x.contiguous()?, weight.contiguous()?, bias.contiguous()?);
        return x.apply_op3(&w, &b, custom::LayerNorm { eps });
    }
    reference::layer_norm(x, weight, bias, eps)
}

/// GELU, exact (erf) form as PyTorch's default `nn.GELU()` / HF `"gelu"`.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    if fast(&[x]) {
        return x
            .contiguous()?
            .apply_op1(custom::Activation(custom::Act::Gelu));
    }
    reference::gelu(x)
}

/// Differentiable softmax over the last dimension.
pub fn softmax_last_dim(x: &Tensor) -> Result<Tensor> {
    if fast(&[x]) && x.rank() > 0 {
        return x.contiguous()?.apply_op1(custom::Softmax);
    }
    reference::softmax_last_dim(x)
}

/// Scaled dot-product attention, softmax(q·kᵀ·scale)·v, over every (batch, head).
///
/// # Shapes
/// q, k, v: (b, heads, n, d) → (b, heads, n, d)
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    attention_masked(q, k, v, scale, false)
}

/// Causal scaled dot-product attention (decoder self-attention): query i attends to keys
/// 0..=i only, softmax(q·kᵀ·scale + mask)·v with mask −∞ above the diagonal.
///
/// # Shapes
/// q, k, v: (b, heads, n, d) → (b, heads, n, d)
pub fn causal_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    attention_masked(q, k, v, scale, true)
}

fn attention_masked(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    causal: bool,
) -> Result<Tensor> {
    if fast(&[q, k, v]) && q.rank() == 4 && q.dims() == k.dims() && q.dims() == v.dims() {
        // The kernel reads q/k/v through their strides (head-split or channel-major views
        // need no copy). It writes (b, n, h, d): the result is a (b, h, n, d) view of it, so the usual
        // `.transpose(1, 2).reshape((b, n, h·d))` that merges the heads costs no copy.
        return q
            .apply_op3(k, v, custom::Attention { scale, causal })?
            .transpose(1, 2);
    }
    if causal {
        return reference::causal_attention(q, k, v, scale);
    }
    reference::attention(q, k, v, scale)
}

/// Linear layer with PyTorch's weight layout.
///
/// # Shapes
/// x: (..., in), weight: (out, in), bias: (out) → (..., out)
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let fast_ok = match bias {
        Some(b) => fast(&[x, weight, b]) && b.rank() == 1,
        None => fast(&[x, weight]),
    };
    if fast_ok && x.rank() >= 1 && weight.rank() == 2 {
        let (x, w) = (x.contiguous()?, weight.contiguous()?);
        return match bias {
            Some(b) => x.apply_op3(&w, &b.contiguous()?, custom::Linear),
            None => x.apply_op2(&w, custom::Linear),
        };
    }
    reference::linear(x, weight, bias)
}

/// Index of the nearest codebook row for every row of `z`, by squared Euclidean distance
/// ‖z‖² + ‖e‖² − 2·z·eᵀ (ties go to the lowest index, as `torch.argmin`).
///
/// # Shapes
/// z: (n, d), codebook: (k, d) → (n) u32
pub fn nearest_codebook(z: &Tensor, codebook: &Tensor) -> Result<Tensor> {
    if z.device().is_cpu() && codebook.device().is_cpu() && z.rank() == 2 && codebook.rank() == 2 {
        let z = z.to_dtype(DType::F32)?.contiguous()?;
        let e = codebook.to_dtype(DType::F32)?.contiguous()?;
        return z.apply_op2_no_bwd(&e, &custom::NearestCodebook);
    }
    reference::nearest_codebook(z, codebook)
}

/// Index of the codebook row with the largest inner product z·e for every row of `z` (IBQ's
/// `argmax softmax(z·eᵀ)`; ties go to the lowest index). Blocked over the codebook like
/// [`nearest_codebook`], so memory stays bounded for any codebook size.
///
/// # Shapes
/// z: (n, d), codebook: (k, d) → (n) u32
pub fn max_inner_product(z: &Tensor, codebook: &Tensor) -> Result<Tensor> {
    if z.device().is_cpu() && codebook.device().is_cpu() && z.rank() == 2 && codebook.rank() == 2 {
        let z = z.to_dtype(DType::F32)?.contiguous()?;
        let e = codebook.to_dtype(DType::F32)?.contiguous()?;
        return z.apply_op2_no_bwd(&e, &custom::MaxInnerProduct);
    }
    reference::max_inner_product(z, codebook)
}

// ---------------------------------------------------------------------------------------------
// bf16 inference (Precision::Bf16): weights rounded to bf16 and packed once, inputs rounded on
// every call, f32 accumulation (`vdpbf16ps`, or its portable emulation). No backward.

pub use crate::cpu::bf16::ConvAlgo as Bf16ConvAlgo;
pub use crate::cpu::bf16::Kernel as Bf16Kernel;

/// Tensor → contiguous f32 data on the CPU, for packing weights.
fn cpu_f32(t: &Tensor, what: &str) -> Result<Vec<f32>> {
    if !t.device().is_cpu() {
        candle_core::bail!("{what}: bf16 weights are packed on the CPU only");
    }
    t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()
}

/// A conv layer's weights rounded to bf16 and packed (once, at load) for [`conv2d_bf16`].
#[derive(Debug, Clone)]
pub struct Bf16Conv2d {
    weights: std::sync::Arc<crate::cpu::bf16::ConvWeights>,
    kernel: Bf16Kernel,
}

impl Bf16Conv2d {
    /// Packs the weights for [`Bf16ConvAlgo::Auto`]: Winograd F(2×2, 3×3) with bf16
    /// products for big 3×3 stride-1 convs of ≥ 128 channels in and out
    /// ([`crate::cpu::winograd::auto_bf16`]), else the direct conv.
    ///
    /// # Shapes
    /// weight: (c_out, c_in, kh, kw), bias: (c_out)
    pub fn new(
        weight: &Tensor,
        bias: Option<&Tensor>,
        stride: usize,
        pad: Padding,
        kernel: Bf16Kernel,
    ) -> Result<Self> {
        Self::with_algo(weight, bias, stride, pad, kernel, Bf16ConvAlgo::Auto)
    }

    /// [`Bf16Conv2d::new`] with the algorithm chosen ([`Bf16ConvAlgo::Winograd`]: 3×3
    /// stride-1 convs only).
    pub fn with_algo(
        weight: &Tensor,
        bias: Option<&Tensor>,
        stride: usize,
        pad: Padding,
        kernel: Bf16Kernel,
        algo: Bf16ConvAlgo,
    ) -> Result<Self> {
        let (_, _, kh, kw) = weight.dims4()?;
        if algo == Bf16ConvAlgo::Winograd && (kh, kw, stride) != (3, 3, 1) {
            candle_core::bail!(
                "conv2d_bf16: Winograd needs a 3x3 stride-1 conv, got {kh}x{kw} stride {stride}"
            );
        }
        Self::build(weight, bias, stride, pad, kernel, algo)
    }

    /// Whether an h × w input runs Winograd F(2×2, 3×3) on this conv's kernel (else the
    /// direct conv; `auto` never picks Winograd on AMX).
    pub fn runs_winograd(&self, h: usize, w: usize) -> bool {
        self.weights.runs_winograd_on(h, w, self.kernel)
    }

    fn build(
        weight: &Tensor,
        bias: Option<&Tensor>,
        stride: usize,
        pad: Padding,
        kernel: Bf16Kernel,
        algo: Bf16ConvAlgo,
    ) -> Result<Self> {
        let (co, ci, kh, kw) = weight.dims4()?;
        if stride == 0 {
            candle_core::bail!("conv2d_bf16: stride 0");
        }
        let b = match bias {
            Some(b) if b.elem_count() != co => {
                candle_core::bail!("conv2d_bf16: bias of {} for {co} channels", b.elem_count())
            }
            Some(b) => Some(cpu_f32(b, "conv2d_bf16")?),
            None => None,
        };
        let w = cpu_f32(weight, "conv2d_bf16")?;
        let pads = (pad.left, pad.right, pad.top, pad.bottom);
        let dims = (co, ci, kh, kw);
        let weights =
            crate::cpu::bf16::ConvWeights::with_algo(&w, b.as_deref(), dims, stride, pads, algo);
        Ok(Self {
            weights: std::sync::Arc::new(weights),
            kernel,
        })
    }
}

/// 2-D convolution (as [`conv2d`]) in bf16 with f32 accumulation, on the CPU.
///
/// # Shapes
/// x: (b, c_in, h, w) f32 → (b, c_out, h', w') f32
pub fn conv2d_bf16(x: &Tensor, w: &Bf16Conv2d) -> Result<Tensor> {
    if !x.device().is_cpu() || x.dtype() != DType::F32 {
        candle_core::bail!(
            "conv2d_bf16: needs an f32 input on the CPU, got {:?} on {:?}",
            x.dtype(),
            x.device().location()
        );
    }
    x.contiguous()?.apply_op1_no_bwd(&custom::Bf16ConvOp {
        weights: w.weights.clone(),
        kernel: w.kernel,
    })
}

/// [`group_norm_conv2d`] on bf16-packed weights ([`conv2d_bf16`], inference only): GroupNorm
/// (+ SiLU) in f32, the bf16 conv, then `residual` added; where the conv runs by Winograd the
/// norm and the residual are folded into its packing, with the bits of the separate steps.
///
/// # Shapes
/// x: (b, c_in, h, w) f32, norm (groups, weight (c_in), bias (c_in), eps, silu),
/// residual: (b, c_out, h', w') → (b, c_out, h', w') f32
pub fn group_norm_conv2d_bf16(
    x: &Tensor,
    norm: (usize, &Tensor, &Tensor, f64, bool),
    w: &Bf16Conv2d,
    residual: Option<&Tensor>,
) -> Result<Tensor> {
    let (groups, nw, nb, eps, silu) = norm;
    let mut ts = vec![x, nw, nb];
    ts.extend(residual);
    if !ts
        .iter()
        .all(|t| t.device().is_cpu() && t.dtype() == DType::F32)
    {
        candle_core::bail!(
            "conv2d_bf16: needs f32 inputs on the CPU, got {:?} on {:?}",
            x.dtype(),
            x.device().location()
        );
    }
    x.contiguous()?
        .apply_op1_no_bwd(&crate::fused::NormConv2dBf16 {
            groups,
            eps,
            silu,
            norm_weight: nw.contiguous()?,
            norm_bias: nb.contiguous()?,
            weights: w.weights.clone(),
            kernel: w.kernel,
            residual: residual.map(|r| r.contiguous()).transpose()?,
        })
}

/// A linear layer's weights rounded to bf16 and packed (once, at load) for [`linear_bf16`].
#[derive(Debug, Clone)]
pub struct Bf16Linear {
    weights: std::sync::Arc<crate::cpu::bf16::LinearWeights>,
    kernel: Bf16Kernel,
}

impl Bf16Linear {
    /// # Shapes
    /// weight: (out, in) in PyTorch's layout, bias: (out)
    pub fn new(weight: &Tensor, bias: Option<&Tensor>, kernel: Bf16Kernel) -> Result<Self> {
        let (out, inp) = weight.dims2()?;
        let b = match bias {
            Some(b) if b.elem_count() != out => {
                candle_core::bail!("linear_bf16: bias of {} for {out} outputs", b.elem_count())
            }
            Some(b) => Some(cpu_f32(b, "linear_bf16")?),
            None => None,
        };
        let w = cpu_f32(weight, "linear_bf16")?;
        let weights = crate::cpu::bf16::LinearWeights::new(&w, b.as_deref(), inp, out);
        Ok(Self {
            weights: std::sync::Arc::new(weights),
            kernel,
        })
    }

    /// The code path the weights were packed for.
    pub fn kernel(&self) -> Bf16Kernel {
        self.kernel
    }
}

/// Linear layer (as [`linear`]) in bf16 with f32 accumulation, on the CPU.
///
/// # Shapes
/// x: (..., in) f32 → (..., out) f32
pub fn linear_bf16(x: &Tensor, w: &Bf16Linear) -> Result<Tensor> {
    if !x.device().is_cpu() || x.dtype() != DType::F32 || x.rank() == 0 {
        candle_core::bail!(
            "linear_bf16: needs an f32 input of rank ≥ 1 on the CPU, got {:?} {:?} on {:?}",
            x.dtype(),
            x.dims(),
            x.device().location()
        );
    }
    x.contiguous()?.apply_op1_no_bwd(&custom::Bf16LinearOp {
        weights: w.weights.clone(),
        kernel: w.kernel,
    })
}
