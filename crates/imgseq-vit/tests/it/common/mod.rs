//! Shared helpers: fixture paths, error measures, random models and the candle-autograd
//! reference step the fused engine is compared with.
#![allow(dead_code)]

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use imgseq_vit::fused::ParamLayout;
use imgseq_vit::loss::{cross_entropy_smoothed, cross_entropy_soft};
use imgseq_vit::{ViTConfig, ViTForImageClassification};
use std::path::PathBuf;

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/vit")
}

/// max |a − b| / max |b|
pub fn rel_err(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    rel_err_slice(&flat(a), &flat(b))
}

/// max |a − b| / max |b| of two equally long slices.
pub fn rel_err_slice(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let diff = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    diff / max_abs(b).max(1e-12)
}

pub fn max_abs(v: &[f32]) -> f32 {
    v.iter().map(|x| x.abs()).fold(0f32, f32::max)
}

/// A deterministic stream of roughly N(0, 1) numbers (sum of uniforms).
pub struct Noise(u64);

impl Noise {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn uniform(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
    pub fn normal(&mut self) -> f32 {
        (0..4).map(|_| self.uniform()).sum::<f32>() * 3f32.sqrt() - 2.0 * 3f32.sqrt()
    }
    pub fn vec(&mut self, n: usize, std: f32) -> Vec<f32> {
        (0..n).map(|_| self.normal() * std).collect()
    }
}

/// Random weights where every parameter matters: LayerNorm weights 1 ± 0.2, everything else
/// (biases, CLS, positions included) ~ N(0, std²).
pub fn random_params(layout: &ParamLayout, std: f32, seed: u64) -> Vec<f32> {
    let mut rng = Noise::new(seed);
    let mut flat = vec![0f32; layout.len()];
    for s in &layout.specs {
        let v = if s.name.contains("layernorm") && s.name.ends_with("weight") {
            rng.vec(s.len(), 0.2).into_iter().map(|x| 1.0 + x).collect()
        } else {
            rng.vec(s.len(), std)
        };
        flat[s.range()].copy_from_slice(&v);
    }
    flat
}

/// An odd-sized two-layer model: 3 channels of 15×15 in 3×3 patches (26 tokens), width 21
/// in 3 heads of 7, MLP 37, 7 classes.
pub fn odd_config(qkv_bias: bool) -> ViTConfig {
    let labels: Vec<String> = (0..7).map(|i| format!("c{i}")).collect();
    let names: Vec<&str> = labels.iter().map(|s| s.as_str()).collect();
    let mut c = ViTConfig::seed(3, &names);
    c.image_size = 15;
    c.patch_size = 3;
    c.hidden_size = 21;
    c.num_attention_heads = 3;
    c.intermediate_size = 37;
    c.num_hidden_layers = 2;
    c.layer_norm_eps = 1e-6;
    c.qkv_bias = qkv_bias;
    c.validate().unwrap();
    c
}

/// What the loss compares with, for the reference.
pub enum RefTargets<'a> {
    Labels(&'a [u32]),
    Probs(&'a [f32]),
}

/// One step of the candle-autograd engine on `params`: (logits, loss, flat gradients).
pub fn autograd_step(
    cfg: &ViTConfig,
    params: &[f32],
    x: &[f32],
    targets: RefTargets,
    eps: f64,
) -> (Vec<f32>, f64, Vec<f32>) {
    let dev = Device::Cpu;
    let layout = ParamLayout::new(cfg);
    let vars = VarMap::new();
    let model =
        ViTForImageClassification::new(cfg, VarBuilder::from_varmap(&vars, DType::F32, &dev))
            .unwrap();
    let data = vars.data().lock().unwrap().clone();
    assert_eq!(data.len(), layout.specs.len());
    for s in &layout.specs {
        let t = Tensor::from_slice(&params[s.range()], s.shape.as_slice(), &dev).unwrap();
        data[&s.name].set(&t).unwrap();
    }
    let b = x.len() / (cfg.num_channels * cfg.image_size * cfg.image_size);
    let xt = Tensor::from_slice(
        x,
        (b, cfg.num_channels, cfg.image_size, cfg.image_size),
        &dev,
    )
    .unwrap();
    let logits = model.forward(&xt, false).unwrap();
    let loss = match targets {
        RefTargets::Labels(y) => {
            let yt = Tensor::from_slice(y, b, &dev).unwrap();
            cross_entropy_smoothed(&logits, &yt, eps).unwrap()
        }
        RefTargets::Probs(t) => {
            let tt = Tensor::from_slice(t, (b, cfg.num_labels()), &dev).unwrap();
            cross_entropy_soft(&logits, &tt, eps).unwrap()
        }
    };
    let grads = loss.backward().unwrap();
    let mut flat = vec![0f32; layout.len()];
    for s in &layout.specs {
        let g = grads.get(data[&s.name].as_tensor()).unwrap();
        flat[s.range()].copy_from_slice(&g.flatten_all().unwrap().to_vec1::<f32>().unwrap());
    }
    (
        logits.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        loss.to_scalar::<f32>().unwrap() as f64,
        flat,
    )
}

/// Every parameter's gradient of `got` within `tol` (max-normwise relative) of `want`; the
/// attention key bias, whose gradient is exactly zero in theory (softmax ignores a constant
/// added to every score of a row), must be rounding noise next to the query bias's.
pub fn assert_grads_close(layout: &ParamLayout, got: &[f32], want: &[f32], tol: f32, what: &str) {
    let mut worst = (0f32, String::new());
    for s in &layout.specs {
        let (g, w) = (&got[s.range()], &want[s.range()]);
        if s.name.ends_with("key.bias") {
            let q = layout
                .get(&s.name.replace("key.bias", "query.bias"))
                .unwrap();
            let scale = max_abs(&want[q.range()]);
            assert!(
                max_abs(g) <= 1e-4 * scale && max_abs(w) <= 1e-4 * scale,
                "{what}: {}: {} and {} vs query bias {scale}",
                s.name,
                max_abs(g),
                max_abs(w)
            );
            continue;
        }
        let e = rel_err_slice(g, w);
        if e > worst.0 || worst.1.is_empty() {
            worst = (e, s.name.clone());
        }
    }
    assert!(
        worst.0 <= tol,
        "{what}: grad of {}: rel err {}",
        worst.1,
        worst.0
    );
}
