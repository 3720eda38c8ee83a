//! AdamW (decoupled weight decay, as `torch.optim.AdamW`) over named candle variables, with
//! state that can be saved and restored so that training resumes exactly where it stopped,
//! and the warm-up + cosine learning-rate schedule. Shared by the ViT and VQGAN trainers.

use candle_core::{backprop::GradStore, DType, Result, Tensor, Var};
use std::collections::HashMap;

/// AdamW over named candle variables: [`FlatAdamW`]'s rule and state, each variable one
/// parameter of it (in the given order). Weight decay applies only to the variables marked
/// `decay`. The settings (`lr`, `beta1`, `beta2`, `eps`, `weight_decay`) and `step` are the
/// [`FlatAdamW`]'s, reached through `Deref`.
pub struct AdamW {
    vars: Vec<Var>,
    flat: FlatAdamW,
}

impl std::ops::Deref for AdamW {
    type Target = FlatAdamW;
    fn deref(&self) -> &FlatAdamW {
        &self.flat
    }
}

impl std::ops::DerefMut for AdamW {
    fn deref_mut(&mut self) -> &mut FlatAdamW {
        &mut self.flat
    }
}

impl AdamW {
    /// `vars`: (name, variable, whether weight decay applies). β = (0.9, 0.999), ε = 1e-8.
    pub fn new(vars: Vec<(String, Var, bool)>, lr: f64, weight_decay: f64) -> Result<Self> {
        let mut offset = 0;
        let mut specs = Vec::with_capacity(vars.len());
        let vars = vars
            .into_iter()
            .map(|(name, var, decay)| {
                let shape = var.as_tensor().dims().to_vec();
                let spec = ParamSpec {
                    name,
                    shape,
                    offset,
                    decay,
                };
                offset += spec.len();
                specs.push(spec);
                var
            })
            .collect();
        Ok(Self {
            vars,
            flat: FlatAdamW::new(&specs, lr, weight_decay),
        })
    }

    /// One update from the gradients in `grads` (as `torch.optim.AdamW`, amsgrad off).
    /// Variables without a gradient are left alone (their moments too).
    pub fn step(&mut self, grads: &GradStore) -> Result<()> {
        let c = self.flat.begin_step();
        for (i, var) in self.vars.iter().enumerate() {
            let Some(g) = grads.get(var.as_tensor()) else {
                continue;
            };
            let g = g.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
            let theta_t = var.as_tensor();
            let mut theta = theta_t.flatten_all()?.to_vec1::<f32>()?;
            self.flat.update_param(i, &mut theta, &g, c);
            var.set(&Tensor::from_vec(theta, theta_t.shape(), theta_t.device())?)?;
        }
        Ok(())
    }

    /// Moment tensors by name plus the step count, in [`state_format`], on the CPU.
    pub fn state(&self) -> Result<HashMap<String, Tensor>> {
        self.flat.moments_state()
    }
}

/// The per-step constants of the AdamW update at step `t` (1-based): the rule's one owner,
/// shared by [`AdamW`] and the flat-array AdamW of the ViT's fused engine.
#[derive(Debug, Clone, Copy)]
pub struct AdamStep {
    b1: f32,
    b2: f32,
    /// √(1 − β₂ᵗ)
    bc2_sqrt: f32,
    /// lr / (1 − β₁ᵗ)
    step_size: f32,
    eps: f32,
}

impl AdamStep {
    pub fn new(lr: f64, beta1: f64, beta2: f64, eps: f64, t: usize) -> Self {
        let t = t as i32;
        Self {
            b1: beta1 as f32,
            b2: beta2 as f32,
            bc2_sqrt: (1.0 - beta2.powi(t)).sqrt() as f32,
            step_size: (lr / (1.0 - beta1.powi(t))) as f32,
            eps: eps as f32,
        }
    }
}

