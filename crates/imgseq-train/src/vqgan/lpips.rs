//! The LPIPS perceptual distance (Zhang et al. 2018; the `lpips` package's `LPIPS(net='vgg')`,
//! which taming's `taming/modules/losses/lpips.py` copies) from weight files the user has;
//! nothing is downloaded.
//!
//! For images a, b in [-1, 1]: scale each (`(x − shift) / scale`, shift = (−.030, −.088, −.188),
//! scale = (.458, .448, .450)), run torchvision's VGG16 `features` up to relu5_3 and take the
//! five ReLU outputs relu1_2, relu2_2, relu3_3, relu4_3, relu5_3; normalise each over channels
//! (`f / (‖f‖₂ + 1e-10)`), square the difference of a's and b's, weigh the channels by the
//! layer's linear head (a 1×1 conv to one channel, no bias), average over space and sum the
//! five layers: one distance per pair.
//!
//! Files: the VGG16 weights as torchvision names them (`features.N.weight`/`.bias`, e.g.
//! `vgg16-397923af.pth`) or as an `LPIPS` state dict names them (`net.sliceK.N.*`), and the
//! heads `linK.model.1.weight` (the `lpips` package's `weights/v0.1/vgg.pth`, taming's
//! `vgg.pth`); `.pth`/`.ckpt` (read without executing the pickle) or `.safetensors`. One file
//! may hold both.

use candle_core::{DType, Device, Tensor};
use imgseq_core::{Error, Result};
use imgseq_kernels::ops::{self, Padding};
use std::collections::HashMap;
use std::path::Path;

/// The scaling layer's constants.
const SHIFT: [f32; 3] = [-0.030, -0.088, -0.188];
const SCALE: [f32; 3] = [0.458, 0.448, 0.450];
/// VGG16 `features`: (index of each conv, its output channels, whether its ReLU output is
/// one of the five taps); a 2×2 max-pool follows every tap but the last.
pub const VGG16_CONVS: [(usize, usize, bool); 13] = [
    (0, 64, false),
    (2, 64, true),
    (5, 128, false),
    (7, 128, true),
    (10, 256, false),
    (12, 256, false),
    (14, 256, true),
    (17, 512, false),
    (19, 512, false),
    (21, 512, true),
    (24, 512, false),
    (26, 512, false),
    (28, 512, true),
];
/// The slice (1-based) of `LPIPS.net` holding each features index.
fn slice_of(index: usize) -> usize {
    match index {
        0..=3 => 1,
        4..=8 => 2,
        9..=15 => 3,
        16..=22 => 4,
        _ => 5,
    }
}

/// LPIPS with VGG16 features: constant weights (no gradients of their own).
pub struct Lpips {
    convs: Vec<(Tensor, Tensor, bool)>,
    heads: Vec<Tensor>,
    shift: Tensor,
    scale: Tensor,
}

impl Lpips {
    /// From named tensors: `get(name)` returns the tensor or `None`; `origin` names the
    /// file(s) in messages.
    pub fn from_tensors(get: impl Fn(&str) -> Option<Tensor>, origin: &Path) -> Result<Self> {
        let find = |names: &[String], shape: &[usize]| -> Result<Tensor> {
            let t = names
                .iter()
                .find_map(|n| get(n))
                .ok_or_else(|| Error::weights(origin, format!("missing tensor `{}`", names[0])))?;
            if t.dims() != shape {
                let msg = format!(
                    "`{}` has shape {:?}, expected {shape:?}",
                    names[0],
                    t.dims()
                );
                return Err(Error::weights(origin, msg));
            }
            Ok(t.to_dtype(DType::F32)?)
        };
        let mut convs = Vec::new();
        let mut c_in = 3;
        for (i, c_out, tap) in VGG16_CONVS {
            let s = slice_of(i);
            let names =
                |p: &str| vec![format!("features.{i}.{p}"), format!("net.slice{s}.{i}.{p}")];
            let w = find(&names("weight"), &[c_out, c_in, 3, 3])?;
            let b = find(&names("bias"), &[c_out])?;
            convs.push((w, b, tap));
            c_in = c_out;
        }
        let taps = VGG16_CONVS.iter().filter(|c| c.2).map(|c| c.1);
        let heads = taps
            .enumerate()
            .map(|(k, c)| find(&[format!("lin{k}.model.1.weight")], &[1, c, 1, 1]))
            .collect::<Result<Vec<_>>>()?;
        let dev = Device::Cpu;
        Ok(Self {
            convs,
            heads,
            shift: Tensor::from_slice(&SHIFT, (1, 3, 1, 1), &dev)?,
            scale: Tensor::from_slice(&SCALE, (1, 3, 1, 1), &dev)?,
        })
    }

