//! Open-MAGVIT2's encoder and decoder (`taming/modules/diffusionmodules/improved_model.py`),
//! named like their state dict (`encoder.down.{i}.block.{j}.conv1.weight`,
//! `encoder.mid_block.{j}`, `decoder.adaptive.{i}.gamma.weight`,
//! `decoder.up.{i}.upsample.conv1.weight`, ...). What differs from taming's VQGAN:
//!
//! * res blocks: GroupNorm(32) → swish → 3×3 conv **without bias**, twice; a 1×1 bias-free
//!   `nin_shortcut` when the channel count changes; no attention anywhere;
//! * encoder: bias-free `conv_in`; downsampling by a 3×3 stride-2 conv with padding 1 (with
//!   bias); `num_res_blocks` res blocks in the middle; a 1×1 `conv_out` to `z_channels`;
//! * decoder: before each level's res blocks an adaptive GroupNorm — GroupNorm(32) without
//!   affine, then `gamma(std) · x + beta(mean)`, where mean and std (unbiased variance + 1e-6,
//!   square-rooted) are taken per channel over the quantized latent's positions and `gamma`,
//!   `beta` are linear maps from `z_channels` to the level's channels; upsampling by a 3×3
//!   conv to 4× the channels and depth-to-space in DCR order (channel `(i·2 + j)·C + c` goes
//!   to pixel offset (i, j) of channel `c`), not PyTorch's `pixel_shuffle` order.
//!
//! Shapes in comments: b = batch, c = channels, h × w = spatial size.

use crate::config::{LfqConfig, GROUPS};
use crate::quantize::Lfq;
use candle_core::{DType, Device, Result, Tensor};
use candle_nn::VarBuilder;
use imgseq_core::tokens::TokenGrid;
use imgseq_kernels::ops::{self, Padding};

const EPS: f64 = 1e-6;

/// A PyTorch `nn.Conv2d`, square kernel, symmetric padding.
struct Conv {
    weight: Tensor,
    bias: Option<Tensor>,
    stride: usize,
    pad: usize,
}

