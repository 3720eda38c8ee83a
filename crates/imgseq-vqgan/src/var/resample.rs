//! PyTorch's `F.interpolate` in the two modes VAR's quantizer uses, on one (h, w) plane of
//! f32, with PyTorch's CPU arithmetic (f32 throughout, its order of sums):
//! * `mode='area'` = `adaptive_avg_pool2d`: output cell i averages input rows
//!   ⌊i·H/h⌋ .. ⌈(i+1)·H/h⌉ (windows overlap when h does not divide H), the sum divided by
//!   the rows, then by the columns;
//! * `mode='bicubic'`, `align_corners=False`, no antialias: Keys' cubic with A = −0.75 on the
//!   source position `scale·(i + ½) − ½`, `scale` = in/out, taps clamped to the border.

/// The first input index of output cell `i` of `out` over `inp` (PyTorch's `start_index`).
fn start_index(i: usize, out: usize, inp: usize) -> usize {
    (i * inp) / out
}

/// One past the last input index of output cell `i` (PyTorch's `end_index`: a ceiling).
fn end_index(i: usize, out: usize, inp: usize) -> usize {
    ((i + 1) * inp).div_ceil(out)
}

/// `adaptive_avg_pool2d` of a (h, w) plane to (oh, ow).
pub fn area(src: &[f32], h: usize, w: usize, oh: usize, ow: usize) -> Vec<f32> {
    debug_assert_eq!(src.len(), h * w);
    let mut out = Vec::with_capacity(oh * ow);
    for oy in 0..oh {
        let (y0, y1) = (start_index(oy, oh, h), end_index(oy, oh, h));
        for ox in 0..ow {
            let (x0, x1) = (start_index(ox, ow, w), end_index(ox, ow, w));
            let mut sum = 0f32;
            for y in y0..y1 {
                for x in x0..x1 {
                    sum += src[y * w + x];
                }
            }
            out.push(sum / (y1 - y0) as f32 / (x1 - x0) as f32);
        }
    }
    out
}

const A: f32 = -0.75;

fn cubic1(x: f32) -> f32 {
    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
}

fn cubic2(x: f32) -> f32 {
    ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
}

/// The four taps (clamped indices) and weights of output index `i` of `out` over `inp`.
fn taps(i: usize, out: usize, inp: usize) -> ([usize; 4], [f32; 4]) {
    let scale = inp as f32 / out as f32;
    let real = scale * (i as f32 + 0.5) - 0.5;
    let base = (real.floor() as i64).min(inp as i64 - 1);
    let t = (real - base as f32).clamp(0.0, 1.0);
    let w = [cubic2(t + 1.0), cubic1(t), cubic1(1.0 - t), cubic2(2.0 - t)];
    let idx = |k: i64| (base - 1 + k).clamp(0, inp as i64 - 1) as usize;
    ([idx(0), idx(1), idx(2), idx(3)], w)
}

/// `F.interpolate(mode='bicubic', align_corners=False)` of a (h, w) plane to (oh, ow).
pub fn bicubic(src: &[f32], h: usize, w: usize, oh: usize, ow: usize) -> Vec<f32> {
    debug_assert_eq!(src.len(), h * w);
    let cols: Vec<_> = (0..ow).map(|x| taps(x, ow, w)).collect();
    let mut out = Vec::with_capacity(oh * ow);
    for oy in 0..oh {
        let (ys, wy) = taps(oy, oh, h);
        for (xs, wx) in &cols {
            let row = |y: usize| {
                let r = &src[y * w..(y + 1) * w];
                let mut t = r[xs[0]] * wx[0];
                for k in 1..4 {
                    t += r[xs[k]] * wx[k];
                }
                t
            };
            let mut v = row(ys[0]) * wy[0];
            for k in 1..4 {
                v += row(ys[k]) * wy[k];
            }
            out.push(v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn area_windows_overlap_where_the_ratio_is_not_whole() {
        // 16 → 13: cell 0 covers rows 0..2 (⌈16/13⌉ = 2), cell 12 rows 14..16.
        assert_eq!((start_index(0, 13, 16), end_index(0, 13, 16)), (0, 2));
        assert_eq!((start_index(12, 13, 16), end_index(12, 13, 16)), (14, 16));
        let src: Vec<f32> = (0..16).map(|v| v as f32).collect();
        // A 4×4 ramp pooled to 1×1 is its mean; to 3×3 with overlapping windows.
        assert_eq!(area(&src, 4, 4, 1, 1), vec![7.5]);
        let a = area(&src, 4, 4, 3, 3);
        assert_eq!(a[0], (0.0 + 1.0 + 4.0 + 5.0) / 4.0);
        assert_eq!(a[4], (5.0 + 6.0 + 9.0 + 10.0) / 4.0);
    }

    #[test]
    fn bicubic_keeps_constants_and_same_size_planes() {
        let c = vec![0.25f32; 9];
        assert!(bicubic(&c, 3, 3, 16, 16)
            .iter()
            .all(|v| (v - 0.25).abs() < 1e-6));
        let src: Vec<f32> = (0..25).map(|v| (v as f32 * 0.37).sin()).collect();
        assert_eq!(bicubic(&src, 5, 5, 5, 5), src);
        // One value to 16×16: every output is it (all taps clamp to it).
        assert!(bicubic(&[3.0], 1, 1, 16, 16).iter().all(|&v| v == 3.0));
    }

    /// Values from PyTorch 2.x: `F.interpolate(torch.arange(4.).view(1,1,2,2), size=(4,4),
    /// mode='bicubic')` first row.
    #[test]
    fn bicubic_matches_pytorch_on_a_small_ramp() {
        let out = bicubic(&[0.0, 1.0, 2.0, 3.0], 2, 2, 4, 4);
        let want = [-0.31640625f32, 0.015625, 0.5625, 0.89453125];
        for (a, b) in out[..4].iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{:?}", &out[..4]);
        }
    }
}
