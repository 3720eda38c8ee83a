//! MaskGIT-VQGAN's network (`modeling/modules/maskgit_vqgan.py` of bytedance/1d-tokenizer, from
//! open-muse's port of MaskGIT's JAX VQGAN), under its weight names: taming-like ResNet levels
//! with no attention, bias-free 3×3 convs inside the blocks, 2×2 average pooling down and
//! nearest ×2 + a 3×3 conv up, and the plain nearest-entry codebook.
//!
//! Two details differ from taming and are kept as upstream has them: a block whose width
//! changes adds `nin_shortcut` of its *output* (`h + nin_shortcut(h)`, not of its input), and
//! every `Conv2dSame` pads a stride-1 k×k conv by ⌊(k−1)/2⌋ before and the rest after.
//!
//! Shapes in trailing comments use b = batch, c = channels, h × w = spatial size.

use super::MaskGitConfig;
use crate::layers::{Conv2d, GroupNorm};
use crate::quantize::VectorQuantizer;
use candle_core::{DType, Result, Tensor};
use candle_nn::VarBuilder;
use imgseq_kernels::ops::{self, Padding};

/// Every GroupNorm: 32 groups, eps 1e-6 ([`crate::layers`]).
const GROUPS: usize = 32;

/// `Conv2dSame` at stride 1: `⌊(k−1)/2⌋` zeros before, the rest after.
fn same(k: usize) -> Padding {
    let p = k - 1;
    Padding {
        left: p / 2,
        right: p - p / 2,
        top: p / 2,
        bottom: p - p / 2,
    }
}

/// A `Conv2dSame(c_in, c_out, k, bias=False)`: a conv with a zero bias.
fn conv_no_bias(c_in: usize, c_out: usize, k: usize, vb: VarBuilder) -> Result<Conv2d> {
    let w = vb.get((c_out, c_in, k, k), "weight")?;
    let b = Tensor::zeros(c_out, DType::F32, w.device())?;
    Ok(Conv2d::from_tensors(w, b, 1, same(k)))
}

/// A `Conv2dSame(c_in, c_out, k)` with its bias.
fn conv(c_in: usize, c_out: usize, k: usize, vb: VarBuilder) -> Result<Conv2d> {
    Conv2d::new(c_in, c_out, k, 1, same(k), vb)
}

/// `ResnetBlock`: norm1 → silu → conv1 → norm2 → silu → conv2, plus `h` itself
/// (`nin_shortcut(h)` when the width changes) or the input.
#[derive(Debug, Clone)]
struct ResnetBlock {
    norm1: GroupNorm,
    conv1: Conv2d,
    norm2: GroupNorm,
    conv2: Conv2d,
    nin_shortcut: Option<Conv2d>,
}

impl ResnetBlock {
    fn new(c_in: usize, c_out: usize, vb: VarBuilder) -> Result<Self> {
        let nin_shortcut = if c_in != c_out {
            Some(conv_no_bias(c_out, c_out, 1, vb.pp("nin_shortcut"))?)
        } else {
            None
        };
        Ok(Self {
            norm1: GroupNorm::new(c_in, GROUPS, vb.pp("norm1"))?,
            conv1: conv_no_bias(c_in, c_out, 3, vb.pp("conv1"))?,
            norm2: GroupNorm::new(c_out, GROUPS, vb.pp("norm2"))?,
            conv2: conv_no_bias(c_out, c_out, 3, vb.pp("conv2"))?,
            nin_shortcut,
        })
    }

    /// # Shapes
    /// x: (b, c_in, h, w) → (b, c_out, h, w)
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.conv1.forward_normed(x, &self.norm1, true, None)?;
        match &self.nin_shortcut {
            None => self.conv2.forward_normed(&h, &self.norm2, true, Some(x)),
            Some(s) => {
                let h = self.conv2.forward_normed(&h, &self.norm2, true, None)?;
                h.add(&s.forward(&h)?)
            }
        }
    }
}

fn blocks(c_in: usize, c_out: usize, n: usize, vb: VarBuilder) -> Result<Vec<ResnetBlock>> {
    (0..n)
        .map(|j| ResnetBlock::new(if j == 0 { c_in } else { c_out }, c_out, vb.pp(j)))
        .collect()
}

fn run(blocks: &[ResnetBlock], x: Tensor) -> Result<Tensor> {
    blocks.iter().try_fold(x, |x, b| b.forward(&x))
}

/// `Encoder`: conv_in → levels (blocks, then 2×2 average pooling but after the last) → mid
/// blocks → norm_out → silu → conv_out (1×1, to `z_channels`).
#[derive(Debug, Clone)]
pub struct Encoder {
    conv_in: Conv2d,
    down: Vec<Vec<ResnetBlock>>,
    mid: Vec<ResnetBlock>,
    norm_out: GroupNorm,
    conv_out: Conv2d,
}

impl Encoder {
    pub fn new(cfg: &MaskGitConfig, vb: VarBuilder) -> Result<Self> {
        let hc = cfg.hidden_channels;
        let conv_in = conv_no_bias(cfg.num_channels, hc, 3, vb.pp("conv_in"))?;
        let mut down = Vec::with_capacity(cfg.num_resolutions);
        let mut c_in = hc;
        for (i, m) in cfg.channel_mult.iter().enumerate() {
            let c_out = hc * m;
            let vbl = vb.pp("down").pp(i).pp("block");
            down.push(blocks(c_in, c_out, cfg.num_res_blocks, vbl)?);
            c_in = c_out;
        }
        let mid_c = cfg.last_width();
        Ok(Self {
            conv_in,
            down,
            mid: blocks(mid_c, mid_c, cfg.num_res_blocks, vb.pp("mid"))?,
            norm_out: GroupNorm::new(mid_c, GROUPS, vb.pp("norm_out"))?,
            conv_out: conv(mid_c, cfg.z_channels, 1, vb.pp("conv_out"))?,
        })
    }

