//! taming's `VectorQuantizer2`: nearest codebook entry per latent position.

use candle_core::{DType, Result, Tensor};
use candle_nn::VarBuilder;
use imgseq_kernels::ops;

/// The codebook's name in taming's state dict (n_embed, embed_dim).
pub const CODEBOOK: &str = "quantize.embedding.weight";

/// The result of [`VectorQuantizer::quantize`].
#[derive(Debug, Clone)]
pub struct Quantized {
    /// Codebook vectors at every position, with the straight-through gradient
    /// `z + sg[z_q − z]`: (b, c, h, w).
    pub quantized: Tensor,
    /// Codebook + commitment loss, a scalar.
    pub loss: Tensor,
    /// Codebook index per position, raster order (row by row), u32: (b, h, w).
    pub indices: Tensor,
}

/// Codebook `quantize.embedding.weight` of shape (n_embed, embed_dim).
#[derive(Debug, Clone)]
pub struct VectorQuantizer {
    embedding: Tensor, // (n_embed, embed_dim)
    beta: f64,
    legacy: bool,
}

impl VectorQuantizer {
    pub fn new(
        n_embed: usize,
        embed_dim: usize,
        beta: f64,
        legacy: bool,
        vb: VarBuilder,
    ) -> Result<Self> {
        let embedding = vb.pp("embedding").get((n_embed, embed_dim), "weight")?;
        Ok(Self {
            embedding,
            beta,
            legacy,
        })
    }

    /// From a codebook tensor directly (tests, training code).
    pub fn from_codebook(embedding: Tensor, beta: f64, legacy: bool) -> Self {
        Self {
            embedding,
            beta,
            legacy,
        }
    }

    pub fn codebook(&self) -> &Tensor {
        &self.embedding
    }

    pub fn n_embed(&self) -> usize {
        self.embedding.dims()[0]
    }

    /// Nearest codebook entry for every position, by ‖z‖² + ‖e‖² − 2·z·e (ties → lowest
    /// index), with taming's loss:
    /// legacy (released checkpoints): mean((sg[z_q] − z)²) + β·mean((z_q − sg[z])²);
    /// otherwise:                     β·mean((sg[z_q] − z)²) + mean((z_q − sg[z])²).
    ///
    /// # Shapes
    /// z: (b, c, h, w), c = embed_dim → quantized (b, c, h, w), loss (), indices (b, h, w) u32
    pub fn quantize(&self, z: &Tensor) -> Result<Quantized> {
        let (b, c, h, w) = z.dims4()?;
        let rows = z.permute((0, 2, 3, 1))?.reshape((b * h * w, c))?; // (bhw, c), raster order
        let idx = ops::nearest_codebook(&rows, &self.embedding)?; // (bhw) u32
        let zq = self.embedding.index_select(&idx, 0)?; // (bhw, c)
        let zq = zq
            .reshape((b, h, w, c))?
            .permute((0, 3, 1, 2))?
            .contiguous()?; // (b, c, h, w)
        let commit = (zq.detach() - z)?.sqr()?.mean_all()?; // pulls the encoder to the code
        let codebook = (&zq - z.detach())?.sqr()?.mean_all()?; // pulls the code to the encoder
        let loss = if self.legacy {
            (commit + (codebook * self.beta)?)?
        } else {
            ((commit * self.beta)? + codebook)?
        };
        // Straight-through estimator: forward value z_q, gradient of identity w.r.t. z.
        let quantized = (z + (zq - z)?.detach())?;
        Ok(Quantized {
            quantized,
            loss,
            indices: idx.reshape((b, h, w))?,
        })
    }

