//! TiTok's ViT encoder and decoder (`TiTokEncoder`, `TiTokDecoder` of
//! `modeling/modules/blocks.py`) on the project's kernels: open_clip-style pre-LN blocks
//! (`ResidualAttentionBlock`: `nn.MultiheadAttention` with its packed `in_proj`, a GELU MLP of
//! 4× width), LayerNorm eps 1e-5.
//!
//! Shapes in trailing comments use b = batch, L = sequence, W = width, N = latent tokens,
//! g = a side's patches, t = `token_size`.

use super::TitokConfig;
use crate::layers::Conv2d;
use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;
use imgseq_kernels::ops::{self, Padding};

/// `nn.LayerNorm`'s default eps.
const LN_EPS: f64 = 1e-5;

#[derive(Debug, Clone)]
struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
}

impl LayerNorm {
    fn new(d: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            weight: vb.get(d, "weight")?,
            bias: vb.get(d, "bias")?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        ops::layer_norm(x, &self.weight, &self.bias, LN_EPS)
    }
}

/// A linear layer (PyTorch layout); a 1×1 conv's weight squeezed to (out, in).
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    weight: Tensor,
    bias: Tensor,
}

impl Linear {
    pub(crate) fn new(d_in: usize, d_out: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            weight: vb.get((d_out, d_in), "weight")?,
            bias: vb.get(d_out, "bias")?,
        })
    }

    /// An `nn.Conv2d(d_in, d_out, 1)` as the linear map it is over the channels.
    pub(crate) fn conv1x1(d_in: usize, d_out: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            weight: vb
                .get((d_out, d_in, 1, 1), "weight")?
                .reshape((d_out, d_in))?,
            bias: vb.get(d_out, "bias")?,
        })
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        ops::linear(x, &self.weight, Some(&self.bias))
    }
}

/// `ResidualAttentionBlock`: x + attn(ln_1(x)); x + mlp(ln_2(x)).
#[derive(Debug, Clone)]
struct Block {
    ln_1: LayerNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    out_proj: Linear,
    ln_2: LayerNorm,
    c_fc: Linear,
    c_proj: Linear,
    heads: usize,
}

impl Block {
    fn new(w: usize, heads: usize, vb: VarBuilder) -> Result<Self> {
        let a = vb.pp("attn");
        let in_w = a.get((3 * w, w), "in_proj_weight")?;
        let in_b = a.get(3 * w, "in_proj_bias")?;
        let part = |i: usize| -> Result<Linear> {
            Ok(Linear {
                weight: in_w.narrow(0, i * w, w)?.contiguous()?,
                bias: in_b.narrow(0, i * w, w)?.contiguous()?,
            })
        };
        let m = vb.pp("mlp");
        Ok(Self {
            ln_1: LayerNorm::new(w, vb.pp("ln_1"))?,
            q: part(0)?,
            k: part(1)?,
            v: part(2)?,
            out_proj: Linear::new(w, w, a.pp("out_proj"))?,
            ln_2: LayerNorm::new(w, vb.pp("ln_2"))?,
            c_fc: Linear::new(w, 4 * w, m.pp("c_fc"))?,
            c_proj: Linear::new(4 * w, w, m.pp("c_proj"))?,
            heads,
        })
    }

    /// # Shapes
    /// x: (b, L, W) → (b, L, W)
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, l, w) = x.dims3()?;
        let hd = w / self.heads;
        let h = self.ln_1.forward(x)?;
        let split = |t: Tensor| t.reshape((b, l, self.heads, hd))?.transpose(1, 2);
        let q = split(self.q.forward(&h)?)?;
        let k = split(self.k.forward(&h)?)?;
        let v = split(self.v.forward(&h)?)?;
        let ctx = ops::attention(&q, &k, &v, 1.0 / (hd as f64).sqrt())?; // (b, heads, L, hd)
        let ctx = ctx.transpose(1, 2)?.reshape((b, l, w))?;
        let x = (x + self.out_proj.forward(&ctx)?)?;
        let m = self
            .c_proj
            .forward(&ops::gelu(&self.c_fc.forward(&self.ln_2.forward(&x)?)?)?)?;
        x + m
    }
}

fn transformer(w: usize, layers: usize, heads: usize, vb: VarBuilder) -> Result<Vec<Block>> {
    (0..layers)
        .map(|i| Block::new(w, heads, vb.pp(i)))
        .collect()
}

/// (1, d) or (n, d) parameters broadcast to a batch: (b, n, d).
fn batched(t: &Tensor, b: usize) -> Result<Tensor> {
    let (n, d) = t.dims2()?;
    t.unsqueeze(0)?.broadcast_as((b, n, d))
}

