//! The taming-transformers VQGAN, top to bottom: conv / norm helpers, ResnetBlock, AttnBlock,
//! Downsample, Upsample, Encoder, Decoder, and the VQModel that ties them to the quantizer.
//!
//! Every block is built by `fn new(cfg, vb)` whose `vb.pp(..)` chain spells the taming
//! state-dict names (`encoder.down.0.block.0.norm1.weight`, `encoder.mid.attn_1.q.weight`,
//! `decoder.up.3.upsample.conv.bias`, `quantize.embedding.weight`, ...), so a taming checkpoint
//! loads without any renaming. Heavy ops go through [`imgseq_kernels::ops`] only.
//!
//! Shapes in trailing comments use b = batch, c = channels, h × w = spatial size.

use crate::config::{DdConfig, VqConfig};
use crate::family::{Range, Variant};
use crate::quantize::{Quantized, VectorQuantizer};
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
type ConvVisitor<'a> = dyn FnMut(&mut Conv2d) -> Result<()> + 'a;

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

    fn for_each_conv(&mut self, f: &mut ConvVisitor) -> Result<()> {
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

    fn for_each_conv(&mut self, f: &mut ConvVisitor) -> Result<()> {
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
    conv: Conv2d, // 3×3 stride 2, c → c
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
    conv: Conv2d, // 3×3, c → c
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

/// One resolution level of the encoder (`encoder.down.i`).
#[derive(Debug, Clone)]
struct DownLevel {
    block: Vec<ResnetBlock>,
    /// Empty, or one AttnBlock after each ResnetBlock.
    attn: Vec<AttnBlock>,
    downsample: Option<Downsample>,
}

/// Image → latent grid (16× smaller for the f16 configs).
#[derive(Debug, Clone)]
pub struct Encoder {
    conv_in: Conv2d, // 3×3, in_channels → ch
    down: Vec<DownLevel>,
    mid_block_1: ResnetBlock,
    /// Absent only for diffusers models with `mid_block_add_attention: false`.
    mid_attn_1: Option<AttnBlock>,
    mid_block_2: ResnetBlock,
    norm_out: GroupNorm,
    conv_out: Conv2d, // 3×3, block_in → z_channels (2× if double_z)
}

impl Encoder {
    pub fn new(cfg: &DdConfig, variant: &Variant, vb: VarBuilder) -> Result<Self> {
        let g = variant.norm_groups;
        let p1 = Padding::same(1);
        let conv_in = Conv2d::new(cfg.in_channels, cfg.ch, 3, 1, p1, vb.pp("conv_in"))?;
        let levels = cfg.ch_mult.len();
        // `curr_res` starts at the *config* resolution and halves per level; it only decides
        // where attention goes, whatever the input size.
        let mut curr_res = cfg.resolution;
        let mut block_in = cfg.ch;
        let mut down = Vec::with_capacity(levels);
        for (i, mult) in cfg.ch_mult.iter().enumerate() {
            let vb_l = vb.pp("down").pp(i);
            let block_out = cfg.ch * mult;
            let mut block = Vec::new();
            let mut attn = Vec::new();
            for j in 0..cfg.num_res_blocks {
                block.push(ResnetBlock::new(
                    block_in,
                    block_out,
                    g,
                    vb_l.pp("block").pp(j),
                )?);
                block_in = block_out;
                if cfg.attn_resolutions.contains(&curr_res) {
                    attn.push(AttnBlock::new(block_in, g, vb_l.pp("attn").pp(j))?);
                }
            }
            let downsample = if i + 1 != levels {
                curr_res /= 2;
                Some(Downsample::new(block_in, vb_l.pp("downsample"))?)
            } else {
                None
            };
            down.push(DownLevel {
                block,
                attn,
                downsample,
            });
        }
        let vb_m = vb.pp("mid");
        let z_out = if cfg.double_z {
            2 * cfg.z_channels
        } else {
            cfg.z_channels
        };
        Ok(Self {
            conv_in,
            down,
            mid_block_1: ResnetBlock::new(block_in, block_in, g, vb_m.pp("block_1"))?,
            mid_attn_1: mid_attn(block_in, variant, vb_m.pp("attn_1"))?,
            mid_block_2: ResnetBlock::new(block_in, block_in, g, vb_m.pp("block_2"))?,
            norm_out: GroupNorm::new(block_in, g, vb.pp("norm_out"))?,
            conv_out: Conv2d::new(block_in, z_out, 3, 1, p1, vb.pp("conv_out"))?,
        })
    }

    /// # Shapes
    /// x: (b, in_channels, H, W) → (b, z_channels, H/f, W/f), f = 2^(levels−1)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = self.conv_in.forward(x)?; // (b, ch, H, W)
        for level in &self.down {
            for (j, block) in level.block.iter().enumerate() {
                h = block.forward(&h)?;
                if let Some(a) = level.attn.get(j) {
                    h = a.forward(&h)?;
                }
            }
            if let Some(d) = &level.downsample {
                h = d.forward(&h)?; // spatial / 2
            }
        }
        let mut h = self.mid_block_1.forward(&h)?;
        if let Some(a) = &self.mid_attn_1 {
            h = a.forward(&h)?;
        }
        let h = self.mid_block_2.forward(&h)?;
        self.conv_out.forward_normed(&h, &self.norm_out, true, None) // (b, z_channels, H/f, W/f)
    }

    fn for_each_conv(&mut self, f: &mut ConvVisitor) -> Result<()> {
        f(&mut self.conv_in)?;
        for level in &mut self.down {
            for b in &mut level.block {
                b.for_each_conv(f)?;
            }
            for a in &mut level.attn {
                a.for_each_conv(f)?;
            }
            if let Some(d) = &mut level.downsample {
                f(&mut d.conv)?;
            }
        }
        self.mid_block_1.for_each_conv(f)?;
        if let Some(a) = &mut self.mid_attn_1 {
            a.for_each_conv(f)?;
        }
        self.mid_block_2.for_each_conv(f)?;
        f(&mut self.conv_out)
    }
}

/// The middle attention block, unless the variant has none.
fn mid_attn(c: usize, variant: &Variant, vb: VarBuilder) -> Result<Option<AttnBlock>> {
    if variant.mid_attn {
        Ok(Some(AttnBlock::new(c, variant.norm_groups, vb)?))
    } else {
        Ok(None)
    }
}

/// One resolution level of the decoder (`decoder.up.i`).
#[derive(Debug, Clone)]
struct UpLevel {
    block: Vec<ResnetBlock>,
    attn: Vec<AttnBlock>,
    upsample: Option<Upsample>,
}

/// Latent grid → image. No tanh at the end (taming's `tanh_out=False`).
#[derive(Debug, Clone)]
pub struct Decoder {
    conv_in: Conv2d, // 3×3, z_channels → ch·ch_mult[-1]
    mid_block_1: ResnetBlock,
    mid_attn_1: Option<AttnBlock>,
    mid_block_2: ResnetBlock,
    /// Indexed by resolution level like the encoder: `up[0]` is the full-resolution level.
    /// taming builds the levels from the lowest resolution up and stores each with
    /// `self.up.insert(0, up)`, so `decoder.up.{L-1}` (lowest resolution) runs first.
    up: Vec<UpLevel>,
    norm_out: GroupNorm,
    conv_out: Conv2d, // 3×3, ch·ch_mult[0] → out_ch
}

impl Decoder {
    pub fn new(cfg: &DdConfig, variant: &Variant, vb: VarBuilder) -> Result<Self> {
        let g = variant.norm_groups;
        let p1 = Padding::same(1);
        let levels = cfg.ch_mult.len();
        let mut block_in = cfg.ch * cfg.ch_mult[levels - 1];
        let mut curr_res = cfg.resolution >> (levels - 1);
        let conv_in = Conv2d::new(cfg.z_channels, block_in, 3, 1, p1, vb.pp("conv_in"))?;
        let vb_m = vb.pp("mid");
        let mid_block_1 = ResnetBlock::new(block_in, block_in, g, vb_m.pp("block_1"))?;
        let mid_attn_1 = mid_attn(block_in, variant, vb_m.pp("attn_1"))?;
        let mid_block_2 = ResnetBlock::new(block_in, block_in, g, vb_m.pp("block_2"))?;
        // Build in running order (lowest resolution first), then reverse into level order.
        let mut up_rev = Vec::with_capacity(levels);
        for i in (0..levels).rev() {
            let vb_l = vb.pp("up").pp(i);
            let block_out = cfg.ch * cfg.ch_mult[i];
            let mut block = Vec::new();
            let mut attn = Vec::new();
            for j in 0..cfg.num_res_blocks + 1 {
                block.push(ResnetBlock::new(
                    block_in,
                    block_out,
                    g,
                    vb_l.pp("block").pp(j),
                )?);
                block_in = block_out;
                if cfg.attn_resolutions.contains(&curr_res) {
                    attn.push(AttnBlock::new(block_in, g, vb_l.pp("attn").pp(j))?);
                }
            }
            let upsample = if i != 0 {
                curr_res *= 2;
                Some(Upsample::new(block_in, vb_l.pp("upsample"))?)
            } else {
                None
            };
            up_rev.push(UpLevel {
                block,
                attn,
                upsample,
            });
        }
        up_rev.reverse();
        Ok(Self {
            conv_in,
            mid_block_1,
            mid_attn_1,
            mid_block_2,
            up: up_rev,
            norm_out: GroupNorm::new(block_in, g, vb.pp("norm_out"))?,
            conv_out: Conv2d::new(block_in, cfg.out_ch, 3, 1, p1, vb.pp("conv_out"))?,
        })
    }

    fn for_each_conv(&mut self, f: &mut ConvVisitor) -> Result<()> {
        f(&mut self.conv_in)?;
        self.mid_block_1.for_each_conv(f)?;
        if let Some(a) = &mut self.mid_attn_1 {
            a.for_each_conv(f)?;
        }
        self.mid_block_2.for_each_conv(f)?;
        for level in &mut self.up {
            for b in &mut level.block {
                b.for_each_conv(f)?;
            }
            for a in &mut level.attn {
                a.for_each_conv(f)?;
            }
            if let Some(u) = &mut level.upsample {
                f(&mut u.conv)?;
            }
        }
        f(&mut self.conv_out)
    }

    /// # Shapes
    /// z: (b, z_channels, h, w) → (b, out_ch, h·f, w·f), f = 2^(levels−1)
    pub fn forward(&self, z: &Tensor) -> Result<Tensor> {
        let h = self.conv_in.forward(z)?; // (b, ch·ch_mult[-1], h, w)
        let mut h = self.mid_block_1.forward(&h)?;
        if let Some(a) = &self.mid_attn_1 {
            h = a.forward(&h)?;
        }
        let mut h = self.mid_block_2.forward(&h)?;
        for level in self.up.iter().rev() {
            for (j, block) in level.block.iter().enumerate() {
                h = block.forward(&h)?;
                if let Some(a) = level.attn.get(j) {
                    h = a.forward(&h)?;
                }
            }
            if let Some(u) = &level.upsample {
                h = u.forward(&h)?; // spatial × 2
            }
        }
        self.conv_out.forward_normed(&h, &self.norm_out, true, None) // (b, out_ch, H, W)
    }
}

/// Whether [`VqModel::forward`] passes the latents through the codebook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bottleneck {
    /// Nearest codebook entry, straight-through gradient: the tokenizer.
    Quantize,
    /// The latents go to the decoder as they are (the autoencoder warm-up of training).
    Bypass,
}

