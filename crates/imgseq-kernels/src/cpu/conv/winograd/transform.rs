//! The Winograd transforms: the matrices of F(2×2, 3×3) and F(4×4, 3×3) ([`Wino`]), and the
//! three jobs that apply them over whole tile rows — weights (U = G g Gᵀ), input tiles
//! (V = Bᵀ d B) and output tiles (Y = Aᵀ M A + bias) — each written once over [`Simd`].

// The transforms index small fixed-size arrays the way the matrices are written.
#![allow(clippy::needless_range_loop)]

use super::simd::{dispatch, Job, Simd};
use super::{ranges, Isa, Plan, MAX_L};
use crate::cpu::{threads, SyncPtr};
use rayon::prelude::*;

/// Bᵀ (α×α), Aᵀ (m×α) and G (α×3) of F(m×m, 3×3), applied to one column of vectors.
pub(super) trait Wino<const M: usize, const A: usize> {
    fn bt<S: Simd>(d: [S; A]) -> [S; A];
    fn at<S: Simd>(m: [S; A]) -> [S; M];
    fn g<S: Simd>(w: [S; 3]) -> [S; A];
}

/// F(2×2, 3×3): points 0, ±1, ∞.
pub(super) struct F2x3;

impl Wino<2, 4> for F2x3 {
    #[inline(always)]
    fn bt<S: Simd>(d: [S; 4]) -> [S; 4] {
        [d[0] - d[2], d[1] + d[2], d[2] - d[1], d[1] - d[3]]
    }
    #[inline(always)]
    fn at<S: Simd>(m: [S; 4]) -> [S; 2] {
        [m[0] + m[1] + m[2], m[1] - m[2] - m[3]]
    }
    #[inline(always)]
    fn g<S: Simd>(w: [S; 3]) -> [S; 4] {
        let h = S::splat(0.5);
        let s = w[0] + w[2];
        [w[0], h * (s + w[1]), h * (s - w[1]), w[2]]
    }
}

/// F(4×4, 3×3): points 0, ±1, ±2, ∞.
pub(super) struct F4x3;

impl Wino<4, 6> for F4x3 {
    #[inline(always)]
    fn bt<S: Simd>(d: [S; 6]) -> [S; 6] {
        let (two, four, five) = (S::splat(2.0), S::splat(4.0), S::splat(5.0));
        let t1 = d[4] - four * d[2];
        let t2 = d[3] - four * d[1];
        let t3 = d[4] - d[2];
        let t4 = two * (d[3] - d[1]);
        [
            four * d[0] - five * d[2] + d[4],
            t1 + t2,
            t1 - t2,
            t3 + t4,
            t3 - t4,
            four * d[1] - five * d[3] + d[5],
        ]
    }
    #[inline(always)]
    fn at<S: Simd>(m: [S; 6]) -> [S; 4] {
        let (two, four, eight) = (S::splat(2.0), S::splat(4.0), S::splat(8.0));
        let a = m[1] + m[2];
        let b = m[1] - m[2];
        let c = m[3] + m[4];
        let d = m[3] - m[4];
        [
            m[0] + a + c,
            b + two * d,
            a + four * c,
            b + eight * d + m[5],
        ]
    }
    #[inline(always)]
    fn g<S: Simd>(w: [S; 3]) -> [S; 6] {
        let s = w[0] + w[2];
        let t = w[0] + S::splat(4.0) * w[2];
        let w1 = S::splat(2.0) * w[1];
        let (sixth, tw4) = (S::splat(-1.0 / 6.0), S::splat(1.0 / 24.0));
        [
            S::splat(0.25) * w[0],
            sixth * (s + w[1]),
            sixth * (s - w[1]),
            tw4 * (t + w1),
            tw4 * (t - w1),
            w[2],
        ]
    }
}

/// U = G g Gᵀ for output channels o0..o1: u is (α², co, ci).
struct WeightJob<'a, const M: usize, const A: usize, K> {
    w: &'a [f32],
    ci: usize,
    co: usize,
    o0: usize,
    o1: usize,
    u: SyncPtr<f32>,
    k: std::marker::PhantomData<K>,
}

