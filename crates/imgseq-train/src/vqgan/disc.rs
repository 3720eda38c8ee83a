//! taming's PatchGAN discriminator (`taming/modules/discriminator/model.py`,
//! `NLayerDiscriminator`, the pix2pix layout): conv 4×4 stride 2 + LeakyReLU(0.2), then
//! `n_layers − 1` blocks of conv 4×4 stride 2 (no bias) + norm + LeakyReLU with
//! `ndf·min(2ⁿ, 8)` channels, one such block at stride 1, and a 4×4 stride-1 conv to one logit
//! per patch. Padding 1 everywhere, so a 256² input gives 30×30 logits (`n_layers` 3).
//!
//! The norm is `BatchNorm2d` (taming's default; ε 1e-5, momentum 0.1, running statistics
//! saved with the weights) or taming's `ActNorm` (`use_actnorm`: per-channel `scale·(x + loc)`
//! initialised from the first training batch's mean and standard deviation; its convs have
//! biases). Weights are named as in taming's state dict (`main.N.weight`, `main.N.bias`,
//! `main.N.running_mean`, …), so a taming checkpoint's `loss.discriminator.*` tensors load.

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;
use imgseq_core::run::normal;
use imgseq_core::{Error, Result};
use imgseq_kernels::ops::{self, Padding};
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::Path;

/// BatchNorm's ε and running-statistics momentum (PyTorch's defaults).
const BN_EPS: f64 = 1e-5;
const BN_MOMENTUM: f64 = 0.1;
/// The prefix of the discriminator's tensors in a taming checkpoint.
pub const TAMING_PREFIX: &str = "loss.discriminator.";

/// The discriminator's normalisation layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiscNorm {
    /// `nn.BatchNorm2d` (taming's default).
    #[default]
    Batch,
    /// taming's `ActNorm` (`use_actnorm=True`).
    Act,
}

/// The shape of the discriminator (taming's `disc_in_channels`, `disc_ndf`,
/// `disc_num_layers`, `use_actnorm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscConfig {
    pub in_channels: usize,
    pub ndf: usize,
    pub n_layers: usize,
    pub norm: DiscNorm,
}

enum Norm {
    Batch {
        weight: Var,
        bias: Var,
        running_mean: RefCell<Tensor>,
        running_var: RefCell<Tensor>,
        tracked: Cell<i64>,
    },
    Act {
        loc: Var,
        scale: Var,
        initialized: Cell<bool>,
    },
}

struct Layer {
    /// Index in taming's `main` Sequential of the conv; the norm is at `index + 1`.
    index: usize,
    weight: Var,
    bias: Option<Var>,
    stride: usize,
    norm: Option<Norm>,
    leaky: bool,
}

/// The PatchGAN discriminator; its trainable variables live in the [`VarMap`] given to
/// [`Discriminator::new`], its BatchNorm running statistics in the network.
pub struct Discriminator {
    layers: Vec<Layer>,
}

fn add_var(vars: &VarMap, name: String, shape: &[usize]) -> Result<Var> {
    let v = Var::zeros(shape, DType::F32, &Device::Cpu)?;
    vars.data()
        .lock()
        .map_err(|_| Error::invalid("variable map lock poisoned"))?
        .insert(name, v.clone());
    Ok(v)
}