/// What a parameter is multiplied by before its AdamW step: 1 − lr·wd where weight decay
/// applies (`decay`), else 1.
pub fn decay_factor(decay: bool, lr: f64, weight_decay: f64) -> f32 {
    if decay {
        1.0 - (lr * weight_decay) as f32
    } else {
        1.0
    }
}

/// One AdamW update of a parameter `theta` from its gradient `g`, moments `m` and `v` updated
/// in place (as `torch.optim.AdamW`, amsgrad off): θ ← θ·shrink − step_size·m / (√v / √bc₂ + ε).
pub fn adamw_update(
    theta: &mut [f32],
    g: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    shrink: f32,
    c: AdamStep,
) {
    for i in 0..theta.len() {
        m[i] = c.b1 * m[i] + (1.0 - c.b1) * g[i];
        v[i] = c.b2 * v[i] + (1.0 - c.b2) * g[i] * g[i];
        let denom = v[i].sqrt() / c.bc2_sqrt + c.eps;
        theta[i] = theta[i] * shrink - c.step_size * m[i] / denom;
    }
}

/// One parameter of a flat parameter array: its name, shape and place in the array, and
/// whether weight decay applies.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub offset: usize,
    /// Whether weight decay applies.
    pub decay: bool,
}

impl ParamSpec {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.len()
    }
}

/// AdamW on flat arrays (parameters back to back as `specs` place them) with exactly the
/// arithmetic of [`AdamW`] (the same [`adamw_update`]) and the same saved state
/// ([`state_format`]), so a run can switch between the two on resume.
pub struct FlatAdamW {
    specs: Vec<ParamSpec>,
    len: usize,
    m: Vec<f32>,
    v: Vec<f32>,
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Updates done so far (the bias-correction step `t`).
    pub step: usize,
}

impl FlatAdamW {
    /// The parameters of `specs` (which cover the flat arrays from 0 without gaps).
    /// β = (0.9, 0.999), ε = 1e-8 (as [`AdamW`]).
    pub fn new<S: AsRef<[ParamSpec]> + ?Sized>(specs: &S, lr: f64, weight_decay: f64) -> Self {
        let specs = specs.as_ref().to_vec();
        let len = specs.iter().map(|s| s.offset + s.len()).max().unwrap_or(0);
        Self {
            specs,
            len,
            m: vec![0.0; len],
            v: vec![0.0; len],
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay,
            step: 0,
        }
    }

    fn check_len(&self, flat: &[f32]) -> crate::Result<()> {
        if flat.len() != self.len {
            return Err(crate::Error::invalid(format!(
                "a parameter array of {} values for a model of {}",
                flat.len(),
                self.len
            )));
        }
        Ok(())
    }

    /// One update of `params` from `grads`.
    pub fn update(&mut self, params: &mut [f32], grads: &[f32]) -> crate::Result<()> {
        self.check_len(params)?;
        self.check_len(grads)?;
        let c = self.begin_step();
        for i in 0..self.specs.len() {
            let r = self.specs[i].range();
            self.update_param(i, &mut params[r.clone()], &grads[r], c);
        }
        Ok(())
    }

    /// Counts a new step and returns its constants.
    fn begin_step(&mut self) -> AdamStep {
        self.step += 1;
        AdamStep::new(self.lr, self.beta1, self.beta2, self.eps, self.step)
    }

    /// The update of parameter `i` (its values `theta`, gradient `g`) at the step of `c`.
    fn update_param(&mut self, i: usize, theta: &mut [f32], g: &[f32], c: AdamStep) {
        let s = &self.specs[i];
        let shrink = decay_factor(s.decay, self.lr, self.weight_decay);
        let (m, v) = (&mut self.m[s.range()], &mut self.v[s.range()]);
        adamw_update(theta, g, m, v, shrink, c);
    }

