//! Inference-only fusions of two ops ([`crate::ops::group_norm_conv2d`]): no backward, used
//! only when nothing asks for a gradient.

use crate::cpu::{self, conv, with_data};
use candle_core::{bail, CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};

/// GroupNorm (+ SiLU) then a conv, on contiguous f32 CPU tensors ([`conv::conv2d_normed`]).
pub struct NormConv2d {
    pub groups: usize,
    pub eps: f64,
    pub silu: bool,
    /// (ci) each
    pub norm_weight: Tensor,
    pub norm_bias: Tensor,
    /// (co, ci, kh, kw)
    pub weight: Tensor,
    /// (co)
    pub bias: Option<Tensor>,
    /// (b, co, ho, wo), added to the output
    pub residual: Option<Tensor>,
    pub stride: usize,
    /// (left, right, top, bottom)
    pub pad: (usize, usize, usize, usize),
}

impl NormConv2d {
    fn geom(&self, x: &[usize]) -> Result<conv::Geom> {
        let w = self.weight.dims();
        if x.len() != 4 || w.len() != 4 || x[1] != w[1] {
            bail!("conv2d: input {x:?} and weight {w:?} do not match");
        }
        if self.groups == 0
            || !x[1].is_multiple_of(self.groups)
            || self.norm_weight.elem_count() != x[1]
        {
            bail!(
                "group_norm: {} groups and {} weights for {} channels",
                self.groups,
                self.norm_weight.elem_count(),
                x[1]
            );
        }
        let (l, r, t, b) = self.pad;
        if x[2] + t + b < w[2] || x[3] + l + r < w[3] || self.stride == 0 {
            bail!("conv2d: kernel {w:?} larger than padded input {x:?}");
        }
        Ok(conv::Geom {
            b: x[0],
            ci: x[1],
            h: x[2],
            w: x[3],
            co: w[0],
            kh: w[2],
            kw: w[3],
            s: self.stride,
            pad: self.pad,
        })
    }
}

impl CustomOp1 for NormConv2d {
    fn name(&self) -> &'static str {
        "imgseq-group-norm-conv2d"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let g = self.geom(l.dims())?;
        let x = cpu::slice::<f32>(s, l)?;
        let (ho, wo) = g.out_hw();
        if let Some(r) = &self.residual {
            if r.dims() != [g.b, g.co, ho, wo] {
                bail!(
                    "conv2d: residual {:?} for an output ({}, {}, {ho}, {wo})",
                    r.dims(),
                    g.b,
                    g.co
                );
            }
        }
        let bias = self.bias.as_ref();
        let y = with_all(&[&self.norm_weight, &self.norm_bias, &self.weight], |t| {
            with_opt(bias, |b| {
                if b.is_some_and(|b| b.len() != g.co) {
                    bail!("conv2d: bias for {} output channels expected", g.co);
                }
                with_opt(self.residual.as_ref(), |r| {
                    let norm = conv::PreNorm {
                        groups: self.groups,
                        weight: t[0],
                        bias: t[1],
                        eps: self.eps,
                        silu: self.silu,
                    };
                    Ok(conv::conv2d_normed(x, &norm, t[2], b, r, &g))
                })
            })
        })?;
        Ok((CpuStorage::F32(y), Shape::from((g.b, g.co, ho, wo))))
    }
}

/// GroupNorm (+ SiLU) then a conv on bf16-packed weights, plus a residual
/// ([`conv::conv2d_bf16_normed`]).
pub struct NormConv2dBf16 {
    pub groups: usize,
    pub eps: f64,
    pub silu: bool,
    /// (ci) each
    pub norm_weight: Tensor,
    pub norm_bias: Tensor,
    pub weights: std::sync::Arc<cpu::bf16::ConvWeights>,
    pub kernel: cpu::bf16::Kernel,
    /// (b, co, ho, wo), added to the output
    pub residual: Option<Tensor>,
}

impl CustomOp1 for NormConv2dBf16 {
    fn name(&self) -> &'static str {
        "imgseq-group-norm-conv2d-bf16"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let w = &self.weights;
        let d = l.dims();
        if d.len() != 4 || d[1] != w.ci {
            bail!("conv2d_bf16: input {d:?} for {} input channels", w.ci);
        }
        if self.groups == 0
            || !d[1].is_multiple_of(self.groups)
            || self.norm_weight.elem_count() != d[1]
        {
            bail!(
                "group_norm: {} groups and {} weights for {} channels",
                self.groups,
                self.norm_weight.elem_count(),
                d[1]
            );
        }
        let (l_, r, t, b) = w.pad;
        if d[2] + t + b < w.kh || d[3] + l_ + r < w.kw {
            bail!(
                "conv2d_bf16: kernel {}x{} larger than padded input {d:?}",
                w.kh,
                w.kw
            );
        }
        let (ho, wo) = w.out_hw(d[2], d[3]);
        if let Some(r) = &self.residual {
            if r.dims() != [d[0], w.co, ho, wo] {
                bail!(
                    "conv2d_bf16: residual {:?} for an output ({}, {}, {ho}, {wo})",
                    r.dims(),
                    d[0],
                    w.co
                );
            }
        }
        let x = cpu::slice::<f32>(s, l)?;
        let y = with_all(&[&self.norm_weight, &self.norm_bias], |t| {
            with_opt(self.residual.as_ref(), |r| {
                let norm = conv::PreNorm {
                    groups: self.groups,
                    weight: t[0],
                    bias: t[1],
                    eps: self.eps,
                    silu: self.silu,
                };
                Ok(conv::conv2d_bf16_normed(
                    x,
                    Some(&norm),
                    r,
                    (d[0], d[2], d[3]),
                    w,
                    self.kernel,
                ))
            })
        })?;
        Ok((CpuStorage::F32(y), Shape::from((d[0], w.co, ho, wo))))
    }
}

/// Runs `f` on the f32 data of every tensor of `ts` (each contiguous, on the CPU).
fn with_all<R>(ts: &[&Tensor], f: impl FnOnce(&[&[f32]]) -> Result<R>) -> Result<R> {
    fn go<R>(
        ts: &[&Tensor],
        got: &mut Vec<&[f32]>,
        f: impl FnOnce(&[&[f32]]) -> Result<R>,
    ) -> Result<R> {
        match ts.split_first() {
            None => f(got),
            Some((t, rest)) => with_data::<f32, _>(t, |d| {
                // The slices outlive this call only inside `f`, which runs within it.
                let mut more: Vec<&[f32]> = got.clone();
                more.push(d);
                go(rest, &mut more, f)
            }),
        }
    }
    go(ts, &mut Vec::new(), f)
}

/// [`with_data`] of an optional tensor.
fn with_opt<R>(t: Option<&Tensor>, f: impl FnOnce(Option<&[f32]>) -> Result<R>) -> Result<R> {
    match t {
        Some(t) => with_data::<f32, _>(t, |d| f(Some(d))),
        None => f(None),
    }
}