    /// # Shapes
    /// x: (b, num_channels, h, w) → (b, z_channels, h/f, w/f)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = self.conv_in.forward(x)?;
        let last = self.down.len() - 1;
        for (i, level) in self.down.iter().enumerate() {
            h = run(level, h)?;
            if i != last {
                h = h.avg_pool2d(2)?;
            }
        }
        let h = run(&self.mid, h)?;
        self.conv_out.forward_normed(&h, &self.norm_out, true, None)
    }
}

/// One `UpsamplingBlock`: its blocks, then (but at level 0) nearest ×2 and `upsample_conv`.
#[derive(Debug, Clone)]
struct Up {
    block: Vec<ResnetBlock>,
    upsample_conv: Option<Conv2d>,
}

/// `Decoder`: conv_in → mid blocks → levels from the last to the first → norm_out → silu →
/// conv_out (3×3, to `num_channels`).
#[derive(Debug, Clone)]
pub struct Decoder {
    conv_in: Conv2d,
    mid: Vec<ResnetBlock>,
    /// `up[i]` is level i; they run from the last.
    up: Vec<Up>,
    norm_out: GroupNorm,
    conv_out: Conv2d,
}

impl Decoder {
    pub fn new(cfg: &MaskGitConfig, vb: VarBuilder) -> Result<Self> {
        let hc = cfg.hidden_channels;
        let top = cfg.last_width();
        let levels = cfg.channel_mult.len();
        let mut up = Vec::with_capacity(levels);
        for i in 0..levels {
            let c_in = hc * cfg.channel_mult[(i + 1).min(levels - 1)];
            let c_out = hc * cfg.channel_mult[i];
            let vbl = vb.pp("up").pp(i);
            let block = blocks(c_in, c_out, cfg.num_res_blocks, vbl.pp("block"))?;
            let upsample_conv = if i != 0 {
                Some(conv(c_out, c_out, 3, vbl.pp("upsample_conv"))?)
            } else {
                None
            };
            up.push(Up {
                block,
                upsample_conv,
            });
        }
        let c0 = hc * cfg.channel_mult[0];
        Ok(Self {
            conv_in: conv(cfg.z_channels, top, 3, vb.pp("conv_in"))?,
            mid: blocks(top, top, cfg.num_res_blocks, vb.pp("mid"))?,
            up,
            norm_out: GroupNorm::new(c0, GROUPS, vb.pp("norm_out"))?,
            conv_out: conv(c0, cfg.num_channels, 3, vb.pp("conv_out"))?,
        })
    }

    /// # Shapes
    /// z: (b, z_channels, h, w) → (b, num_channels, h·f, w·f)
    pub fn forward(&self, z: &Tensor) -> Result<Tensor> {
        let mut h = run(&self.mid, self.conv_in.forward(z)?)?;
        for level in self.up.iter().rev() {
            h = run(&level.block, h)?;
            if let Some(c) = &level.upsample_conv {
                h = c.forward(&ops::upsample_nearest2x(&h)?)?;
            }
        }
        self.conv_out.forward_normed(&h, &self.norm_out, true, None)
    }
}

/// The MaskGIT-VQGAN (`PretrainedTokenizer` of `modeling/titok.py`): encoder, codebook
/// `quantize.embedding.weight`, decoder.
#[derive(Debug, Clone)]
pub struct MaskGitModel {
    pub encoder: Encoder,
    pub quantize: VectorQuantizer,
    pub decoder: Decoder,
    cfg: MaskGitConfig,
}

impl MaskGitModel {
    pub fn new(cfg: &MaskGitConfig, vb: VarBuilder) -> Result<Self> {
        let e = vb
            .pp("quantize.embedding")
            .get((cfg.num_embeddings, cfg.embedding_dim), "weight")?;
        Ok(Self {
            encoder: Encoder::new(cfg, vb.pp("encoder"))?,
            quantize: VectorQuantizer::from_codebook(e, 0.25, false),
            decoder: Decoder::new(cfg, vb.pp("decoder"))?,
            cfg: cfg.clone(),
        })
    }

    pub fn config(&self) -> &MaskGitConfig {
        &self.cfg
    }

    /// The encoder's latents (what the codebook is searched with).
    ///
    /// # Shapes
    /// x: (b, 3, h, w) in [0, 1] → (b, z_channels, h/f, w/f)
    pub fn encode_latents(&self, x: &Tensor) -> Result<Tensor> {
        self.encoder.forward(x)
    }

    /// `PretrainedTokenizer.encode`: the nearest entry's index at every latent position, by
    /// ‖z‖² + ‖e‖² − 2·z·e.
    ///
    /// # Shapes
    /// x: (b, 3, h, w) → (b, h/f, w/f) u32
    pub fn encode(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.quantize.quantize(&self.encode_latents(x)?)?.indices)
    }

    /// `PretrainedTokenizer.decode`: the entries through the decoder, clamped to [0, 1].
    ///
    /// # Shapes
    /// indices: (b, h, w) → (b, 3, h·f, w·f)
    pub fn decode_indices(&self, indices: &Tensor) -> Result<Tensor> {
        self.decoder
            .forward(&self.quantize.lookup(indices)?)?
            .clamp(0f32, 1f32)
    }
}