/// `TiTokEncoder`: patches + class token + positions, then the latent tokens with theirs,
/// ln_pre, the blocks, ln_post of the latent tokens, `conv_out` to `token_size`.
#[derive(Debug, Clone)]
pub struct Encoder {
    patch_embed: Conv2d,
    class_embedding: Tensor,                   // (1, W)
    positional_embedding: Tensor,              // (g² + 1, W)
    latent_token_positional_embedding: Tensor, // (N, W)
    ln_pre: LayerNorm,
    transformer: Vec<Block>,
    ln_post: LayerNorm,
    conv_out: Linear,
    legacy: bool,
}

impl Encoder {
    pub fn new(cfg: &TitokConfig, vb: VarBuilder) -> Result<Self> {
        let (w, layers, heads) = cfg.encoder_size();
        let p = cfg.vit_enc_patch_size;
        let g = cfg.crop_size / p;
        let n = cfg.num_latent_tokens;
        Ok(Self {
            patch_embed: Conv2d::new(3, w, p, p, Padding::same(0), vb.pp("patch_embed"))?,
            class_embedding: vb.get((1, w), "class_embedding")?,
            positional_embedding: vb.get((g * g + 1, w), "positional_embedding")?,
            latent_token_positional_embedding: vb
                .get((n, w), "latent_token_positional_embedding")?,
            ln_pre: LayerNorm::new(w, vb.pp("ln_pre"))?,
            transformer: transformer(w, layers, heads, vb.pp("transformer"))?,
            ln_post: LayerNorm::new(w, vb.pp("ln_post"))?,
            conv_out: Linear::conv1x1(w, cfg.token_size, vb.pp("conv_out"))?,
            legacy: cfg.is_legacy,
        })
    }

    /// The latents before the quantizer, `(b, t, 1, N)` as upstream shapes them. With
    /// `is_legacy` (every released VQ model but the VQ8k ones) the (b, N, W) latent tokens are
    /// *reinterpreted* as (b, W, N) before `conv_out`, as upstream's `reshape` does.
    ///
    /// # Shapes
    /// x: (b, 3, S, S) in [0, 1], latent_tokens: (N, W) → (b, t, 1, N)
    pub fn forward(&self, x: &Tensor, latent_tokens: &Tensor) -> Result<Tensor> {
        let b = x.dim(0)?;
        let p = self.patch_embed.forward(x)?; // (b, W, g, g)
        let (_, w, gh, gw) = p.dims4()?;
        let p = p.reshape((b, w, gh * gw))?.transpose(1, 2)?; // (b, g², W)
        let cls = batched(&self.class_embedding, b)?;
        let x = Tensor::cat(&[&cls, &p], 1)?.broadcast_add(&self.positional_embedding)?;
        let lat = (latent_tokens + &self.latent_token_positional_embedding)?;
        let lat = batched(&lat, b)?;
        let x = Tensor::cat(&[&x, &lat], 1)?; // (b, 1 + g² + N, W)
        let mut x = self.ln_pre.forward(&x)?;
        for blk in &self.transformer {
            x = blk.forward(&x)?;
        }
        let n = lat.dim(1)?;
        let lat = self.ln_post.forward(&x.narrow(1, 1 + gh * gw, n)?)?; // (b, N, W)
        let rows = if self.legacy {
            // (b, N, W) memory read as (b, W, N): channel c of token j is element c·N + j.
            lat.contiguous()?.reshape((b, w, n))?.transpose(1, 2)? // (b, N, W)
        } else {
            lat
        };
        let z = self.conv_out.forward(&rows)?; // (b, N, t)
        let t = z.dim(2)?;
        z.transpose(1, 2)?.contiguous()?.reshape((b, t, 1, n))
    }
}

/// What the decoder's `ffn` makes of its grid.
#[derive(Debug, Clone)]
enum Head {
    /// Legacy: 1×1 conv to 2W, tanh, 1×1 conv to the MaskGIT-VQGAN's codes (logits).
    Codes { fc: Linear, out: Linear },
    /// Pixels directly: 1×1 conv to p²·3, unpatchified, then a 3×3 `conv_out`.
    Pixels {
        fc: Linear,
        conv_out: Conv2d,
        patch: usize,
    },
}

/// `TiTokDecoder`: the tokens embedded to W after a class token and g² mask tokens (with
/// their positions), ln_pre, the blocks, ln_post of the mask tokens, the `ffn` head.
#[derive(Debug, Clone)]
pub struct Decoder {
    decoder_embed: Linear,
    class_embedding: Tensor,                   // (1, W)
    positional_embedding: Tensor,              // (g² + 1, W)
    mask_token: Tensor,                        // (1, W)
    latent_token_positional_embedding: Tensor, // (N, W)
    ln_pre: LayerNorm,
    transformer: Vec<Block>,
    ln_post: LayerNorm,
    head: Head,
    grid: usize,
}

