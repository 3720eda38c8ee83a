//! The FID network as the published figures use it: `pytorch-fid`'s `InceptionV3([3])` with
//! `use_fid_inception=True` (`pytorch_fid/inception.py`), the TensorFlow FID Inception
//! (`inception-2015-12-05`) ported to PyTorch, up to its 2048-d pool3 features.
//!
//! pictures (b, 3, h, w) in [0, 1]
//!   → bilinear resize to 299×299 (`F.interpolate(mode="bilinear", align_corners=False)`,
//!     no antialiasing) → `2x − 1`
//!   → stem: `Conv2d_1a_3x3` (stride 2), `Conv2d_2a_3x3`, `Conv2d_2b_3x3` (pad 1), max-pool
//!     3/2, `Conv2d_3b_1x1`, `Conv2d_4a_3x3`, max-pool 3/2
//!   → `Mixed_5b..5d` (FIDInceptionA: the pool branch's 3×3 average excludes the padding),
//!     `Mixed_6a` (InceptionB), `Mixed_6b..6e` (FIDInceptionC), `Mixed_7a` (InceptionD),
//!     `Mixed_7b` (FIDInceptionE_1), `Mixed_7c` (FIDInceptionE_2: a 3×3 max-pool branch)
//!   → global average → (b, 2048).
//!
//! Every conv is torchvision's `BasicConv2d`: conv without bias, BatchNorm (eps 0.001, running
//! statistics) and ReLU; the BatchNorm is folded into the conv's weight and bias at load.
//! Weights: the released `pt_inception-2015-12-05-6726825d.pth` (torchvision's `Inception3`
//! names, `Mixed_5b.branch1x1.conv.weight`, `...bn.running_var`; its `fc.*` classifier is not
//! used) or the same tensors as safetensors. Read without executing the pickle; never
//! downloaded.

use candle_core::{DType, Device, Tensor, D};
use candle_nn::VarBuilder;
use imgseq_core::weights::{model_error, AuditedWeights};
use imgseq_core::{Error, Result};
use imgseq_kernels::ops::{self, Padding};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// Width of the pool3 features.
pub const FEATURES: usize = 2048;
/// The side the network resizes every picture to.
pub const SIDE: usize = 299;
/// torchvision's `BasicConv2d` BatchNorm epsilon.
const BN_EPS: f64 = 0.001;

/// `InceptionV3`'s options, upstream names and defaults (pytorch-fid's FID features:
/// `output_blocks=[3]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InceptionConfig {
    /// Bilinear resize of the input to 299×299.
    pub resize_input: bool,
    /// Scale the input from [0, 1] to [−1, 1].
    pub normalize_input: bool,
}

impl Default for InceptionConfig {
    fn default() -> Self {
        Self {
            resize_input: true,
            normalize_input: true,
        }
    }
}

/// torchvision's `BasicConv2d` with its BatchNorm folded in: `relu(conv(x) · s + t)`.
struct BasicConv2d {
    weight: Tensor,
    bias: Tensor,
    stride: usize,
    pad: Padding,
}

impl BasicConv2d {
    /// `conv.weight` (c_out, c_in, kh, kw) and `bn.{weight,bias,running_mean,running_var}`.
    fn new(
        c_in: usize,
        c_out: usize,
        (kh, kw): (usize, usize),
        stride: usize,
        (ph, pw): (usize, usize),
        vb: VarBuilder,
    ) -> candle_core::Result<Self> {
        let w = vb.pp("conv").get((c_out, c_in, kh, kw), "weight")?;
        let bn = vb.pp("bn");
        let gamma = bn.get(c_out, "weight")?;
        let beta = bn.get(c_out, "bias")?;
        let mean = bn.get(c_out, "running_mean")?;
        let var = bn.get(c_out, "running_var")?;
        let scale = gamma.broadcast_div(&(var + BN_EPS)?.sqrt()?)?;
        let weight = w.broadcast_mul(&scale.reshape((c_out, 1, 1, 1))?)?;
        let bias = (beta - mean.mul(&scale)?)?;
        Ok(Self {
            weight,
            bias,
            stride,
            pad: Padding {
                left: pw,
                right: pw,
                top: ph,
                bottom: ph,
            },
        })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        ops::conv2d(x, &self.weight, Some(&self.bias), self.stride, self.pad)?.relu()
    }
}

