//! Fréchet distance between two sets of feature vectors (the "FID" formula, here over any
//! features — imgseq uses its ViT judge's CLS features of Fashion-MNIST images):
//!
//! `d² = |μ₁ − μ₂|² + Tr(Σ₁ + Σ₂ − 2 (Σ₁ Σ₂)^½)`
//!
//! with μ, Σ the mean and the sample covariance (divisor n − 1, as `numpy.cov` and
//! pytorch-fid use) of each set. `Tr((Σ₁ Σ₂)^½)` is computed without a non-symmetric matrix
//! square root: `Σ₁ Σ₂` is similar to a symmetric positive semi-definite matrix — `Lᵀ Σ₂ L`
//! where `Σ₁ = L Lᵀ` is positive definite (Cholesky), else `S Σ₂ S` with `S = Σ₁^½` from
//! `Σ₁`'s eigenvectors — so the trace is the sum of the square roots of that matrix's
//! eigenvalues (tiny negative ones from rounding are clamped to 0). Eigenvalues come from a
//! Householder tridiagonalisation and the implicit QL method, in `f64` ([`symmetric_eigen`]).
//! Checked against `scipy.linalg.sqrtm` and pytorch-fid's `calculate_frechet_distance` in the
//! tests (fixtures from `scripts/make_frechet_fixture.py` and `scripts/make_fid_fixtures.py`).
//!
//! Large sets are summarised piece by piece ([`Moments`]: the count and the raw sums of the
//! vectors and their outer products in double-double arithmetic), so that a job array's parts
//! or a resumed run give the statistics of the whole set, independently of how it was cut.

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
        Moments::of_features(features, dim)?.stats()
    }
}

/// A summary of a set of `dim`-dimensional vectors that parts of the set merge into without
/// depending on how the set was cut: the count and the raw sums `Σ x` and `Σ x xᵀ` in
/// double-double arithmetic (about 106 bits).
///
/// Each product of two `f32` features is exact in `f64`, and a double-double sum of them is
/// exact to ~1e-30 relative whatever the order, so a job array's parts, merged, give the same
/// `f64` statistics as one process reading the set in order (to the last bit but for a rare
/// rounding tie) — which matters because FID's matrix square root magnifies last-bit
/// differences when the covariance is singular (fewer images than feature dimensions).
/// The centred covariance is formed from the sums in double-double too, so the raw sums lose
/// nothing to cancellation at `f64` precision.
#[derive(Debug, Clone, PartialEq)]
pub struct Moments {
    pub dim: usize,
    pub n: usize,
    /// `Σ x`: high and low parts.
    pub sum: [Vec<f64>; 2],
    /// `Σ x xᵀ`, the upper triangle packed row by row (`dim (dim + 1) / 2` values): high and
    /// low parts.
    pub outer: [Vec<f64>; 2],
}

/// `a + b` as a rounded sum and its exact error (Knuth's TwoSum: no branch, any order).
#[inline(always)]
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

/// A double-double number (hi, lo), |lo| ≤ ulp(hi) / 2.
#[derive(Clone, Copy)]
struct Dd(f64, f64);

impl Dd {
    fn add(self, o: Dd) -> Dd {
        let (s, e) = two_sum(self.0, o.0);
        let (t, f) = two_sum(self.1, o.1);
        let (s, e) = quick(s, e + t);
        let (s, e) = quick(s, e + f);
        Dd(s, e)
    }

    fn neg(self) -> Dd {
        Dd(-self.0, -self.1)
    }

    /// `self · o` (Dekker's product through a fused multiply-add).
    fn mul(self, o: Dd) -> Dd {
        let p = self.0 * o.0;
        let e = self.0.mul_add(o.0, -p) + (self.0 * o.1 + self.1 * o.0);
        let (s, e) = quick(p, e);
        Dd(s, e)
    }

    /// `self / k`.
    fn div(self, k: f64) -> Dd {
        let q1 = self.0 / k;
        let r = self.add(Dd(q1, 0.0).mul(Dd(k, 0.0)).neg());
        let (s, e) = quick(q1, r.0 / k);
        Dd(s, e)
    }
}

/// `a + b` for |a| ≥ |b| (or a = 0).
#[inline(always)]
fn quick(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    (s, b - (s - a))
}

