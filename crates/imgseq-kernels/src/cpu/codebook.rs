//! Nearest codebook entry: argmin_j ‖z_i‖² + ‖e_j‖² − 2·z_i·e_j (or argmax_j z_i·e_j,
//! [`Metric::InnerProduct`]), as a blocked GEMM over row blocks of z and chunks of the
//! codebook with a running best per row, so that memory stays bounded for any codebook size
//! (one `rows × CHUNK` block of dot products per thread, 8 MiB at most).
//!
//! The distance is formed exactly as the reference composite does, (‖z‖² + ‖e‖²) − (2·z·e),
//! in f32, and ties go to the lowest index (strict comparison, chunks in order), as
//! `torch.argmin` / `torch.argmax`.

use rayon::prelude::*;

/// Codebook entries per GEMM block.
pub const CHUNK: usize = 8192;
/// Most rows of z per GEMM block.
pub const MAX_ROWS: usize = 256;

/// What "nearest" means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Least squared Euclidean distance ‖z‖² + ‖e‖² − 2·z·e (taming, LlamaGen, Janus).
    Euclidean,
    /// Largest inner product z·e (IBQ's `argmax softmax(z·eᵀ)`).
    InnerProduct,
}

fn sq_norms(a: &[f32], d: usize) -> Vec<f32> {
    a.chunks_exact(d)
        .map(|r| r.iter().map(|v| v * v).sum())
        .collect()
}

/// Index of the nearest row of `e` (k × d) for every row of `z` (n × d), by distance.
pub fn nearest(z: &[f32], e: &[f32], d: usize) -> Vec<u32> {
    nearest_by(z, e, d, Metric::Euclidean)
}

/// Index of the nearest row of `e` (k × d) for every row of `z` (n × d) by `metric`.
pub fn nearest_by(z: &[f32], e: &[f32], d: usize, metric: Metric) -> Vec<u32> {
    search(z, e, d, metric, CHUNK)
}

