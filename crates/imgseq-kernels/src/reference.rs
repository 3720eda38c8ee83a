//! The original plain-candle composites of every op in [`crate::ops`].
//!
//! They are the numerical reference for the custom CPU kernels (see `tests/`) and the path
//! used on non-CPU devices and for dtypes the kernels do not cover (f16/bf16). Every function
//! here is differentiable through candle's autograd.

use crate::padding::Padding;
use candle_core::{DType, Result, Tensor, D};

/// Depthwise convolution as candle's grouped convolution (one group a channel).
pub fn depthwise_conv2d(x: &Tensor, weight: &Tensor, pad: usize) -> Result<Tensor> {
    x.conv2d(weight, pad, 1, 1, x.dim(1)?)
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
    let x = if pad.is_symmetric() {
        x.clone()
    } else {
        x.pad_with_zeros(D::Minus1, pad.left, pad.right)?
            .pad_with_zeros(D::Minus2, pad.top, pad.bottom)?
    };
    let p = if pad.is_symmetric() { pad.left } else { 0 };
    let y = x.conv2d(weight, p, stride, 1, 1)?;
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
    let (b, c, h, w) = x.dims4()?;
    let xg = x.reshape((b, num_groups, (c / num_groups) * h * w))?;
    let mean = xg.mean_keepdim(D::Minus1)?;
    let xc = xg.broadcast_sub(&mean)?;
    let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
    let xn = xc
        .broadcast_div(&(var + eps)?.sqrt()?)?
        .reshape((b, c, h, w))?;
    let y = xn
        .broadcast_mul(&weight.reshape((1, c, 1, 1))?)?
        .broadcast_add(&bias.reshape((1, c, 1, 1))?)?;
    if fuse_silu {
        silu(&y)
    } else {
        Ok(y)
    }
}

/// SiLU / swish: x·sigmoid(x).
pub fn silu(x: &Tensor) -> Result<Tensor> {
    x.silu()
}

/// GELU-tanh (candle's `gelu`).
pub fn gelu_tanh(x: &Tensor) -> Result<Tensor> {
    x.gelu()
}

/// Quick GELU: x·σ(1.702·x) of candle's ops.
pub fn quick_gelu(x: &Tensor) -> Result<Tensor> {
    x * sigmoid(&(x * 1.702)?)?
}

/// σ(x) = 1 / (1 + e^−x) of candle's element-wise ops.
fn sigmoid(x: &Tensor) -> Result<Tensor> {
    (x.neg()?.exp()? + 1.0)?.recip()
}

/// Nearest-neighbour 2× upsampling (candle's, whose backward is a grouped conv of ones).
///
/// # Shapes
/// x: (b, c, h, w) → (b, c, 2h, 2w)
pub fn upsample_nearest2x(x: &Tensor) -> Result<Tensor> {
    let (_, _, h, w) = x.dims4()?;
    x.upsample_nearest2d(2 * h, 2 * w)
}

/// Layer normalisation over the last dimension (differentiable).
///
/// # Shapes
/// x: (..., d), weight/bias: (d) → (..., d)
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
    let mean = x.mean_keepdim(D::Minus1)?;
    let xc = x.broadcast_sub(&mean)?;
    let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
    xc.broadcast_div(&(var + eps)?.sqrt()?)?
        .broadcast_mul(weight)?
        .broadcast_add(bias)
}

/// GELU, exact (erf) form as PyTorch's default `nn.GELU()` / HF `"gelu"`.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    x.gelu_erf()
}

/// Differentiable softmax over the last dimension.
pub fn softmax_last_dim(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}

/// Scaled dot-product attention, softmax(q·kᵀ·scale)·v, over every (batch, head).
///
/// # Shapes
/// q, k, v: (b, heads, n, d) → (b, heads, n, d)
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    let att = (q.contiguous()?.matmul(&k.t()?.contiguous()?)? * scale)?;
    let att = softmax_last_dim(&att)?;
    att.matmul(&v.contiguous()?)
}

/// Causal attention: scores above the diagonal (key j > query i) set to −∞ before the softmax.
///
/// # Shapes
/// q, k, v: (b, heads, n, d) → (b, heads, n, d)
pub fn causal_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    let n = q.dim(2)?;
    let mask: Vec<f32> = (0..n)
        .flat_map(|i| (0..n).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    let mask = Tensor::from_vec(mask, (n, n), q.device())?.to_dtype(q.dtype())?;
    let att = (q.contiguous()?.matmul(&k.t()?.contiguous()?)? * scale)?;
    let att = att.broadcast_add(&mask)?;
    let att = softmax_last_dim(&att)?;
    att.matmul(&v.contiguous()?)
}

/// Linear layer with PyTorch's weight layout.
///
/// # Shapes
/// x: (..., in), weight: (out, in), bias: (out) → (..., out)
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let dims = x.dims().to_vec();
    let inp = *dims.last().expect("linear input has no dims");
    let rows = x.elem_count() / inp;
    let y = x.reshape((rows, inp))?.matmul(&weight.t()?)?;
    let y = match bias {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    };
    let mut out = dims;
    *out.last_mut().unwrap() = weight.dim(0)?;
    y.reshape(out)
}

/// Index of the nearest codebook row for every row of `z`, by squared Euclidean distance
/// ‖z‖² + ‖e‖² − 2·z·eᵀ (ties go to the lowest index, as `torch.argmin`).
///
/// # Shapes
/// z: (n, d), codebook: (k, d) → (n) u32
pub fn nearest_codebook(z: &Tensor, codebook: &Tensor) -> Result<Tensor> {
    let z = z.to_dtype(DType::F32)?;
    let e = codebook.to_dtype(DType::F32)?;
    let z2 = z.sqr()?.sum_keepdim(1)?; // (n, 1)
    let e2 = e.sqr()?.sum(1)?.unsqueeze(0)?; // (1, k)
    let d = z2.broadcast_add(&e2)?.sub(&(z.matmul(&e.t()?)? * 2.0)?)?;
    d.argmin(1)
}

/// Index of the codebook row with the largest inner product (ties → lowest index).
///
/// # Shapes
/// z: (n, d), codebook: (k, d) → (n) u32
pub fn max_inner_product(z: &Tensor, codebook: &Tensor) -> Result<Tensor> {
    let z = z.to_dtype(DType::F32)?;
    let e = codebook.to_dtype(DType::F32)?;
    z.matmul(&e.t()?)?.neg()?.argmin(1)
}
