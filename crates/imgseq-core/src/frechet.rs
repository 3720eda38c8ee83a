//! Fréchet distance between two sets of feature vectors (the "FID" formula, here over any
//! features — imgseq uses its ViT judge's CLS features of Fashion-MNIST images):
//!
//! `d² = |μ₁ − μ₂|² + Tr(Σ₁ + Σ₂ − 2 (Σ₁ Σ₂)^½)`
//!
//! with μ, Σ the mean and the sample covariance (divisor n − 1, as `numpy.cov` and
//! pytorch-fid use) of each set. `Tr((Σ₁ Σ₂)^½)` is computed without a non-symmetric matrix
//! square root: with `S = Σ₁^½` (symmetric), `Σ₁ Σ₂` is similar to the symmetric positive
//! semi-definite `S Σ₂ S`, so the trace is the sum of the square roots of that matrix's
//! eigenvalues (tiny negative ones from rounding are clamped to 0). Eigenvalues come from the
//! cyclic Jacobi method, in `f64`, which is exact to rounding for the small dimensions this
//! is used at (48–512). Checked against `scipy.linalg.sqrtm` (pytorch-fid's formula) in the
//! tests (fixtures from `scripts/make_frechet_fixture.py`).

use crate::{Error, Result};

/// Mean and sample covariance of a set of `dim`-dimensional vectors.
#[derive(Debug, Clone, PartialEq)]
pub struct GaussianStats {
    pub dim: usize,
    /// Number of vectors the statistics were computed from.
    pub n: usize,
    pub mean: Vec<f64>,
    /// Row-major `dim × dim`, divisor `n − 1`.
    pub cov: Vec<f64>,
}

impl GaussianStats {
    /// Statistics of `n = features.len() / dim` vectors stored row after row.
    pub fn from_features(features: &[f32], dim: usize) -> Result<Self> {
        if dim == 0 || !features.len().is_multiple_of(dim) {
            return Err(Error::bad_data(format!(
                "{} feature values are not whole vectors of {dim}",
                features.len()
            )));
        }
        let n = features.len() / dim;
        if n < 2 {
            return Err(Error::bad_data(format!(
                "a covariance needs at least 2 feature vectors, got {n}"
            )));
        }
        if let Some(i) = features.iter().position(|v| !v.is_finite()) {
            return Err(Error::bad_data(format!(
                "feature value {i} is not finite ({})",
                features[i]
            )));
        }
        let mut mean = vec![0f64; dim];
        for row in features.chunks_exact(dim) {
            for (m, &v) in mean.iter_mut().zip(row) {
                *m += v as f64;
            }
        }
        mean.iter_mut().for_each(|m| *m /= n as f64);
        let mut cov = vec![0f64; dim * dim];
        let mut centred = vec![0f64; dim];
        for row in features.chunks_exact(dim) {
            for ((c, &v), m) in centred.iter_mut().zip(row).zip(&mean) {
                *c = v as f64 - m;
            }
            for i in 0..dim {
                let ci = centred[i];
                // Upper triangle only; mirrored below.
                for j in i..dim {
                    cov[i * dim + j] += ci * centred[j];
                }
            }
        }
        for i in 0..dim {
            for j in i..dim {
                let v = cov[i * dim + j] / (n - 1) as f64;
                cov[i * dim + j] = v;
                cov[j * dim + i] = v;
            }
        }
        Ok(Self { dim, n, mean, cov })
    }
}

/// Fréchet distance (squared, as FID reports it) between two Gaussians.
pub fn frechet_distance(a: &GaussianStats, b: &GaussianStats) -> Result<f64> {
    if a.dim != b.dim {
        return Err(Error::bad_data(format!(
            "feature sizes differ: {} vs {}",
            a.dim, b.dim
        )));
    }
    let d = a.dim;
    let mean_term: f64 = a
        .mean
        .iter()
        .zip(&b.mean)
        .map(|(x, y)| (x - y).powi(2))
        .sum();
    let trace = |m: &[f64]| (0..d).map(|i| m[i * d + i]).sum::<f64>();
    // S = Σa^½ from Σa = V diag(λ) Vᵀ.
    let (lam, v) = symmetric_eigen(&a.cov, d);
    let mut s = vec![0f64; d * d];
    for i in 0..d {
        for j in i..d {
            let x: f64 = (0..d)
                .map(|k| v[i * d + k] * lam[k].max(0.0).sqrt() * v[j * d + k])
                .sum();
            s[i * d + j] = x;
            s[j * d + i] = x;
        }
    }
    let m = matmul(&matmul(&s, &b.cov, d), &s, d); // S Σb S, symmetric PSD
    let mut m_sym = m.clone();
    for i in 0..d {
        for j in 0..d {
            m_sym[i * d + j] = 0.5 * (m[i * d + j] + m[j * d + i]);
        }
    }
    let (mu, _) = symmetric_eigen(&m_sym, d);
    let tr_sqrt: f64 = mu.iter().map(|x| x.max(0.0).sqrt()).sum();
    Ok(mean_term + trace(&a.cov) + trace(&b.cov) - 2.0 * tr_sqrt)
}

fn matmul(a: &[f64], b: &[f64], d: usize) -> Vec<f64> {
    let mut c = vec![0f64; d * d];
    for i in 0..d {
        for k in 0..d {
            let aik = a[i * d + k];
            if aik == 0.0 {
                continue;
            }
            for j in 0..d {
                c[i * d + j] += aik * b[k * d + j];
            }
        }
    }
    c
}

