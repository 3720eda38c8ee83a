//! Emu3's VQVAE network (transformers' `Emu3VQVAE`), under transformers' weight names: the 2-D
//! encoder on taming's blocks ([`ResnetBlock`], [`Downsample`], [`Upsample`] of
//! [`crate::layers`]) with multi-head linear attention, causal Conv3d temporal layers and
//! BatchNorm3d temporal ResNet blocks, a Conv3d `quant_conv` / `post_quant_conv`, and the MoVQ
//! decoder whose norms are conditioned on the quantized latents ([`SpatialNorm`]).
//!
//! Video tensors are kept as (b, t, c, h, w) — frames major — so that a Conv3d is one 2-D conv
//! over windows of frames stacked along the channels (the project's conv kernel, its weight
//! folded at load: (c_out, c_in, kt, k, k) → (c_out, kt·c_in, k, k)).
//!
//! Shapes in trailing comments use b = batch, t = frames, c = channels, h × w = spatial size.

use super::Emu3Config;
use crate::layers::{Conv2d, Downsample, GroupNorm, ResnetBlock, Upsample};
use crate::quantize::VectorQuantizer;
use candle_core::{DType, Result, Tensor};
use candle_nn::VarBuilder;
use imgseq_kernels::ops::{self, Padding};

/// Every GroupNorm of the network: 32 groups (eps 1e-6, [`crate::layers`]).
const GROUPS: usize = 32;
/// `nn.BatchNorm3d`'s default eps.
const BN_EPS: f64 = 1e-5;
/// Zero frames a causal Conv3d puts in front (`Emu3VQVAEConv3d`: `(2, 0)` in time, whatever
/// the kernel).
const CAUSAL_PAD: usize = 2;

/// `Emu3VQVAEConv3d`: `F.pad` with 2 zero frames in front and `(k − s)` split ⌈½⌉ / ⌊½⌋ in
/// space, then `nn.Conv3d` (weights under `.conv`).
#[derive(Debug, Clone)]
struct CausalConv3d {
    conv: Conv2d, // (c_out, kt·c_in, k, k)
    kt: usize,
    stride_t: usize,
    c_out: usize,
}

impl CausalConv3d {
    fn new(
        c_in: usize,
        c_out: usize,
        (kt, k): (usize, usize),
        stride_t: usize,
        vb: VarBuilder,
    ) -> Result<Self> {
        let vb = vb.pp("conv");
        let w = vb.get((c_out, c_in, kt, k, k), "weight")?;
        let bias = vb.get(c_out, "bias")?;
        // (c_out, c_in, kt, k, k) → (c_out, kt, c_in, k, k) → (c_out, kt·c_in, k, k): frame
        // dt's input channels sit at dt·c_in.. in the stacked window.
        let w = w
            .permute((0, 2, 1, 3, 4))?
            .contiguous()?
            .reshape((c_out, kt * c_in, k, k))?;
        let p = k - 1;
        let pad = Padding {
            left: p / 2 + p % 2,
            right: p / 2,
            top: p / 2 + p % 2,
            bottom: p / 2,
        };
        Ok(Self {
            conv: Conv2d::from_tensors(w, bias, 1, pad),
            kt,
            stride_t,
            c_out,
        })
    }

    /// # Shapes
    /// x: (b, t, c_in, h, w) → (b, t', c_out, h, w), t' = (t + 2 − kt) / stride_t + 1
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, c, h, w) = x.dims5()?;
        let zeros = Tensor::zeros((b, CAUSAL_PAD, c, h, w), x.dtype(), x.device())?;
        let xp = Tensor::cat(&[&zeros, x], 1)?; // (b, t + 2, c, h, w)
        let tp = t + CAUSAL_PAD;
        if tp < self.kt {
            candle_core::bail!("a causal Conv3d of {} frames got {t}", self.kt);
        }
        let t_out = (tp - self.kt) / self.stride_t + 1;
        let windows = (0..t_out)
            .map(|o| {
                xp.narrow(1, o * self.stride_t, self.kt)?
                    .reshape((b, 1, self.kt * c, h, w))
            })
            .collect::<Result<Vec<_>>>()?;
        let xw = Tensor::cat(&windows, 1)?.reshape((b * t_out, self.kt * c, h, w))?;
        let y = self.conv.forward(&xw)?; // (b·t', c_out, h, w)
        y.reshape((b, t_out, self.c_out, h, w))
    }
}

