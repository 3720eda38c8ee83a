//! AdamW (decoupled weight decay, as `torch.optim.AdamW`) with state that can be saved and
//! restored, so training resumes exactly where it stopped.

use candle_core::{backprop::GradStore, DType, Result, Tensor, Var};
use std::collections::HashMap;

/// One parameter with its moment estimates (kept as plain vectors: the update is one fused
/// loop per parameter instead of a dozen tensor ops).
struct Slot {
    name: String,
    var: Var,
    m: Vec<f32>,
    v: Vec<f32>,
    decay: bool,
}

/// AdamW over named variables. Weight decay applies only to the variables marked `decay`
/// (matrices and conv kernels, not biases, norms, CLS token or positions).
pub struct AdamW {
    slots: Vec<Slot>,
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub step: usize,
}

impl AdamW {
    pub fn new(vars: Vec<(String, Var, bool)>, lr: f64, weight_decay: f64) -> Result<Self> {
        let slots = vars
            .into_iter()
            .map(|(name, var, decay)| {
                let n = var.as_tensor().elem_count();
                Slot { name, var, m: vec![0.0; n], v: vec![0.0; n], decay }
            })
            .collect();
        Ok(Self { slots, lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay, step: 0 })
    }

    /// One update from the gradients in `grads` (as `torch.optim.AdamW`, amsgrad off).
    pub fn step(&mut self, grads: &GradStore) -> Result<()> {
        self.step += 1;
        let t = self.step as i32;
        let (b1, b2) = (self.beta1 as f32, self.beta2 as f32);
        let bc1 = 1.0 - self.beta1.powi(t);
        let bc2_sqrt = (1.0 - self.beta2.powi(t)).sqrt();
        let step_size = (self.lr / bc1) as f32;
        let eps = self.eps as f32;
        for s in self.slots.iter_mut() {
            let Some(g) = grads.get(s.var.as_tensor()) else { continue };
            let g = g.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
            let theta_t = s.var.as_tensor();
            let mut theta = theta_t.flatten_all()?.to_vec1::<f32>()?;
            let shrink = if s.decay { 1.0 - (self.lr * self.weight_decay) as f32 } else { 1.0 };
            for i in 0..theta.len() {
                s.m[i] = b1 * s.m[i] + (1.0 - b1) * g[i];
                s.v[i] = b2 * s.v[i] + (1.0 - b2) * g[i] * g[i];
                let denom = s.v[i].sqrt() / bc2_sqrt as f32 + eps;
                theta[i] = theta[i] * shrink - step_size * s.m[i] / denom;
            }
            s.var.set(&Tensor::from_vec(theta, theta_t.shape(), theta_t.device())?)?;
        }
        Ok(())
    }

    /// Moment tensors by name (`<var>.exp_avg`, `<var>.exp_avg_sq`) plus the step count.
    pub fn state(&self) -> Result<HashMap<String, Tensor>> {
        let mut out = HashMap::new();
        let dev = candle_core::Device::Cpu;
        for s in &self.slots {
            let shape = s.var.as_tensor().shape();
            out.insert(format!("{}.exp_avg", s.name), Tensor::from_slice(&s.m, shape, &dev)?);
            out.insert(format!("{}.exp_avg_sq", s.name), Tensor::from_slice(&s.v, shape, &dev)?);
        }
        out.insert("step".into(), Tensor::new(&[self.step as i64], &dev)?);
        Ok(out)
    }

    /// Restores what [`state`](Self::state) saved; every slot must be present with its shape.
    pub fn load_state(&mut self, state: &HashMap<String, Tensor>) -> std::result::Result<(), String> {
        for s in self.slots.iter_mut() {
            let dims = s.var.as_tensor().dims().to_vec();
            for (suffix, dst) in [("exp_avg", &mut s.m), ("exp_avg_sq", &mut s.v)] {
                let key = format!("{}.{suffix}", s.name);
                let t = state.get(&key).ok_or_else(|| format!("missing optimizer tensor `{key}`"))?;
                if t.dims() != dims.as_slice() {
                    return Err(format!("optimizer tensor `{key}` has shape {:?}, expected {:?}", t.dims(), dims));
                }
                *dst = t.flatten_all().and_then(|t| t.to_dtype(DType::F32)?.to_vec1::<f32>()).map_err(|e| e.to_string())?;
            }
        }
        let step = state.get("step").ok_or("missing optimizer `step`")?;
        self.step = step.to_vec1::<i64>().map_err(|e| e.to_string())?[0] as usize;
        Ok(())
    }
}

/// Linear warmup from 0 to `peak` over `warmup` steps, then cosine decay to `min_lr` at `total`.
pub fn warmup_cosine(step: usize, warmup: usize, total: usize, peak: f64, min_lr: f64) -> f64 {
    if step < warmup {
        return peak * (step + 1) as f64 / warmup as f64;
    }
    let span = total.saturating_sub(warmup).max(1);
    let p = ((step - warmup) as f64 / span as f64).min(1.0);
    min_lr + 0.5 * (peak - min_lr) * (1.0 + (std::f64::consts::PI * p).cos())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn schedule_warms_up_then_decays_to_min() {
        assert!((warmup_cosine(0, 10, 100, 1.0, 0.0) - 0.1).abs() < 1e-12);
        assert!((warmup_cosine(9, 10, 100, 1.0, 0.0) - 1.0).abs() < 1e-12);
        assert!((warmup_cosine(10, 10, 100, 1.0, 0.0) - 1.0).abs() < 1e-12);
        assert!((warmup_cosine(55, 10, 100, 1.0, 0.0) - 0.5).abs() < 1e-9);
        assert!(warmup_cosine(100, 10, 100, 1.0, 0.01) - 0.01 < 1e-12);
    }

    /// One step on f(x) = Σx² matches PyTorch AdamW's closed form for step 1:
    /// x1 = x0·(1 − lr·wd) − lr·sign(g) (m̂/√v̂ = g/|g|).
    #[test]
    fn first_step_matches_torch_adamw_closed_form() {
        let dev = Device::Cpu;
        let var = Var::from_vec(vec![1.0f32, -2.0], 2, &dev).unwrap();
        let mut opt = AdamW::new(vec![("x".into(), var.clone(), true)], 0.1, 0.01).unwrap();
        let loss = var.as_tensor().sqr().unwrap().sum_all().unwrap();
        opt.step(&loss.backward().unwrap()).unwrap();
        let got = var.as_tensor().to_vec1::<f32>().unwrap();
        let want = [1.0 * (1.0 - 0.001) - 0.1, -2.0 * (1.0 - 0.001) + 0.1];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{got:?} vs {want:?}");
        }
        let st = opt.state().unwrap();
        let mut opt2 = AdamW::new(vec![("x".into(), var.clone(), true)], 0.1, 0.01).unwrap();
        opt2.load_state(&st).unwrap();
        assert_eq!(opt2.step, 1);
    }
}