impl Moments {
    /// The summary of no vectors.
    pub fn empty(dim: usize) -> Self {
        let tri = dim * (dim + 1) / 2;
        Self {
            dim,
            n: 0,
            sum: [vec![0.0; dim], vec![0.0; dim]],
            outer: [vec![0.0; tri], vec![0.0; tri]],
        }
    }

    /// The summary of `features.len() / dim` vectors stored row after row.
    pub fn of_features(features: &[f32], dim: usize) -> Result<Self> {
        if dim == 0 || !features.len().is_multiple_of(dim) {
            return Err(Error::bad_data(format!(
                "{} feature values are not whole vectors of {dim}",
                features.len()
            )));
        }
        if let Some(i) = features.iter().position(|v| !v.is_finite()) {
            return Err(Error::bad_data(format!(
                "feature value {i} is not finite ({})",
                features[i]
            )));
        }
        let mut m = Self::empty(dim);
        let mut x = vec![0f64; dim];
        for row in features.chunks_exact(dim) {
            m.n += 1;
            let [shi, slo] = &mut m.sum;
            for ((xi, &v), (hi, lo)) in x
                .iter_mut()
                .zip(row)
                .zip(shi.iter_mut().zip(slo.iter_mut()))
            {
                *xi = v as f64;
                let (s, e) = two_sum(*hi, *xi);
                *hi = s;
                *lo += e;
            }
            let [hi, lo] = &mut m.outer;
            let mut at = 0;
            for i in 0..dim {
                let xi = x[i];
                let len = dim - i;
                // xi·xj of two f32 values is exact in f64; only the sum rounds.
                for ((h, l), xj) in hi[at..at + len]
                    .iter_mut()
                    .zip(lo[at..at + len].iter_mut())
                    .zip(&x[i..])
                {
                    let (s, e) = two_sum(*h, xi * xj);
                    *h = s;
                    *l += e;
                }
                at += len;
            }
        }
        // Renormalise so that each (hi, lo) is a proper double-double again.
        for [hi, lo] in [&mut m.sum, &mut m.outer] {
            for (h, l) in hi.iter_mut().zip(lo.iter_mut()) {
                (*h, *l) = two_sum(*h, *l);
            }
        }
        Ok(m)
    }

    /// Adds the vectors `other` summarises.
    pub fn merge(&mut self, other: &Moments) -> Result<()> {
        if other.dim != self.dim {
            return Err(Error::bad_data(format!(
                "feature sizes differ: {} vs {}",
                self.dim, other.dim
            )));
        }
        for (mine, theirs) in [(&mut self.sum, &other.sum), (&mut self.outer, &other.outer)] {
            let [hi, lo] = mine;
            for (((h, l), oh), ol) in hi
                .iter_mut()
                .zip(lo.iter_mut())
                .zip(&theirs[0])
                .zip(&theirs[1])
            {
                let r = Dd(*h, *l).add(Dd(*oh, *ol));
                (*h, *l) = (r.0, r.1);
            }
        }
        self.n += other.n;
        Ok(())
    }