/// `nn.BatchNorm3d` at inference: its running statistics folded into a per-channel scale and
/// shift, y = x·w/√(var + eps) + (b − mean·w/√(var + eps)).
#[derive(Debug, Clone)]
struct BatchNorm3d {
    scale: Tensor, // (1, 1, c, 1, 1)
    shift: Tensor, // (1, 1, c, 1, 1)
}

impl BatchNorm3d {
    fn new(c: usize, vb: VarBuilder) -> Result<Self> {
        let w = vb.get(c, "weight")?;
        let b = vb.get(c, "bias")?;
        let mean = vb.get(c, "running_mean")?;
        let var = vb.get(c, "running_var")?;
        let scale = (w / (var + BN_EPS)?.sqrt()?)?;
        let shift = (b - (mean * &scale)?)?;
        Ok(Self {
            scale: scale.reshape((1, 1, c, 1, 1))?,
            shift: shift.reshape((1, 1, c, 1, 1))?,
        })
    }

    /// # Shapes
    /// x: (b, t, c, h, w) → (b, t, c, h, w)
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.broadcast_mul(&self.scale)?.broadcast_add(&self.shift)
    }
}

/// `Emu3VQVAETemporalResnetBlock`: BatchNorm3d → swish → causal Conv3d 3×3×3, twice, plus the
/// input (Emu3 builds it with as many channels out as in: no shortcut conv).
#[derive(Debug, Clone)]
struct TemporalResnetBlock {
    norm1: BatchNorm3d,
    conv1: CausalConv3d,
    norm2: BatchNorm3d,
    conv2: CausalConv3d,
}

impl TemporalResnetBlock {
    fn new(c: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            norm1: BatchNorm3d::new(c, vb.pp("norm1"))?,
            conv1: CausalConv3d::new(c, c, (3, 3), 1, vb.pp("conv1"))?,
            norm2: BatchNorm3d::new(c, vb.pp("norm2"))?,
            conv2: CausalConv3d::new(c, c, (3, 3), 1, vb.pp("conv2"))?,
        })
    }

    /// # Shapes
    /// x: (b, t, c, h, w) → (b, t, c, h, w)
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.conv1.forward(&ops::silu(&self.norm1.forward(x)?)?)?;
        let h = self.conv2.forward(&ops::silu(&self.norm2.forward(&h)?)?)?;
        x + h
    }
}

/// `Emu3VQVAEAttentionBlock`: multi-head self-attention over the h·w positions with linear
/// q, k, v and output projections (`hidden_size` wide, `num_attention_heads` heads, scale
/// head_dim^−½). The norm before it and the residual add are the caller's.
#[derive(Debug, Clone)]
struct Attention {
    q: (Tensor, Tensor),
    k: (Tensor, Tensor),
    v: (Tensor, Tensor),
    out: (Tensor, Tensor),
    heads: usize,
}

impl Attention {
    fn new(c: usize, heads: usize, vb: VarBuilder) -> Result<Self> {
        let lin = |name: &str| -> Result<(Tensor, Tensor)> {
            let vb = vb.pp(name);
            Ok((vb.get((c, c), "weight")?, vb.get(c, "bias")?))
        };
        Ok(Self {
            q: lin("q_proj")?,
            k: lin("k_proj")?,
            v: lin("v_proj")?,
            out: lin("out_proj")?,
            heads,
        })
    }

    /// # Shapes
    /// x: (b, c, h, w), normalised → (b, c, h, w)
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = x.dims4()?;
        let (n, d) = (h * w, c / self.heads);
        let seq = x.reshape((b, c, n))?.transpose(1, 2)?.contiguous()?; // (b, n, c)
        let split = |(wt, bs): &(Tensor, Tensor)| -> Result<Tensor> {
            ops::linear(&seq, wt, Some(bs))?
                .reshape((b, n, self.heads, d))?
                .transpose(1, 2) // (b, heads, n, d)
        };
        let (q, k, v) = (split(&self.q)?, split(&self.k)?, split(&self.v)?);
        let a = ops::attention(&q, &k, &v, (d as f64).powf(-0.5))?; // (b, heads, n, d)
        let a = a.transpose(1, 2)?.reshape((b, n, c))?;
        let o = ops::linear(&a, &self.out.0, Some(&self.out.1))?; // (b, n, c)
        o.transpose(1, 2)?.reshape((b, c, h, w))
    }
}