impl Discriminator {
    /// A discriminator with zero weights whose variables are added to `vars` under taming's
    /// names (`main.N.*`); [`Discriminator::init`] draws taming's initialisation.
    pub fn new(cfg: &DiscConfig, vars: &VarMap) -> Result<Self> {
        if cfg.n_layers == 0 || cfg.ndf == 0 || cfg.in_channels == 0 {
            return Err(Error::setting(
                "disc_layers",
                cfg.n_layers,
                "the discriminator needs ≥ 1 layer, ndf ≥ 1 and input channels",
            ));
        }
        let mut layers = Vec::new();
        let mut index = 0;
        let mut conv = |c_in: usize, c_out: usize, stride: usize, norm: bool| -> Result<Layer> {
            let with_norm = norm.then_some(cfg.norm);
            let has_bias = with_norm != Some(DiscNorm::Batch);
            let i = index;
            index += if norm { 3 } else { 2 };
            let weight = add_var(vars, format!("main.{i}.weight"), &[c_out, c_in, 4, 4])?;
            let bias = has_bias
                .then(|| add_var(vars, format!("main.{i}.bias"), &[c_out]))
                .transpose()?;
            let n = i + 1;
            let norm = match with_norm {
                None => None,
                Some(DiscNorm::Batch) => Some(Norm::Batch {
                    weight: add_var(vars, format!("main.{n}.weight"), &[c_out])?,
                    bias: add_var(vars, format!("main.{n}.bias"), &[c_out])?,
                    running_mean: RefCell::new(Tensor::zeros(c_out, DType::F32, &Device::Cpu)?),
                    running_var: RefCell::new(Tensor::ones(c_out, DType::F32, &Device::Cpu)?),
                    tracked: Cell::new(0),
                }),
                Some(DiscNorm::Act) => Some(Norm::Act {
                    loc: add_var(vars, format!("main.{n}.loc"), &[1, c_out, 1, 1])?,
                    scale: add_var(vars, format!("main.{n}.scale"), &[1, c_out, 1, 1])?,
                    initialized: Cell::new(false),
                }),
            };
            Ok(Layer {
                index: i,
                weight,
                bias,
                stride,
                norm,
                leaky: true,
            })
        };
        let ndf = cfg.ndf;
        layers.push(conv(cfg.in_channels, ndf, 2, false)?);
        let mut mult = 1;
        for n in 1..cfg.n_layers {
            let prev = mult;
            mult = (1usize << n.min(3)).min(8);
            layers.push(conv(ndf * prev, ndf * mult, 2, true)?);
        }
        let prev = mult;
        mult = (1usize << cfg.n_layers.min(3)).min(8);
        layers.push(conv(ndf * prev, ndf * mult, 1, true)?);
        let mut last = conv(ndf * mult, 1, 1, false)?;
        last.leaky = false;
        layers.push(last);
        Ok(Self { layers })
    }

    /// taming's `weights_init`: conv weights N(0, 0.02), BatchNorm weights N(1, 0.02) and
    /// biases 0; conv biases keep PyTorch's default U(±1/√fan_in); ActNorm loc 0, scale 1.
    pub fn init<R: Rng>(&self, rng: &mut R) -> Result<()> {
        let fill = |v: &Var, f: &mut dyn FnMut() -> f32| -> Result<()> {
            let shape = v.as_tensor().shape().clone();
            let vals: Vec<f32> = (0..shape.elem_count()).map(|_| f()).collect();
            v.set(&Tensor::from_vec(vals, shape, &Device::Cpu)?)?;
            Ok(())
        };
        for l in &self.layers {
            fill(&l.weight, &mut || (normal(rng) * 0.02) as f32)?;
            if let Some(b) = &l.bias {
                let (_, c_in, k, _) = l.weight.as_tensor().dims4()?;
                let bound = 1.0 / ((c_in * k * k) as f32).sqrt();
                fill(b, &mut || rng.random_range(-bound..=bound))?;
            }
            match &l.norm {
                Some(Norm::Batch { weight, bias, .. }) => {
                    fill(weight, &mut || (1.0 + normal(rng) * 0.02) as f32)?;
                    fill(bias, &mut || 0.0)?;
                }
                Some(Norm::Act {
                    loc,
                    scale,
                    initialized,
                }) => {
                    fill(loc, &mut || 0.0)?;
                    fill(scale, &mut || 1.0)?;
                    initialized.set(false);
                }
                None => {}
            }
        }
        Ok(())
    }

