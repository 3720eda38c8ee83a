//! The taming-transformers VQGAN's layers: Conv2d and GroupNorm (each with its bf16 /
//! fused inference path), ResnetBlock, AttnBlock, Downsample and Upsample — what
//! [`crate::model`]'s Encoder and Decoder are built of, under the same taming names.
//!
//! Shapes in trailing comments use b = batch, c = channels, h × w = spatial size.

use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;
use imgseq_kernels::ops::{self, Bf16Conv2d, Bf16Kernel, Padding};
use imgseq_kernels::Precision;

/// taming's `Normalize`: GroupNorm with 32 groups (diffusers: `norm_num_groups`), eps 1e-6,
/// affine.
const GN_EPS: f64 = 1e-6;

/// A PyTorch `nn.Conv2d` (weight `[c_out, c_in, k, k]`, bias `[c_out]`).
#[derive(Debug, Clone)]
pub struct Conv2d {
    weight: Tensor, // (c_out, c_in, k, k)
    bias: Tensor,   // (c_out)
    stride: usize,
    pad: Padding,
    /// The weights packed for [`Precision::Bf16`] inference; `None`: f32.
    bf16: Option<Bf16Conv2d>,
}

impl Conv2d {
    pub fn new(
        c_in: usize,
        c_out: usize,
        k: usize,
        stride: usize,
        pad: Padding,
        vb: VarBuilder,
    ) -> Result<Self> {
        let weight = vb.get((c_out, c_in, k, k), "weight")?;
        let bias = vb.get(c_out, "bias")?;
        Ok(Self {
            weight,
            bias,
            stride,
            pad,
            bf16: None,
        })
    }

    /// A conv of given tensors (a Conv3d folded into a Conv2d, say: `crate::emu3`).
    pub(crate) fn from_tensors(weight: Tensor, bias: Tensor, stride: usize, pad: Padding) -> Self {
        Self {
            weight,
            bias,
            stride,
            pad,
            bf16: None,
        }
    }

    /// Runs the layer in `precision`: bf16 packs the weights once (on `kernel`); f32 drops
    /// the packed copy.
    pub fn set_precision(&mut self, precision: Precision, kernel: Bf16Kernel) -> Result<()> {
        self.bf16 = match precision {
            Precision::F32 => None,
            Precision::Bf16 => Some(Bf16Conv2d::new(
                &self.weight,
                Some(&self.bias),
                self.stride,
                self.pad,
                kernel,
            )?),
        };
        Ok(())
    }

    /// # Shapes
    /// x: (b, c_in, h, w) → (b, c_out, h', w')
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match &self.bf16 {
            Some(p) => ops::conv2d_bf16(x, p),
            None => ops::conv2d(x, &self.weight, Some(&self.bias), self.stride, self.pad),
        }
    }

    /// `norm` (then swish when `then_swish`), this conv, then `residual` added (a map of the
    /// output's shape), as one op where the kernels fuse them ([`ops::group_norm_conv2d`]:
    /// f32 inference).
    ///
    /// # Shapes
    /// x: (b, c_in, h, w), residual: (b, c_out, h', w') → (b, c_out, h', w')
    pub fn forward_normed(
        &self,
        x: &Tensor,
        norm: &GroupNorm,
        then_swish: bool,
        residual: Option<&Tensor>,
    ) -> Result<Tensor> {
        let n = (norm.groups, &norm.weight, &norm.bias, GN_EPS, then_swish);
        if let Some(p) = &self.bf16 {
            return ops::group_norm_conv2d_bf16(x, n, p, residual);
        }
        let conv = (&self.weight, Some(&self.bias));
        ops::group_norm_conv2d(x, n, conv, residual, self.stride, self.pad)
    }
}

/// Every conv of a block, for [`VqModel::set_precision`].
pub(crate) type ConvVisitor<'a> = dyn FnMut(&mut Conv2d) -> Result<()> + 'a;

/// taming's `Normalize(c)` = `GroupNorm(32, c, eps=1e-6, affine=True)` (`groups` groups for
/// diffusers), optionally fused with the swish that follows it almost everywhere.
#[derive(Debug, Clone)]
pub struct GroupNorm {
    weight: Tensor, // (c)
    bias: Tensor,   // (c)
    groups: usize,
}

impl GroupNorm {
    pub fn new(c: usize, groups: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            weight: vb.get(c, "weight")?,
            bias: vb.get(c, "bias")?,
            groups,
        })
    }

    /// # Shapes
    /// x: (b, c, h, w) → (b, c, h, w)
    pub fn forward(&self, x: &Tensor, then_swish: bool) -> Result<Tensor> {
        ops::group_norm(x, self.groups, &self.weight, &self.bias, GN_EPS, then_swish)
    }
}

/// norm1 → swish → conv1 → norm2 → swish → (dropout) → conv2, plus the shortcut.
/// taming's Encoder/Decoder build it with `temb_channels=0`, so there is no `temb_proj`;
/// dropout is a no-op at inference.
#[derive(Debug, Clone)]
pub struct ResnetBlock {
    norm1: GroupNorm,
    conv1: Conv2d, // 3×3, c_in → c_out
    norm2: GroupNorm,
    conv2: Conv2d, // 3×3, c_out → c_out
    /// `nin_shortcut`, a 1×1 conv, only when the channel count changes (taming's default
    /// `conv_shortcut=False`; the 3×3 `conv_shortcut` variant is never used by VQGAN).
    nin_shortcut: Option<Conv2d>,
}

