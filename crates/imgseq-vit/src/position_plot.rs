//! What did the position embeddings learn? As in the ViT paper's figure 7: for every patch
//! position (an 8×8 grid), a small 8×8 map of the cosine similarity between its learned
//! position vector and that of every other patch. A model that learned 2-D structure shows a
//! bright spot at the patch's own place, fading with distance, often with row/column stripes.

use image::{Rgb, RgbImage};
use imgseq_core::{Error, Result};

/// Pixels per similarity cell, and gap between the small maps.
const CELL: u32 = 6;
const GAP: u32 = 3;

/// Viridis-like colour map: t in [0, 1] → RGB (5 anchor colours, linear in between).
fn colormap(t: f32) -> Rgb<u8> {
    const STOPS: [[f32; 3]; 5] = [
        [68., 1., 84.],
        [59., 82., 139.],
        [33., 145., 140.],
        [94., 201., 98.],
        [253., 231., 37.],
    ];
    let t = t.clamp(0.0, 1.0) * 4.0;
    let i = (t.floor() as usize).min(3);
    let f = t - i as f32;
    let c = |k: usize| (STOPS[i][k] * (1.0 - f) + STOPS[i + 1][k] * f).round() as u8;
    Rgb([c(0), c(1), c(2)])
}

/// Cosine-similarity maps of a (n, d) set of position vectors on a `side`×`side` grid.
pub fn similarity_maps(pos: &[f32], n: usize, d: usize) -> Vec<f32> {
    let norms: Vec<f32> = (0..n)
        .map(|i| {
            pos[i * d..(i + 1) * d]
                .iter()
                .map(|x| x * x)
                .sum::<f32>()
                .sqrt()
                .max(1e-12)
        })
        .collect();
    let mut sim = vec![0f32; n * n];
    for i in 0..n {
        for j in 0..n {
            let dot: f32 = pos[i * d..(i + 1) * d]
                .iter()
                .zip(&pos[j * d..(j + 1) * d])
                .map(|(a, b)| a * b)
                .sum();
            sim[i * n + j] = dot / (norms[i] * norms[j]);
        }
    }
    sim
}

/// The figure of a set of position vectors, with how much 2-D structure they hold.
#[derive(Debug, Clone)]
pub struct PositionPlot {
    pub image: RgbImage,
    /// Patches per grid side.
    pub side: usize,
    /// Mean cosine similarity of grid neighbours, and of patches at least `side / 2` apart.
    pub near: f32,
    pub far: f32,
}

/// Draws the similarity maps of `n` patch position vectors of width `d` (`pos`: (n, d) row
/// major, CLS excluded; `n` must be a square) and measures their 2-D structure.
pub fn plot_positions(pos: &[f32], n: usize, d: usize) -> Result<PositionPlot> {
    let side = (n as f64).sqrt().round() as usize;
    if side * side != n {
        return Err(Error::bad_data(format!(
            "{n} position slots do not form a square grid"
        )));
    }
    if pos.len() != n * d {
        return Err(Error::bad_data(format!(
            "{} position values for {n} vectors of {d}",
            pos.len()
        )));
    }
    let sim = similarity_maps(pos, n, d);
    let map_px = side as u32 * CELL;
    let total = side as u32 * map_px + (side as u32 + 1) * GAP;
    let mut img = RgbImage::from_pixel(total, total, Rgb([255, 255, 255]));
    for pi in 0..n {
        let (gy, gx) = ((pi / side) as u32, (pi % side) as u32);
        let (oy, ox) = (GAP + gy * (map_px + GAP), GAP + gx * (map_px + GAP));
        for pj in 0..n {
            // Colour scale −1 … 1 as in the paper's figure.
            let c = colormap((sim[pi * n + pj] + 1.0) / 2.0);
            let (cy, cx) = ((pj / side) as u32, (pj % side) as u32);
            for y in 0..CELL {
                for x in 0..CELL {
                    img.put_pixel(ox + cx * CELL + x, oy + cy * CELL + y, c);
                }
            }
        }
    }
    // A number that says whether 2-D structure was learned: mean similarity of grid neighbours
    // versus of patches at least half the grid apart.
    let (mut near, mut nn, mut far, mut nf) = (0f32, 0, 0f32, 0);
    for i in 0..n {
        for j in 0..n {
            let dy = (i / side).abs_diff(j / side);
            let dx = (i % side).abs_diff(j % side);
            if dy + dx == 1 {
                near += sim[i * n + j];
                nn += 1;
            } else if dy.max(dx) >= side / 2 {
                far += sim[i * n + j];
                nf += 1;
            }
        }
    }
    Ok(PositionPlot {
        image: img,
        side,
        near: near / nn.max(1) as f32,
        far: far / nf.max(1) as f32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Positions that vary smoothly over a 4×4 grid: neighbours alike, far patches not.
    fn smooth_grid() -> Vec<f32> {
        let mut pos = Vec::new();
        for i in 0..16 {
            let (y, x) = ((i / 4) as f32, (i % 4) as f32);
            pos.extend([x.cos(), x.sin(), y.cos(), y.sin()]);
        }
        pos
    }

    #[test]
    fn smooth_positions_show_two_dimensional_structure() {
        let p = plot_positions(&smooth_grid(), 16, 4).unwrap();
        assert_eq!(p.side, 4);
        assert!(p.near > p.far, "{} vs {}", p.near, p.far);
        let side = 4 * (4 * CELL) + 5 * GAP;
        assert_eq!(p.image.dimensions(), (side, side));
    }

    #[test]
    fn a_count_that_is_no_square_or_a_short_buffer_is_refused() {
        let e = plot_positions(&[0.0; 12], 3, 4).unwrap_err().to_string();
        assert!(e.contains("do not form a square grid"), "{e}");
        let e = plot_positions(&[0.0; 10], 4, 4).unwrap_err().to_string();
        assert!(e.contains("10 position values for 4 vectors of 4"), "{e}");
    }
}
