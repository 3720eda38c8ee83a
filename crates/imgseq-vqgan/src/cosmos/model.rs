//! The Cosmos image tokenizer's network (`cosmos_tokenizer/modules/layers2d.py`,
//! `networks/{discrete,continuous}_image.py`): the Haar patcher, a taming-style encoder
//! (ResnetBlock / AttnBlock / Downsample of [`crate::layers`], which are Cosmos' layers under
//! the same names), `quant_conv`, FSQ ([`Fsq`]) or the continuous latent, `post_quant_conv`,
//! the decoder and the unpatcher. Tensor names are those of the released archives:
//! `encoder.*`, `quant_conv.*` in `encoder.jit`; `post_quant_conv.*`, `decoder.*` in
//! `decoder.jit`.

use super::config::{CosmosConfig, Kind};
use super::patching;
use crate::layers::{AttnBlock, Conv2d, Downsample, GroupNorm, ResnetBlock, Upsample};
use candle_core::{DType, Result, Tensor};
use candle_nn::VarBuilder;
use imgseq_kernels::ops::Padding;

/// Cosmos' `Normalize`: GroupNorm with 32 groups.
const GROUPS: usize = 32;

/// One resolution level: its blocks, the attention after each (if the level attends) and
/// its resampling conv (if any).
struct Level<S> {
    blocks: Vec<ResnetBlock>,
    attn: Vec<AttnBlock>,
    resample: Option<S>,
}

impl<S> Level<S> {
    fn forward(&self, mut h: Tensor) -> Result<Tensor> {
        for (i, b) in self.blocks.iter().enumerate() {
            h = b.forward(&h)?;
            if let Some(a) = self.attn.get(i) {
                h = a.forward(&h)?;
            }
        }
        Ok(h)
    }
}

/// block_1 → attn_1 → block_2.
struct Mid {
    block_1: ResnetBlock,
    attn_1: AttnBlock,
    block_2: ResnetBlock,
}

impl Mid {
    fn new(c: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            block_1: ResnetBlock::new(c, c, GROUPS, vb.pp("block_1"))?,
            attn_1: AttnBlock::new(c, GROUPS, vb.pp("attn_1"))?,
            block_2: ResnetBlock::new(c, c, GROUPS, vb.pp("block_2"))?,
        })
    }

    fn forward(&self, h: &Tensor) -> Result<Tensor> {
        let h = self.block_1.forward(h)?;
        let h = self.attn_1.forward(&h)?;
        self.block_2.forward(&h)
    }
}

/// `layers2d.Encoder`: patcher → conv_in → levels (downsampling the first
/// `num_downsamples`) → mid → norm_out, swish → conv_out.
pub struct Encoder {
    cfg: CosmosConfig,
    conv_in: Conv2d,
    down: Vec<Level<Downsample>>,
    mid: Mid,
    norm_out: GroupNorm,
    conv_out: Conv2d,
}

impl Encoder {
    pub fn new(cfg: &CosmosConfig, vb: VarBuilder) -> Result<Self> {
        let p1 = Padding::same(1);
        let c0 = cfg.channels;
        let c_in = cfg.in_channels * cfg.patch_size * cfg.patch_size;
        let conv_in = Conv2d::new(c_in, c0, 3, 1, p1, vb.pp("conv_in"))?;
        let mut down = Vec::new();
        let mut block_in = c0;
        for (i, &m) in cfg.channels_mult.iter().enumerate() {
            let vl = vb.pp("down").pp(i);
            let block_out = c0 * m;
            let mut blocks = Vec::new();
            let mut attn = Vec::new();
            for j in 0..cfg.num_res_blocks {
                blocks.push(ResnetBlock::new(
                    block_in,
                    block_out,
                    GROUPS,
                    vl.pp("block").pp(j),
                )?);
                block_in = block_out;
                if cfg.encoder_attn_levels.contains(&i) {
                    attn.push(AttnBlock::new(block_in, GROUPS, vl.pp("attn").pp(j))?);
                }
            }
            let resample = match i < cfg.num_downsamples {
                true => Some(Downsample::new(block_in, vl.pp("downsample"))?),
                false => None,
            };
            down.push(Level {
                blocks,
                attn,
                resample,
            });
        }
        Ok(Self {
            cfg: cfg.clone(),
            conv_in,
            down,
            mid: Mid::new(block_in, vb.pp("mid"))?,
            norm_out: GroupNorm::new(block_in, GROUPS, vb.pp("norm_out"))?,
            conv_out: Conv2d::new(block_in, cfg.z_channels, 3, 1, p1, vb.pp("conv_out"))?,
        })
    }