/// `x` brought to `h`×`w` by nearest-neighbour (`F.interpolate(size=…, mode="nearest")`:
/// source index ⌊i·in/out⌋), by doubling where the ratio is a power of two.
///
/// # Shapes
/// x: (b, c, h0, w0) → (b, c, h, w)
fn nearest_to(x: &Tensor, h: usize, w: usize) -> Result<Tensor> {
    let (_, _, h0, w0) = x.dims4()?;
    let mut y = x.clone();
    let (mut hc, mut wc) = (h0, w0);
    while hc * 2 <= h
        && wc * 2 <= w
        && h.is_multiple_of(hc * 2)
        && w.is_multiple_of(wc * 2)
        && h / hc == w / wc
    {
        y = ops::upsample_nearest2x(&y)?;
        (hc, wc) = (hc * 2, wc * 2);
    }
    if (hc, wc) == (h, w) {
        return Ok(y);
    }
    let index = |out: usize, inp: usize| {
        let v: Vec<u32> = (0..out).map(|i| (i * inp / out) as u32).collect();
        Tensor::from_vec(v, out, x.device())
    };
    y.index_select(&index(h, hc)?, 2)?
        .index_select(&index(w, wc)?, 3)
}

/// `Emu3VQVAESpatialNorm` (MoVQ): GroupNorm of the features, then × `conv_y(zq)` +
/// `conv_b(zq)`, zq the quantized latents brought to the features' size by nearest-neighbour
/// (the 1×1 convs run at the latents' size: per-pixel, they commute with the copying).
#[derive(Debug, Clone)]
struct SpatialNorm {
    norm_layer: GroupNorm,
    conv_y: Conv2d, // 1×1, embed_dim → c
    conv_b: Conv2d, // 1×1, embed_dim → c
}

impl SpatialNorm {
    fn new(zq_ch: usize, c: usize, vb: VarBuilder) -> Result<Self> {
        let p0 = Padding::same(0);
        Ok(Self {
            norm_layer: GroupNorm::new(c, GROUPS, vb.pp("norm_layer"))?,
            conv_y: Conv2d::new(zq_ch, c, 1, 1, p0, vb.pp("conv_y"))?,
            conv_b: Conv2d::new(zq_ch, c, 1, 1, p0, vb.pp("conv_b"))?,
        })
    }

    /// # Shapes
    /// x: (b, c, h, w), zq: (b, embed_dim, h0, w0) → (b, c, h, w)
    fn forward(&self, x: &Tensor, zq: &Tensor, then_swish: bool) -> Result<Tensor> {
        let (_, _, h, w) = x.dims4()?;
        let y = nearest_to(&self.conv_y.forward(zq)?, h, w)?;
        let b = nearest_to(&self.conv_b.forward(zq)?, h, w)?;
        let out = ((self.norm_layer.forward(x, false)? * y)? + b)?;
        if then_swish {
            ops::silu(&out)
        } else {
            Ok(out)
        }
    }
}

/// The decoder's `Emu3VQVAEResnetBlock` (with `quant_channels`): taming's block with
/// [`SpatialNorm`]s.
#[derive(Debug, Clone)]
struct SpatialResnetBlock {
    norm1: SpatialNorm,
    conv1: Conv2d,
    norm2: SpatialNorm,
    conv2: Conv2d,
    nin_shortcut: Option<Conv2d>,
}

