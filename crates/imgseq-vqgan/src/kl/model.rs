//! [`KlModel`]: diffusers' `AutoencoderKL` (`autoencoder_kl.py`, `vae.py`) at inference.
//!
//! encode: `moments = quant_conv(encoder(x))` (2·latent channels) → mean and log-variance
//! (`DiagonalGaussianDistribution`: the two halves, log-variance clamped to [−30, 20]) → the
//! mean, or `mean + e^(logvar/2)·ε` for a draw → the pipelines' scaling
//! `z = (latent − shift) · scaling`. decode: `z / scaling + shift` →
//! `decoder(post_quant_conv(·))`. The blocks are [`crate::model`]'s (GroupNorm eps 1e-6,
//! single-head middle attention, (0, 1, 0, 1) padding before each stride-2 conv).

use super::config::KlConfig;
use super::tiling;
use crate::model::{Conv2d, Decoder, Encoder};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use imgseq_core::{Error, Result};
use imgseq_kernels::ops::Padding;
use rand::{Rng, SeedableRng};

/// Which latent [`KlModel::encode`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Draw {
    /// The posterior's mean (`latent_dist.mode()`), what feature caching uses by default.
    #[default]
    Mean,
    /// `mean + std·ε` with ε from a generator seeded by the value (`latent_dist.sample()`).
    Sample(u64),
}

/// The encoder's Gaussian posterior.
#[derive(Debug, Clone)]
pub struct Posterior {
    /// (b, latent, h, w)
    pub mean: Tensor,
    /// (b, latent, h, w), clamped to [−30, 20].
    pub logvar: Tensor,
}

impl Posterior {
    /// The mean, or a draw.
    pub fn latent(&self, draw: Draw) -> Result<Tensor> {
        match draw {
            Draw::Mean => Ok(self.mean.clone()),
            Draw::Sample(seed) => {
                let eps = gaussian(self.mean.dims(), seed, self.mean.device())?;
                let std = (&self.logvar * 0.5)?.exp()?;
                Ok((&self.mean + (std * eps)?)?)
            }
        }
    }
}

/// Standard normal values from a generator seeded by `seed` (Box–Muller on `StdRng`).
fn gaussian(dims: &[usize], seed: u64, dev: &Device) -> Result<Tensor> {
    let n: usize = dims.iter().product();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut v = Vec::with_capacity(n + 1);
    while v.len() < n {
        let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]
        let u2: f64 = rng.random::<f64>();
        let r = (-2.0 * u1.ln()).sqrt();
        let t = std::f64::consts::TAU * u2;
        v.push((r * t.cos()) as f32);
        v.push((r * t.sin()) as f32);
    }
    v.truncate(n);
    Ok(Tensor::from_vec(v, dims, dev)?)
}

/// An `AutoencoderKL`.
#[derive(Debug, Clone)]
pub struct KlModel {
    cfg: KlConfig,
    encoder: Encoder,
    quant_conv: Option<Conv2d>,      // 1×1, 2L → 2L
    post_quant_conv: Option<Conv2d>, // 1×1, L → L
    decoder: Decoder,
    /// FLUX.2: the BatchNorm's running mean and sqrt(running_var + eps), (1, L·p², 1, 1).
    latent_bn: Option<(Tensor, Tensor)>,
}

impl KlModel {
    /// Built from tensors under taming / LDM names (`encoder.down.i.block.j`, ...); diffusers
    /// names come through [`crate::rename::RenamedWeights`].
    pub fn new(cfg: &KlConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let l = cfg.latent_channels();
        let p0 = Padding::same(0);
        let quant_conv = if cfg.use_quant_conv {
            Some(Conv2d::new(2 * l, 2 * l, 1, 1, p0, vb.pp("quant_conv"))?)
        } else {
            None
        };
        let post_quant_conv = if cfg.use_post_quant_conv {
            Some(Conv2d::new(l, l, 1, 1, p0, vb.pp("post_quant_conv"))?)
        } else {
            None
        };
        let latent_bn = match cfg.latent_bn {
            Some(b) => {
                let (c, vb) = (cfg.output_channels(), vb.pp("bn"));
                let mean = vb.get(c, "running_mean")?.reshape((1, c, 1, 1))?;
                let var = vb.get(c, "running_var")?;
                // Read so that the weights audit counts it; the running count plays no part.
                let _ = vb.get_unchecked_dtype("num_batches_tracked", DType::I64);
                let std = (var.to_dtype(DType::F64)? + b.eps)?
                    .sqrt()?
                    .to_dtype(DType::F32)?
                    .reshape((1, c, 1, 1))?;
                Some((mean, std))
            }
            None => None,
        };
        let decoder = cfg.decoder_config();
        Ok(Self {
            cfg: cfg.clone(),
            encoder: Encoder::new(&cfg.ddconfig, &cfg.variant, vb.pp("encoder"))?,
            quant_conv,
            post_quant_conv,
            decoder: Decoder::new(decoder, &cfg.variant, vb.pp("decoder"))?,
            latent_bn,
        })
    }

