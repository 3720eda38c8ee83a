//! Nearest codebook entry: argmin_j ‖z_i‖² + ‖e_j‖² − 2·z_i·e_j, tiled over rows of z.
//!
//! The distance is formed exactly as the reference composite does, (‖z‖² + ‖e‖²) − (2·z·e),
//! in f32, and ties go to the lowest index (strict `<`), as `torch.argmin`.

use rayon::prelude::*;

fn sq_norms(a: &[f32], d: usize) -> Vec<f32> {
    a.chunks_exact(d)
        .map(|r| r.iter().map(|v| v * v).sum())
        .collect()
}

/// Index of the nearest row of `e` (k × d) for every row of `z` (n × d).
pub fn nearest(z: &[f32], e: &[f32], d: usize) -> Vec<u32> {
    if d == 0 {
        return vec![0; z.len()];
    }
    let (n, k) = (z.len() / d, e.len() / d);
    let mut out = vec![0u32; n];
    if k == 0 {
        return out;
    }
    let e2 = sq_norms(e, d);
    // Few, large row blocks: each GEMM call re-packs the whole codebook.
    let rows_per = n.div_ceil(2 * super::threads()).clamp(32, 256);
    out.par_chunks_mut(rows_per).enumerate().for_each_init(
        || vec![0f32; rows_per * k],
        |dots, (bi, idx)| {
            let rows = idx.len();
            let zb = &z[bi * rows_per * d..(bi * rows_per + rows) * d];
            // SAFETY: dots holds rows × k, zb rows × d, e k × d (read transposed).
            unsafe {
                super::gemm::mm(
                    rows,
                    k,
                    d,
                    dots.as_mut_ptr(),
                    (k, 1),
                    false,
                    zb.as_ptr(),
                    (d, 1),
                    e.as_ptr(),
                    (1, d),
                    gemm::Parallelism::None,
                );
            }
            let z2 = sq_norms(zb, d);
            for (r, o) in idx.iter_mut().enumerate() {
                let row = &dots[r * k..(r + 1) * k];
                let mut best = f32::INFINITY;
                let mut arg = 0u32;
                for (j, (dot, e2)) in row.iter().zip(&e2).enumerate() {
                    let dist = (z2[r] + e2) - dot * 2.0;
                    if dist < best {
                        best = dist;
                        arg = j as u32;
                    }
                }
                *o = arg;
            }
        },
    );
    out
}