impl SpatialResnetBlock {
    fn new(c_in: usize, c_out: usize, zq_ch: usize, vb: VarBuilder) -> Result<Self> {
        let p1 = Padding::same(1);
        let nin_shortcut = (c_in != c_out)
            .then(|| Conv2d::new(c_in, c_out, 1, 1, Padding::same(0), vb.pp("nin_shortcut")))
            .transpose()?;
        Ok(Self {
            norm1: SpatialNorm::new(zq_ch, c_in, vb.pp("norm1"))?,
            conv1: Conv2d::new(c_in, c_out, 3, 1, p1, vb.pp("conv1"))?,
            norm2: SpatialNorm::new(zq_ch, c_out, vb.pp("norm2"))?,
            conv2: Conv2d::new(c_out, c_out, 3, 1, p1, vb.pp("conv2"))?,
            nin_shortcut,
        })
    }

    /// # Shapes
    /// x: (b, c_in, h, w), zq: (b, embed_dim, h0, w0) → (b, c_out, h, w)
    fn forward(&self, x: &Tensor, zq: &Tensor) -> Result<Tensor> {
        let h = self.conv1.forward(&self.norm1.forward(x, zq, true)?)?;
        let h = self.conv2.forward(&self.norm2.forward(&h, zq, true)?)?;
        match &self.nin_shortcut {
            Some(s) => s.forward(x)? + h,
            None => x + h,
        }
    }
}

/// An attention block with the norm before it: plain GroupNorm (encoder) or [`SpatialNorm`]
/// (decoder).
#[derive(Debug, Clone)]
enum AttnNorm {
    Group(GroupNorm),
    Spatial(SpatialNorm),
}

/// x + attn(norm(x)).
fn attend(x: &Tensor, norm: &AttnNorm, attn: &Attention, zq: Option<&Tensor>) -> Result<Tensor> {
    let hn = match (norm, zq) {
        (AttnNorm::Group(g), _) => g.forward(x, false)?,
        (AttnNorm::Spatial(s), Some(zq)) => s.forward(x, zq, false)?,
        (AttnNorm::Spatial(_), None) => candle_core::bail!("a spatial norm without latents"),
    };
    x + attn.forward(&hn)?
}

/// One level of the encoder (`down_block.down.i`).
#[derive(Debug, Clone)]
struct DownLevel {
    block: Vec<ResnetBlock>,
    attn: Vec<(AttnNorm, Attention)>,
    downsample: Option<Downsample>,
}

/// `Emu3VQVAEEncoder`: the 2-D part frame by frame, then the temporal convs and blocks.
#[derive(Debug, Clone)]
struct Encoder {
    conv_in: Conv2d,
    down: Vec<DownLevel>,
    mid_block_1: ResnetBlock,
    mid_attn: (AttnNorm, Attention),
    mid_block_2: ResnetBlock,
    norm_out: GroupNorm,
    conv_out: Conv2d,
    time_conv: Vec<CausalConv3d>,
    time_res_stack: Vec<TemporalResnetBlock>,
}

impl Encoder {
    fn new(cfg: &Emu3Config, vb: VarBuilder) -> Result<Self> {
        let (ch, heads) = (cfg.base_channels, cfg.num_attention_heads);
        let p1 = Padding::same(1);
        let levels = cfg.channel_multiplier.len();
        let mut block_in = ch;
        let mut down = Vec::with_capacity(levels);
        for (i, &mult) in cfg.channel_multiplier.iter().enumerate() {
            let vb_l = vb.pp("down_block").pp("down").pp(i);
            let block_out = ch * mult;
            let (mut block, mut attn) = (Vec::new(), Vec::new());
            for j in 0..cfg.num_res_blocks {
                block.push(ResnetBlock::new(
                    block_in,
                    block_out,
                    GROUPS,
                    vb_l.pp("block").pp(j),
                )?);
                block_in = block_out;
                if cfg.attn_resolutions.contains(&i) {
                    let norm = GroupNorm::new(block_in, GROUPS, vb_l.pp("attn_norms").pp(j))?;
                    let a = Attention::new(block_in, heads, vb_l.pp("attn").pp(j))?;
                    attn.push((AttnNorm::Group(norm), a));
                }
            }
            let downsample = (i + 1 != levels)
                .then(|| Downsample::new(block_in, vb_l.pp("downsample")))
                .transpose()?;
            down.push(DownLevel {
                block,
                attn,
                downsample,
            });
        }
        let vb_m = vb.pp("middle_block");
        let z = cfg.encoder_out_channels();
        Ok(Self {
            conv_in: Conv2d::new(cfg.in_channels, ch, 3, 1, p1, vb.pp("conv_in"))?,
            down,
            mid_block_1: ResnetBlock::new(block_in, block_in, GROUPS, vb_m.pp("block_1"))?,
            mid_attn: (
                AttnNorm::Group(GroupNorm::new(block_in, GROUPS, vb_m.pp("attn_norm"))?),
                Attention::new(block_in, heads, vb_m.pp("attn_1"))?,
            ),
            mid_block_2: ResnetBlock::new(block_in, block_in, GROUPS, vb_m.pp("block_2"))?,
            norm_out: GroupNorm::new(block_in, GROUPS, vb.pp("norm_out"))?,
            conv_out: Conv2d::new(block_in, z, 3, 1, p1, vb.pp("conv_out"))?,
            time_conv: (0..cfg.temporal_blocks())
                .map(|i| CausalConv3d::new(z, z, (4, 3), 2, vb.pp("time_conv").pp(i).pp("conv")))
                .collect::<Result<_>>()?,
            time_res_stack: (0..cfg.num_res_blocks)
                .map(|j| TemporalResnetBlock::new(z, vb.pp("time_res_stack").pp(j)))
                .collect::<Result<_>>()?,
        })
    }