    /// # Shapes
    /// x: (b, 3, H, W) → (b, z_channels, H/f, W/f)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = patching::patch(x, self.cfg.patch_size, self.cfg.patch_method)?;
        let mut h = self.conv_in.forward(&x)?;
        for l in &self.down {
            h = l.forward(h)?;
            if let Some(d) = &l.resample {
                h = d.forward(&h)?;
            }
        }
        let h = self.mid.forward(&h)?;
        self.conv_out.forward_normed(&h, &self.norm_out, true, None)
    }
}

/// `layers2d.Decoder`: conv_in → mid → levels from the last (upsampling the last
/// `num_upsamples`) → norm_out, swish → conv_out → unpatcher.
pub struct Decoder {
    cfg: CosmosConfig,
    conv_in: Conv2d,
    mid: Mid,
    /// Level i at index i (run from the last).
    up: Vec<Level<Upsample>>,
    norm_out: GroupNorm,
    conv_out: Conv2d,
}

impl Decoder {
    pub fn new(cfg: &CosmosConfig, vb: VarBuilder) -> Result<Self> {
        let p1 = Padding::same(1);
        let c0 = cfg.channels;
        let n = cfg.channels_mult.len();
        let mut block_in = c0 * cfg.channels_mult[n - 1];
        let conv_in = Conv2d::new(cfg.z_channels, block_in, 3, 1, p1, vb.pp("conv_in"))?;
        let mid = Mid::new(block_in, vb.pp("mid"))?;
        let mut up: Vec<Level<Upsample>> = Vec::new();
        for i in (0..n).rev() {
            let vl = vb.pp("up").pp(i);
            let block_out = c0 * cfg.channels_mult[i];
            let mut blocks = Vec::new();
            let mut attn = Vec::new();
            for j in 0..=cfg.num_res_blocks {
                blocks.push(ResnetBlock::new(
                    block_in,
                    block_out,
                    GROUPS,
                    vl.pp("block").pp(j),
                )?);
                block_in = block_out;
                if cfg.decoder_attn_levels.contains(&i) {
                    attn.push(AttnBlock::new(block_in, GROUPS, vl.pp("attn").pp(j))?);
                }
            }
            let resample = match i >= n - cfg.num_upsamples {
                true => Some(Upsample::new(block_in, vl.pp("upsample"))?),
                false => None,
            };
            up.insert(
                0,
                Level {
                    blocks,
                    attn,
                    resample,
                },
            );
        }
        let c_out = cfg.out_channels * cfg.patch_size * cfg.patch_size;
        Ok(Self {
            cfg: cfg.clone(),
            conv_in,
            mid,
            up,
            norm_out: GroupNorm::new(block_in, GROUPS, vb.pp("norm_out"))?,
            conv_out: Conv2d::new(block_in, c_out, 3, 1, p1, vb.pp("conv_out"))?,
        })
    }

    /// # Shapes
    /// z: (b, z_channels, h, w) → (b, 3, h·f, w·f)
    pub fn forward(&self, z: &Tensor) -> Result<Tensor> {
        let h = self.conv_in.forward(z)?;
        let mut h = self.mid.forward(&h)?;
        for l in self.up.iter().rev() {
            h = l.forward(h)?;
            if let Some(u) = &l.resample {
                h = u.forward(&h)?;
            }
        }
        let h = self
            .conv_out
            .forward_normed(&h, &self.norm_out, true, None)?;
        patching::unpatch(&h, self.cfg.patch_size, self.cfg.patch_method)
    }
}

