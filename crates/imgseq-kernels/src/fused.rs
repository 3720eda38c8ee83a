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
        let y = with_data::<f32, _>(&self.norm_weight, |nw| {
            with_data::<f32, _>(&self.norm_bias, |nb| {
                with_data::<f32, _>(&self.weight, |w| {
                    let norm = conv::PreNorm {
                        groups: self.groups,
                        weight: nw,
                        bias: nb,
                        eps: self.eps,
                        silu: self.silu,
                    };
                    match &self.bias {
                        Some(b) => with_data::<f32, _>(b, |b| {
                            if b.len() != g.co {
                                bail!("conv2d: bias of {} for {} output channels", b.len(), g.co);
                            }
                            Ok(conv::conv2d_normed(x, &norm, w, Some(b), &g))
                        }),
                        None => Ok(conv::conv2d_normed(x, &norm, w, None, &g)),
                    }
                })
            })
        })?;
        let (ho, wo) = g.out_hw();
        Ok((CpuStorage::F32(y), Shape::from((g.b, g.co, ho, wo))))
    }
}