/// A `BasicConv2d` of a square kernel `k`, stride 1 and padding `p`.
fn conv(c_in: usize, c_out: usize, k: usize, p: usize, vb: VarBuilder) -> CResult<BasicConv2d> {
    BasicConv2d::new(c_in, c_out, (k, k), 1, (p, p), vb)
}

/// A 1×n conv (padding (0, n/2)) when `wide`, else an n×1 conv (padding (n/2, 0)).
fn strip(c_in: usize, c_out: usize, n: usize, wide: bool, vb: VarBuilder) -> CResult<BasicConv2d> {
    let (k, p) = if wide {
        ((1, n), (0, n / 2))
    } else {
        ((n, 1), (n / 2, 0))
    };
    BasicConv2d::new(c_in, c_out, k, 1, p, vb)
}

type CResult<T> = candle_core::Result<T>;

/// Runs convs one after another.
fn chain(convs: &[BasicConv2d], x: &Tensor) -> CResult<Tensor> {
    let mut h = x.clone();
    for c in convs {
        h = c.forward(&h)?;
    }
    Ok(h)
}

/// `F.max_pool2d(x, 3, stride)` without padding (floor mode).
fn max_pool3(x: &Tensor, stride: usize) -> CResult<Tensor> {
    x.max_pool2d_with_stride(3, stride)
}

/// `F.max_pool2d(x, 3, stride=1, padding=1)`: edge replication pads as −∞ would (the edge
/// value is in every window the padding reaches).
fn max_pool3_same(x: &Tensor) -> CResult<Tensor> {
    x.pad_with_same(D::Minus1, 1, 1)?
        .pad_with_same(D::Minus2, 1, 1)?
        .max_pool2d_with_stride(3, 1)
}

/// `F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)`: TensorFlow's average
/// pool, which divides by the window's pixels inside the picture.
fn avg_pool3_same(x: &Tensor) -> CResult<Tensor> {
    let (_, _, h, w) = x.dims4()?;
    let sum = (x
        .pad_with_zeros(D::Minus1, 1, 1)?
        .pad_with_zeros(D::Minus2, 1, 1)?
        .avg_pool2d_with_stride(3, 1)?
        * 9.0)?;
    let inside = |i: usize, n: usize| 1 + usize::from(i > 0) + usize::from(i + 1 < n);
    let counts: Vec<f32> = (0..h)
        .flat_map(|i| (0..w).map(move |j| 1.0 / (inside(i, h) * inside(j, w)) as f32))
        .collect();
    let inv = Tensor::from_vec(counts, (1, 1, h, w), x.device())?.to_dtype(x.dtype())?;
    sum.broadcast_mul(&inv)
}

/// `FIDInceptionA`: 1×1 | 1×1 → 5×5 | 1×1 → 3×3 → 3×3 | avg-pool (padding excluded) → 1×1.
struct BlockA {
    b1: BasicConv2d,
    b5: [BasicConv2d; 2],
    b3: [BasicConv2d; 3],
    pool: BasicConv2d,
}

impl BlockA {
    fn new(c_in: usize, pool_features: usize, vb: VarBuilder) -> CResult<Self> {
        Ok(Self {
            b1: conv(c_in, 64, 1, 0, vb.pp("branch1x1"))?,
            b5: [
                conv(c_in, 48, 1, 0, vb.pp("branch5x5_1"))?,
                conv(48, 64, 5, 2, vb.pp("branch5x5_2"))?,
            ],
            b3: [
                conv(c_in, 64, 1, 0, vb.pp("branch3x3dbl_1"))?,
                conv(64, 96, 3, 1, vb.pp("branch3x3dbl_2"))?,
                conv(96, 96, 3, 1, vb.pp("branch3x3dbl_3"))?,
            ],
            pool: conv(c_in, pool_features, 1, 0, vb.pp("branch_pool"))?,
        })
    }

    fn forward(&self, x: &Tensor) -> CResult<Tensor> {
        let parts = [
            self.b1.forward(x)?,
            chain(&self.b5, x)?,
            chain(&self.b3, x)?,
            self.pool.forward(&avg_pool3_same(x)?)?,
        ];
        Tensor::cat(&parts, 1)
    }
}