    /// The 2-D part of one frame.
    ///
    /// # Shapes
    /// x: (b, in_channels, H, W) → (b, latent_channels, H/f, W/f)
    fn forward_frame(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = self.conv_in.forward(x)?;
        for level in &self.down {
            for (j, block) in level.block.iter().enumerate() {
                h = block.forward(&h)?;
                if let Some((norm, attn)) = level.attn.get(j) {
                    h = attend(&h, norm, attn, None)?;
                }
            }
            if let Some(d) = &level.downsample {
                h = d.forward(&h)?;
            }
        }
        let h = self.mid_block_1.forward(&h)?;
        let h = attend(&h, &self.mid_attn.0, &self.mid_attn.1, None)?;
        let h = self.mid_block_2.forward(&h)?;
        self.conv_out.forward_normed(&h, &self.norm_out, true, None)
    }

    /// The temporal part: downsampling convs (each followed by swish), then the blocks.
    ///
    /// # Shapes
    /// z: (b, t, c, h, w) → (b, t / temporal_downsample_factor, c, h, w)
    fn forward_time(&self, z: &Tensor) -> Result<Tensor> {
        let mut z = z.clone();
        for conv in &self.time_conv {
            z = ops::silu(&conv.forward(&z)?)?;
        }
        for block in &self.time_res_stack {
            z = block.forward(&z)?;
        }
        Ok(z)
    }
}

/// One level of the decoder (`up_block.up.i`).
#[derive(Debug, Clone)]
struct UpLevel {
    block: Vec<SpatialResnetBlock>,
    attn: Vec<(AttnNorm, Attention)>,
    upsample: Option<Upsample>,
}

/// `Emu3VQVAEDecoder`: the temporal blocks and upsampling convs over the latents and the
/// quantized latents together, then the 2-D MoVQ decoder of one frame conditioned on them.
#[derive(Debug, Clone)]
struct Decoder {
    time_res_stack: Vec<TemporalResnetBlock>,
    time_conv: Vec<CausalConv3d>,
    conv_in: Conv2d,
    mid_block_1: SpatialResnetBlock,
    mid_attn: (AttnNorm, Attention),
    mid_block_2: SpatialResnetBlock,
    /// Indexed by level: `up[0]` is the full-resolution level (run last).
    up: Vec<UpLevel>,
    norm_out: SpatialNorm,
    conv_out: Conv2d,
}