    /// Codebook vectors for given indices.
    ///
    /// # Shapes
    /// indices: (b, h, w), any integer dtype, each < n_embed → (b, embed_dim, h, w)
    pub fn lookup(&self, indices: &Tensor) -> Result<Tensor> {
        let (b, h, w) = indices.dims3()?;
        let n = self.n_embed();
        let flat = indices
            .flatten_all()?
            .to_dtype(DType::I64)?
            .to_vec1::<i64>()?;
        if let Some((_, bad)) = imgseq_core::codes::first_out_of_range(&flat, n) {
            candle_core::bail!("codebook index {bad} is out of range: the codebook has n_embed = {n} entries (0..={})", n - 1);
        }
        let idx = Tensor::from_vec(
            flat.iter().map(|&i| i as u32).collect::<Vec<_>>(),
            b * h * w,
            self.embedding.device(),
        )?;
        let e = self.embedding.index_select(&idx, 0)?; // (bhw, c)
        let c = e.dim(1)?;
        e.reshape((b, h, w, c))?.permute((0, 3, 1, 2))?.contiguous()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn vq(legacy: bool) -> VectorQuantizer {
        let e = Tensor::new(&[[0f32, 0.], [1., 0.], [0., 2.]], &Device::Cpu).unwrap();
        VectorQuantizer::from_codebook(e, 0.25, legacy)
    }

    /// z: (1, 2, 1, 2) = two positions (0.9, 0.1) and (0.2, 1.5).
    fn z() -> Var {
        let t = Tensor::new(&[0.9f32, 0.2, 0.1, 1.5], &Device::Cpu).unwrap();
        Var::from_tensor(&t.reshape((1, 2, 1, 2)).unwrap()).unwrap()
    }

    #[test]
    fn nearest_entries_loss_and_straight_through() {
        let z = z();
        let q = vq(true).quantize(z.as_tensor()).unwrap();
        assert_eq!(
            q.indices.flatten_all().unwrap().to_vec1::<u32>().unwrap(),
            vec![1, 2]
        );
        let zq = q.quantized.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(zq, vec![1.0, 0.0, 0.0, 2.0]); // (c, w) layout: c0 = [1, 0], c1 = [0, 2]
                                                  // mse = mean((zq - z)^2) over 4 values = (0.01 + 0.04 + 0.01 + 0.25) / 4
        let mse = (0.01 + 0.04 + 0.01 + 0.25) / 4.0;
        let loss = q.loss.to_scalar::<f32>().unwrap();
        assert!((loss - 1.25 * mse).abs() < 1e-6, "{loss}");
        // Straight-through: d(sum quantized)/dz = 1; the loss gradient w.r.t. z comes only
        // from the commitment term of the legacy formula: 2 (z − zq) / n.
        let g = q.quantized.sum_all().unwrap().backward().unwrap();
        let gz = g
            .get(z.as_tensor())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(gz, vec![1.0; 4]);
        let g = q.loss.backward().unwrap();
        let gz = g
            .get(z.as_tensor())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let want = [
            2.0 * (0.9 - 1.0) / 4.0,
            2.0 * 0.2 / 4.0,
            2.0 * 0.1 / 4.0,
            2.0 * (1.5 - 2.0) / 4.0,
        ];
        for (a, b) in gz.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{gz:?}");
        }
        // Non-legacy puts β on the commitment term instead.
        let z = self::z();
        let q = vq(false).quantize(z.as_tensor()).unwrap();
        let g = q.loss.backward().unwrap();
        let gz = g
            .get(z.as_tensor())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        for (a, b) in gz.iter().zip(want) {
            assert!((a - 0.25 * b).abs() < 1e-6, "{gz:?}");
        }
    }

    #[test]
    fn lookup_is_the_inverse_of_indices() {
        let v = vq(true);
        let q = v.quantize(z().as_tensor()).unwrap();
        let back = v.lookup(&q.indices).unwrap();
        assert_eq!(
            back.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            q.quantized.flatten_all().unwrap().to_vec1::<f32>().unwrap()
        );
        let bad = Tensor::new(&[[[3u32]]], &Device::Cpu).unwrap();
        let e = v.lookup(&bad).unwrap_err().to_string();
        assert!(
            e.contains("codebook index 3") && e.contains("n_embed = 3"),
            "{e}"
        );
    }
}