/// torchvision's `InceptionB` (`Mixed_6a`): 3×3/2 | 1×1 → 3×3 → 3×3/2 | max-pool 3/2.
struct BlockB {
    b3: BasicConv2d,
    dbl: [BasicConv2d; 3],
}

impl BlockB {
    fn new(c_in: usize, vb: VarBuilder) -> CResult<Self> {
        Ok(Self {
            b3: BasicConv2d::new(c_in, 384, (3, 3), 2, (0, 0), vb.pp("branch3x3"))?,
            dbl: [
                conv(c_in, 64, 1, 0, vb.pp("branch3x3dbl_1"))?,
                conv(64, 96, 3, 1, vb.pp("branch3x3dbl_2"))?,
                BasicConv2d::new(96, 96, (3, 3), 2, (0, 0), vb.pp("branch3x3dbl_3"))?,
            ],
        })
    }

    fn forward(&self, x: &Tensor) -> CResult<Tensor> {
        let parts = [self.b3.forward(x)?, chain(&self.dbl, x)?, max_pool3(x, 2)?];
        Tensor::cat(&parts, 1)
    }
}

/// `FIDInceptionC`: 1×1 | 1×1 → 1×7 → 7×1 | 1×1 → 7×1 → 1×7 → 7×1 → 1×7 | avg-pool → 1×1.
struct BlockC {
    b1: BasicConv2d,
    b7: [BasicConv2d; 3],
    dbl: [BasicConv2d; 5],
    pool: BasicConv2d,
}

impl BlockC {
    fn new(c_in: usize, c7: usize, vb: VarBuilder) -> CResult<Self> {
        let v = |i: usize| vb.pp(format!("branch7x7dbl_{i}"));
        Ok(Self {
            b1: conv(c_in, 192, 1, 0, vb.pp("branch1x1"))?,
            b7: [
                conv(c_in, c7, 1, 0, vb.pp("branch7x7_1"))?,
                strip(c7, c7, 7, true, vb.pp("branch7x7_2"))?,
                strip(c7, 192, 7, false, vb.pp("branch7x7_3"))?,
            ],
            dbl: [
                conv(c_in, c7, 1, 0, v(1))?,
                strip(c7, c7, 7, false, v(2))?,
                strip(c7, c7, 7, true, v(3))?,
                strip(c7, c7, 7, false, v(4))?,
                strip(c7, 192, 7, true, v(5))?,
            ],
            pool: conv(c_in, 192, 1, 0, vb.pp("branch_pool"))?,
        })
    }

    fn forward(&self, x: &Tensor) -> CResult<Tensor> {
        let parts = [
            self.b1.forward(x)?,
            chain(&self.b7, x)?,
            chain(&self.dbl, x)?,
            self.pool.forward(&avg_pool3_same(x)?)?,
        ];
        Tensor::cat(&parts, 1)
    }
}

/// torchvision's `InceptionD` (`Mixed_7a`): 1×1 → 3×3/2 | 1×1 → 1×7 → 7×1 → 3×3/2 |
/// max-pool 3/2.
struct BlockD {
    b3: [BasicConv2d; 2],
    b7: [BasicConv2d; 4],
}

impl BlockD {
    fn new(c_in: usize, vb: VarBuilder) -> CResult<Self> {
        let v = |i: usize| vb.pp(format!("branch7x7x3_{i}"));
        Ok(Self {
            b3: [
                conv(c_in, 192, 1, 0, vb.pp("branch3x3_1"))?,
                BasicConv2d::new(192, 320, (3, 3), 2, (0, 0), vb.pp("branch3x3_2"))?,
            ],
            b7: [
                conv(c_in, 192, 1, 0, v(1))?,
                strip(192, 192, 7, true, v(2))?,
                strip(192, 192, 7, false, v(3))?,
                BasicConv2d::new(192, 192, (3, 3), 2, (0, 0), v(4))?,
            ],
        })
    }

    fn forward(&self, x: &Tensor) -> CResult<Tensor> {
        let parts = [chain(&self.b3, x)?, chain(&self.b7, x)?, max_pool3(x, 2)?];
        Tensor::cat(&parts, 1)
    }
}