/// What [`VqModel::forward`] computed.
#[derive(Debug, Clone)]
pub struct Forward {
    /// Continuous latents `quant_conv(encoder(x))`: (b, embed_dim, h, w) (before the l2
    /// normalisation of an l2 codebook: [`VectorQuantizer::search_space`]).
    pub latents: Tensor,
    /// The quantizer's output (indices, codebook loss); `None` with [`Bottleneck::Bypass`].
    pub quantized: Option<Quantized>,
    /// `decoder(post_quant_conv(·))`, not clamped: (b, out_ch, H, W).
    pub reconstruction: Tensor,
}

/// taming's `VQModel` (inference part): encoder → quant_conv → quantize → post_quant_conv →
/// decoder.
#[derive(Debug, Clone)]
pub struct VqModel {
    cfg: VqConfig,
    encoder: Encoder,
    quant_conv: Conv2d, // 1×1, z_channels → embed_dim
    quantize: VectorQuantizer,
    post_quant_conv: Conv2d, // 1×1, embed_dim → z_channels
    decoder: Decoder,
    /// The arithmetic of the decoding convs ([`Self::set_precision`]); the quantizer's
    /// search, the norms and attention's products are f32 either way.
    precision: Precision,
    /// The arithmetic of the encoding convs (the encoder and `quant_conv`): f32 unless the
    /// user opts in ([`Self::set_encoder_precision`]).
    encoder_precision: Precision,
    /// The bf16 code path the packed weights were made for.
    bf16_kernel: Bf16Kernel,
}