    /// Reads the VGG16 weights from `vgg` and the heads from `heads` (the same file may be
    /// given twice).
    pub fn load(vgg: &Path, heads: &Path) -> Result<Self> {
        let mut all = read_tensors(vgg)?;
        if heads != vgg {
            all.extend(read_tensors(heads)?);
        }
        let origin = if heads == vgg {
            vgg.to_path_buf()
        } else {
            Path::new(&format!("{} + {}", vgg.display(), heads.display())).to_path_buf()
        };
        Self::from_tensors(|n| all.get(n).cloned(), &origin)
    }

    /// The five tapped feature maps of scaled images `x` (b, 3, h, w).
    fn features(&self, x: &Tensor) -> Result<Vec<Tensor>> {
        let mut h = x.broadcast_sub(&self.shift)?.broadcast_div(&self.scale)?;
        let mut taps = Vec::with_capacity(5);
        for (w, b, tap) in &self.convs {
            h = ops::conv2d(&h, w, Some(b), 1, Padding::same(1))?.relu()?;
            if *tap {
                taps.push(h.clone());
                if taps.len() < 5 {
                    h = h.max_pool2d(2)?;
                }
            }
        }
        Ok(taps)
    }

    /// The distance of each pair (b): `a`, `b` (b, 3, h, w) in [-1, 1], h and w ≥ 16.
    /// Differentiable in both.
    pub fn forward(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let (_, c, h, w) = a.dims4()?;
        if c != 3 || h < 16 || w < 16 || a.dims() != b.dims() {
            return Err(Error::invalid(format!(
                "LPIPS takes two (b, 3, h, w) batches with h, w ≥ 16, got {:?} and {:?}",
                a.dims(),
                b.dims()
            )));
        }
        let (fa, fb) = (self.features(a)?, self.features(b)?);
        let mut total: Option<Tensor> = None;
        for ((x, y), head) in fa.iter().zip(&fb).zip(&self.heads) {
            let d = (unit(x)? - unit(y)?)?.sqr()?;
            let v = d.broadcast_mul(head)?.sum_keepdim(1)?.mean(3)?.mean(2)?; // (b, 1)
            total = Some(match total {
                Some(t) => (t + v)?,
                None => v,
            });
        }
        let total = total.ok_or_else(|| Error::invalid("LPIPS has no layers"))?;
        Ok(total.flatten_all()?)
    }
}

/// `f / (sqrt(Σ_c f²) + 1e-10)`.
fn unit(f: &Tensor) -> Result<Tensor> {
    let n = (f.sqr()?.sum_keepdim(1)?.sqrt()? + 1e-10)?;
    Ok(f.broadcast_div(&n)?)
}

/// Every tensor of a safetensors file or a torch checkpoint's state dict (read without
/// executing its pickle).
pub(crate) fn read_tensors(path: &Path) -> Result<HashMap<String, Tensor>> {
    if imgseq_vqgan::load::is_torch_checkpoint(path) {
        let sd = imgseq_torch::read_state_dict(path, &Device::Cpu)?;
        Ok(sd.into_iter().map(|(k, t)| (k, t.tensor)).collect())
    } else {
        imgseq_core::weights::load_tensors(path, &Device::Cpu)
    }
}
