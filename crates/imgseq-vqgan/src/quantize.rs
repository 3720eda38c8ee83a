//! taming's `VectorQuantizer2`: nearest codebook entry per latent position; with the two
//! options its relatives need: LlamaGen's l2-normalised codes and diffusers' `torch.cdist`
//! distance ([`VectorQuantizer::with_search`]).

use crate::family::Distance;
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
    /// LlamaGen's `l2_norm`: search and decode with unit-length z and entries.
    l2_norm: bool,
    distance: Distance,
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
        Ok(Self::from_codebook(embedding, beta, legacy))
    }

    /// From a codebook tensor directly (tests, training code).
    pub fn from_codebook(embedding: Tensor, beta: f64, legacy: bool) -> Self {
        Self {
            embedding,
            beta,
            legacy,
            l2_norm: false,
            distance: Distance::Expanded,
        }
    }

    /// The same codebook searched LlamaGen's way (`l2_norm`: `F.normalize` of z and of
    /// every entry, before the search and at lookup) and/or with `distance`.
    pub fn with_search(mut self, l2_norm: bool, distance: Distance) -> Self {
        self.l2_norm = l2_norm;
        self.distance = distance;
        self
    }

    /// The codebook the search and the lookup use: normalised rows with `l2_norm`.
    ///
    /// # Shapes
    /// → (n_embed, embed_dim)
    fn entries(&self) -> Result<Tensor> {
        if self.l2_norm {
            l2_normalize_rows(&self.embedding)
        } else {
            Ok(self.embedding.clone())
        }
    }

    pub fn codebook(&self) -> &Tensor {
        &self.embedding
    }

    /// The latents as the search (and, after it, the decoder) sees them: z itself, or with
    /// `l2_norm` each position's vector scaled to unit length (`F.normalize(z, dim=1)`).
    /// [`Self::quantize`] searches this; training's autoencoder warm-up decodes it, and the
    /// k-means init and dead-code restarts draw from it, so the decoder and the codebook
    /// never meet another scale.
    ///
    /// # Shapes
    /// z: (b, c, h, w) → (b, c, h, w)
    pub fn search_space(&self, z: &Tensor) -> Result<Tensor> {
        if !self.l2_norm {
            return Ok(z.clone());
        }
        let norm = z.sqr()?.sum_keepdim(1)?.sqrt()?.maximum(1e-12)?; // (b, 1, h, w)
        z.broadcast_div(&norm)
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
        let raw = z;
        // LlamaGen: z itself is replaced by its normalised self (the loss and the
        // straight-through path use it too).
        let z = &self.search_space(z)?;
        let rows = z.permute((0, 2, 3, 1))?.reshape((b * h * w, c))?; // (bhw, c), raster order
        let entries = self.entries()?; // (n, c)
        let idx = match self.distance {
            Distance::Expanded => ops::nearest_codebook(&rows, &entries)?, // (bhw) u32
            Distance::Cdist => nearest_cdist(&rows, &entries)?,
            Distance::Unnormalised => {
                let raw = raw.permute((0, 2, 3, 1))?.reshape((b * h * w, c))?;
                ops::nearest_codebook(&raw, &self.embedding)?
            }
            Distance::InnerProduct => ops::max_inner_product(&rows, &entries)?,
        };
        let zq = entries.index_select(&idx, 0)?; // (bhw, c)
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
        let e = self.entries()?.index_select(&idx, 0)?; // (bhw, c)
        let c = e.dim(1)?;
        e.reshape((b, h, w, c))?.permute((0, 3, 1, 2))?.contiguous()
    }
}

/// `F.normalize(x, p=2, dim=-1)`: every row divided by max(‖row‖₂, 1e−12).
///
/// # Shapes
/// x: (n, d) → (n, d)
pub fn l2_normalize_rows(x: &Tensor) -> Result<Tensor> {
    let norm = x.sqr()?.sum_keepdim(1)?.sqrt()?.maximum(1e-12)?; // (n, 1)
    x.broadcast_div(&norm)
}