    pub fn config(&self) -> &KlConfig {
        &self.cfg
    }

    /// Checks an image side (a positive multiple of the downsampling factor) and that a
    /// forward pass of `n` images of `h`×`w` (or of `tile`² tiles) fits the memory budget.
    pub fn check_input(&self, n: usize, h: usize, w: usize, tile: Option<usize>) -> Result<()> {
        self.cfg.check_side("size", h)?;
        self.cfg.check_side("size", w)?;
        let (th, tw) = match tile {
            Some(t) => (h.min(t), w.min(t)),
            None => (h, w),
        };
        if let Err(m) = imgseq_core::budget::check_memory(self.forward_bytes(n, th, tw)) {
            return Err(Error::setting(
                "size",
                format!("{h}x{w}"),
                format!("{m}; use --tile (tiled encode/decode) or a smaller batch"),
            ));
        }
        Ok(())
    }

    /// Rough peak bytes of one forward of `n` images of `h`×`w`: the weights plus eleven live
    /// activations of the widest level (SD's VAE at 512²: 1.85 GB peak RSS measured, 1.8 GB
    /// estimated).
    pub fn forward_bytes(&self, n: usize, h: usize, w: usize) -> u128 {
        let d = &self.cfg.ddconfig;
        let px = (h as u128).saturating_mul(w as u128);
        let widest = d
            .ch_mult
            .iter()
            .enumerate()
            .map(|(i, m)| ((d.ch * m) as u128).saturating_mul(px >> (2 * i).min(126)))
            .max()
            .unwrap_or(0);
        widest
            .saturating_mul(n as u128)
            .saturating_mul(11 * 4)
            .saturating_add(self.cfg.weight_count().saturating_mul(4))
    }

    /// `quant_conv(encoder(x))`.
    ///
    /// # Shapes
    /// x: (b, in, H, W) in [−1, 1] → (b, 2·latent, H/f, W/f)
    pub fn moments(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.encoder.forward(x)?;
        Ok(match &self.quant_conv {
            Some(q) => q.forward(&h)?,
            None => h,
        })
    }

    /// The posterior of `x`; tiled ([`tiling`]) when `tile` is given and `x` is larger.
    ///
    /// # Shapes
    /// x: (b, in, H, W) in [−1, 1] → mean, logvar (b, latent, H/f, W/f)
    pub fn posterior(&self, x: &Tensor, tile: Option<usize>) -> Result<Posterior> {
        let (_, _, h, w) = x.dims4()?;
        let m = match tile {
            Some(t) if h > t || w > t => {
                let f = self.cfg.downsample_factor();
                tiling::check_tile(t, f)?;
                tiling::tiled(x, t, t / f, |t| self.moments(t))?
            }
            _ => self.moments(x)?,
        };
        let l = self.cfg.latent_channels();
        Ok(Posterior {
            mean: m.narrow(1, 0, l)?,
            logvar: m.narrow(1, l, l)?.clamp(-30f32, 20f32)?,
        })
    }

    /// Image → latents as the pipelines feed them to the transformer (scaled and shifted).
    ///
    /// # Shapes
    /// x: (b, in, H, W) in [−1, 1] → (b, latent, H/f, W/f)
    pub fn encode(&self, x: &Tensor, draw: Draw, tile: Option<usize>) -> Result<Tensor> {
        let z = self.posterior(x, tile)?.latent(draw)?;
        self.scale(&z)
    }

    /// `decoder(post_quant_conv(z))` of unscaled latents; tiled when `tile` (in pixels) is
    /// given and the picture is larger. Not clamped.
    ///
    /// # Shapes
    /// z: (b, latent, h, w) → (b, out, h·f, w·f), roughly in [−1, 1]
    pub fn decode_raw(&self, z: &Tensor, tile: Option<usize>) -> Result<Tensor> {
        let (_, c, h, w) = z.dims4()?;
        if c != self.cfg.latent_channels() {
            return Err(Error::invalid(format!(
                "latents have {c} channels; the model has {}",
                self.cfg.latent_channels()
            )));
        }
        let f = self.cfg.downsample_factor();
        let run = |z: &Tensor| -> Result<Tensor> {
            let z = match &self.post_quant_conv {
                Some(p) => p.forward(z)?,
                None => z.clone(),
            };
            Ok(self.decoder.forward(&z)?)
        };
        match tile {
            Some(t) if h * f > t || w * f > t => {
                tiling::check_tile(t, f)?;
                tiling::tiled(z, t / f, t, run)
            }
            _ => run(z),
        }
    }