impl Conv {
    fn new(
        vb: VarBuilder,
        c_in: usize,
        c_out: usize,
        k: usize,
        stride: usize,
        bias: bool,
    ) -> Result<Self> {
        Ok(Self {
            weight: vb.get((c_out, c_in, k, k), "weight")?,
            bias: if bias {
                Some(vb.get(c_out, "bias")?)
            } else {
                None
            },
            stride,
            pad: k / 2,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        ops::conv2d(
            x,
            &self.weight,
            self.bias.as_ref(),
            self.stride,
            Padding::same(self.pad),
        )
    }
}

/// `nn.GroupNorm(32, c, eps=1e-6)`: affine (weights from the file) or not (ones and zeros).
struct Norm {
    weight: Tensor,
    bias: Tensor,
}

impl Norm {
    fn new(vb: VarBuilder, c: usize) -> Result<Self> {
        Ok(Self {
            weight: vb.get(c, "weight")?,
            bias: vb.get(c, "bias")?,
        })
    }

    fn plain(c: usize) -> Result<Self> {
        Ok(Self {
            weight: Tensor::ones(c, DType::F32, &Device::Cpu)?,
            bias: Tensor::zeros(c, DType::F32, &Device::Cpu)?,
        })
    }

    fn forward(&self, x: &Tensor, swish: bool) -> Result<Tensor> {
        ops::group_norm(x, GROUPS, &self.weight, &self.bias, EPS, swish)
    }
}

/// `ResBlock(in, out)`: norm1 → swish → conv1 → norm2 → swish → conv2, plus the shortcut.
struct ResBlock {
    norm1: Norm,
    conv1: Conv,
    norm2: Norm,
    conv2: Conv,
    nin_shortcut: Option<Conv>,
}

impl ResBlock {
    fn new(vb: VarBuilder, c_in: usize, c_out: usize) -> Result<Self> {
        Ok(Self {
            norm1: Norm::new(vb.pp("norm1"), c_in)?,
            conv1: Conv::new(vb.pp("conv1"), c_in, c_out, 3, 1, false)?,
            norm2: Norm::new(vb.pp("norm2"), c_out)?,
            conv2: Conv::new(vb.pp("conv2"), c_out, c_out, 3, 1, false)?,
            nin_shortcut: if c_in != c_out {
                Some(Conv::new(vb.pp("nin_shortcut"), c_in, c_out, 1, 1, false)?)
            } else {
                None
            },
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.conv1.forward(&self.norm1.forward(x, true)?)?;
        let h = self.conv2.forward(&self.norm2.forward(&h, true)?)?;
        match &self.nin_shortcut {
            Some(s) => h + s.forward(x)?,
            None => h + x,
        }
    }
}

fn blocks(vb: VarBuilder, n: usize, c_in: usize, c_out: usize) -> Result<Vec<ResBlock>> {
    (0..n)
        .map(|j| ResBlock::new(vb.pp(j), if j == 0 { c_in } else { c_out }, c_out))
        .collect()
}

fn run(blocks: &[ResBlock], mut x: Tensor) -> Result<Tensor> {
    for b in blocks {
        x = b.forward(&x)?;
    }
    Ok(x)
}

/// The encoder: image (b, 3, h, w) → latent (b, z_channels, h/f, w/f).
struct Encoder {
    conv_in: Conv,
    /// Per level: its res blocks and (all but the last level) the strided conv.
    down: Vec<(Vec<ResBlock>, Option<Conv>)>,
    mid: Vec<ResBlock>,
    norm_out: Norm,
    conv_out: Conv,
}

impl Encoder {
    fn new(cfg: &LfqConfig, vb: VarBuilder) -> Result<Self> {
        let (ch, n) = (cfg.ch, cfg.num_res_blocks);
        let conv_in = Conv::new(vb.pp("conv_in"), cfg.in_channels, ch, 3, 1, false)?;
        let mut c_in = ch;
        let mut down = Vec::new();
        for (i, &m) in cfg.ch_mult.iter().enumerate() {
            let c_out = ch * m;
            let vbl = vb.pp("down").pp(i);
            let bl = blocks(vbl.pp("block"), n, c_in, c_out)?;
            let ds = if i + 1 < cfg.ch_mult.len() {
                Some(Conv::new(vbl.pp("downsample"), c_out, c_out, 3, 2, true)?)
            } else {
                None
            };
            down.push((bl, ds));
            c_in = c_out;
        }
        Ok(Self {
            conv_in,
            down,
            mid: blocks(vb.pp("mid_block"), n, c_in, c_in)?,
            norm_out: Norm::new(vb.pp("norm_out"), c_in)?,
            conv_out: Conv::new(vb.pp("conv_out"), c_in, cfg.z_channels, 1, 1, true)?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = self.conv_in.forward(x)?;
        for (bl, ds) in &self.down {
            h = run(bl, h)?;
            if let Some(d) = ds {
                h = d.forward(&h)?;
            }
        }
        h = run(&self.mid, h)?;
        self.conv_out.forward(&self.norm_out.forward(&h, true)?)
    }
}

/// `AdaptiveGroupNorm(z_channels, c)`: plain GroupNorm, then a scale and shift computed from
/// the quantized latent's per-channel std and mean.
struct AdaptiveNorm {
    norm: Norm,
    gamma: (Tensor, Tensor),
    beta: (Tensor, Tensor),
}

impl AdaptiveNorm {
    fn new(vb: VarBuilder, z: usize, c: usize) -> Result<Self> {
        let lin = |name: &str| -> Result<(Tensor, Tensor)> {
            Ok((
                vb.pp(name).get((c, z), "weight")?,
                vb.pp(name).get(c, "bias")?,
            ))
        };
        Ok(Self {
            norm: Norm::plain(c)?,
            gamma: lin("gamma")?,
            beta: lin("beta")?,
        })
    }

    /// x: (b, c, h, w); stats: ((b, z) std, (b, z) mean) → (b, c, h, w)
    fn forward(&self, x: &Tensor, (std, mean): &(Tensor, Tensor)) -> Result<Tensor> {
        let (b, c, _, _) = x.dims4()?;
        let scale = ops::linear(std, &self.gamma.0, Some(&self.gamma.1))?.reshape((b, c, 1, 1))?;
        let shift = ops::linear(mean, &self.beta.0, Some(&self.beta.1))?.reshape((b, c, 1, 1))?;
        self.norm
            .forward(x, false)?
            .broadcast_mul(&scale)?
            .broadcast_add(&shift)
    }
}

/// Per-channel std (`sqrt(var + 1e-6)`, torch's unbiased `var`) and mean over the positions.
///
/// # Shapes
/// z: (b, z, h, w) → ((b, z), (b, z))
fn latent_stats(z: &Tensor) -> Result<(Tensor, Tensor)> {
    let (b, c, h, w) = z.dims4()?;
    let n = h * w;
    let v = z.flatten_all()?.to_vec1::<f32>()?;
    let (mut std, mut mean) = (Vec::with_capacity(b * c), Vec::with_capacity(b * c));
    for row in v.chunks(n.max(1)) {
        let m = row.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
        let ss = row.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>();
        let var = ss / (n as f64 - 1.0);
        std.push(((var + EPS).sqrt()) as f32);
        mean.push(m as f32);
    }
    Ok((
        Tensor::from_vec(std, (b, c), &Device::Cpu)?,
        Tensor::from_vec(mean, (b, c), &Device::Cpu)?,
    ))
}

/// Depth-to-space, DCR order: (b, 4c, h, w) → (b, c, 2h, 2w).
fn depth_to_space(x: &Tensor) -> Result<Tensor> {
    let (b, c4, h, w) = x.dims4()?;
    let c = c4 / 4;
    x.reshape((b, 2, 2, c, h, w))?
        .permute([0, 3, 4, 1, 5, 2])?
        .contiguous()?
        .reshape((b, c, 2 * h, 2 * w))
}

/// One decoder level: adaptive norm, res blocks, and (all but level 0) the upsampler.
struct UpLevel {
    adaptive: AdaptiveNorm,
    blocks: Vec<ResBlock>,
    upsample: Option<Conv>,
}

/// The decoder: ±1 latent (b, z, h, w) → image (b, 3, f·h, f·w).
struct Decoder {
    conv_in: Conv,
    mid: Vec<ResBlock>,
    /// Level by level from the lowest resolution (their `reversed(range(num_blocks))`).
    up: Vec<UpLevel>,
    norm_out: Norm,
    conv_out: Conv,
}

impl Decoder {
    fn new(cfg: &LfqConfig, vb: VarBuilder) -> Result<Self> {
        let (ch, n, z) = (cfg.ch, cfg.num_res_blocks, cfg.z_channels);
        let levels = cfg.ch_mult.len();
        let mut c_in = ch * cfg.ch_mult[levels - 1];
        let conv_in = Conv::new(vb.pp("conv_in"), z, c_in, 3, 1, true)?;
        let mid = blocks(vb.pp("mid_block"), n, c_in, c_in)?;
        let mut up = Vec::new();
        for i in (0..levels).rev() {
            let c_out = ch * cfg.ch_mult[i];
            let adaptive = AdaptiveNorm::new(vb.pp("adaptive").pp(i), z, c_in)?;
            let vbl = vb.pp("up").pp(i);
            let bl = blocks(vbl.pp("block"), n, c_in, c_out)?;
            let upsample = if i > 0 {
                Some(Conv::new(
                    vbl.pp("upsample").pp("conv1"),
                    c_out,
                    4 * c_out,
                    3,
                    1,
                    true,
                )?)
            } else {
                None
            };
            up.push(UpLevel {
                adaptive,
                blocks: bl,
                upsample,
            });
            c_in = c_out;
        }
        Ok(Self {
            conv_in,
            mid,
            up,
            norm_out: Norm::new(vb.pp("norm_out"), c_in)?,
            conv_out: Conv::new(vb.pp("conv_out"), c_in, cfg.out_ch, 3, 1, true)?,
        })
    }

    fn forward(&self, z: &Tensor) -> Result<Tensor> {
        let stats = latent_stats(z)?;
        let mut h = run(&self.mid, self.conv_in.forward(z)?)?;
        for l in &self.up {
            h = run(&l.blocks, l.adaptive.forward(&h, &stats)?)?;
            if let Some(u) = &l.upsample {
                h = depth_to_space(&u.forward(&h)?)?;
            }
        }
        self.conv_out.forward(&self.norm_out.forward(&h, true)?)
    }
}

/// An Open-MAGVIT2 tokenizer network: encoder, LFQ, decoder.
pub struct LfqModel {
    cfg: LfqConfig,
    encoder: Encoder,
    decoder: Decoder,
    quantizer: Lfq,
    /// Whether the weights are the EMA copies (else the raw ones).
    pub ema: bool,
}

impl LfqModel {
    /// Builds the network from `vb` (names as in their state dict, without `model_ema.`).
    pub fn new(cfg: LfqConfig, vb: VarBuilder, ema: bool) -> Result<Self> {
        Ok(Self {
            encoder: Encoder::new(&cfg, vb.pp("encoder"))?,
            decoder: Decoder::new(&cfg, vb.pp("decoder"))?,
            quantizer: Lfq::new(&cfg),
            cfg,
            ema,
        })
    }

    pub fn config(&self) -> &LfqConfig {
        &self.cfg
    }

    pub fn quantizer(&self) -> &Lfq {
        &self.quantizer
    }

    /// The encoder's latent, before quantization.
    ///
    /// # Shapes
    /// x: (b, 3, h, w) in [-1, 1] → (b, z_channels, h/f, w/f)
    pub fn encode_latent(&self, x: &Tensor) -> imgseq_core::Result<Tensor> {
        let (b, _, h, w) = x.dims4()?;
        self.cfg.check_memory(b, h, w)?;
        Ok(self.encoder.forward(x)?)
    }

    /// Tokens of images (b, 3, h, w) in [-1, 1].
    pub fn encode(&self, x: &Tensor) -> imgseq_core::Result<TokenGrid> {
        self.quantizer.indices(&self.encode_latent(x)?)
    }

    /// Images (b, 3, f·h, f·w), roughly in [-1, 1], of a ±1 latent (b, z, h, w).
    pub fn decode_latent(&self, q: &Tensor) -> imgseq_core::Result<Tensor> {
        let (b, _, h, w) = q.dims4()?;
        let f = self.cfg.downsample_factor();
        self.cfg.check_memory(b, h * f, w * f)?;
        if h * w < 2 {
            return Err(imgseq_core::Error::invalid(
                "a 1x1 token grid cannot be decoded (the adaptive norm takes a variance over the grid)",
            ));
        }
        Ok(self.decoder.forward(q)?)
    }

    /// Images of tokens (every token in `0..2^bits`).
    pub fn decode(&self, tokens: &TokenGrid) -> imgseq_core::Result<Tensor> {
        let q = self
            .quantizer
            .codes(&tokens.data, (tokens.n, tokens.h, tokens.w))?;
        self.decode_latent(&q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_to_space_is_dcr_order() {
        // (1, 8, 1, 1): c = 2; channel (i·2 + j)·2 + c holds 100·c + 10·i + j.
        let mut v = vec![0f32; 8];
        for i in 0..2 {
            for j in 0..2 {
                for c in 0..2 {
                    v[(i * 2 + j) * 2 + c] = (100 * c + 10 * i + j) as f32;
                }
            }
        }
        let x = Tensor::from_vec(v, (1, 8, 1, 1), &Device::Cpu).unwrap();
        let y = depth_to_space(&x).unwrap();
        assert_eq!(y.dims(), &[1, 2, 2, 2]);
        let got = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(got, vec![0., 1., 10., 11., 100., 101., 110., 111.]);
    }

    #[test]
    fn latent_stats_use_the_unbiased_variance() {
        let z = Tensor::from_vec(vec![1f32, -1., 1., 1.], (1, 1, 2, 2), &Device::Cpu).unwrap();
        let (std, mean) = latent_stats(&z).unwrap();
        let (s, m) = (
            std.to_vec2::<f32>().unwrap()[0][0],
            mean.to_vec2::<f32>().unwrap()[0][0],
        );
        assert_eq!(m, 0.5);
        // sum of squares 3 × 0.25 + 2.25 = 3, over n − 1 = 3
        assert!((s - (1.0f32 + 1e-6).sqrt()).abs() < 1e-7, "{s}");
    }
}