/// Index of the nearest codebook row by `torch.cdist(z, e).argmin(1)`: with more than 25
/// rows or entries torch computes √max(‖z‖² + ‖e‖² − 2·z·e, 1e−30) (else the direct
/// √Σ(z − e)²), so entries whose distances round to the same float after the square root
/// tie, and a tie goes to the lowest index.
///
/// # Shapes
/// z: (n, d), codebook: (k, d) → (n) u32
pub fn nearest_cdist(z: &Tensor, codebook: &Tensor) -> Result<Tensor> {
    let z = z.to_dtype(DType::F32)?.contiguous()?;
    let e = codebook.to_dtype(DType::F32)?.contiguous()?;
    let k = e.dim(0)?;
    if z.dim(0)? <= 25 && k <= 25 {
        // torch's small case: the direct √Σ(z − e)².
        let (zs, es) = (z.to_vec2::<f32>()?, e.to_vec2::<f32>()?);
        let idx = zs
            .iter()
            .map(|r| {
                let mut best = (f32::INFINITY, 0u32);
                for (j, c) in es.iter().enumerate() {
                    let d = r
                        .iter()
                        .zip(c)
                        .map(|(a, b)| (a - b) * (a - b))
                        .sum::<f32>()
                        .sqrt();
                    if d < best.0 {
                        best = (d, j as u32);
                    }
                }
                best.1
            })
            .collect::<Vec<_>>();
        return Tensor::from_vec(idx, zs.len(), z.device());
    }
    let zz = z.sqr()?.sum(1)?.to_vec1::<f32>()?; // (n)
    let ee = e.sqr()?.sum(1)?.to_vec1::<f32>()?; // (k)
    let mut out = Vec::with_capacity(zz.len());
    // In blocks of rows, so that the (rows × k) dot products stay small.
    let block = (1usize << 20).div_ceil(k.max(1)).max(1);
    let mut start = 0;
    while start < zz.len() {
        let m = block.min(zz.len() - start);
        let dots = z.narrow(0, start, m)?.matmul(&e.t()?)?.to_vec2::<f32>()?; // (m, k)
        for (i, row) in dots.iter().enumerate() {
            let mut best = (f32::INFINITY, 0u32);
            for (j, &d) in row.iter().enumerate() {
                let d2 = zz[start + i] + ee[j] - 2.0 * d;
                let dist = d2.max(1e-30).sqrt();
                if dist < best.0 {
                    best = (dist, j as u32);
                }
            }
            out.push(best.1);
        }
        start += m;
    }
    Tensor::from_vec(out, zz.len(), z.device())
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
    fn l2_search_and_lookup_use_unit_vectors() {
        // Entry 1 is nearest by plain distance, entry 2 by direction.
        let e = Tensor::new(&[[1f32, 0.], [0.9, 0.5], [0., 3.]], &Device::Cpu).unwrap();
        let z = Tensor::new(&[0.1f32, 0.9], &Device::Cpu)
            .unwrap()
            .reshape((1, 2, 1, 1))
            .unwrap();
        let plain = VectorQuantizer::from_codebook(e.clone(), 0.25, false);
        let l2 = plain.clone().with_search(true, Distance::Expanded);
        assert_eq!(as_u32(&plain.quantize(&z).unwrap().indices), vec![1]);
        let q = l2.quantize(&z).unwrap();
        assert_eq!(as_u32(&q.indices), vec![2]);
        // The decoder gets the normalised entry (0, 1), not (0, 3).
        let v = q.quantized.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(v[0].abs() < 1e-6 && (v[1] - 1.0).abs() < 1e-6, "{v:?}");
        let back = l2
            .lookup(&q.indices)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert!((back[1] - 1.0).abs() < 1e-6, "{back:?}");
    }

    #[test]
    fn search_space_is_the_z_that_the_l2_quantizer_uses() {
        let z = z();
        let q = vq(true).with_search(true, Distance::Expanded);
        let s = q.search_space(z.as_tensor()).unwrap(); // (b, c, h, w)
        let len = s.sqr().unwrap().sum(1).unwrap().sqrt().unwrap();
        for n in len.flatten_all().unwrap().to_vec1::<f32>().unwrap() {
            assert!((n - 1.0).abs() < 1e-5, "{n}");
        }
        // The l2 quantizer's straight-through output is its entries; its loss is measured
        // from the normalised z: the same entries as a plain search over search_space(z)
        // with unit entries.
        let a = q.quantize(z.as_tensor()).unwrap();
        let plain = VectorQuantizer::from_codebook(q.entries().unwrap(), 0.25, true);
        let b = plain.quantize(&s).unwrap();
        assert_eq!(as_u32(&a.indices), as_u32(&b.indices));
        let d = (a.loss - b.loss)
            .unwrap()
            .abs()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(d < 1e-6, "{d}");
        // Without l2_norm it is z itself.
        let s0 = vq(true).search_space(z.as_tensor()).unwrap();
        let d0 = (s0 - z.as_tensor())
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap();
        assert_eq!(d0.to_scalar::<f32>().unwrap(), 0.0);
    }

    #[test]
    fn cdist_ties_go_to_the_lowest_index() {
        // Squared distances 1e-8 and 4e-8 both clamp-and-root to distinct floats, but two
        // entries at the same distance tie exactly: lowest index wins (torch.argmin).
        let e = Tensor::new(&[[2f32, 0.], [0., 1.], [1., 0.]], &Device::Cpu).unwrap();
        let z = Tensor::new(&[[0f32, 0.], [1.5, 0.], [0., 0.9]], &Device::Cpu).unwrap();
        let idx = nearest_cdist(&z, &e).unwrap().to_vec1::<u32>().unwrap();
        // z0 is 1 from entries 1 and 2 (tie → 1); z1 is 0.5 from entries 0 and 2 (tie → 0).
        assert_eq!(idx, vec![1, 0, 1]);
        let expanded = ops::nearest_codebook(&z, &e)
            .unwrap()
            .to_vec1::<u32>()
            .unwrap();
        assert_eq!(expanded, idx);
        // Over 25 entries torch (and this) takes the expanded form: the same rule for ties.
        let mut rows: Vec<f32> = (0..28).flat_map(|i| [100.0 + i as f32, 100.0]).collect();
        rows.extend([0.0, 1.0, 1.0, 0.0]);
        let e = Tensor::from_vec(rows, (30, 2), &Device::Cpu).unwrap();
        let z = Tensor::new(&[[0f32, 0.], [0.2, 0.9]], &Device::Cpu).unwrap();
        let idx = nearest_cdist(&z, &e).unwrap().to_vec1::<u32>().unwrap();
        assert_eq!(idx, vec![28, 28]);
    }

    fn as_u32(t: &Tensor) -> Vec<u32> {
        t.flatten_all().unwrap().to_vec1::<u32>().unwrap()
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
