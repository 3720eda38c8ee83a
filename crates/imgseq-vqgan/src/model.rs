//! The taming-transformers VQGAN, top to bottom: Encoder, Decoder, and the VQModel that ties
//! them to the quantizer (their layers — Conv2d, GroupNorm, ResnetBlock, AttnBlock, Downsample,
//! Upsample — are in [`crate::layers`]).
//!
//! Every block is built by `fn new(cfg, vb)` whose `vb.pp(..)` chain spells the taming
//! state-dict names (`encoder.down.0.block.0.norm1.weight`, `encoder.mid.attn_1.q.weight`,
//! `decoder.up.3.upsample.conv.bias`, `quantize.embedding.weight`, ...), so a taming checkpoint
//! loads without any renaming. Heavy ops go through [`imgseq_kernels::ops`] only.
//!
//! Shapes in trailing comments use b = batch, c = channels, h × w = spatial size.

use crate::config::{DdConfig, VqConfig};
use crate::family::{Family, Range, Variant};
use crate::layers::ConvVisitor;
pub use crate::layers::{AttnBlock, Conv2d, Downsample, GroupNorm, ResnetBlock, Upsample};
use crate::quantize::{Quantized, VectorQuantizer};
use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;
use imgseq_kernels::ops::{Bf16Kernel, Padding};
use imgseq_kernels::Precision;

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
        for l in &mut self.down {
            level_convs(
                &mut l.block,
                &mut l.attn,
                l.downsample.as_mut().map(|d| &mut d.conv),
                f,
            )?;
        }
        mid_convs(
            (
                &mut self.mid_block_1,
                self.mid_attn_1.as_mut(),
                &mut self.mid_block_2,
            ),
            f,
        )?;
        f(&mut self.conv_out)
    }
}

/// Every conv of one resolution level — its ResNet blocks, attention blocks and resampling
/// conv — in the order [`VqModel::set_convs`] visits them (encoder and decoder alike).
fn level_convs(
    block: &mut [ResnetBlock],
    attn: &mut [AttnBlock],
    resample: Option<&mut Conv2d>,
    f: &mut ConvVisitor,
) -> Result<()> {
    block.iter_mut().try_for_each(|b| b.for_each_conv(f))?;
    attn.iter_mut().try_for_each(|a| a.for_each_conv(f))?;
    resample.map_or(Ok(()), f)
}

/// Every conv of the middle: block 1, the attention (when there is one), block 2.
fn mid_convs(
    (b1, attn, b2): (&mut ResnetBlock, Option<&mut AttnBlock>, &mut ResnetBlock),
    f: &mut ConvVisitor,
) -> Result<()> {
    b1.for_each_conv(f)?;
    attn.map_or(Ok(()), |a| a.for_each_conv(f))?;
    b2.for_each_conv(f)
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
        mid_convs(
            (
                &mut self.mid_block_1,
                self.mid_attn_1.as_mut(),
                &mut self.mid_block_2,
            ),
            f,
        )?;
        for l in &mut self.up {
            level_convs(
                &mut l.block,
                &mut l.attn,
                l.upsample.as_mut().map(|u| &mut u.conv),
                f,
            )?;
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

/// One half of a [`VqModel`]'s convs: encoding (the encoder and `quant_conv`) or decoding
/// (`post_quant_conv` and the decoder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Half {
    Encoding,
    Decoding,
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
    /// `None`: an encoder-only model (transformers' Chameleon VQ).
    decoder: Option<Decoder>,
    /// The arithmetic of the decoding convs ([`Self::set_precision`]); the quantizer's
    /// search, the norms and attention's products are f32 either way.
    pub(crate) precision: Precision,
    /// The arithmetic of the encoding convs (the encoder and `quant_conv`): f32 unless the
    /// user opts in ([`Self::set_encoder_precision`]).
    pub(crate) encoder_precision: Precision,
    /// The bf16 code path the packed weights were made for.
    pub(crate) bf16_kernel: Bf16Kernel,
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
            decoder: if cfg.variant.family == Family::Chameleon
                && !vb.contains_tensor("decoder.conv_in.weight")
            {
                None
            } else {
                Some(Decoder::new(dd, &cfg.variant, vb.pp("decoder"))?)
            },
            precision: Precision::F32,
            encoder_precision: Precision::F32,
            bf16_kernel: Bf16Kernel::best(),
        })
    }

    /// Sets the convs of one half of the model to `precision` on `kernel` (bf16: weights
    /// packed once, here). [`crate::precision`] owns the rules of which half runs in what.
    pub(crate) fn set_convs(
        &mut self,
        half: Half,
        precision: Precision,
        kernel: Bf16Kernel,
    ) -> Result<()> {
        let mut set = |c: &mut Conv2d| c.set_precision(precision, kernel);
        match half {
            Half::Encoding => {
                set(&mut self.quant_conv)?;
                self.encoder.for_each_conv(&mut set)
            }
            Half::Decoding => {
                set(&mut self.post_quant_conv)?;
                match &mut self.decoder {
                    Some(d) => d.for_each_conv(&mut set),
                    None => Ok(()),
                }
            }
        }
    }

    pub fn config(&self) -> &VqConfig {
        &self.cfg
    }

    /// Whether the model decodes (transformers' Chameleon VQ has no decoder).
    pub fn has_decoder(&self) -> bool {
        self.decoder.is_some()
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
        let decoder = self
            .decoder
            .as_ref()
            .ok_or_else(crate::chameleon::no_decoder)?;
        let y = decoder.forward(&h)?;
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