    /// Patch logits (b, 1, h', w') of images `x` (b, c, h, w) in [-1, 1]. `train`: BatchNorm
    /// normalises with the batch's statistics and updates its running ones (ActNorm
    /// initialises itself on its first call), as taming's discriminator in training mode.
    pub fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let mut h = x.clone();
        for l in &self.layers {
            let b = l.bias.as_ref().map(|b| b.as_tensor());
            h = ops::conv2d(&h, l.weight.as_tensor(), b, l.stride, Padding::same(1))?;
            if let Some(n) = &l.norm {
                h = n.forward(&h, train)?;
            }
            if l.leaky {
                h = h.maximum(&(&h * 0.2)?)?;
            }
        }
        Ok(h)
    }

    /// The buffers that are not variables: BatchNorm running statistics (f32) and batch
    /// counts (i64), ActNorm's `initialized` (u8), by taming name.
    pub fn buffers(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = Vec::new();
        for l in &self.layers {
            let n = l.index + 1;
            match &l.norm {
                Some(Norm::Batch {
                    running_mean,
                    running_var,
                    tracked,
                    ..
                }) => {
                    out.push((
                        format!("main.{n}.running_mean"),
                        running_mean.borrow().clone(),
                    ));
                    out.push((
                        format!("main.{n}.running_var"),
                        running_var.borrow().clone(),
                    ));
                    let t = Tensor::new(tracked.get(), &Device::Cpu)?;
                    out.push((format!("main.{n}.num_batches_tracked"), t));
                }
                Some(Norm::Act { initialized, .. }) => {
                    let t = Tensor::new(initialized.get() as u8, &Device::Cpu)?;
                    out.push((format!("main.{n}.initialized"), t));
                }
                None => {}
            }
        }
        Ok(out)
    }

    /// Sets the buffers from `saved` (names `prefix` + taming's; `path` for messages). Running
    /// statistics must be there with their shape; a missing `num_batches_tracked` counts 0.
    pub fn load_buffers(
        &self,
        path: &Path,
        saved: &HashMap<String, Tensor>,
        prefix: &str,
    ) -> Result<()> {
        let get = |name: String| {
            saved
                .get(&format!("{prefix}{name}"))
                .ok_or_else(|| Error::weights(path, format!("missing tensor `{prefix}{name}`")))
        };
        for l in &self.layers {
            let n = l.index + 1;
            match &l.norm {
                Some(Norm::Batch {
                    running_mean,
                    running_var,
                    tracked,
                    ..
                }) => {
                    for (cell, what) in
                        [(running_mean, "running_mean"), (running_var, "running_var")]
                    {
                        let t = get(format!("main.{n}.{what}"))?;
                        if t.dims() != cell.borrow().dims() {
                            let msg = format!("`{prefix}main.{n}.{what}` has shape {:?}", t.dims());
                            return Err(Error::weights(path, msg));
                        }
                        *cell.borrow_mut() = t.to_dtype(DType::F32)?;
                    }
                    let key = format!("{prefix}main.{n}.num_batches_tracked");
                    let count = match saved.get(&key) {
                        Some(t) => t.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?,
                        None => vec![0.0],
                    };
                    tracked.set(count.first().copied().unwrap_or(0.0) as i64);
                }
                Some(Norm::Act { initialized, .. }) => {
                    let t = get(format!("main.{n}.initialized"))?;
                    let v = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
                    initialized.set(v.first().is_some_and(|&x| x != 0.0));
                }
                None => {}
            }
        }
        Ok(())
    }
}

/// Per-channel mean and biased variance over (batch, h, w) of `h` (b, c, h, w), each (c),
/// and the count they are taken over.
fn channel_stats(h: &Tensor) -> Result<(Tensor, Tensor, usize)> {
    let c = h.dim(1)?;
    let flat = h.transpose(0, 1)?.contiguous()?.reshape((c, ()))?;
    let n = flat.dim(1)?;
    let mean = flat.mean_keepdim(1)?;
    let var = flat.broadcast_sub(&mean)?.sqr()?.mean_keepdim(1)?;
    Ok((mean.flatten_all()?, var.flatten_all()?, n))
}

fn per_channel(t: &Tensor) -> Result<Tensor> {
    Ok(t.reshape((1, (), 1, 1))?)
}

