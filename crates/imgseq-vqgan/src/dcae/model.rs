//! [`DcaeModel`]: diffusers' `AutoencoderDC` (`autoencoder_dc.py`) at inference, one type per
//! module of diffusers and the `vb.pp(..)` chain as its weight names:
//!
//! encoder: `conv_in` (a 3×3 conv, or a stride-2 down block where the first level has no
//! layers) → per level its blocks (`ResBlock`: conv, act, conv, norm, + input;
//! `EfficientViTBlock`: multi-scale linear attention, then `GLUMBConv`) and a `DCDownBlock2d`
//! (pixel-unshuffle or stride-2 conv, plus the channel-averaged pixel-unshuffle of its input)
//! → `conv_out` + the channel-averaged shortcut. decoder: `conv_in` + the channel-repeated
//! shortcut → per level, deepest first, a `DCUpBlock2d` (conv then pixel-shuffle, or nearest
//! ×2 then conv, plus the repeated pixel-shuffle of its input) and its blocks → RMSNorm →
//! ReLU → `conv_out`.

use super::config::{DcaeConfig, Side};
use crate::kl::model::{patchify_channels as pixel_unshuffle, unpatchify_channels};
use candle_core::{DType, Result, Tensor};
use candle_nn::VarBuilder;
use imgseq_kernels::ops::{self, Padding};

/// RMSNorm's and BatchNorm's epsilon in every DC-AE norm.
const NORM_EPS: f64 = 1e-5;
/// The linear attention's denominator guard (`SanaMultiscaleLinearAttention.eps`).
const ATTN_EPS: f64 = 1e-15;

/// `F.pixel_shuffle(x, 2)`: channel `c·4 + dy·2 + dx` to the pixel (2y + dy, 2x + dx).
fn pixel_shuffle(x: &Tensor) -> Result<Tensor> {
    unpatchify_channels(x, 2).map_err(candle_core::Error::wrap)
}

/// `F.pixel_unshuffle(x, 2)`.
fn unshuffle(x: &Tensor) -> Result<Tensor> {
    pixel_unshuffle(x, 2).map_err(candle_core::Error::wrap)
}

/// `x.unflatten(1, (-1, g)).mean(dim=2)`: the mean of each run of `g` channels.
fn channel_group_mean(x: &Tensor, g: usize) -> Result<Tensor> {
    let (b, c, h, w) = x.dims4()?;
    x.reshape((b, c / g, g, h, w))?.mean(2)
}

/// `x.repeat_interleave(r, dim=1)`.
fn repeat_channels(x: &Tensor, r: usize) -> Result<Tensor> {
    let (b, c, h, w) = x.dims4()?;
    x.reshape((b, c, 1, h, w))?
        .broadcast_as((b, c, r, h, w))?
        .reshape((b, c * r, h, w))
}

/// A 1×1 convolution without bias (an `nn.Linear` over the channels).
///
/// # Shapes
/// x: (b, c, h, w), weight (o, c) → (b, o, h, w)
fn channel_linear(x: &Tensor, weight: &Tensor) -> Result<Tensor> {
    let (b, c, h, w) = x.dims4()?;
    let y = weight.broadcast_matmul(&x.reshape((b, c, h * w))?)?;
    y.reshape((b, weight.dim(0)?, h, w))
}

/// An `nn.Conv2d` (square kernel, symmetric padding k / 2, optional bias; grouped ones are
/// depthwise, stride 1).
#[derive(Debug, Clone)]
struct Conv {
    weight: Tensor,
    bias: Option<Tensor>,
    stride: usize,
    groups: usize,
}