impl Decoder {
    fn new(cfg: &Emu3Config, vb: VarBuilder) -> Result<Self> {
        let (ch, heads, zq) = (cfg.base_channels, cfg.num_attention_heads, cfg.embed_dim);
        let lat = cfg.latent_channels;
        let p1 = Padding::same(1);
        let levels = cfg.channel_multiplier.len();
        let mut block_in = ch * cfg.channel_multiplier[levels - 1];
        let vb_m = vb.pp("middle_block");
        let mid_block_1 = SpatialResnetBlock::new(block_in, block_in, zq, vb_m.pp("block_1"))?;
        let mid_attn = (
            AttnNorm::Spatial(SpatialNorm::new(zq, block_in, vb_m.pp("attn_norm"))?),
            Attention::new(block_in, heads, vb_m.pp("attn_1"))?,
        );
        let mid_block_2 = SpatialResnetBlock::new(block_in, block_in, zq, vb_m.pp("block_2"))?;
        let mut up_rev = Vec::with_capacity(levels);
        for i in (0..levels).rev() {
            let vb_l = vb.pp("up_block").pp("up").pp(i);
            let block_out = ch * cfg.channel_multiplier[i];
            let (mut block, mut attn) = (Vec::new(), Vec::new());
            for j in 0..cfg.num_res_blocks + 1 {
                block.push(SpatialResnetBlock::new(
                    block_in,
                    block_out,
                    zq,
                    vb_l.pp("block").pp(j),
                )?);
                block_in = block_out;
                if cfg.attn_resolutions.contains(&i) {
                    let norm = SpatialNorm::new(zq, block_in, vb_l.pp("attn_norms").pp(j))?;
                    let a = Attention::new(block_in, heads, vb_l.pp("attn").pp(j))?;
                    attn.push((AttnNorm::Spatial(norm), a));
                }
            }
            let upsample = (i != 0)
                .then(|| Upsample::new(block_in, vb_l.pp("upsample")))
                .transpose()?;
            up_rev.push(UpLevel {
                block,
                attn,
                upsample,
            });
        }
        up_rev.reverse();
        Ok(Self {
            time_res_stack: (0..cfg.num_res_blocks)
                .map(|j| TemporalResnetBlock::new(lat, vb.pp("time_res_stack").pp(j)))
                .collect::<Result<_>>()?,
            time_conv: (0..cfg.temporal_blocks())
                .map(|i| {
                    CausalConv3d::new(lat, lat, (3, 3), 1, vb.pp("time_conv").pp(i).pp("conv"))
                })
                .collect::<Result<_>>()?,
            conv_in: Conv2d::new(
                lat,
                ch * cfg.channel_multiplier[levels - 1],
                3,
                1,
                p1,
                vb.pp("conv_in"),
            )?,
            mid_block_1,
            mid_attn,
            mid_block_2,
            up: up_rev,
            norm_out: SpatialNorm::new(zq, block_in, vb.pp("norm_out"))?,
            conv_out: Conv2d::new(block_in, cfg.out_channels, 3, 1, p1, vb.pp("conv_out"))?,
        })
    }

    /// The first frame of the decode (what transformers returns for an image): the temporal
    /// stack runs over the latents and the quantized latents as one batch (as transformers
    /// concatenates them), each upsampling conv doubling the frames (nearest) first; the 2-D
    /// decoder then runs on frame 0 only (every later layer works frame by frame).
    ///
    /// # Shapes
    /// h: (b, t, latent_channels, h, w), zq: (b, t, embed_dim, h, w) → (b, out_channels, H, W)
    fn forward_first_frame(&self, h: &Tensor, zq: &Tensor) -> Result<Tensor> {
        let b = h.dim(0)?;
        let mut both = Tensor::cat(&[h, zq], 0)?; // (2b, t, c, h, w)
        for block in &self.time_res_stack {
            both = block.forward(&both)?;
        }
        for conv in &self.time_conv {
            let (n, t, c, hh, ww) = both.dims5()?;
            // nearest ×2 in time: every frame twice.
            let doubled = Tensor::stack(&[&both, &both], 2)?.reshape((n, 2 * t, c, hh, ww))?;
            both = ops::silu(&conv.forward(&doubled)?)?;
        }
        let first = both.narrow(1, 0, 1)?.squeeze(1)?; // (2b, c, h, w)
        let (h, zq) = (first.narrow(0, 0, b)?, first.narrow(0, b, b)?.contiguous()?);
        let h = self.conv_in.forward(&h.contiguous()?)?;
        let h = self.mid_block_1.forward(&h, &zq)?;
        let h = attend(&h, &self.mid_attn.0, &self.mid_attn.1, Some(&zq))?;
        let mut h = self.mid_block_2.forward(&h, &zq)?;
        for level in self.up.iter().rev() {
            for (j, block) in level.block.iter().enumerate() {
                h = block.forward(&h, &zq)?;
                if let Some((norm, attn)) = level.attn.get(j) {
                    h = attend(&h, norm, attn, Some(&zq))?;
                }
            }
            if let Some(u) = &level.upsample {
                h = u.forward(&h)?;
            }
        }
        let h = self.norm_out.forward(&h, &zq, true)?;
        self.conv_out.forward(&h)
    }
}