/// `FIDInceptionE_1` (`max_pool` false: average pool without the padding) and
/// `FIDInceptionE_2` (`max_pool` true): 1×1 | 1×1 → (1×3 ‖ 3×1) | 1×1 → 3×3 → (1×3 ‖ 3×1) |
/// pool → 1×1.
struct BlockE {
    b1: BasicConv2d,
    b3_1: BasicConv2d,
    b3_2: [BasicConv2d; 2],
    dbl_1: [BasicConv2d; 2],
    dbl_3: [BasicConv2d; 2],
    pool: BasicConv2d,
    max_pool: bool,
}

impl BlockE {
    fn new(c_in: usize, max_pool: bool, vb: VarBuilder) -> CResult<Self> {
        Ok(Self {
            b1: conv(c_in, 320, 1, 0, vb.pp("branch1x1"))?,
            b3_1: conv(c_in, 384, 1, 0, vb.pp("branch3x3_1"))?,
            b3_2: [
                strip(384, 384, 3, true, vb.pp("branch3x3_2a"))?,
                strip(384, 384, 3, false, vb.pp("branch3x3_2b"))?,
            ],
            dbl_1: [
                conv(c_in, 448, 1, 0, vb.pp("branch3x3dbl_1"))?,
                conv(448, 384, 3, 1, vb.pp("branch3x3dbl_2"))?,
            ],
            dbl_3: [
                strip(384, 384, 3, true, vb.pp("branch3x3dbl_3a"))?,
                strip(384, 384, 3, false, vb.pp("branch3x3dbl_3b"))?,
            ],
            pool: conv(c_in, 192, 1, 0, vb.pp("branch_pool"))?,
            max_pool,
        })
    }

    fn forward(&self, x: &Tensor) -> CResult<Tensor> {
        let h3 = self.b3_1.forward(x)?;
        let hd = chain(&self.dbl_1, x)?;
        let pooled = if self.max_pool {
            max_pool3_same(x)?
        } else {
            avg_pool3_same(x)?
        };
        let parts = [
            self.b1.forward(x)?,
            self.b3_2[0].forward(&h3)?,
            self.b3_2[1].forward(&h3)?,
            self.dbl_3[0].forward(&hd)?,
            self.dbl_3[1].forward(&hd)?,
            self.pool.forward(&pooled)?,
        ];
        Tensor::cat(&parts, 1)
    }
}

/// pytorch-fid's FID Inception-v3 up to the pool3 features.
pub struct FidInception {
    cfg: InceptionConfig,
    stem: [BasicConv2d; 5],
    a: [BlockA; 3],
    b: BlockB,
    c: [BlockC; 4],
    d: BlockD,
    e: [BlockE; 2],
}

impl FidInception {
    /// The network from `vb` (torchvision's `Inception3` names at its root).
    pub fn new(cfg: &InceptionConfig, vb: VarBuilder) -> CResult<Self> {
        Ok(Self {
            cfg: cfg.clone(),
            stem: [
                BasicConv2d::new(3, 32, (3, 3), 2, (0, 0), vb.pp("Conv2d_1a_3x3"))?,
                conv(32, 32, 3, 0, vb.pp("Conv2d_2a_3x3"))?,
                conv(32, 64, 3, 1, vb.pp("Conv2d_2b_3x3"))?,
                conv(64, 80, 1, 0, vb.pp("Conv2d_3b_1x1"))?,
                conv(80, 192, 3, 0, vb.pp("Conv2d_4a_3x3"))?,
            ],
            a: [
                BlockA::new(192, 32, vb.pp("Mixed_5b"))?,
                BlockA::new(256, 64, vb.pp("Mixed_5c"))?,
                BlockA::new(288, 64, vb.pp("Mixed_5d"))?,
            ],
            b: BlockB::new(288, vb.pp("Mixed_6a"))?,
            c: [
                BlockC::new(768, 128, vb.pp("Mixed_6b"))?,
                BlockC::new(768, 160, vb.pp("Mixed_6c"))?,
                BlockC::new(768, 160, vb.pp("Mixed_6d"))?,
                BlockC::new(768, 192, vb.pp("Mixed_6e"))?,
            ],
            d: BlockD::new(768, vb.pp("Mixed_7a"))?,
            e: [
                BlockE::new(1280, false, vb.pp("Mixed_7b"))?,
                BlockE::new(2048, true, vb.pp("Mixed_7c"))?,
            ],
        })
    }

    /// Reads the released `pt_inception-2015-12-05-6726825d.pth` (or its tensors as
    /// safetensors): every tensor but the `fc.*` classifier must be used.
    pub fn load(path: &Path) -> Result<Self> {
        Self::from_tensors(path, crate::read_tensors(path)?)
    }