/// [`nearest_by`] with codebook chunks of `chunk` entries (tests use small ones).
pub fn search(z: &[f32], e: &[f32], d: usize, metric: Metric, chunk: usize) -> Vec<u32> {
    if d == 0 {
        return vec![0; z.len()];
    }
    let (n, k) = (z.len() / d, e.len() / d);
    let mut out = vec![0u32; n];
    if k == 0 {
        return out;
    }
    let e2 = match metric {
        Metric::Euclidean => sq_norms(e, d),
        Metric::InnerProduct => Vec::new(),
    };
    let kc = chunk.clamp(1, k);
    // Few, large row blocks: each GEMM call re-packs the codebook chunk.
    let rows_per = n.div_ceil(2 * super::threads()).clamp(32, MAX_ROWS);
    out.par_chunks_mut(rows_per).enumerate().for_each_init(
        || vec![0f32; rows_per * kc],
        |dots, (bi, idx)| {
            let rows = idx.len();
            let zb = &z[bi * rows_per * d..(bi * rows_per + rows) * d];
            let z2 = sq_norms(zb, d);
            let mut best = vec![f32::INFINITY; rows];
            let mut start = 0;
            while start < k {
                let m = kc.min(k - start);
                let ec = &e[start * d..(start + m) * d];
                // SAFETY: dots holds ≥ rows × m, zb rows × d, ec m × d (read transposed).
                unsafe {
                    super::gemm::mm(
                        rows,
                        m,
                        d,
                        dots.as_mut_ptr(),
                        (m, 1),
                        false,
                        zb.as_ptr(),
                        (d, 1),
                        ec.as_ptr(),
                        (1, d),
                        gemm::Parallelism::None,
                    );
                }
                for (r, o) in idx.iter_mut().enumerate() {
                    let row = &dots[r * m..(r + 1) * m];
                    for (j, dot) in row.iter().enumerate() {
                        let dist = match metric {
                            Metric::Euclidean => (z2[r] + e2[start + j]) - dot * 2.0,
                            Metric::InnerProduct => -dot,
                        };
                        if dist < best[r] {
                            best[r] = dist;
                            *o = (start + j) as u32;
                        }
                    }
                }
                start += m;
            }
        },
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1664525).wrapping_add(1013904223);
                (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// The plain rule, one entry at a time.
    fn brute(z: &[f32], e: &[f32], d: usize, metric: Metric) -> Vec<u32> {
        z.chunks_exact(d)
            .map(|r| {
                let z2: f32 = r.iter().map(|v| v * v).sum();
                let mut best = (f32::INFINITY, 0u32);
                for (j, c) in e.chunks_exact(d).enumerate() {
                    let dot: f32 = r.iter().zip(c).map(|(a, b)| a * b).sum();
                    let dist = match metric {
                        Metric::Euclidean => {
                            (z2 + c.iter().map(|v| v * v).sum::<f32>()) - dot * 2.0
                        }
                        Metric::InnerProduct => -dot,
                    };
                    if dist < best.0 {
                        best = (dist, j as u32);
                    }
                }
                best.1
            })
            .collect()
    }

    #[test]
    fn chunked_search_equals_the_unchunked_one() {
        let d = 16;
        let (z, e) = (data(300 * d, 1), data(1000 * d, 2));
        for metric in [Metric::Euclidean, Metric::InnerProduct] {
            let whole = search(&z, &e, d, metric, usize::MAX);
            for chunk in [1, 7, 64, 999, 1000] {
                assert_eq!(
                    search(&z, &e, d, metric, chunk),
                    whole,
                    "{metric:?} {chunk}"
                );
            }
            // The GEMM's sums may round differently from the plain loop; near-ties aside
            // they agree.
            let b = brute(&z, &e, d, metric);
            let same = b.iter().zip(&whole).filter(|(a, b)| a == b).count();
            assert!(same >= 298, "{metric:?}: {same} of 300");
        }
    }

    #[test]
    fn ties_go_to_the_lowest_index_across_chunks() {
        // Entries 0..8 identical: every chunking must answer 0.
        let e = [1.0f32, 0.0].repeat(8);
        let z = vec![1.0f32, 0.5];
        for metric in [Metric::Euclidean, Metric::InnerProduct] {
            for chunk in [1, 3, 8] {
                assert_eq!(search(&z, &e, 2, metric, chunk), vec![0], "{metric:?}");
            }
        }
        // The inner product prefers the long entry the distance does not.
        let e = vec![1.0f32, 0.0, 3.0, 0.0];
        let z = vec![1.0f32, 0.0];
        assert_eq!(nearest_by(&z, &e, 2, Metric::Euclidean), vec![0]);
        assert_eq!(nearest_by(&z, &e, 2, Metric::InnerProduct), vec![1]);
    }

    /// Speed of one 256-token image against a 2^18 × 256 codebook (IBQ's largest):
    /// `cargo test -p imgseq-kernels --release --lib codebook::tests::large -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn large_codebook_speed() {
        let (d, k) = (256, 1 << 18);
        let (z, e) = (data(256 * d, 3), data(k * d, 4));
        let before = peak_rss_kib();
        let t = std::time::Instant::now();
        let idx = nearest_by(&z, &e, d, Metric::InnerProduct);
        let secs = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        let idx2 = nearest_by(&z, &e, d, Metric::Euclidean);
        let grew = peak_rss_kib().saturating_sub(before);
        eprintln!(
            "256 rows x 2^18 codes x 256 ({} threads): inner product {secs:.2} s, distance {:.2} s; \
             peak RSS +{grew} KiB over the inputs",
            super::super::threads(),
            t.elapsed().as_secs_f64(),
        );
        assert_eq!((idx.len(), idx2.len()), (256, 256));
        // The working blocks: rows x CHUNK floats per thread, far below the 256 MiB codebook.
        let bound = (super::super::threads() * MAX_ROWS * CHUNK * 4 / 1024) as u64 + 16 * 1024;
        assert!(grew < bound, "{grew} KiB");
    }

    /// The process's peak resident memory (`VmHWM`), KiB.
    fn peak_rss_kib() -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        s.lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}