/// Finite scalar quantization (`quantizers.FSQuantizer`, without projections: its `dim` is
/// the number of levels, as released). Each of the d channels is bounded
/// (`tanh(z + shift)·half_l − offset`, half_l = (L−1)(1 + 1e-3)/2, offset ½ for even L),
/// rounded half to even, and the digits `round + L//2` make the index Σ digitᵢ·basisᵢ
/// (basis the cumulative product of the levels: [1, 8, 64, 512, 2560, 12800] for
/// [8, 8, 8, 5, 5, 5]). Codes are `(digit − L//2) / (L//2)`.
#[derive(Debug, Clone)]
pub struct Fsq {
    levels: Vec<usize>,
    basis: Vec<i64>,
}

impl Fsq {
    pub fn new(levels: &[usize]) -> Self {
        let mut basis = Vec::with_capacity(levels.len());
        let mut acc = 1i64;
        for &l in levels {
            basis.push(acc);
            acc *= l as i64;
        }
        Self {
            levels: levels.to_vec(),
            basis,
        }
    }

    /// Codebook size.
    pub fn size(&self) -> usize {
        self.levels.iter().product()
    }

    /// The codebook index of each position of `z`, with the f32 arithmetic upstream does.
    ///
    /// # Shapes
    /// z: (b, d, h, w) → (b, h, w) i64
    pub fn indices(&self, z: &Tensor) -> Result<Tensor> {
        let (b, d, h, w) = z.dims4()?;
        if d != self.levels.len() {
            candle_core::bail!("FSQ of {} levels given {d} channels", self.levels.len());
        }
        let zs: Vec<f32> = z.permute((0, 2, 3, 1))?.flatten_all()?.to_vec1()?;
        let consts: Vec<(f32, f32, f32, f32)> = self
            .levels
            .iter()
            .map(|&l| {
                let half_l = (l as f32 - 1.0) * 1.001f32 / 2.0;
                let offset = if l % 2 == 0 { 0.5f32 } else { 0.0 };
                let shift = (offset / half_l).atanh();
                (half_l, offset, shift, (l / 2) as f32)
            })
            .collect();
        let idx: Vec<i64> = zs
            .chunks_exact(d)
            .map(|zc| {
                let s: f32 = zc
                    .iter()
                    .zip(&consts)
                    .zip(&self.basis)
                    .map(|((&z, &(half_l, offset, shift, hw)), &basis)| {
                        let q = ((z + shift).tanh() * half_l - offset).round_ties_even();
                        // codes_to_indices: ((q / hw)·hw + hw)·basis, summed, truncated.
                        ((q / hw) * hw + hw) * basis as f32
                    })
                    .sum();
                s as i64
            })
            .collect();
        Tensor::from_vec(idx, (b, h, w), z.device())
    }

    /// The codes of `indices`, which must lie in `0..size()`.
    ///
    /// # Shapes
    /// indices: (b, h, w) i64 → (b, d, h, w) f32
    pub fn codes(&self, indices: &Tensor) -> Result<Tensor> {
        let (b, h, w) = indices.dims3()?;
        let idx: Vec<i64> = indices.to_dtype(DType::I64)?.flatten_all()?.to_vec1()?;
        let d = self.levels.len();
        let mut out = Vec::with_capacity(idx.len() * d);
        for &i in &idx {
            for (&l, &basis) in self.levels.iter().zip(&self.basis) {
                let hw = (l / 2) as f32;
                let digit = (i.div_euclid(basis)).rem_euclid(l as i64) as f32;
                out.push((digit - hw) / hw);
            }
        }
        Tensor::from_vec(out, (b, h, w, d), indices.device())?
            .permute((0, 3, 1, 2))?
            .contiguous()
    }
}

/// What sits between quant_conv and post_quant_conv.
pub enum Bottleneck {
    /// DI: FSQ indices.
    Fsq(Fsq),
    /// CI: the latent itself (the AE formulation's `IdentityDistribution`).
    Latent,
}