    /// Scaled latents (as [`Self::encode`] gives them) → picture.
    pub fn decode(&self, z: &Tensor, tile: Option<usize>) -> Result<Tensor> {
        self.decode_raw(&self.unscale(z)?, tile)
    }

    /// `(latent − shift) · scaling`, per channel ([`KlConfig::channel_scaling`]); FLUX.2:
    /// p×p-patchified, then `(z − mean) / std` by the BatchNorm statistics.
    ///
    /// # Shapes
    /// z: (b, L, h, w) → (b, L·p², h/p, w/p)
    pub fn scale(&self, z: &Tensor) -> Result<Tensor> {
        if let (Some((mean, std)), Some(b)) = (&self.latent_bn, self.cfg.latent_bn) {
            let z = patchify_channels(z, b.patch)?;
            return Ok(z.broadcast_sub(mean)?.broadcast_div(std)?);
        }
        let (shift, scale) = self.scaling_tensors(z.device())?;
        Ok(z.broadcast_sub(&shift)?.broadcast_mul(&scale)?)
    }

    /// The inverse of [`Self::scale`]: `z / scaling + shift`; FLUX.2: `z · std + mean`, then
    /// the p×p cells back in place.
    pub fn unscale(&self, z: &Tensor) -> Result<Tensor> {
        if let (Some((mean, std)), Some(b)) = (&self.latent_bn, self.cfg.latent_bn) {
            let c = z.dim(1)?;
            if c != self.cfg.output_channels() {
                return Err(Error::invalid(format!(
                    "latents have {c} channels; the model's are {}",
                    self.cfg.output_channels()
                )));
            }
            let z = z.broadcast_mul(std)?.broadcast_add(mean)?;
            return unpatchify_channels(&z, b.patch);
        }
        let (shift, scale) = self.scaling_tensors(z.device())?;
        Ok(z.broadcast_div(&scale)?.broadcast_add(&shift)?)
    }

    /// (1, L, 1, 1) shift and scale.
    fn scaling_tensors(&self, dev: &Device) -> Result<(Tensor, Tensor)> {
        let s = self.cfg.channel_scaling();
        let l = s.len();
        let col = |v: Vec<f64>| -> Result<Tensor> {
            Ok(Tensor::from_vec(v, (1, l, 1, 1), dev)?.to_dtype(DType::F32)?)
        };
        Ok((
            col(s.iter().map(|p| p.0).collect())?,
            col(s.iter().map(|p| p.1).collect())?,
        ))
    }
}

/// FLUX.2's `_patchify_latents`: each p×p cell's values become channels, channel
/// `c·p² + dy·p + dx`.
///
/// # Shapes
/// z: (b, c, h, w) → (b, c·p², h/p, w/p)
pub fn patchify_channels(z: &Tensor, p: usize) -> Result<Tensor> {
    let (b, c, h, w) = z.dims4()?;
    if h % p != 0 || w % p != 0 {
        return Err(Error::invalid(format!(
            "a {h}x{w} latent grid does not divide into {p}x{p} patches"
        )));
    }
    Ok(z.reshape((b * c, h / p, p, w / p, p))?
        .permute((0, 2, 4, 1, 3))?
        .reshape((b, c * p * p, h / p, w / p))?)
}

/// The inverse of [`patchify_channels`] (`_unpatchify_latents`).
///
/// # Shapes
/// z: (b, c·p², h, w) → (b, c, h·p, w·p)
pub fn unpatchify_channels(z: &Tensor, p: usize) -> Result<Tensor> {
    let (b, cp, h, w) = z.dims4()?;
    let c = cp / (p * p);
    Ok(z.reshape((b * c, p, p, h, w))?
        .permute((0, 3, 1, 4, 2))?
        .reshape((b, c, h * p, w * p))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_draws_repeat_and_are_standard_normal() {
        let dev = Device::Cpu;
        let a = gaussian(&[2, 4, 50, 50], 7, &dev).unwrap();
        let b = gaussian(&[2, 4, 50, 50], 7, &dev).unwrap();
        let c = gaussian(&[2, 4, 50, 50], 8, &dev).unwrap();
        let v: Vec<f32> = a.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(v, b.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        assert_ne!(v, c.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        assert!(
            mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
    }
}