impl VqModel {
    pub fn new(cfg: &VqConfig, vb: VarBuilder) -> Result<Self> {
        let dd = &cfg.ddconfig;
        let p0 = Padding::same(0);
        Ok(Self {
            cfg: cfg.clone(),
            encoder: Encoder::new(dd, &cfg.variant, vb.pp("encoder"))?,
            quant_conv: Conv2d::new(dd.z_channels, cfg.embed_dim, 1, 1, p0, vb.pp("quant_conv"))?,
            quantize: VectorQuantizer::new(
                cfg.n_embed,
                cfg.embed_dim,
                cfg.beta,
                cfg.legacy,
                vb.pp("quantize"),
            )?
            .with_search(cfg.variant.l2_norm, cfg.variant.distance),
            post_quant_conv: Conv2d::new(
                cfg.embed_dim,
                dd.z_channels,
                1,
                1,
                p0,
                vb.pp("post_quant_conv"),
            )?,
            decoder: Decoder::new(dd, &cfg.variant, vb.pp("decoder"))?,
            precision: Precision::F32,
            encoder_precision: Precision::F32,
            bf16_kernel: Bf16Kernel::best(),
        })
    }

    /// The arithmetic the decoding convs run in.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Runs the decoding convs (`post_quant_conv` and the decoder) in `precision` (bf16:
    /// weights packed once, here; inference only — no gradients flow through bf16 layers), on
    /// the best bf16 code path of this CPU.
    ///
    /// The encoder and `quant_conv` stay f32, so the tokens are the f32 path's: with bf16
    /// encoder convs only 98.7% of the tokens of the shipped model on the held-out photos
    /// (99.5% on `assets/coffee.png`) equalled f32's, below the 99.5% bar, while the bf16
    /// decoder is at 57–59 dB PSNR against the f32 decode.
    pub fn set_precision(&mut self, precision: Precision) -> Result<()> {
        self.set_precision_on(precision, Bf16Kernel::best())
    }

