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
        let conv = crate::custom::Conv2d {
            stride: self.stride,
            pad: self.pad,
        };
        let g = conv.geom(x, self.weight.dims())?;
        check_norm(self.groups, &self.norm_weight, g.ci)?;
        Ok(g)
    }
}

/// The residual, when given, has the output's dims.
fn check_residual(residual: Option<&Tensor>, out: [usize; 4]) -> Result<()> {
    match residual {
        Some(r) if r.dims() != out => {
            bail!("conv2d: residual {:?} for an output {out:?}", r.dims())
        }
        _ => Ok(()),
    }
}

/// The GroupNorm's groups and weights fit `c` channels.
fn check_norm(groups: usize, weight: &Tensor, c: usize) -> Result<()> {
    if groups == 0 || !c.is_multiple_of(groups) || weight.elem_count() != c {
        bail!(
            "group_norm: {groups} groups and {} weights for {c} channels",
            weight.elem_count()
        );
    }
    Ok(())
}

impl CustomOp1 for NormConv2d {
    fn name(&self) -> &'static str {
        "imgseq-group-norm-conv2d"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let g = self.geom(l.dims())?;
        let x = cpu::slice::<f32>(s, l)?;
        let (ho, wo) = g.out_hw();
        check_residual(self.residual.as_ref(), [g.b, g.co, ho, wo])?;
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
        let (w, d) = (&self.weights, l.dims());
        let (ho, wo) = crate::custom::bf16_out_hw(w, d)?;
        check_norm(self.groups, &self.norm_weight, d[1])?;
        check_residual(self.residual.as_ref(), [d[0], w.co, ho, wo])?;
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