    /// Mean and sample covariance (divisor n − 1); at least 2 vectors.
    pub fn stats(&self) -> Result<GaussianStats> {
        if self.n < 2 {
            return Err(Error::bad_data(format!(
                "a covariance needs at least 2 feature vectors, got {}",
                self.n
            )));
        }
        let (d, n) = (self.dim, self.n as f64);
        let mean: Vec<Dd> = (0..d)
            .map(|i| Dd(self.sum[0][i], self.sum[1][i]).div(n))
            .collect();
        let mut cov = vec![0f64; d * d];
        let mut at = 0;
        for i in 0..d {
            for j in i..d {
                // Σ (x − μ)(x − μ)ᵀ = Σ x xᵀ − n μ μᵀ, then / (n − 1).
                let s = Dd(self.outer[0][at], self.outer[1][at]);
                let c = s
                    .add(mean[i].mul(mean[j]).mul(Dd(n, 0.0)).neg())
                    .div(n - 1.0);
                cov[i * d + j] = c.0;
                cov[j * d + i] = c.0;
                at += 1;
            }
        }
        Ok(GaussianStats {
            dim: d,
            n: self.n,
            mean: mean.iter().map(|m| m.0).collect(),
            cov,
        })
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
    let tr_sqrt = match cholesky(&a.cov, d) {
        Some(l) => trace_sqrt_by_cholesky(&l, &b.cov, d)?,
        None => trace_sqrt_by_eigenvectors(&a.cov, &b.cov, d)?,
    };
    Ok(mean_term + trace(&a.cov) + trace(&b.cov) - 2.0 * tr_sqrt)
}

/// `Tr((Σa Σb)^½)` for a positive definite `Σa = L Lᵀ`: `Σa Σb` is similar to the symmetric
/// positive semi-definite `Lᵀ Σb L`, whose eigenvalues alone give the trace — a third of the
/// work of [`trace_sqrt_by_eigenvectors`] (no eigenvectors).
fn trace_sqrt_by_cholesky(l: &[f64], cov_b: &[f64], d: usize) -> Result<f64> {
    let mut lt = vec![0f64; d * d];
    for i in 0..d {
        for j in 0..=i {
            lt[j * d + i] = l[i * d + j];
        }
    }
    let m = gemm(&lt, &gemm(cov_b, l, d, false)?, d, false)?;
    Ok(eigen_trace_sqrt(&m, d))
}

/// `Tr((Σa Σb)^½)` for any positive semi-definite `Σa`: `S = Σa^½` from its eigenvectors,
/// then the eigenvalues of `S Σb S`.
fn trace_sqrt_by_eigenvectors(cov_a: &[f64], cov_b: &[f64], d: usize) -> Result<f64> {
    // S = Σa^½ = (V diag(√λ)) Vᵀ from Σa = V diag(λ) Vᵀ.
    let (lam, v) = symmetric_eigen(cov_a, d);
    let mut vs = v.clone();
    for row in vs.chunks_exact_mut(d) {
        for (x, l) in row.iter_mut().zip(&lam) {
            *x *= l.max(0.0).sqrt();
        }
    }
    let s = gemm(&vs, &v, d, true)?;
    let m = gemm(&gemm(&s, cov_b, d, false)?, &s, d, false)?; // S Σb S, symmetric PSD
    Ok(eigen_trace_sqrt(&m, d))
}

/// `Σ √max(μ, 0)` over the eigenvalues μ of the symmetric part of `m`.
fn eigen_trace_sqrt(m: &[f64], d: usize) -> f64 {
    let mut m_sym = m.to_vec();
    for i in 0..d {
        for j in 0..d {
            m_sym[i * d + j] = 0.5 * (m[i * d + j] + m[j * d + i]);
        }
    }
    symmetric_eigenvalues(&m_sym, d)
        .iter()
        .map(|x| x.max(0.0).sqrt())
        .sum()
}

/// The lower-triangular `L` (row-major) with `m = L Lᵀ`, or `None` when a pivot falls below
/// 1e-9 of the largest diagonal entry (a singular or nearly singular covariance: fewer
/// vectors than dimensions, constant features), where the eigenvector route is used.
fn cholesky(m: &[f64], d: usize) -> Option<Vec<f64>> {
    let top = (0..d).map(|i| m[i * d + i]).fold(0f64, f64::max);
    if top.is_nan() || top <= 0.0 {
        return None;
    }
    let mut l = vec![0f64; d * d];
    for j in 0..d {
        let row_j = l[j * d..j * d + j].to_vec();
        let s = m[j * d + j] - row_j.iter().map(|x| x * x).sum::<f64>();
        if s.is_nan() || s <= 1e-9 * top {
            return None;
        }
        let pivot = s.sqrt();
        l[j * d + j] = pivot;
        for i in j + 1..d {
            let row_i = &l[i * d..i * d + j];
            let dot: f64 = row_i.iter().zip(&row_j).map(|(a, b)| a * b).sum();
            l[i * d + j] = (m[i * d + j] - dot) / pivot;
        }
    }
    Some(l)
}

/// `a · b` (`a · bᵀ` with `transpose_b`) of row-major `d × d` matrices, in f64 through
/// candle's matrix product (blocked, multi-threaded).
fn gemm(a: &[f64], b: &[f64], d: usize, transpose_b: bool) -> Result<Vec<f64>> {
    let dev = candle_core::Device::Cpu;
    let ta = candle_core::Tensor::from_slice(a, (d, d), &dev)?;
    let mut tb = candle_core::Tensor::from_slice(b, (d, d), &dev)?;
    if transpose_b {
        tb = tb.t()?.contiguous()?;
    }
    Ok(ta.matmul(&tb)?.flatten_all()?.to_vec1::<f64>()?)
}

#[cfg(test)]
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
/// matrix: Householder reduction to tridiagonal form, then the implicit QL method with
/// Wilkinson-style shifts (the EISPACK `tred2`/`tql2` pair), all in `f64`; O(d³), so the
/// 2048-d FID features take seconds.
pub fn symmetric_eigen(m: &[f64], d: usize) -> (Vec<f64>, Vec<f64>) {
    if d == 0 {
        return (Vec::new(), Vec::new());
    }
    // `qt` holds the transform's columns as rows (qt[k] = column k), so that each QL rotation
    // touches two contiguous rows.
    let (diag, off, mut qt) = reduce(m, d, true);
    let lam = tridiagonal_ql(diag, off, Some(&mut qt), d);
    let mut v = vec![0f64; d * d];
    for k in 0..d {
        for i in 0..d {
            v[i * d + k] = qt[k * d + i];
        }
    }
    (lam, v)
}

/// Eigenvalues of a symmetric matrix ([`symmetric_eigen`] without the eigenvectors: a third
/// of the work).
pub fn symmetric_eigenvalues(m: &[f64], d: usize) -> Vec<f64> {
    if d == 0 {
        return Vec::new();
    }
    let (diag, off, _) = reduce(m, d, false);
    tridiagonal_ql(diag, off, None, d)
}

/// Householder reduction of the symmetric `m` to tridiagonal form `Qᵀ m Q`: its diagonal,
/// its sub-diagonal (`off[i]` couples i − 1 and i; `off[0]` = 0) and `Qᵀ` (row-major).
/// Without `vectors` `Q` is not accumulated (the returned matrix is scratch).
///
/// EISPACK's `tred2` on the matrix stored by columns (`m` is symmetric, so its rows are its
/// columns): the O(n³) loops then walk contiguous memory (2048-d: the row-wise version spent
/// its time in cache misses).
fn reduce(m: &[f64], n: usize, vectors: bool) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut v = m.to_vec();
    let mut d: Vec<f64> = (0..n).map(|j| v[j * n + n - 1]).collect();
    let mut e = vec![0f64; n];
    for i in (1..n).rev() {
        let scale: f64 = d[..i].iter().map(|x| x.abs()).sum();
        let mut h = 0.0;
        if scale == 0.0 {
            e[i] = d[i - 1];
            for j in 0..i {
                d[j] = v[j * n + i - 1];
                v[j * n + i] = 0.0;
                v[i * n + j] = 0.0;
            }
        } else {
            for x in d[..i].iter_mut() {
                *x /= scale;
                h += *x * *x;
            }
            let f = d[i - 1];
            let g = if f > 0.0 { -h.sqrt() } else { h.sqrt() };
            e[i] = scale * g;
            h -= f * g;
            d[i - 1] = f - g;
            e[..i].iter_mut().for_each(|x| *x = 0.0);
            for j in 0..i {
                let f = d[j];
                v[i * n + j] = f;
                let mut g = e[j] + v[j * n + j] * f;
                for k in j + 1..i {
                    g += v[j * n + k] * d[k];
                    e[k] += v[j * n + k] * f;
                }
                e[j] = g;
            }
            let mut f = 0.0;
            for j in 0..i {
                e[j] /= h;
                f += e[j] * d[j];
            }
            let hh = f / (h + h);
            for j in 0..i {
                e[j] -= hh * d[j];
            }
            for j in 0..i {
                let (f, g) = (d[j], e[j]);
                for k in j..i {
                    v[j * n + k] -= f * e[k] + g * d[k];
                }
                d[j] = v[j * n + i - 1];
                v[j * n + i] = 0.0;
            }
        }
        d[i] = h;
    }
    if !vectors {
        let diag = (0..n).map(|i| v[i * n + i]).collect();
        e[0] = 0.0;
        return (diag, e, v);
    }
    // Accumulate the transformations.
    for i in 0..n - 1 {
        v[i * n + n - 1] = v[i * n + i];
        v[i * n + i] = 1.0;
        let h = d[i + 1];
        if h != 0.0 {
            for k in 0..=i {
                d[k] = v[(i + 1) * n + k] / h;
            }
            for j in 0..=i {
                let g: f64 = (0..=i).map(|k| v[(i + 1) * n + k] * v[j * n + k]).sum();
                for k in 0..=i {
                    v[j * n + k] -= g * d[k];
                }
            }
        }
        for k in 0..=i {
            v[(i + 1) * n + k] = 0.0;
        }
    }
    for j in 0..n {
        d[j] = v[j * n + n - 1];
        v[j * n + n - 1] = 0.0;
    }
    v[(n - 1) * n + n - 1] = 1.0;
    e[0] = 0.0;
    (d, e, v)
}