/// A Cosmos image tokenizer: encoder and decoder as their archives hold them.
pub struct CosmosModel {
    cfg: CosmosConfig,
    encoder: Encoder,
    quant_conv: Conv2d,
    bottleneck: Bottleneck,
    post_quant_conv: Conv2d,
    decoder: Decoder,
}

impl CosmosModel {
    /// The model of `cfg` from `enc` (names of `encoder.jit`) and `dec` (of `decoder.jit`).
    pub fn new(cfg: &CosmosConfig, enc: VarBuilder, dec: VarBuilder) -> Result<Self> {
        let p0 = Padding::same(0);
        let e = cfg.embedding_dim();
        let bottleneck = match &cfg.kind {
            Kind::Discrete { levels } => Bottleneck::Fsq(Fsq::new(levels)),
            Kind::Continuous { .. } => Bottleneck::Latent,
        };
        Ok(Self {
            cfg: cfg.clone(),
            encoder: Encoder::new(cfg, enc.pp("encoder"))?,
            quant_conv: Conv2d::new(cfg.z_channels, e, 1, 1, p0, enc.pp("quant_conv"))?,
            bottleneck,
            post_quant_conv: Conv2d::new(e, cfg.z_channels, 1, 1, p0, dec.pp("post_quant_conv"))?,
            decoder: Decoder::new(cfg, dec.pp("decoder"))?,
        })
    }

    pub fn config(&self) -> &CosmosConfig {
        &self.cfg
    }

    /// FSQ of a DI tokenizer.
    pub fn fsq(&self) -> Option<&Fsq> {
        match &self.bottleneck {
            Bottleneck::Fsq(f) => Some(f),
            Bottleneck::Latent => None,
        }
    }

    /// `quant_conv(encoder(x))`: FSQ's input (DI) or the latent (CI).
    ///
    /// # Shapes
    /// x: (b, 3, H, W) in [-1, 1] → (b, embedding_dim, H/f, W/f)
    pub fn encode_latents(&self, x: &Tensor) -> Result<Tensor> {
        self.quant_conv.forward(&self.encoder.forward(x)?)
    }

    /// DI: the FSQ indices (b, H/f, W/f) of pictures x (b, 3, H, W) in [-1, 1].
    pub fn encode_indices(&self, x: &Tensor) -> Result<Tensor> {
        match &self.bottleneck {
            Bottleneck::Fsq(f) => f.indices(&self.encode_latents(x)?),
            Bottleneck::Latent => candle_core::bail!("a continuous (CI) tokenizer has no indices"),
        }
    }

    /// `decoder(post_quant_conv(z))`: pictures in [-1, 1] of codes or latents z.
    ///
    /// # Shapes
    /// z: (b, embedding_dim, h, w) → (b, 3, h·f, w·f)
    pub fn decode_latents(&self, z: &Tensor) -> Result<Tensor> {
        self.decoder.forward(&self.post_quant_conv.forward(z)?)
    }

    /// DI: pictures of FSQ indices (b, h, w) (checked to lie in the codebook by the caller).
    pub fn decode_indices(&self, indices: &Tensor) -> Result<Tensor> {
        match &self.bottleneck {
            Bottleneck::Fsq(f) => self.decode_latents(&f.codes(indices)?),
            Bottleneck::Latent => candle_core::bail!("a continuous (CI) tokenizer has no indices"),
        }
    }

    /// About the bytes a forward pass of n pictures of h×w pixels holds at its peak: a few
    /// maps of the widest level at the patched resolution, and the middle attention's
    /// (positions²) scores.
    pub fn forward_bytes(&self, n: usize, h: usize, w: usize) -> u128 {
        let p = self.cfg.patch_size.max(1) as u128;
        let px = (h as u128 / p).saturating_mul(w as u128 / p);
        let maps = px
            .saturating_mul(self.cfg.widest() as u128)
            .saturating_mul(4 * 8);
        let f = self.cfg.spatial_compression.max(1) as u128;
        let mid = ((h as u128 / f).saturating_mul(w as u128 / f))
            .pow(2)
            .saturating_mul(4 * 2);
        maps.saturating_add(mid).saturating_mul(n as u128)
    }
}