/// Eigenvalues and eigenvectors (columns of the row-major `d × d` result) of a symmetric
/// matrix, by cyclic Jacobi rotations until the off-diagonal mass is below 1e-14 of the
/// total (or 100 sweeps).
pub fn symmetric_eigen(m: &[f64], d: usize) -> (Vec<f64>, Vec<f64>) {
    let mut a = m.to_vec();
    let mut v = vec![0f64; d * d];
    for i in 0..d {
        v[i * d + i] = 1.0;
    }
    let total: f64 = a.iter().map(|x| x * x).sum::<f64>().max(f64::MIN_POSITIVE);
    for _sweep in 0..100 {
        let off: f64 = (0..d)
            .flat_map(|i| (0..d).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i * d + j].powi(2))
            .sum();
        if off <= 1e-28 * total {
            break;
        }
        for p in 0..d {
            for q in p + 1..d {
                let apq = a[p * d + q];
                if apq == 0.0 {
                    continue;
                }
                let (app, aqq) = (a[p * d + p], a[q * d + q]);
                let theta = (aqq - app) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                // A ← Jᵀ A J on rows/columns p and q.
                for k in 0..d {
                    let (akp, akq) = (a[k * d + p], a[k * d + q]);
                    a[k * d + p] = c * akp - s * akq;
                    a[k * d + q] = s * akp + c * akq;
                }
                for k in 0..d {
                    let (apk, aqk) = (a[p * d + k], a[q * d + k]);
                    a[p * d + k] = c * apk - s * aqk;
                    a[q * d + k] = s * apk + c * aqk;
                }
                for k in 0..d {
                    let (vkp, vkq) = (v[k * d + p], v[k * d + q]);
                    v[k * d + p] = c * vkp - s * vkq;
                    v[k * d + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    ((0..d).map(|i| a[i * d + i]).collect(), v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::npy;
    use std::path::PathBuf;

    fn lcg(seed: &mut u64) -> f64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 11) as f64) / ((1u64 << 53) as f64)
    }

    #[test]
    fn jacobi_reconstructs_the_matrix() {
        let d = 7;
        let mut seed = 3;
        let r: Vec<f64> = (0..d * d).map(|_| lcg(&mut seed) - 0.5).collect();
        let m = matmul(
            &r,
            &(0..d * d)
                .map(|k| r[(k % d) * d + k / d])
                .collect::<Vec<_>>(),
            d,
        );
        let (lam, v) = symmetric_eigen(&m, d);
        for i in 0..d {
            for j in 0..d {
                let x: f64 = (0..d).map(|k| v[i * d + k] * lam[k] * v[j * d + k]).sum();
                assert!(
                    (x - m[i * d + j]).abs() < 1e-12,
                    "({i},{j}) {x} vs {}",
                    m[i * d + j]
                );
            }
        }
    }

    #[test]
    fn identical_sets_are_at_distance_zero() {
        let mut seed = 5;
        let f: Vec<f32> = (0..200 * 6).map(|_| lcg(&mut seed) as f32).collect();
        let s = GaussianStats::from_features(&f, 6).unwrap();
        let fd = frechet_distance(&s, &s).unwrap();
        assert!(fd.abs() < 1e-10, "{fd}");
    }

    #[test]
    fn diagonal_gaussians_match_the_closed_form() {
        // Commuting covariances: d² = |Δμ|² + Σ (σa − σb)².
        let d = 3;
        let a = GaussianStats {
            dim: d,
            n: 10,
            mean: vec![0.0, 1.0, 2.0],
            cov: vec![4.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 9.0],
        };
        let b = GaussianStats {
            dim: d,
            n: 10,
            mean: vec![1.0, 1.0, 0.0],
            cov: vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 4.0],
        };
        let want = 1.0 + 4.0 + (2.0f64 - 1.0).powi(2) + 0.0 + (3.0f64 - 2.0).powi(2);
        let fd = frechet_distance(&a, &b).unwrap();
        assert!((fd - want).abs() < 1e-10, "{fd} vs {want}");
    }

    #[test]
    fn bad_features_are_refused() {
        assert!(GaussianStats::from_features(&[1.0; 7], 3).is_err());
        assert!(GaussianStats::from_features(&[1.0; 3], 3).is_err());
        assert!(GaussianStats::from_features(&[1.0, f32::NAN, 0.0, 0.0], 2).is_err());
        let a = GaussianStats::from_features(&[0.0, 1.0, 2.0, 3.0], 2).unwrap();
        let b = GaussianStats::from_features(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 3).unwrap();
        assert!(frechet_distance(&a, &b).is_err());
    }

    #[test]
    fn matches_scipy_sqrtm_formula() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/frechet");
        let read = |name: &str| npy::read_npy_f32(dir.join(name)).unwrap();
        let (sa, fa) = read("a.npy");
        let (sb, fb) = read("b.npy");
        let want: f64 = std::fs::read_to_string(dir.join("expected.json"))
            .map(|s| {
                serde_json::from_str::<serde_json::Value>(&s).unwrap()["fd"]
                    .as_f64()
                    .unwrap()
            })
            .unwrap();
        let a = GaussianStats::from_features(&fa, sa[1]).unwrap();
        let b = GaussianStats::from_features(&fb, sb[1]).unwrap();
        let fd = frechet_distance(&a, &b).unwrap();
        assert!(
            (fd - want).abs() <= 1e-6 * want.abs().max(1.0),
            "{fd} vs scipy {want}"
        );
    }
}