impl Decoder {
    pub fn new(cfg: &TitokConfig, pixel_codes: usize, vb: VarBuilder) -> Result<Self> {
        let (w, layers, heads) = cfg.decoder_size();
        let p = cfg.vit_dec_patch_size;
        let g = cfg.crop_size / p;
        let n = cfg.num_latent_tokens;
        let head = if cfg.is_legacy {
            Head::Codes {
                fc: Linear::conv1x1(w, 2 * w, vb.pp("ffn.0"))?,
                out: Linear::conv1x1(2 * w, pixel_codes, vb.pp("ffn.2"))?,
            }
        } else {
            Head::Pixels {
                fc: Linear::conv1x1(w, p * p * 3, vb.pp("ffn.0"))?,
                conv_out: Conv2d::new(3, 3, 3, 1, Padding::same(1), vb.pp("conv_out"))?,
                patch: p,
            }
        };
        Ok(Self {
            decoder_embed: Linear::new(cfg.token_size, w, vb.pp("decoder_embed"))?,
            class_embedding: vb.get((1, w), "class_embedding")?,
            positional_embedding: vb.get((g * g + 1, w), "positional_embedding")?,
            mask_token: vb.get((1, 1, w), "mask_token")?.reshape((1, w))?,
            latent_token_positional_embedding: vb
                .get((n, w), "latent_token_positional_embedding")?,
            ln_pre: LayerNorm::new(w, vb.pp("ln_pre"))?,
            transformer: transformer(w, layers, heads, vb.pp("transformer"))?,
            ln_post: LayerNorm::new(w, vb.pp("ln_post"))?,
            head,
            grid: g,
        })
    }

    /// Legacy: the MaskGIT-VQGAN code logits (b, codes, g, g); otherwise the picture
    /// (b, 3, S, S).
    ///
    /// # Shapes
    /// z: (b, t, 1, N) → (b, codes, g, g) or (b, 3, g·p, g·p)
    pub fn forward(&self, z: &Tensor) -> Result<Tensor> {
        let (b, t, _, n) = z.dims4()?;
        let x = z.reshape((b, t, n))?.transpose(1, 2)?; // (b, N, t)
        let x = self.decoder_embed.forward(&x)?; // (b, N, W)
        let w = x.dim(2)?;
        let g2 = self.grid * self.grid;
        let mask = self.mask_token.broadcast_as((g2, w))?;
        let masks = Tensor::cat(&[&self.class_embedding, &mask], 0)?;
        let masks = batched(&(masks + &self.positional_embedding)?, b)?;
        let pos = self.latent_token_positional_embedding.narrow(0, 0, n)?;
        let x = x.broadcast_add(&pos)?;
        let mut x = self.ln_pre.forward(&Tensor::cat(&[&masks, &x], 1)?)?;
        for blk in &self.transformer {
            x = blk.forward(&x)?;
        }
        let x = self.ln_post.forward(&x.narrow(1, 1, g2)?)?; // (b, g², W)
        let g = self.grid;
        match &self.head {
            Head::Codes { fc, out } => {
                let y = out.forward(&fc.forward(&x)?.tanh()?)?; // (b, g², codes)
                let c = y.dim(2)?;
                y.transpose(1, 2)?.contiguous()?.reshape((b, c, g, g))
            }
            Head::Pixels {
                fc,
                conv_out,
                patch: p,
            } => {
                let p = *p;
                // 'b (p1 p2 c) h w -> b c (h p1) (w p2)'
                let y = fc.forward(&x)?.reshape((b, g, g, p, p, 3))?; // (b, h, w, p1, p2, c)
                let y =
                    y.permute((0, 5, 1, 3, 2, 4))?
                        .contiguous()?
                        .reshape((b, 3, g * p, g * p))?;
                conv_out.forward(&y)
            }
        }
    }
}

/// softmax over the code logits' channels, then the mixture of the pixel codebook's entries:
/// `einsum('nchw,cd->ndhw', logits.softmax(1), codebook)`.
///
/// # Shapes
/// logits: (b, codes, g, g), codebook: (codes, d) → (b, d, g, g)
pub fn soft_codes(logits: &Tensor, codebook: &Tensor) -> Result<Tensor> {
    let (b, c, h, w) = logits.dims4()?;
    let rows = logits.reshape((b, c, h * w))?.transpose(1, 2)?; // (b, hw, codes)
    let probs = ops::softmax_last_dim(&rows)?;
    let d = codebook.dim(1)?;
    let mixed = probs.broadcast_matmul(codebook)?; // (b, hw, d)
    mixed.transpose(1, 2)?.contiguous()?.reshape((b, d, h, w))
}