    /// The arithmetic the encoding convs run in.
    pub fn encoder_precision(&self) -> Precision {
        self.encoder_precision
    }

    /// Runs the encoding convs (the encoder and `quant_conv`) in `precision`, on the same
    /// bf16 code path as the decoding convs — an opt-in: bf16 encoder convs move some latents
    /// across a codebook boundary, so the tokens are no longer always the f32 tokens
    /// ([`Self::set_precision`] says how many; [`crate::precision::encoder_token_agreement`]
    /// measures it on a built-in picture). Norms, attention and the search stay f32.
    pub fn set_encoder_precision(&mut self, precision: Precision) -> Result<()> {
        if precision == self.encoder_precision {
            return Ok(());
        }
        let kernel = self.bf16_kernel;
        let mut set = |c: &mut Conv2d| c.set_precision(precision, kernel);
        set(&mut self.quant_conv)?;
        self.encoder.for_each_conv(&mut set)?;
        self.encoder_precision = precision;
        Ok(())
    }

    /// [`Self::set_precision`] on a given bf16 code path (tests compare the two).
    pub fn set_precision_on(&mut self, precision: Precision, kernel: Bf16Kernel) -> Result<()> {
        if precision == self.precision
            && (precision == Precision::F32 || kernel == self.bf16_kernel)
        {
            return Ok(()); // already packed (or not needed)
        }
        let mut set = |c: &mut Conv2d| c.set_precision(precision, kernel);
        set(&mut self.post_quant_conv)?;
        self.decoder.for_each_conv(&mut set)?;
        self.precision = precision;
        if kernel != self.bf16_kernel && self.encoder_precision == Precision::Bf16 {
            // The encoder's packed weights follow the code path too.
            self.quant_conv.set_precision(Precision::Bf16, kernel)?;
            self.encoder
                .for_each_conv(&mut |c| c.set_precision(Precision::Bf16, kernel))?;
        }
        self.bf16_kernel = kernel;
        Ok(())
    }