impl<const M: usize, const A: usize, K: Wino<M, A>> Job for WeightJob<'_, M, A, K> {
    #[inline(always)]
    fn run<S: Simd>(&self) {
        let l = S::L;
        let mut gt = [[0.0f32; MAX_L]; 9];
        let mut tmp = [0.0f32; MAX_L];
        for o in self.o0..self.o1 {
            let mut c0 = 0;
            while c0 < self.ci {
                let n = l.min(self.ci - c0);
                for (lane, c) in (c0..c0 + n).enumerate() {
                    let src = &self.w[(o * self.ci + c) * 9..][..9];
                    for t in 0..9 {
                        gt[t][lane] = src[t];
                    }
                }
                for row in gt.iter_mut() {
                    row[n..].fill(0.0);
                }
                let mut h = [[S::splat(0.0); A]; 3];
                for (r, hr) in h.iter_mut().enumerate() {
                    // SAFETY: gt rows hold MAX_L ≥ L floats.
                    let g3 = unsafe {
                        [
                            S::load(gt[3 * r].as_ptr()),
                            S::load(gt[3 * r + 1].as_ptr()),
                            S::load(gt[3 * r + 2].as_ptr()),
                        ]
                    };
                    *hr = K::g(g3);
                }
                for ex in 0..A {
                    let col = K::g([h[0][ex], h[1][ex], h[2][ex]]);
                    for (ey, v) in col.iter().enumerate() {
                        // SAFETY: tmp holds MAX_L ≥ L floats; the n lanes written lie inside
                        // row (ey·α + ex, o) of u, which only this job writes.
                        unsafe {
                            let dst = self.u.0.add(((ey * A + ex) * self.co + o) * self.ci + c0);
                            if n == l {
                                v.store(dst);
                            } else {
                                v.store(tmp.as_mut_ptr());
                                std::ptr::copy_nonoverlapping(tmp.as_ptr(), dst, n);
                            }
                        }
                    }
                }
                c0 += n;
            }
        }
    }
}

/// V = Bᵀ d B for channels c0..c1 of one task's tiles (flat k0..k0+tp): v is (α², ci, tp).
struct InputJob<'a, const M: usize, const A: usize, K> {
    /// this image's polyphase planes
    img: &'a [f32],
    p: Plan,
    ci: usize,
    c0: usize,
    c1: usize,
    k0: usize,
    tp: usize,
    v: SyncPtr<f32>,
    k: std::marker::PhantomData<K>,
}

impl<const M: usize, const A: usize, K: Wino<M, A>> Job for InputJob<'_, M, A, K> {
    #[inline(always)]
    fn run<S: Simd>(&self) {
        let p = &self.p;
        let mut off = [[0usize; A]; A];
        for (i, oi) in off.iter_mut().enumerate() {
            for (j, o) in oi.iter_mut().enumerate() {
                *o = ((i % M) * M + j % M) * p.pl + (i / M) * p.w1 + j / M + self.k0;
            }
        }
        for c in self.c0..self.c1 {
            let src = &self.img[c * p.chan..(c + 1) * p.chan];
            debug_assert!(off[A - 1][A - 1] + self.tp <= src.len());
            let src = src.as_ptr();
            let mut kk = 0;
            while kk < self.tp {
                let mut h = [[S::splat(0.0); A]; A];
                for i in 0..A {
                    let mut d = [S::splat(0.0); A];
                    for j in 0..A {
                        // SAFETY: plan() leaves room for the shifted reads of the last tile
                        // row plus one vector (tp is a multiple of L, k0 + tp ≤ nty·w1 + L).
                        d[j] = unsafe { S::load(src.add(off[i][j] + kk)) };
                    }
                    h[i] = K::bt(d);
                }
                for ex in 0..A {
                    let mut col = [S::splat(0.0); A];
                    for i in 0..A {
                        col[i] = h[i][ex];
                    }
                    let r = K::bt(col);
                    for (ey, v) in r.iter().enumerate() {
                        // SAFETY: row (ey·α + ex, c) of v has tp floats, kk + L ≤ tp; only
                        // this job writes channel c.
                        unsafe {
                            v.store(self.v.0.add(((ey * A + ex) * self.ci + c) * self.tp + kk))
                        };
                    }
                }
                kk += S::L;
            }
        }
    }
}

/// Y = Aᵀ M A + bias for output channels o0..o1 of one task, written into the output.
struct OutputJob<'a, const M: usize, const A: usize, K> {
    /// (α², co, tp)
    mb: &'a [f32],
    bias: Option<&'a [f32]>,
    /// image bi's residual, (co, ho, wo)
    residual: Option<&'a [f32]>,
    p: Plan,
    co: usize,
    o0: usize,
    o1: usize,
    tp: usize,
    /// tile rows of the task
    ty0: usize,
    rows: usize,
    /// image bi's output, (co, ho, wo)
    out: SyncPtr<f32>,
    k: std::marker::PhantomData<K>,
}