impl ResnetBlock {
    pub fn new(c_in: usize, c_out: usize, groups: usize, vb: VarBuilder) -> Result<Self> {
        let p1 = Padding::same(1);
        let nin_shortcut = if c_in != c_out {
            Some(Conv2d::new(
                c_in,
                c_out,
                1,
                1,
                Padding::same(0),
                vb.pp("nin_shortcut"),
            )?)
        } else {
            None
        };
        Ok(Self {
            norm1: GroupNorm::new(c_in, groups, vb.pp("norm1"))?,
            conv1: Conv2d::new(c_in, c_out, 3, 1, p1, vb.pp("conv1"))?,
            norm2: GroupNorm::new(c_out, groups, vb.pp("norm2"))?,
            conv2: Conv2d::new(c_out, c_out, 3, 1, p1, vb.pp("conv2"))?,
            nin_shortcut,
        })
    }

    pub(crate) fn for_each_conv(&mut self, f: &mut ConvVisitor) -> Result<()> {
        f(&mut self.conv1)?;
        f(&mut self.conv2)?;
        self.nin_shortcut.iter_mut().try_for_each(f)
    }

    /// # Shapes
    /// x: (b, c_in, h, w) → (b, c_out, h, w)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.conv1.forward_normed(x, &self.norm1, true, None)?; // (b, c_out, h, w)
        let x = match &self.nin_shortcut {
            Some(s) => s.forward(x)?, // (b, c_out, h, w)
            None => x.clone(),
        };
        // x + conv2(swish(norm2(h)))
        self.conv2.forward_normed(&h, &self.norm2, true, Some(&x))
    }
}

/// Single-head self-attention over the h·w positions, with 1×1 convs for q, k, v and the
/// output projection, and a residual connection.
#[derive(Debug, Clone)]
pub struct AttnBlock {
    norm: GroupNorm,
    q: Conv2d,        // 1×1, c → c
    k: Conv2d,        // 1×1, c → c
    v: Conv2d,        // 1×1, c → c
    proj_out: Conv2d, // 1×1, c → c
}

impl AttnBlock {
    pub fn new(c: usize, groups: usize, vb: VarBuilder) -> Result<Self> {
        let p0 = Padding::same(0);
        Ok(Self {
            norm: GroupNorm::new(c, groups, vb.pp("norm"))?,
            q: Conv2d::new(c, c, 1, 1, p0, vb.pp("q"))?,
            k: Conv2d::new(c, c, 1, 1, p0, vb.pp("k"))?,
            v: Conv2d::new(c, c, 1, 1, p0, vb.pp("v"))?,
            proj_out: Conv2d::new(c, c, 1, 1, p0, vb.pp("proj_out"))?,
        })
    }

    pub(crate) fn for_each_conv(&mut self, f: &mut ConvVisitor) -> Result<()> {
        [&mut self.q, &mut self.k, &mut self.v, &mut self.proj_out]
            .into_iter()
            .try_for_each(f)
    }

    /// # Shapes
    /// x: (b, c, h, w) → (b, c, h, w)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = x.dims4()?;
        let hn = self.norm.forward(x, false)?; // no swish before attention
                                               // (b, c, h, w) → (b, 1, h·w, c): one head, positions in raster order.
        let seq = |t: Tensor| -> Result<Tensor> {
            t.reshape((b, c, h * w))?.transpose(1, 2)?.unsqueeze(1)
        };
        let q = seq(self.q.forward(&hn)?)?; // (b, 1, hw, c)
        let k = seq(self.k.forward(&hn)?)?; // (b, 1, hw, c)
        let v = seq(self.v.forward(&hn)?)?; // (b, 1, hw, c)
        let a = ops::attention(&q, &k, &v, (c as f64).powf(-0.5))?; // (b, 1, hw, c)
        let a = a.squeeze(1)?.transpose(1, 2)?.reshape((b, c, h, w))?; // (b, c, h, w)
        x + self.proj_out.forward(&a)?
    }
}

/// Halves h and w with a stride-2 3×3 conv.
#[derive(Debug, Clone)]
pub struct Downsample {
    pub(crate) conv: Conv2d, // 3×3 stride 2, c → c
}

impl Downsample {
    pub fn new(c: usize, vb: VarBuilder) -> Result<Self> {
        // Asymmetric padding: taming pads with `F.pad(x, (0, 1, 0, 1))` — one zero column on
        // the right and one zero row at the bottom, nothing left/top — and then convolves with
        // padding 0 ("no asymmetric padding in torch conv, must do it ourselves"). A symmetric
        // padding of 1 would shift every output pixel by one input pixel.
        let conv = Conv2d::new(c, c, 3, 2, Padding::TAMING_DOWN, vb.pp("conv"))?;
        Ok(Self { conv })
    }

    /// # Shapes
    /// x: (b, c, h, w) → (b, c, h/2, w/2) for even h, w
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.conv.forward(x)
    }
}

/// Doubles h and w: nearest-neighbour ×2, then a 3×3 conv.
#[derive(Debug, Clone)]
pub struct Upsample {
    pub(crate) conv: Conv2d, // 3×3, c → c
}

impl Upsample {
    pub fn new(c: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            conv: Conv2d::new(c, c, 3, 1, Padding::same(1), vb.pp("conv"))?,
        })
    }

    /// # Shapes
    /// x: (b, c, h, w) → (b, c, 2h, 2w)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = ops::upsample_nearest2x(x)?; // (b, c, 2h, 2w)
        self.conv.forward(&x)
    }
}