    pub fn config(&self) -> &VqConfig {
        &self.cfg
    }

    pub fn quantizer(&self) -> &VectorQuantizer {
        &self.quantize
    }

    /// Image → reconstruction, codebook loss and indices: the one path that training,
    /// evaluation and the CLI all take.
    ///
    /// # Shapes
    /// x: (b, 3, H, W) in [-1, 1] → latents (b, embed_dim, H/f, W/f), indices (b, H/f, W/f),
    /// reconstruction (b, out_ch, H, W)
    pub fn forward(&self, x: &Tensor, bottleneck: Bottleneck) -> Result<Forward> {
        let latents = self.encode_latents(x)?; // (b, d, h, w)
        let (quantized, reconstruction) = match bottleneck {
            Bottleneck::Quantize => {
                let q = self.quantize.quantize(&latents)?;
                let r = self.decode(&q.quantized)?;
                (Some(q), r)
            }
            // Unit-length latents with an l2 codebook: what the decoder gets once quantizing.
            Bottleneck::Bypass => (None, self.decode(&self.quantize.search_space(&latents)?)?),
        };
        Ok(Forward {
            latents,
            quantized,
            reconstruction,
        })
    }

    /// Continuous latents before quantization (`quant_conv(encoder(x))`). Callers always
    /// give [-1, 1]; a model whose network reads [0, 1] (diffusers' aMUSEd VQ,
    /// [`Range::ZeroOne`]) gets `(x + 1) / 2`, and [`Self::decode`] maps its output back.
    ///
    /// # Shapes
    /// x: (b, 3, H, W) in [-1, 1] → (b, embed_dim, H/f, W/f)
    pub fn encode_latents(&self, x: &Tensor) -> Result<Tensor> {
        let x = match self.cfg.variant.range {
            Range::MinusOneOne => x.clone(),
            Range::ZeroOne => ((x + 1.0)? * 0.5)?, // the network reads [0, 1]
        };
        let h = self.encoder.forward(&x)?; // (b, z_channels, h, w)
        self.quant_conv.forward(&h) // (b, embed_dim, h, w)
    }

    /// `quantize(quant_conv(encoder(x)))`.
    ///
    /// # Shapes
    /// x: (b, 3, H, W) in [-1, 1] → quantized (b, embed_dim, h, w), indices (b, h, w)
    pub fn encode(&self, x: &Tensor) -> Result<Quantized> {
        let z = self.encode_latents(x)?;
        self.quantize.quantize(&z)
    }

    /// `decoder(post_quant_conv(q))`; the output is not clamped.
    ///
    /// # Shapes
    /// q: (b, embed_dim, h, w) → (b, out_ch, h·f, w·f), roughly in [-1, 1]
    pub fn decode(&self, q: &Tensor) -> Result<Tensor> {
        let h = self.post_quant_conv.forward(q)?; // (b, z_channels, h, w)
        let y = self.decoder.forward(&h)?;
        match self.cfg.variant.range {
            Range::MinusOneOne => Ok(y),
            Range::ZeroOne => (y * 2.0)? - 1.0, // back to [-1, 1]
        }
    }

    /// Codebook lookup then [`Self::decode`] (what taming's broken `decode_code` meant to do).
    ///
    /// # Shapes
    /// indices: (b, h, w), u32 or i64 → (b, out_ch, h·f, w·f)
    pub fn decode_indices(&self, indices: &Tensor) -> Result<Tensor> {
        let q = self.quantize.lookup(indices)?;
        self.decode(&q)
    }
}