impl Norm {
    fn forward(&self, h: &Tensor, train: bool) -> Result<Tensor> {
        match self {
            Norm::Batch {
                weight,
                bias,
                running_mean,
                running_var,
                tracked,
            } => {
                let (mean, var) = if train {
                    let (mean, var, n) = channel_stats(h)?;
                    let unbiased = (var.detach() * (n as f64 / (n.max(2) - 1) as f64))?;
                    let m = BN_MOMENTUM;
                    let rm = ((&*running_mean.borrow() * (1.0 - m))? + (mean.detach() * m)?)?;
                    let rv = ((&*running_var.borrow() * (1.0 - m))? + (unbiased * m)?)?;
                    *running_mean.borrow_mut() = rm;
                    *running_var.borrow_mut() = rv;
                    tracked.set(tracked.get() + 1);
                    (mean, var)
                } else {
                    (running_mean.borrow().clone(), running_var.borrow().clone())
                };
                let inv = (var + BN_EPS)?.sqrt()?.recip()?;
                let scale = (inv * weight.as_tensor())?;
                let shift = (bias.as_tensor() - (&mean * &scale)?)?;
                Ok(h.broadcast_mul(&per_channel(&scale)?)?
                    .broadcast_add(&per_channel(&shift)?)?)
            }
            Norm::Act {
                loc,
                scale,
                initialized,
            } => {
                if train && !initialized.get() {
                    let (mean, var, n) = channel_stats(h)?;
                    let std = (var * (n as f64 / (n.max(2) - 1) as f64))?.sqrt()?;
                    loc.set(&per_channel(&mean.neg()?)?)?;
                    scale.set(&per_channel(&(std + 1e-6)?.recip()?)?)?;
                    initialized.set(true);
                }
                Ok(h.broadcast_add(loc.as_tensor())?
                    .broadcast_mul(scale.as_tensor())?)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_nn::VarMap;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn names(norm: DiscNorm) -> Vec<String> {
        let vars = VarMap::new();
        let cfg = DiscConfig {
            in_channels: 3,
            ndf: 8,
            n_layers: 3,
            norm,
        };
        let _d = Discriminator::new(&cfg, &vars).unwrap();
        let mut n: Vec<String> = vars.data().lock().unwrap().keys().cloned().collect();
        n.sort();
        n
    }

    #[test]
    fn discriminator_has_tamings_layout_and_names() {
        // taming n_layers 3: 0 conv, 1 lrelu, 2 conv, 3 bn, 4 lrelu, 5 conv, 6 bn, 7 lrelu,
        // 8 conv (stride 1), 9 bn, 10 lrelu, 11 conv → 1 channel.
        let batch = names(DiscNorm::Batch);
        let want = [
            "main.0.bias",
            "main.0.weight",
            "main.11.bias",
            "main.11.weight",
            "main.2.weight",
            "main.3.bias",
            "main.3.weight",
            "main.5.weight",
            "main.6.bias",
            "main.6.weight",
            "main.8.weight",
            "main.9.bias",
            "main.9.weight",
        ];
        assert_eq!(batch, want);
        let act = names(DiscNorm::Act);
        assert!(act.contains(&"main.2.bias".to_string()));
        assert!(act.contains(&"main.3.loc".to_string()));
        assert!(act.contains(&"main.3.scale".to_string()));
    }

    #[test]
    fn discriminator_logits_are_patches_and_running_stats_move() {
        let vars = VarMap::new();
        let cfg = DiscConfig {
            in_channels: 3,
            ndf: 4,
            n_layers: 3,
            norm: DiscNorm::Batch,
        };
        let d = Discriminator::new(&cfg, &vars).unwrap();
        d.init(&mut StdRng::seed_from_u64(1)).unwrap();
        let x = Tensor::randn(0f32, 1.0, (2, 3, 64, 64), &Device::Cpu).unwrap();
        let y = d.forward(&x, true).unwrap();
        // 64 → 32 → 16 → 8 → 7 (stride 1, k 4, pad 1) → 6.
        assert_eq!(y.dims(), &[2, 1, 6, 6]);
        let bufs = d.buffers().unwrap();
        let rm = &bufs
            .iter()
            .find(|(n, _)| n == "main.3.running_mean")
            .unwrap()
            .1;
        let moved = rm
            .abs()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(moved > 0.0, "running mean did not move");
        let nb = &bufs
            .iter()
            .find(|(n, _)| n == "main.3.num_batches_tracked")
            .unwrap()
            .1;
        assert_eq!(nb.to_scalar::<i64>().unwrap(), 1);
    }
}