    /// The network from named tensors as [`Self::load`] reads them (`path` names them in
    /// messages).
    pub fn from_tensors(path: &Path, tensors: HashMap<String, Tensor>) -> Result<Self> {
        let weights = AuditedWeights::new(path, tensors);
        let vb = weights.var_builder(DType::F32, &Device::Cpu);
        let net = Self::new(&InceptionConfig::default(), vb).map_err(|e| model_error(path, e))?;
        weights.finish(&["fc.", "AuxLogits."])?;
        Ok(net)
    }

    /// The 2048-d pool3 features of pictures `x` (b, 3, h, w) with values in [0, 1]
    /// (`InceptionV3([3])(x)[0]` flattened): (b, 2048).
    pub fn features(&self, x: &Tensor) -> Result<Tensor> {
        let (_, c, h, w) = x.dims4()?;
        if c != 3 || h == 0 || w == 0 {
            return Err(Error::invalid(format!(
                "the FID network reads (b, 3, h, w) pictures, got {:?}",
                x.dims()
            )));
        }
        let mut x = x.to_dtype(DType::F32)?;
        if self.cfg.resize_input {
            x = resize_bilinear(&x, SIDE, SIDE)?;
        }
        if self.cfg.normalize_input {
            x = x.affine(2.0, -1.0)?;
        }
        let (_, _, h, w) = x.dims4()?;
        if h < 75 || w < 75 {
            return Err(Error::invalid(format!(
                "the FID network needs pictures of at least 75x75, got {w}x{h}"
            )));
        }
        Ok(self.forward_scaled(&x)?)
    }

    fn forward_scaled(&self, x: &Tensor) -> CResult<Tensor> {
        let s = &self.stem;
        let mut h = chain(&s[..3], x)?;
        h = max_pool3(&h, 2)?;
        h = chain(&s[3..], &h)?;
        h = max_pool3(&h, 2)?;
        for a in &self.a {
            h = a.forward(&h)?;
        }
        h = self.b.forward(&h)?;
        for c in &self.c {
            h = c.forward(&h)?;
        }
        h = self.d.forward(&h)?;
        for e in &self.e {
            h = e.forward(&h)?;
        }
        h.mean(D::Minus1)?.mean(D::Minus1)
    }
}

/// PyTorch's `F.interpolate(x, (oh, ow), mode="bilinear", align_corners=False)` without
/// antialiasing (upsampling or downsampling alike): output pixel `o` reads the input at
/// `(o + ½)·in/out − ½` (clamped at 0), blended linearly between its two neighbours.
pub fn resize_bilinear(x: &Tensor, oh: usize, ow: usize) -> Result<Tensor> {
    let (b, c, h, w) = x.dims4()?;
    if (h, w) == (oh, ow) {
        return Ok(x.to_dtype(DType::F32)?);
    }
    let src = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    let taps = |n_in: usize, n_out: usize| -> Vec<(usize, usize, f32)> {
        let scale = n_in as f32 / n_out as f32;
        (0..n_out)
            .map(|o| {
                let s = ((o as f32 + 0.5) * scale - 0.5).max(0.0);
                let i0 = (s as usize).min(n_in - 1);
                let i1 = (i0 + 1).min(n_in - 1);
                (i0, i1, s - i0 as f32)
            })
            .collect()
    };
    let (ty, tx) = (taps(h, oh), taps(w, ow));
    let mut out = vec![0f32; b * c * oh * ow];
    for (plane, dst) in src.chunks_exact(h * w).zip(out.chunks_exact_mut(oh * ow)) {
        for (oy, &(y0, y1, ly)) in ty.iter().enumerate() {
            let (r0, r1) = (&plane[y0 * w..][..w], &plane[y1 * w..][..w]);
            for (ox, &(x0, x1, lx)) in tx.iter().enumerate() {
                let top = (1.0 - lx) * r0[x0] + lx * r0[x1];
                let bottom = (1.0 - lx) * r1[x0] + lx * r1[x1];
                dst[oy * ow + ox] = (1.0 - ly) * top + ly * bottom;
            }
        }
    }
    Ok(Tensor::from_vec(out, (b, c, oh, ow), x.device())?)
}