    /// Zeroes the moments of rows `rows` of the parameter `name` seen as a matrix
    /// (dim 0 × the rest), e.g. after re-seeding codebook entries. Unknown names and rows
    /// out of range are ignored; returns how many rows were reset.
    pub fn reset_rows(&mut self, name: &str, rows: &[usize]) -> usize {
        let Some(s) = self.specs.iter().find(|s| s.name == name) else {
            return 0;
        };
        let (n, per) = match s.shape.first() {
            Some(&n) if n > 0 => (n, s.len() / n),
            _ => return 0,
        };
        let (m, v) = (&mut self.m[s.range()], &mut self.v[s.range()]);
        let mut done = 0;
        for &r in rows.iter().filter(|&&r| r < n) {
            m[r * per..(r + 1) * per].fill(0.0);
            v[r * per..(r + 1) * per].fill(0.0);
            done += 1;
        }
        done
    }

    /// Moment tensors by name plus the step count, in [`state_format`] ([`AdamW`]'s form too).
    pub fn state(&self) -> crate::Result<HashMap<String, Tensor>> {
        Ok(self.moments_state()?)
    }

    fn moments_state(&self) -> Result<HashMap<String, Tensor>> {
        let mut out = HashMap::new();
        for s in &self.specs {
            let (m, v) = (&self.m[s.range()], &self.v[s.range()]);
            state_format::put_moments(&mut out, &s.name, &s.shape, m, v)?;
        }
        state_format::put_step(&mut out, self.step)?;
        Ok(out)
    }

    /// Restores what [`state`](Self::state) (or [`AdamW`]) saved; every parameter must be
    /// present with its shape. The error is a one-line description (the caller adds the file
    /// name).
    pub fn load_state(
        &mut self,
        state: &HashMap<String, Tensor>,
    ) -> std::result::Result<(), String> {
        for s in &self.specs {
            let (m, v) = (&mut self.m[s.range()], &mut self.v[s.range()]);
            state_format::take_moments(state, &s.name, &s.shape, m, v)?;
        }
        self.step = state_format::take_step(state)?;
        Ok(())
    }
}

/// The one saved form of AdamW's state, for every AdamW here (this one and the ViT's fused
/// engine, so a run can switch engines on resume): torch's names — `<param>.exp_avg` and
/// `<param>.exp_avg_sq` with the parameter's shape (f32), and `step` (i64, shape (1)).
pub mod state_format {
    use super::Result;
    use candle_core::{DType, Device, Tensor};
    use std::collections::HashMap;

    /// Adds a parameter's two moment tensors.
    pub fn put_moments(
        out: &mut HashMap<String, Tensor>,
        name: &str,
        shape: &[usize],
        m: &[f32],
        v: &[f32],
    ) -> Result<()> {
        for (suffix, x) in [("exp_avg", m), ("exp_avg_sq", v)] {
            let t = Tensor::from_slice(x, shape, &Device::Cpu)?;
            out.insert(format!("{name}.{suffix}"), t);
        }
        Ok(())
    }

    /// Adds the step count.
    pub fn put_step(out: &mut HashMap<String, Tensor>, step: usize) -> Result<()> {
        out.insert("step".into(), Tensor::new(&[step as i64], &Device::Cpu)?);
        Ok(())
    }

    /// Reads a parameter's moments (of shape `dims`) into `m` and `v` (each `dims`' element
    /// count long). The error is one line naming the tensor.
    pub fn take_moments(
        state: &HashMap<String, Tensor>,
        name: &str,
        dims: &[usize],
        m: &mut [f32],
        v: &mut [f32],
    ) -> std::result::Result<(), String> {
        for (suffix, dst) in [("exp_avg", m), ("exp_avg_sq", v)] {
            let key = format!("{name}.{suffix}");
            let t = state
                .get(&key)
                .ok_or_else(|| format!("missing optimizer tensor `{key}`"))?;
            if t.dims() != dims {
                return Err(format!(
                    "optimizer tensor `{key}` has shape {:?}, expected {:?}",
                    t.dims(),
                    dims
                ));
            }
            let x = t
                .flatten_all()
                .and_then(|t| t.to_dtype(DType::F32)?.to_vec1::<f32>())
                .map_err(|e| e.to_string())?;
            if x.len() != dst.len() {
                return Err(format!(
                    "optimizer tensor `{key}`: {} values, expected {}",
                    x.len(),
                    dst.len()
                ));
            }
            dst.copy_from_slice(&x);
        }
        Ok(())
    }