/// Eigenvalues of the symmetric tridiagonal matrix (`d`, `e` as [`reduce`] gives them) by
/// the implicit QL method; with `qt`, every rotation is applied to its rows `i`, `i + 1`
/// (the eigenvectors, as rows, on return).
fn tridiagonal_ql(
    mut d: Vec<f64>,
    mut e: Vec<f64>,
    mut qt: Option<&mut [f64]>,
    n: usize,
) -> Vec<f64> {
    for i in 1..n {
        e[i - 1] = e[i];
    }
    e[n - 1] = 0.0;
    let eps = f64::EPSILON;
    let (mut f, mut tst1) = (0f64, 0f64);
    for l in 0..n {
        tst1 = tst1.max(d[l].abs() + e[l].abs());
        let mut m = l;
        while m < n - 1 && e[m].abs() > eps * tst1 {
            m += 1;
        }
        if m > l {
            for _iter in 0..60 {
                let g = d[l];
                let mut p = (d[l + 1] - g) / (2.0 * e[l]);
                let mut r = p.hypot(1.0);
                if p < 0.0 {
                    r = -r;
                }
                d[l] = e[l] / (p + r);
                d[l + 1] = e[l] * (p + r);
                let dl1 = d[l + 1];
                let h = g - d[l];
                for x in d[l + 2..].iter_mut() {
                    *x -= h;
                }
                f += h;
                p = d[m];
                let (mut c, mut c2, mut c3) = (1f64, 1f64, 1f64);
                let el1 = e[l + 1];
                let (mut s, mut s2) = (0f64, 0f64);
                for i in (l..m).rev() {
                    c3 = c2;
                    c2 = c;
                    s2 = s;
                    let g = c * e[i];
                    let h = c * p;
                    r = p.hypot(e[i]);
                    e[i + 1] = s * r;
                    s = e[i] / r;
                    c = p / r;
                    p = c * d[i] - s * g;
                    d[i + 1] = h + s * (c * g + s * d[i]);
                    if let Some(qt) = qt.as_deref_mut() {
                        let (lo, hi) = qt.split_at_mut((i + 1) * n);
                        let (a, b) = (&mut lo[i * n..], &mut hi[..n]);
                        for (x, y) in a.iter_mut().zip(b.iter_mut()) {
                            let h = *y;
                            *y = s * *x + c * h;
                            *x = c * *x - s * h;
                        }
                    }
                }
                p = -s * s2 * c3 * el1 * e[l] / dl1;
                e[l] = s * p;
                d[l] = c * p;
                if e[l].abs() <= eps * tst1 {
                    break;
                }
            }
        }
        d[l] += f;
        e[l] = 0.0;
    }
    d
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
    fn eigen_reconstructs_the_matrix() {
        for d in [1, 2, 7, 40] {
            eigen_reconstructs(d);
        }
    }

    fn eigen_reconstructs(d: usize) {
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
        let only = symmetric_eigenvalues(&m, d);
        for (a, b) in lam.iter().zip(&only) {
            assert!((a - b).abs() <= 1e-12 * a.abs().max(1.0), "{a} vs {b}");
        }
        let scale = m.iter().fold(1f64, |a, x| a.max(x.abs()));
        for i in 0..d {
            for j in 0..d {
                let x: f64 = (0..d).map(|k| v[i * d + k] * lam[k] * v[j * d + k]).sum();
                assert!(
                    (x - m[i * d + j]).abs() < 1e-12 * scale,
                    "({i},{j}) {x} vs {}",
                    m[i * d + j]
                );
            }
        }
    }

    #[test]
    fn merged_parts_give_the_whole_sets_statistics() {
        let (d, n) = (9, 103);
        let mut seed = 17;
        let f: Vec<f32> = (0..n * d)
            .map(|_| (lcg(&mut seed) * 3.0 + 1.0) as f32)
            .collect();
        let whole = Moments::of_features(&f, d).unwrap();
        let mut parts = Moments::empty(d);
        for cut in [60..103, 10..11, 11..11, 0..10, 11..60] {
            let p = Moments::of_features(&f[cut.start * d..cut.end * d], d).unwrap();
            parts.merge(&p).unwrap();
        }
        assert_eq!(parts.n, n);
        let (a, b) = (whole.stats().unwrap(), parts.stats().unwrap());
        assert_eq!(a, b, "merged parts in another order give other bits");
        // And the statistics are the two-pass centred ones to f64 precision.
        let mean: Vec<f64> = (0..d)
            .map(|j| (0..n).map(|i| f[i * d + j] as f64).sum::<f64>() / n as f64)
            .collect();
        for (x, y) in a.mean.iter().zip(&mean) {
            assert!((x - y).abs() <= 1e-14 * y.abs(), "{x} vs {y}");
        }
        for (j, k) in [(0, 0), (2, 5), (8, 8)] {
            let c: f64 = (0..n)
                .map(|i| (f[i * d + j] as f64 - mean[j]) * (f[i * d + k] as f64 - mean[k]))
                .sum::<f64>()
                / (n - 1) as f64;
            let x = a.cov[j * d + k];
            assert!((x - c).abs() <= 1e-13 * c.abs().max(1e-3), "{x} vs {c}");
        }
        assert!(Moments::empty(3).merge(&whole).is_err());
    }

    #[test]
    fn cholesky_and_eigenvector_routes_agree_and_singular_sets_take_the_second() {
        let (d, n) = (24, 60);
        let mut seed = 9;
        let mut set = |n: usize| -> Vec<f32> {
            (0..n * d)
                .map(|_| (lcg(&mut seed) * 2.0 - 0.3) as f32)
                .collect()
        };
        let (a, b) = (
            GaussianStats::from_features(&set(n), d).unwrap(),
            GaussianStats::from_features(&set(n), d).unwrap(),
        );
        let l = cholesky(&a.cov, d).expect("a full-rank covariance factors");
        let (x, y) = (
            trace_sqrt_by_cholesky(&l, &b.cov, d).unwrap(),
            trace_sqrt_by_eigenvectors(&a.cov, &b.cov, d).unwrap(),
        );
        assert!((x - y).abs() <= 1e-12 * y, "{x} vs {y}");
        let few = GaussianStats::from_features(&set(10), d).unwrap();
        assert!(
            cholesky(&few.cov, d).is_none(),
            "10 vectors in 24-d are rank 9"
        );
    }

    #[test]
    fn a_singular_covariances_distance_does_not_depend_on_how_the_set_was_cut() {
        // Fewer vectors than dimensions: the matrix square root magnifies last-bit
        // differences, so the merged statistics must be the same bits as the whole set's.
        let (d, n) = (64, 12);
        let mut seed = 5;
        let mut feats = || -> Vec<f32> {
            (0..n * d)
                .map(|_| (lcg(&mut seed) * 2.0 - 0.5).max(0.0) as f32)
                .collect()
        };
        let (fa, fb) = (feats(), feats());
        let b = Moments::of_features(&fb, d).unwrap().stats().unwrap();
        let whole = Moments::of_features(&fa, d).unwrap().stats().unwrap();
        let mut parts = Moments::empty(d);
        for cut in [7..12, 0..3, 3..7] {
            let p = Moments::of_features(&fa[cut.start * d..cut.end * d], d).unwrap();
            parts.merge(&p).unwrap();
        }
        let merged = parts.stats().unwrap();
        let (x, y) = (
            frechet_distance(&whole, &b).unwrap(),
            frechet_distance(&merged, &b).unwrap(),
        );
        assert_eq!(x, y);
    }

    #[test]
    fn matches_pytorch_fid_calculate_frechet_distance() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/fid");
        let read = |name: &str| {
            let (s, f) = npy::read_npy_f32(dir.join(format!("frechet_{name}.npy"))).unwrap();
            GaussianStats::from_features(&f, s[1]).unwrap()
        };
        let want: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("frechet.json")).unwrap())
                .unwrap();
        let a = read("a");
        for (other, key) in [("b", "a_b"), ("c", "a_c")] {
            let fd = frechet_distance(&a, &read(other)).unwrap();
            let w = want[key].as_f64().unwrap();
            let rel = (fd - w).abs() / w.abs();
            eprintln!("FD {key}: {fd} vs pytorch-fid {w} ({rel:.1e} relative)");
            assert!(rel <= 1e-6, "{key}: {fd} vs pytorch-fid {w}");
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