/// transformers' `Emu3VQVAE` (inference, images).
#[derive(Debug, Clone)]
pub struct Emu3Model {
    cfg: Emu3Config,
    encoder: Encoder,
    quant_conv: CausalConv3d,      // (3, 1, 1), latent_channels → embed_dim
    quantize: VectorQuantizer,     // codebook_size × embed_dim, ‖z‖² + ‖e‖² − 2 z·e
    post_quant_conv: CausalConv3d, // (3, 1, 1), embed_dim → latent_channels
    decoder: Decoder,
}

impl Emu3Model {
    pub fn new(cfg: &Emu3Config, vb: VarBuilder) -> Result<Self> {
        let (lat, e) = (cfg.latent_channels, cfg.embed_dim);
        let vb_q = vb.pp("quantize").pp("embedding");
        let embedding = vb_q.get((cfg.codebook_size, e), "weight")?;
        Ok(Self {
            cfg: cfg.clone(),
            encoder: Encoder::new(cfg, vb.pp("encoder"))?,
            quant_conv: CausalConv3d::new(lat, e, (3, 1), 1, vb.pp("quant_conv"))?,
            quantize: VectorQuantizer::from_codebook(embedding, 0.25, true),
            post_quant_conv: CausalConv3d::new(e, lat, (3, 1), 1, vb.pp("post_quant_conv"))?,
            decoder: Decoder::new(cfg, vb.pp("decoder"))?,
        })
    }

    pub fn config(&self) -> &Emu3Config {
        &self.cfg
    }

    pub fn quantizer(&self) -> &VectorQuantizer {
        &self.quantize
    }

    /// `quant_conv(encoder(x))` of an image as transformers' `encode` sees it: repeated to
    /// `temporal_downsample_factor` frames (the 2-D part, frame by frame, is the same for
    /// each: run once), which the temporal convs bring down to one latent frame.
    ///
    /// # Shapes
    /// x: (b, in_channels, H, W) in [-1, 1] → (b, embed_dim, H/f, W/f)
    pub fn encode_latents(&self, x: &Tensor) -> Result<Tensor> {
        let z = self.encoder.forward_frame(x)?; // (b, c, h, w)
        let frames = vec![&z; self.cfg.temporal_downsample_factor];
        let z = Tensor::stack(&frames, 1)?; // (b, t, c, h, w)
        let z = self.encoder.forward_time(&z)?; // (b, 1, c, h, w)
        let q = self.quant_conv.forward(&z)?; // (b, 1, e, h, w)
        q.narrow(1, 0, 1)?.squeeze(1)?.contiguous()
    }

    /// The image's codes: the nearest codebook entry of every latent.
    ///
    /// # Shapes
    /// x: (b, in_channels, H, W) → (b, H/f, W/f) u32
    pub fn encode(&self, x: &Tensor) -> Result<Tensor> {
        let z = self.encode_latents(x)?;
        Ok(self.quantize.quantize(&z)?.indices)
    }

    /// The image of codes (transformers' `decode` of a (b, h, w) grid: frame 0 of the
    /// decoded clip); not clamped.
    ///
    /// # Shapes
    /// indices: (b, h, w) → (b, out_channels, h·f, w·f)
    pub fn decode_indices(&self, indices: &Tensor) -> Result<Tensor> {
        let quant = self.quantize.lookup(indices)?.unsqueeze(1)?; // (b, 1, e, h, w)
        let post = self.post_quant_conv.forward(&quant)?; // (b, 1, latent, h, w)
        self.decoder.forward_first_frame(&post, &quant)
    }
}

/// `DType` of the model's weights (f32).
pub const DTYPE: DType = DType::F32;