    /// Reads the step count.
    pub fn take_step(state: &HashMap<String, Tensor>) -> std::result::Result<usize, String> {
        let step = state.get("step").ok_or("missing optimizer `step`")?;
        let step = step
            .flatten_all()
            .and_then(|t| t.to_dtype(DType::I64)?.to_vec1::<i64>())
            .map_err(|e| e.to_string())?;
        match step.first() {
            Some(&s) if s >= 0 => Ok(s as usize),
            _ => Err("optimizer `step` is empty or negative".into()),
        }
    }
}

/// Exponential moving average of weights: ema ← decay·ema + (1 − decay)·θ, every step. The
/// one rule for the ViT's and the VQGAN's `ema` (`TrainConfig::ema` in each trainer).
pub fn ema_update(ema: &mut [f32], theta: &[f32], decay: f64) {
    let (a, b) = (decay as f32, (1.0 - decay) as f32);
    for (e, t) in ema.iter_mut().zip(theta) {
        *e = a * *e + b * *t;
    }
}

/// In the optimizer file of a run with an EMA, the raw (trained, not averaged) weights are
/// kept under this prefix (`raw.<name>`); the run's model file holds the average.
pub const RAW_PREFIX: &str = "raw.";

/// Linear warm-up from 0 to `peak` over `warmup` steps, then cosine decay to `min_lr` at
/// `total` (and `min_lr` after it).
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
        assert!((warmup_cosine(500, 0, 100, 1.0, 0.01) - 0.01).abs() < 1e-12);
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
    }

    /// Saving after k steps, restoring into a fresh optimizer and continuing gives the same
    /// parameters as never stopping; a missing or misshapen tensor is a one-line error.
    #[test]
    fn state_roundtrip_resumes_exactly() {
        let dev = Device::Cpu;
        let run = |var: &Var, opt: &mut AdamW, n: usize| {
            for _ in 0..n {
                let loss = (var.as_tensor().sqr().unwrap().sum_all().unwrap()
                    + var.as_tensor().sum_all().unwrap())
                .unwrap();
                opt.step(&loss.backward().unwrap()).unwrap();
            }
        };
        let a = Var::from_vec(vec![1.0f32, -2.0, 0.5, 3.0], (2, 2), &dev).unwrap();
        let mut oa = AdamW::new(vec![("w".into(), a.clone(), true)], 0.05, 0.1).unwrap();
        run(&a, &mut oa, 5);

        let b = Var::from_vec(vec![1.0f32, -2.0, 0.5, 3.0], (2, 2), &dev).unwrap();
        let mut ob = AdamW::new(vec![("w".into(), b.clone(), true)], 0.05, 0.1).unwrap();
        run(&b, &mut ob, 3);
        let saved = ob.state().unwrap();
        let c = Var::from_tensor(b.as_tensor()).unwrap();
        let mut oc = AdamW::new(vec![("w".into(), c.clone(), true)], 0.05, 0.1).unwrap();
        oc.load_state(&saved).unwrap();
        assert_eq!(oc.step, 3);
        run(&c, &mut oc, 2);
        assert_eq!(
            a.as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap(),
            c.as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        );

        let mut bad = saved.clone();
        bad.remove("w.exp_avg");
        let e = oc.load_state(&bad).unwrap_err();
        assert_eq!(e, "missing optimizer tensor `w.exp_avg`");
        let mut bad = saved.clone();
        bad.insert(
            "w.exp_avg_sq".into(),
            Tensor::zeros(3, DType::F32, &dev).unwrap(),
        );
        assert!(oc.load_state(&bad).unwrap_err().contains("has shape [3]"));
    }

    #[test]
    fn reset_rows_zeroes_moments_of_those_rows_only() {
        let dev = Device::Cpu;
        let v = Var::from_vec(vec![1.0f32; 6], (3, 2), &dev).unwrap();
        let mut o = AdamW::new(vec![("e".into(), v.clone(), false)], 0.1, 0.0).unwrap();
        let loss = v.as_tensor().sqr().unwrap().sum_all().unwrap();
        o.step(&loss.backward().unwrap()).unwrap();
        assert_eq!(o.reset_rows("e", &[1, 7]), 1);
        assert_eq!(o.reset_rows("nope", &[0]), 0);
        let m = o.state().unwrap()["e.exp_avg"]
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert!(m[0] != 0.0 && m[1] != 0.0 && m[4] != 0.0);
        assert_eq!(&m[2..4], &[0.0, 0.0]);
    }

    #[test]
    fn flat_adamw_is_bitwise_the_candle_side_adamw() {
        // A matrix with weight decay, a vector without, a 3-d tensor with.
        let mut specs = Vec::new();
        let mut end = 0;
        for (name, shape, decay) in [
            ("w", vec![4, 3], true),
            ("b", vec![4], false),
            ("t", vec![2, 2, 3], true),
        ] {
            let spec = ParamSpec {
                name: name.into(),
                shape,
                offset: end,
                decay,
            };
            end += spec.len();
            specs.push(spec);
        }
        let n = end;
        let mut theta: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0)
            .collect();
        let vars: Vec<(String, Var, bool)> = specs
            .iter()
            .map(|s| {
                let t = Tensor::from_slice(&theta[s.range()], s.shape.as_slice(), &Device::Cpu)
                    .unwrap();
                (s.name.clone(), Var::from_tensor(&t).unwrap(), s.decay)
            })
            .collect();
        let mut reference = AdamW::new(vars.clone(), 3e-3, 0.05).unwrap();
        let mut flat = FlatAdamW::new(&specs, 3e-3, 0.05);
        for step in 0..3 {
            // loss = Σ θ³/3 + step·Σ θ → g = θ² + step
            let loss = vars
                .iter()
                .map(|(_, v, _)| {
                    let t = v.as_tensor();
                    ((t.powf(3.0).unwrap() / 3.0).unwrap() + (t * step as f64).unwrap())
                        .unwrap()
                        .sum_all()
                        .unwrap()
                })
                .reduce(|a, b| (a + b).unwrap())
                .unwrap();
            let grads = loss.backward().unwrap();
            let mut g = vec![0f32; n];
            for (s, (_, v, _)) in specs.iter().zip(&vars) {
                let gv = grads.get(v.as_tensor()).unwrap().flatten_all().unwrap();
                g[s.range()].copy_from_slice(&gv.to_vec1::<f32>().unwrap());
            }
            reference.lr = 3e-3 / (step + 1) as f64;
            flat.lr = reference.lr;
            reference.step(&grads).unwrap();
            flat.update(&mut theta, &g).unwrap();
        }
        for (s, (_, v, _)) in specs.iter().zip(&vars) {
            let want = v
                .as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            assert_eq!(&theta[s.range()], want.as_slice(), "{}", s.name);
        }
        let (a, b) = (reference.state().unwrap(), flat.state().unwrap());
        assert_eq!(a.len(), b.len());
        for (k, t) in &a {
            let u = &b[k];
            let flat = |t: &Tensor| {
                t.flatten_all()
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap()
                    .to_vec1::<f64>()
                    .unwrap()
            };
            assert_eq!(flat(t), flat(u), "{k}");
        }
        let mut again = FlatAdamW::new(&specs, 3e-3, 0.05);
        again.load_state(&a).unwrap();
        assert_eq!(again.step, 3);
        assert_eq!(
            (again.m.clone(), again.v.clone()),
            (flat.m.clone(), flat.v.clone())
        );
    }
}
