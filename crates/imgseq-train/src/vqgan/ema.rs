//! The exponential moving average of a run's weights (`TrainConfig::ema`).
//!
//! Every step, after AdamW: ema ← decay·ema + (1 − decay)·θ
//! ([`imgseq_core::optim::ema_update`], the ViT trainer's rule). The average is the run's
//! model: `model.safetensors` (and every snapshot) holds it, while the raw weights, which the
//! optimizer goes on training, are kept in `optimizer.safetensors` as `raw.<name>`.
//!
//! The codebook is the one exception to plain averaging: when codes are re-seeded (the
//! k-means init at the end of the autoencoder warm-up, dead-code restarts) their new rows are
//! copied into the average as they are. Averaging a dead code's old row with its replacement
//! would give a vector between the two, near no encoder output: a code the averaged model
//! never uses.

use candle_core::{Tensor, Var};
use imgseq_core::optim::ema_update;
use imgseq_core::Result;

/// The averaged weights, one flat vector per variable of the run (in the order of the
/// `named` list every method takes: [`super::checkpoint::sorted_vars`]).
pub struct Ema {
    decay: f64,
    values: Vec<Vec<f32>>,
}

fn flat(v: &Var) -> Result<Vec<f32>> {
    Ok(v.as_tensor().flatten_all()?.to_vec1::<f32>()?)
}

impl Ema {
    /// An average that starts at the variables' current values.
    pub fn start(decay: f64, named: &[(String, Var)]) -> Result<Self> {
        let values = named.iter().map(|(_, v)| flat(v)).collect::<Result<_>>()?;
        Ok(Self { decay, values })
    }

    /// One step of the average toward the variables' current values.
    pub fn update(&mut self, named: &[(String, Var)]) -> Result<()> {
        for ((_, v), e) in named.iter().zip(&mut self.values) {
            ema_update(e, &flat(v)?, self.decay);
        }
        Ok(())
    }

    /// Copies rows `rows` (dim 0) of the variable `name` into the average unaveraged (see the
    /// module docs: re-seeded codes). Unknown names and rows out of range are ignored.
    pub fn copy_rows(&mut self, named: &[(String, Var)], name: &str, rows: &[usize]) -> Result<()> {
        let Some(i) = named.iter().position(|(n, _)| n == name) else {
            return Ok(());
        };
        let theta = flat(&named[i].1)?;
        let n = named[i].1.as_tensor().dims().first().copied().unwrap_or(0);
        if n == 0 {
            return Ok(());
        }
        let per = theta.len() / n;
        for &r in rows.iter().filter(|&&r| r < n) {
            let span = r * per..(r + 1) * per;
            self.values[i][span.clone()].copy_from_slice(&theta[span]);
        }
        Ok(())
    }

    /// The average as named tensors (the variables' names and shapes).
    pub fn tensors(&self, named: &[(String, Var)]) -> Result<Vec<(String, Tensor)>> {
        named
            .iter()
            .zip(&self.values)
            .map(|((n, v), e)| {
                let t = Tensor::from_slice(e, v.as_tensor().dims(), v.as_tensor().device())?;
                Ok((n.clone(), t))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn var(vals: &[f32], dims: &[usize]) -> Var {
        Var::from_tensor(&Tensor::from_slice(vals, dims, &Device::Cpu).unwrap()).unwrap()
    }

    #[test]
    fn the_average_moves_by_one_minus_decay_and_reseeded_rows_are_copied_whole() {
        let cb = var(&[0.0, 0.0, 1.0, 1.0, 2.0, 2.0], &[3, 2]);
        let named = vec![("codebook".to_string(), cb.clone())];
        let mut e = Ema::start(0.9, &named).unwrap();
        cb.set(
            &Tensor::from_slice(&[10f32, 10., 11., 11., 12., 12.], (3, 2), &Device::Cpu).unwrap(),
        )
        .unwrap();
        e.update(&named).unwrap();
        let got = |e: &Ema| {
            e.tensors(&named).unwrap()[0]
                .1
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        let want = [1.0f32, 1.0, 2.0, 2.0, 3.0, 3.0];
        for (g, w) in got(&e).iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{g} vs {w}");
        }
        // Row 1 re-seeded: the average takes it as it is; rows 0 and 2 keep their averages.
        cb.set(
            &Tensor::from_slice(&[10f32, 10., -5., 7., 12., 12.], (3, 2), &Device::Cpu).unwrap(),
        )
        .unwrap();
        e.copy_rows(&named, "codebook", &[1, 99]).unwrap();
        e.copy_rows(&named, "no.such.var", &[0]).unwrap();
        let g = got(&e);
        assert_eq!(&g[2..4], &[-5.0, 7.0]);
        assert!(
            (g[0] - 1.0).abs() < 1e-5 && (g[4] - 3.0).abs() < 1e-5,
            "{g:?}"
        );
    }
}