impl Conv {
    fn new(
        (c_in, c_out, k): (usize, usize, usize),
        (stride, groups, bias): (usize, usize, bool),
        vb: VarBuilder,
    ) -> Result<Self> {
        Ok(Self {
            weight: vb.get((c_out, c_in / groups, k, k), "weight")?,
            bias: if bias {
                Some(vb.get(c_out, "bias")?)
            } else {
                None
            },
            stride,
            groups,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let k = self.weight.dim(3)?;
        if self.groups == 1 {
            let pad = Padding::same(k / 2);
            return ops::conv2d(x, &self.weight, self.bias.as_ref(), self.stride, pad);
        }
        // Grouped convs in DC-AE are depthwise (one channel a group), stride 1.
        ops::depthwise_conv2d(x, &self.weight, self.bias.as_ref(), k / 2)
    }
}

/// diffusers' `RMSNorm` over the channels (weight and bias) or an eval `BatchNorm2d`.
#[derive(Debug, Clone)]
enum Norm {
    Rms {
        weight: Tensor,
        bias: Tensor,
    },
    /// `x · scale + shift` with the running statistics folded in.
    Batch {
        scale: Tensor,
        shift: Tensor,
    },
}

impl Norm {
    fn new(kind: &str, c: usize, vb: VarBuilder) -> Result<Self> {
        let col = |t: Tensor| t.reshape((1, c, 1, 1));
        let (weight, bias) = (vb.get(c, "weight")?, vb.get(c, "bias")?);
        if kind == "rms_norm" {
            return Ok(Norm::Rms {
                weight: col(weight)?,
                bias: col(bias)?,
            });
        }
        let mean = vb.get(c, "running_mean")?;
        let var = vb.get(c, "running_var")?;
        // Read so that the weights audit counts it; eval BatchNorm does not use it.
        let _ = vb.get_unchecked_dtype("num_batches_tracked", DType::I64);
        let scale = weight.div(&(var + NORM_EPS)?.sqrt()?)?;
        let shift = (bias - mean.mul(&scale)?)?;
        Ok(Norm::Batch {
            scale: col(scale)?,
            shift: col(shift)?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Norm::Rms { weight, bias } => {
                let var = x.sqr()?.mean_keepdim(1)?;
                let y = x.broadcast_mul(&(var + NORM_EPS)?.sqrt()?.recip()?)?;
                y.broadcast_mul(weight)?.broadcast_add(bias)
            }
            Norm::Batch { scale, shift } => x.broadcast_mul(scale)?.broadcast_add(shift),
        }
    }
}

/// `get_activation(name)`.
#[derive(Debug, Clone, Copy)]
enum Act {
    Silu,
    Relu,
    Relu6,
}

impl Act {
    fn new(name: &str) -> Self {
        match name {
            "relu" => Act::Relu,
            "relu6" => Act::Relu6,
            _ => Act::Silu,
        }
    }

    fn forward(self, x: &Tensor) -> Result<Tensor> {
        match self {
            Act::Silu => ops::silu(x),
            Act::Relu => x.relu(),
            Act::Relu6 => x.clamp(0f32, 6f32),
        }
    }
}

/// `ResBlock`: `norm(conv2(act(conv1(x)))) + x`.
#[derive(Debug, Clone)]
struct ResBlock {
    conv1: Conv,
    act: Act,
    conv2: Conv,
    norm: Norm,
}

impl ResBlock {
    fn new(c: usize, norm: &str, act: &str, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            conv1: Conv::new((c, c, 3), (1, 1, true), vb.pp("conv1"))?,
            act: Act::new(act),
            conv2: Conv::new((c, c, 3), (1, 1, false), vb.pp("conv2"))?,
            norm: Norm::new(norm, c, vb.pp("norm"))?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.act.forward(&self.conv1.forward(x)?)?;
        self.norm.forward(&self.conv2.forward(&h)?)? + x
    }
}

/// `SanaMultiscaleAttentionProjection`: a depthwise k×k conv, then a 1×1 conv in groups of
/// one head's `head_dim` channels.
#[derive(Debug, Clone)]
struct MultiscaleProjection {
    proj_in: Conv,
    /// (3·heads, head_dim, head_dim)
    proj_out: Tensor,
}

impl MultiscaleProjection {
    fn new(inner: usize, heads: usize, k: usize, vb: VarBuilder) -> Result<Self> {
        let c = 3 * inner;
        let hd = inner / heads;
        let w = vb.pp("proj_out").get((c, hd, 1, 1), "weight")?;
        Ok(Self {
            proj_in: Conv::new((c, c, k), (1, c, false), vb.pp("proj_in"))?,
            proj_out: w.reshape((3 * heads, hd, hd))?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.proj_in.forward(x)?;
        let (b, c, h, w) = y.dims4()?;
        let (g, hd) = (self.proj_out.dim(0)?, self.proj_out.dim(1)?);
        let y = self
            .proj_out
            .broadcast_matmul(&y.reshape((b, g, hd, h * w))?)?;
        y.reshape((b, c, h, w))
    }
}

/// `SanaMultiscaleLinearAttention` with its processor: q, k, v by 1×1 projections, each
/// multi-scale projection of them appended, cut into groups of `3·head_dim` channels (q, k,
/// v of `head_dim` each), ReLU on q and k, then ReLU linear attention (`h·w > head_dim`) or
/// its quadratic form, `to_out`, the norm and the residual.
#[derive(Debug, Clone)]
struct LiteMla {
    to_q: Tensor,
    to_k: Tensor,
    to_v: Tensor,
    multiscale: Vec<MultiscaleProjection>,
    to_out: Tensor,
    norm_out: Norm,
    head_dim: usize,
}

impl LiteMla {
    fn new(c: usize, head_dim: usize, scales: &[usize], vb: VarBuilder) -> Result<Self> {
        let heads = c / head_dim;
        let inner = heads * head_dim;
        let ms = vb.pp("to_qkv_multiscale");
        let multiscale = scales
            .iter()
            .enumerate()
            .map(|(i, &k)| MultiscaleProjection::new(inner, heads, k, ms.pp(i)))
            .collect::<Result<_>>()?;
        Ok(Self {
            to_q: vb.pp("to_q").get((inner, c), "weight")?,
            to_k: vb.pp("to_k").get((inner, c), "weight")?,
            to_v: vb.pp("to_v").get((inner, c), "weight")?,
            multiscale,
            to_out: vb
                .pp("to_out")
                .get((c, inner * (1 + scales.len())), "weight")?,
            norm_out: Norm::new("rms_norm", c, vb.pp("norm_out"))?,
            head_dim,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, _, h, w) = x.dims4()?;
        let (n, hd) = (h * w, self.head_dim);
        let qkv = Tensor::cat(
            &[
                channel_linear(x, &self.to_q)?,
                channel_linear(x, &self.to_k)?,
                channel_linear(x, &self.to_v)?,
            ],
            1,
        )?;
        let mut parts = vec![qkv.clone()];
        for m in &self.multiscale {
            parts.push(m.forward(&qkv)?);
        }
        let all = Tensor::cat(&parts, 1)?;
        let g = all.dim(1)? / (3 * hd);
        let all = all.reshape((b, g, 3 * hd, n))?;
        let q = all.narrow(2, 0, hd)?.relu()?.contiguous()?;
        let k = all.narrow(2, hd, hd)?.relu()?.contiguous()?;
        let v = all.narrow(2, 2 * hd, hd)?.contiguous()?;
        let out = if n > hd {
            // (v; 1)·kᵀ·q: the last row is the normaliser.
            let ones = Tensor::ones((b, g, 1, n), v.dtype(), v.device())?;
            let v1 = Tensor::cat(&[&v, &ones], 2)?;
            let s = v1.matmul(&k.transpose(2, 3)?.contiguous()?)?.matmul(&q)?;
            let num = s.narrow(2, 0, hd)?;
            let den = (s.narrow(2, hd, 1)? + ATTN_EPS)?;
            num.broadcast_div(&den)?
        } else {
            let s = k.transpose(2, 3)?.contiguous()?.matmul(&q)?; // (b, g, n, n)
            let s = s.broadcast_div(&(s.sum_keepdim(2)? + ATTN_EPS)?)?;
            v.matmul(&s)?
        };
        let out = channel_linear(&out.reshape((b, g * hd, h, w))?, &self.to_out)?;
        self.norm_out.forward(&out)? + x
    }
}

/// `GLUMBConv`: 1×1 expand ×8 (SiLU), depthwise 3×3, gated halves `a · silu(gate)`, 1×1
/// back, RMSNorm, + input.
#[derive(Debug, Clone)]
struct GluMbConv {
    inverted: Conv,
    depth: Conv,
    point: Conv,
    norm: Norm,
}

impl GluMbConv {
    fn new(c: usize, vb: VarBuilder) -> Result<Self> {
        let hidden = 4 * c;
        Ok(Self {
            inverted: Conv::new((c, 2 * hidden, 1), (1, 1, true), vb.pp("conv_inverted"))?,
            depth: Conv::new(
                (2 * hidden, 2 * hidden, 3),
                (1, 2 * hidden, true),
                vb.pp("conv_depth"),
            )?,
            point: Conv::new((hidden, c, 1), (1, 1, false), vb.pp("conv_point"))?,
            norm: Norm::new("rms_norm", c, vb.pp("norm"))?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = ops::silu(&self.inverted.forward(x)?)?;
        let h = self.depth.forward(&h)?;
        let half = h.dim(1)? / 2;
        let gated = h
            .narrow(1, 0, half)?
            .mul(&ops::silu(&h.narrow(1, half, half)?)?)?;
        self.norm.forward(&self.point.forward(&gated)?)? + x
    }
}

/// A level's block.
#[derive(Debug, Clone)]
enum Block {
    Res(ResBlock),
    EfficientVit(LiteMla, GluMbConv),
    Down(DcDown),
    Up(DcUp),
}

impl Block {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Block::Res(r) => r.forward(x),
            Block::EfficientVit(a, c) => c.forward(&a.forward(x)?),
            Block::Down(d) => d.forward(x),
            Block::Up(u) => u.forward(x),
        }
    }

    /// `get_block`: level `i` of `side` at width `c`.
    fn layer(side: &Side, i: usize, head_dim: usize, vb: VarBuilder) -> Result<Self> {
        let c = side.widths[i];
        Ok(match side.block_types[i].as_str() {
            "EfficientViTBlock" => Block::EfficientVit(
                LiteMla::new(c, head_dim, &side.multiscales[i], vb.pp("attn"))?,
                GluMbConv::new(c, vb.pp("conv_out"))?,
            ),
            _ => Block::Res(ResBlock::new(c, &side.norms[i], &side.acts[i], vb)?),
        })
    }
}

/// `DCDownBlock2d`.
#[derive(Debug, Clone)]
struct DcDown {
    conv: Conv,
    unshuffle: bool,
    /// The shortcut's channel group (`None`: no shortcut).
    group: Option<usize>,
}

impl DcDown {
    fn new(
        c_in: usize,
        c_out: usize,
        unshuffle: bool,
        shortcut: bool,
        vb: VarBuilder,
    ) -> Result<Self> {
        let (conv_out, stride) = if unshuffle {
            (c_out / 4, 1)
        } else {
            (c_out, 2)
        };
        Ok(Self {
            conv: Conv::new((c_in, conv_out, 3), (stride, 1, true), vb.pp("conv"))?,
            unshuffle,
            group: shortcut.then_some(c_in * 4 / c_out),
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut y = self.conv.forward(x)?;
        if self.unshuffle {
            y = unshuffle(&y)?;
        }
        match self.group {
            Some(g) => y + channel_group_mean(&unshuffle(x)?, g)?,
            None => Ok(y),
        }
    }
}

/// `DCUpBlock2d`.
#[derive(Debug, Clone)]
struct DcUp {
    conv: Conv,
    interpolate: bool,
    /// The shortcut's channel repeats (`None`: no shortcut).
    repeats: Option<usize>,
}

impl DcUp {
    fn new(
        c_in: usize,
        c_out: usize,
        interpolate: bool,
        shortcut: bool,
        vb: VarBuilder,
    ) -> Result<Self> {
        let conv_out = if interpolate { c_out } else { c_out * 4 };
        Ok(Self {
            conv: Conv::new((c_in, conv_out, 3), (1, 1, true), vb.pp("conv"))?,
            interpolate,
            repeats: shortcut.then_some(c_out * 4 / c_in),
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = if self.interpolate {
            self.conv.forward(&ops::upsample_nearest2x(x)?)?
        } else {
            pixel_shuffle(&self.conv.forward(x)?)?
        };
        match self.repeats {
            Some(r) => y + pixel_shuffle(&repeat_channels(x, r)?)?,
            None => Ok(y),
        }
    }
}

/// The input conv of a side: a plain conv, or (no layers at the first level) a down/up
/// block without shortcut.
#[derive(Debug, Clone)]
enum EndConv {
    Plain(Conv),
    Block(Block),
}

impl EndConv {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            EndConv::Plain(c) => c.forward(x),
            EndConv::Block(b) => b.forward(x),
        }
    }
}

/// The encoder: image (b, in, H, W) → latent (b, latent, H/f, W/f).
#[derive(Debug, Clone)]
struct Encoder {
    conv_in: EndConv,
    levels: Vec<Vec<Block>>,
    conv_out: Conv,
    /// `encoder_out_shortcut`: the channel group averaged onto the output.
    out_group: Option<usize>,
}

impl Encoder {
    fn new(cfg: &DcaeConfig, vb: VarBuilder) -> Result<Self> {
        let s = cfg.encoder();
        let n = s.widths.len();
        let unshuffle = cfg.downsample_block_type == "pixel_unshuffle";
        let conv_in = if s.layers[0] > 0 {
            let k = (cfg.in_channels, s.widths[0], 3);
            EndConv::Plain(Conv::new(k, (1, 1, true), vb.pp("conv_in"))?)
        } else {
            let d = DcDown::new(
                cfg.in_channels,
                s.widths[1],
                unshuffle,
                false,
                vb.pp("conv_in"),
            )?;
            EndConv::Block(Block::Down(d))
        };
        let mut levels = Vec::with_capacity(n);
        for i in 0..n {
            let vb = vb.pp("down_blocks").pp(i);
            let mut blocks = (0..s.layers[i])
                .map(|j| Block::layer(&s, i, cfg.attention_head_dim, vb.pp(j)))
                .collect::<Result<Vec<_>>>()?;
            if i + 1 < n && s.layers[i] > 0 {
                let (a, b) = (s.widths[i], s.widths[i + 1]);
                let d = DcDown::new(a, b, unshuffle, true, vb.pp(s.layers[i]))?;
                blocks.push(Block::Down(d));
            }
            levels.push(blocks);
        }
        let last = s.widths[n - 1];
        let k = (last, cfg.latent_channels, 3);
        Ok(Self {
            conv_in,
            levels,
            conv_out: Conv::new(k, (1, 1, true), vb.pp("conv_out"))?,
            out_group: cfg
                .encoder_out_shortcut
                .then_some(last / cfg.latent_channels),
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = self.conv_in.forward(x)?;
        for b in self.levels.iter().flatten() {
            h = b.forward(&h)?;
        }
        let y = self.conv_out.forward(&h)?;
        match self.out_group {
            Some(g) => y + channel_group_mean(&h, g)?,
            None => Ok(y),
        }
    }
}

/// The decoder: latent (b, latent, h, w) → image (b, in, h·f, w·f).
#[derive(Debug, Clone)]
struct Decoder {
    conv_in: Conv,
    /// `decoder_in_shortcut`: the latent's channel repeats added to `conv_in`'s output.
    in_repeats: Option<usize>,
    /// Deepest level first, in the order they run.
    levels: Vec<Vec<Block>>,
    norm_out: Norm,
    act: Act,
    conv_out: EndConv,
}

impl Decoder {
    fn new(cfg: &DcaeConfig, vb: VarBuilder) -> Result<Self> {
        let s = cfg.decoder();
        let n = s.widths.len();
        let last = s.widths[n - 1];
        let interpolate = cfg.upsample_block_type == "interpolate";
        let mut levels = Vec::with_capacity(n);
        for i in (0..n).rev() {
            let vb = vb.pp("up_blocks").pp(i);
            let mut blocks = Vec::new();
            let up = i + 1 < n && s.layers[i] > 0;
            if up {
                let (a, b) = (s.widths[i + 1], s.widths[i]);
                blocks.push(Block::Up(DcUp::new(a, b, interpolate, true, vb.pp(0))?));
            }
            for j in 0..s.layers[i] {
                let at = j + usize::from(up);
                blocks.push(Block::layer(&s, i, cfg.attention_head_dim, vb.pp(at))?);
            }
            levels.push(blocks);
        }
        let c = if s.layers[0] > 0 {
            s.widths[0]
        } else {
            s.widths[1]
        };
        let conv_out = if s.layers[0] > 0 {
            EndConv::Plain(Conv::new(
                (c, cfg.in_channels, 3),
                (1, 1, true),
                vb.pp("conv_out"),
            )?)
        } else {
            let u = DcUp::new(c, cfg.in_channels, interpolate, false, vb.pp("conv_out"))?;
            EndConv::Block(Block::Up(u))
        };
        let k = (cfg.latent_channels, last, 3);
        Ok(Self {
            conv_in: Conv::new(k, (1, 1, true), vb.pp("conv_in"))?,
            in_repeats: cfg
                .decoder_in_shortcut
                .then_some(last / cfg.latent_channels),
            levels,
            norm_out: Norm::new("rms_norm", c, vb.pp("norm_out"))?,
            act: Act::new(&cfg.decoder_conv_act_fn),
            conv_out,
        })
    }

    fn forward(&self, z: &Tensor) -> Result<Tensor> {
        let mut h = self.conv_in.forward(z)?;
        if let Some(r) = self.in_repeats {
            h = (h + repeat_channels(z, r)?)?;
        }
        for b in self.levels.iter().flatten() {
            h = b.forward(&h)?;
        }
        let h = self.act.forward(&self.norm_out.forward(&h)?)?;
        self.conv_out.forward(&h)
    }
}

/// An `AutoencoderDC`.
#[derive(Debug, Clone)]
pub struct DcaeModel {
    cfg: DcaeConfig,
    encoder: Encoder,
    decoder: Decoder,
}

impl DcaeModel {
    pub fn new(cfg: &DcaeConfig, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            cfg: cfg.clone(),
            encoder: Encoder::new(cfg, vb.pp("encoder"))?,
            decoder: Decoder::new(cfg, vb.pp("decoder"))?,
        })
    }

    pub fn config(&self) -> &DcaeConfig {
        &self.cfg
    }

    /// `encode(x).latent`, unscaled.
    ///
    /// # Shapes
    /// x: (b, in, H, W) in [−1, 1] → (b, latent, H/f, W/f)
    pub fn encode_raw(&self, x: &Tensor) -> Result<Tensor> {
        self.encoder.forward(x)
    }

    /// `decode(z).sample` of unscaled latents (not clamped).
    pub fn decode_raw(&self, z: &Tensor) -> Result<Tensor> {
        self.decoder.forward(z)
    }

    /// Rough peak bytes of one forward of `n` images of `h`×`w`: the weights plus the
    /// GLUMBConv's 8× expansion and a dozen maps at the widest level.
    pub fn forward_bytes(&self, n: usize, h: usize, w: usize) -> u128 {
        let s = self.cfg.encoder();
        let px = (h as u128).saturating_mul(w as u128);
        let widest = s
            .widths
            .iter()
            .enumerate()
            .map(|(i, &c)| (c as u128).saturating_mul(px >> (2 * i).min(126)))
            .max()
            .unwrap_or(0);
        let weights: u128 = s.widths.iter().map(|&c| (c as u128).pow(2) * 40).sum();
        widest
            .saturating_mul(n as u128)
            .saturating_mul(20 * 4)
            .saturating_add(weights.saturating_mul(8))
    }
}