impl<const M: usize, const A: usize, K: Wino<M, A>> Job for OutputJob<'_, M, A, K> {
    #[inline(always)]
    fn run<S: Simd>(&self) {
        let (p, tp) = (&self.p, self.tp);
        let mut y = vec![0.0f32; M * M * tp];
        for o in self.o0..self.o1 {
            let b = S::splat(self.bias.map_or(0.0, |b| b[o]));
            let src = self.mb.as_ptr();
            let mut kk = 0;
            while kk < tp {
                let mut t = [[S::splat(0.0); A]; M];
                for ex in 0..A {
                    let mut col = [S::splat(0.0); A];
                    for (ey, cv) in col.iter_mut().enumerate() {
                        // SAFETY: row (ey·α + ex, o) of mb has tp floats, kk + L ≤ tp.
                        *cv = unsafe { S::load(src.add(((ey * A + ex) * self.co + o) * tp + kk)) };
                    }
                    let r = K::at(col);
                    for oy in 0..M {
                        t[oy][ex] = r[oy];
                    }
                }
                for (oy, tr) in t.iter().enumerate() {
                    let r = K::at(*tr);
                    for (ox, v) in r.iter().enumerate() {
                        // SAFETY: y holds M² rows of tp floats.
                        unsafe { (*v + b).store(y.as_mut_ptr().add((oy * M + ox) * tp + kk)) };
                    }
                }
                kk += S::L;
            }
            // Write the valid outputs to (o, ty·M + oy, tx·M + ox), a row at a time.
            let (full, rem) = (p.wo / M, p.wo % M);
            for r in 0..self.rows {
                for oy in 0..M {
                    let yy = (self.ty0 + r) * M + oy;
                    if yy >= p.ho {
                        break;
                    }
                    let src = |ox: usize| &y[(oy * M + ox) * tp + r * p.w1..][..full + 1];
                    let s: [&[f32]; M] = std::array::from_fn(src);
                    // Written through the pointer (the output may not be initialised yet).
                    let row0 = (o * p.ho + yy) * p.wo;
                    let dst = self.out.0.wrapping_add(row0);
                    let res = self.residual.map(|r| &r[row0..row0 + p.wo]);
                    let put = |i: usize, v: f32| {
                        let v = match res {
                            Some(r) => r[i] + v,
                            None => v,
                        };
                        // SAFETY: row yy of channel o (wo floats) lies inside this image's
                        // output and i < wo; tasks own disjoint (channel, tile row) ranges.
                        unsafe { dst.add(i).write(v) };
                    };
                    for tx in 0..full {
                        for ox in 0..M {
                            put(tx * M + ox, s[ox][tx]);
                        }
                    }
                    for ox in 0..rem {
                        put(full * M + ox, s[ox][full]);
                    }
                }
            }
        }
    }
}

/// U = G g Gᵀ of every (co, ci) kernel into `u` (α², co, ci), output channels in parallel.
pub(super) fn transform_weights<const M: usize, const A: usize, K: Wino<M, A>>(
    w: &[f32],
    ci: usize,
    co: usize,
    u: &mut [f32],
    isa: Isa,
) {
    assert!(u.len() >= A * A * co * ci);
    let up = SyncPtr(u.as_mut_ptr());
    ranges(co, threads() * 4)
        .into_par_iter()
        .for_each(|(o0, o1)| {
            let job = WeightJob::<M, A, K> {
                w,
                ci,
                co,
                o0,
                o1,
                u: up,
                k: Default::default(),
            };
            dispatch(isa, &job)
        });
}

/// V = Bᵀ d B of one task's tiles (flat k0..k0 + tp of the image's polyphase planes `img`),
/// every channel, into v (α², ci, tp): one job, or (not `outer`) channel ranges in parallel.
#[allow(clippy::too_many_arguments)]
pub(super) fn input_tiles<const M: usize, const A: usize, K: Wino<M, A>>(
    img: &[f32],
    p: Plan,
    ci: usize,
    k0: usize,
    tp: usize,
    v: SyncPtr<f32>,
    isa: Isa,
    outer: bool,
) {
    let input = |(c0, c1): (usize, usize)| {
        let job = InputJob::<M, A, K> {
            img,
            p,
            ci,
            c0,
            c1,
            k0,
            tp,
            v,
            k: Default::default(),
        };
        dispatch(isa, &job)
    };
    if outer {
        input((0, ci));
    } else {
        ranges(ci, threads() * 4).into_par_iter().for_each(input);
    }
}

/// Where [`output_tiles`] reads and writes: the products `mb` (α², `rows_mb`, tp) of one task
/// (tile rows ty0..ty0 + rows) and image's output `out` (co, ho, wo).
pub(super) struct OutputTiles<'a> {
    pub(super) mb: &'a [f32],
    pub(super) bias: Option<&'a [f32]>,
    /// added to the output: the image's (co, ho, wo) ([`super::Fold`])
    pub(super) residual: Option<&'a [f32]>,
    /// rows of mb per transformed element (co, or co rounded up)
    pub(super) rows_mb: usize,
    pub(super) co: usize,
    pub(super) tp: usize,
    pub(super) ty0: usize,
    pub(super) rows: usize,
    pub(super) out: SyncPtr<f32>,
}

/// Y = Aᵀ M A + bias of one task, output channels 0..co, written into the image's output:
/// one job, or (not `outer`) channel ranges in parallel.
pub(super) fn output_tiles<const M: usize, const A: usize, K: Wino<M, A>>(
    o: OutputTiles<'_>,
    p: Plan,
    isa: Isa,
    outer: bool,
) {
    let output = |(o0, o1): (usize, usize)| {
        let job = OutputJob::<M, A, K> {
            mb: o.mb,
            bias: o.bias,
            residual: o.residual,
            p,
            co: o.rows_mb,
            o0,
            o1,
            tp: o.tp,
            ty0: o.ty0,
            rows: o.rows,
            out: o.out,
            k: Default::default(),
        };
        dispatch(isa, &job)
    };
    if outer {
        output((0, o.co));
    } else {
        ranges(o.co, threads() * 4).into_par_iter().for_each(output);
    }
}
