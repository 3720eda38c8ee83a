//! Keeping the codebook alive while training: a k-means initialisation on encoder outputs,
//! and dead-code restarts. (Usage statistics — codes used, perplexity — are
//! [`imgseq_core::codes`].)

use candle_core::{Device, Tensor, Var};
use imgseq_core::{Error, Result};
use rand::seq::SliceRandom;
use rand::Rng;

/// Encoder outputs as rows, in raster order per image.
///
/// # Shapes
/// z: (b, d, h, w) → (b·h·w · d values, d)
pub fn latent_rows(z: &Tensor) -> Result<(Vec<f32>, usize)> {
    let (b, d, h, w) = z.dims4()?;
    let rows = z
        .detach()
        .permute((0, 2, 3, 1))?
        .reshape((b * h * w, d))?
        .flatten_all()?
        .to_vec1::<f32>()?;
    Ok((rows, d))
}

/// k-means (Lloyd) of `rows` (n × d, row-major) into `k` centroids, started from `k` random
/// distinct rows (rows are repeated with a little noise when n < k); empty clusters take a
/// random row. Returns k × d values.
pub fn kmeans(
    rows: &[f32],
    d: usize,
    k: usize,
    iters: usize,
    rng: &mut impl Rng,
) -> Result<Vec<f32>> {
    let n = rows.len().checked_div(d).unwrap_or(0);
    if n == 0 || k == 0 {
        return Err(Error::invalid("k-means: no rows or no clusters"));
    }
    let std = {
        let m = rows.iter().map(|&x| x as f64).sum::<f64>() / rows.len() as f64;
        (rows.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / rows.len() as f64).sqrt()
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(rng);
    let mut cent = vec![0f32; k * d];
    for j in 0..k {
        let r = order[j % n];
        for t in 0..d {
            let noise = if j >= n {
                (rng.random::<f32>() - 0.5) * 0.02 * std as f32
            } else {
                0.0
            };
            cent[j * d + t] = rows[r * d + t] + noise;
        }
    }
    let zt = Tensor::from_slice(rows, (n, d), &Device::Cpu)?;
    for _ in 0..iters {
        let ct = Tensor::from_slice(&cent, (k, d), &Device::Cpu)?;
        let assign = imgseq_kernels::ops::nearest_codebook(&zt, &ct)?.to_vec1::<u32>()?;
        let mut sum = vec![0f64; k * d];
        let mut cnt = vec![0usize; k];
        for (i, &a) in assign.iter().enumerate() {
            let a = a as usize;
            cnt[a] += 1;
            for t in 0..d {
                sum[a * d + t] += rows[i * d + t] as f64;
            }
        }
        for j in 0..k {
            if cnt[j] > 0 {
                for t in 0..d {
                    cent[j * d + t] = (sum[j * d + t] / cnt[j] as f64) as f32;
                }
            } else {
                let r = rng.random_range(0..n);
                cent[j * d..(j + 1) * d].copy_from_slice(&rows[r * d..(r + 1) * d]);
            }
        }
    }
    Ok(cent)
}

/// Sets `codebook` (n_embed, d) to a k-means of the encoder outputs `latents` (each
/// (b, d, h, w)) and returns how many rows it was fitted on.
pub fn init_from_latents(
    codebook: &Var,
    latents: &[Tensor],
    iters: usize,
    rng: &mut impl Rng,
) -> Result<usize> {
    let (k, mut d) = codebook.as_tensor().dims2()?;
    let mut rows = Vec::new();
    for z in latents {
        let (r, dd) = latent_rows(z)?;
        d = dd;
        rows.extend(r);
    }
    let cent = kmeans(&rows, d, k, iters, rng)?;
    codebook.set(&Tensor::from_vec(cent, (k, d), codebook.device())?)?;
    Ok(rows.len() / d)
}

/// Re-seeds every code unused for at least `dead_after` steps (by `last_used`, the last step
/// each code was used) from a random row of `rows` (n × d, the current encoder outputs) plus
/// noise of 1% of their spread, marks it used at `step`, and returns the re-seeded codes.
///
/// # Shapes
/// codebook: (n_embed, d); rows: n × d values
pub fn restart_dead_codes(
    codebook: &Var,
    last_used: &mut [usize],
    step: usize,
    dead_after: usize,
    rows: &[f32],
    rng: &mut impl Rng,
) -> Result<Vec<usize>> {
    let (k, d) = codebook.as_tensor().dims2()?;
    if last_used.len() != k {
        return Err(Error::invalid(format!(
            "dead-code restart: {} usage entries for {k} codes",
            last_used.len()
        )));
    }
    let n = rows.len().checked_div(d).unwrap_or(0);
    let dead: Vec<usize> = (0..k)
        .filter(|&j| step.saturating_sub(last_used[j]) >= dead_after)
        .collect();
    if dead.is_empty() || n == 0 {
        return Ok(Vec::new());
    }
    let m = rows.iter().map(|&x| x as f64).sum::<f64>() / rows.len() as f64;
    let std = (rows.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / rows.len() as f64).sqrt()
        as f32;
    let mut cb = codebook.as_tensor().flatten_all()?.to_vec1::<f32>()?;
    for &j in &dead {
        let r = rng.random_range(0..n);
        for t in 0..d {
            cb[j * d + t] = rows[r * d + t] + (rng.random::<f32>() - 0.5) * 0.02 * std;
        }
        last_used[j] = step;
    }
    codebook.set(&Tensor::from_vec(cb, (k, d), codebook.device())?)?;
    Ok(dead)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn dead_codes_are_reseeded_from_encoder_outputs() {
        let dev = Device::Cpu;
        // 4 codes of size 2; codes 1 and 3 were last used long ago.
        let cb =
            Var::from_vec(vec![0f32, 0., 100., 100., 1., 1., -100., 50.], (4, 2), &dev).unwrap();
        let mut last = vec![90usize, 5, 95, 0];
        let rows = vec![3f32, 4., 3., 4., 3., 4.]; // three identical encoder outputs
        let mut rng = StdRng::seed_from_u64(1);
        let dead = restart_dead_codes(&cb, &mut last, 100, 50, &rows, &mut rng).unwrap();
        assert_eq!(dead, vec![1, 3]);
        assert_eq!(last, vec![90, 100, 95, 100]);
        let v = cb
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(&v[0..2], &[0., 0.]);
        assert_eq!(&v[4..6], &[1., 1.]);
        // The new codes are the encoder output plus noise of 1% of the spread (σ = 0.5).
        for (a, b) in v[2..4].iter().chain(&v[6..8]).zip([3., 4., 3., 4.]) {
            assert!((a - b).abs() <= 0.005 && a != &b, "{v:?}");
        }
        // Nothing dead: nothing changes.
        let again = restart_dead_codes(&cb, &mut last, 101, 50, &rows, &mut rng).unwrap();
        assert!(again.is_empty());
    }

    #[test]
    fn kmeans_finds_separated_clusters() {
        let mut rows = Vec::new();
        for i in 0..50 {
            let e = (i % 5) as f32 * 0.01;
            rows.extend([0.0 + e, 0.0]);
            rows.extend([10.0 + e, 10.0]);
        }
        let mut rng = StdRng::seed_from_u64(3);
        let c = kmeans(&rows, 2, 2, 10, &mut rng).unwrap();
        let mut xs = [c[0], c[2]];
        xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
        assert!(
            (xs[0] - 0.02).abs() < 1e-3 && (xs[1] - 10.02).abs() < 1e-3,
            "{c:?}"
        );
        // More clusters than rows still gives k centroids.
        let c = kmeans(&rows[..4], 2, 5, 3, &mut rng).unwrap();
        assert_eq!(c.len(), 10);
    }
}
