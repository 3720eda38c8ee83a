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

/// SiLU / swish: x·sigmoid(x).
pub fn silu(x: &Tensor) -> Result<Tensor> {
    if fast(&[x]) {
        return x
            .contiguous()?
            .apply_op1(custom::Activation(custom::Act::Silu));
    }
    reference::silu(x)
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
