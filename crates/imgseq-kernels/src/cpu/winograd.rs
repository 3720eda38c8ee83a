//! Winograd F(m×m, 3×3) convolution for stride-1 3×3 f32 convolutions (m = 2 or 4).
//!
//! Per m×m output tile, Y = Aᵀ [Σ_ci (G g Gᵀ) ⊙ (Bᵀ d B)] A, with d the α×α input tile
//! (α = m + 2) and g a 3×3 kernel (Lavin & Gray's matrices; points 0, ±1, ±2 for m = 4). The
//! sum over ci is α² independent GEMMs (co × ci)·(ci × tiles), one per transformed element, so
//! a conv costs α²/m² multiplies per output and input channel instead of 9: 4 for F(2,3),
//! 2.25 for F(4,3).
//!
//! Layout. The zero-padded input is stored *polyphase*: per channel, plane (ry, rx) holds the
//! padded pixels (m·yq + ry, m·xq + rx) at yq·w1 + xq, with w1 = tiles per row + 1. Tile
//! (ty, tx) has the flat index k = ty·w1 + tx and its input pixel (i, j) lies in plane
//! (i mod m, j mod m) at k + [i ≥ m]·w1 + [j ≥ m] (α ≤ 2m), so each of the α² tile inputs is
//! a contiguous run over k: the transforms are plain vector loads and stores over k, written
//! once over a small SIMD trait and compiled for AVX-512, AVX2 and a portable 8-lane array
//! (picked at run time; no FMA contraction, so the three give bit-identical results). Column
//! tx = w1 − 1 of every tile row is junk: transformed and multiplied, never written out.
//!
//! Work is split into tasks of whole tile rows of one image (a few MiB of transformed tiles):
//! each task transforms its input tiles, runs the α² GEMMs (`super::gemm::mm`) and transforms
//! back, adding the bias. Tasks run in parallel (rayon); when there are too few of them (low
//! resolution) they run one after the other, each with its three phases in parallel (over
//! input channels, over the α² GEMMs, over output channels). The transformed weights and the
//! task buffers are per-thread scratch kept between calls.

// The transforms index small fixed-size arrays the way the matrices are written.
#![allow(clippy::needless_range_loop)]

use super::bf16::{self, Kernel, KC, MR, NB};
use super::conv::Geom;
use super::gemm::mm;
use gemm::Parallelism;
use rayon::prelude::*;
use std::cell::Cell;
use std::ops::{Add, Mul, Sub};

/// Output tile size: F(2×2, 3×3) (4×4 input tiles) or F(4×4, 3×3) (6×6 input tiles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tile {
    F2,
    F4,
}

/// Which instruction set the transforms are compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust on 8-lane arrays (any CPU).
    Portable,
    /// 256-bit vectors (x86-64 with AVX2 + FMA).
    Avx2,
    /// 512-bit vectors (x86-64 with AVX-512F).
    Avx512,
}

impl Isa {
    /// Whether this CPU can run the path.
    pub fn available(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => super::has_avx2(),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => std::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The widest path this CPU runs.
    pub fn best() -> Isa {
        [Isa::Avx512, Isa::Avx2]
            .into_iter()
            .find(|i| i.available())
            .unwrap_or(Isa::Portable)
    }
}

/// Whether [`conv2d`] computes this convolution: 3×3, stride 1, a non-empty input.
pub fn supports(g: &Geom) -> bool {
    g.kh == 3 && g.kw == 3 && g.s == 1 && g.ci > 0 && g.h > 0 && g.w > 0
}

/// The tile size that beats the direct conv on this shape, or `None` where the direct conv is
/// as fast. Measured on a 2-core Sapphire Rapids (AVX-512), 1 and 2 threads: F(4,3) is 1.3–2.5×
/// faster than direct from 32 channels in and out (32 @384² … 512 @24²) and F(2,3) is slower
/// than or level with F(4,3) everywhere except 512 @24² (level); at 16 channels both are level
/// with direct or slower, and with 3 (conv_in / conv_out) direct wins.
pub fn auto_tile(g: &Geom) -> Option<Tile> {
    (supports(g) && g.ci >= 32 && g.co >= 32).then_some(Tile::F4)
}

/// Forward 3×3 stride-1 convolution by Winograd: x (b, ci, h, w), w (co, ci, 3, 3), bias (co)
/// → (b, co, ho, wo), on the widest instruction set this CPU has.
pub fn conv2d(x: &[f32], w: &[f32], bias: Option<&[f32]>, g: &Geom, tile: Tile) -> Vec<f32> {
    conv2d_isa(x, w, bias, g, tile, Isa::best())
}

/// [`conv2d`] on a chosen instruction set (panics if this CPU lacks it, or if
/// [`supports`]`(g)` is false).
pub fn conv2d_isa(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Geom,
    tile: Tile,
    isa: Isa,
) -> Vec<f32> {
    assert!(supports(g), "winograd: not a stride-1 3×3 conv: {g:?}");
    assert!(isa.available(), "winograd: this CPU cannot run {isa:?}");
    assert_eq!(x.len(), g.b * g.ci * g.h * g.w, "winograd: input size");
    assert_eq!(w.len(), g.co * g.ci * 9, "winograd: weight size");
    match tile {
        Tile::F2 => run::<2, 4, F2x3>(x, w, bias, g, isa),
        Tile::F4 => run::<4, 6, F4x3>(x, w, bias, g, isa),
    }
}

// ---------------------------------------------------------------------------------------------
// Vectors

/// The few vector operations the transforms need. Only `add`, `sub` and `mul` (no FMA), so
/// every implementation rounds exactly like scalar f32 code.
trait Simd: Copy + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> {
    const L: usize;
    /// # Safety
    /// `p` must be valid for reading `L` floats.
    unsafe fn load(p: *const f32) -> Self;
    /// # Safety
    /// `p` must be valid for writing `L` floats.
    unsafe fn store(self, p: *mut f32);
    fn splat(v: f32) -> Self;
}

/// The portable vector: 8 lanes of plain f32 arithmetic (the compiler vectorises it for the
/// baseline target).
#[derive(Clone, Copy)]
struct Lanes([f32; 8]);

macro_rules! lanes_op {
    ($tr:ident, $f:ident, $op:tt) => {
        impl $tr for Lanes {
            type Output = Lanes;
            #[inline(always)]
            fn $f(self, o: Lanes) -> Lanes {
                let mut r = self.0;
                for (a, b) in r.iter_mut().zip(o.0) {
                    *a $op b;
                }
                Lanes(r)
            }
        }
    };
}
lanes_op!(Add, add, +=);
lanes_op!(Sub, sub, -=);
lanes_op!(Mul, mul, *=);

impl Simd for Lanes {
    const L: usize = 8;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        Lanes(std::ptr::read_unaligned(p as *const [f32; 8]))
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        std::ptr::write_unaligned(p as *mut [f32; 8], self.0)
    }
    #[inline(always)]
    fn splat(v: f32) -> Self {
        Lanes([v; 8])
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! AVX2 and AVX-512 vectors. Their values only exist inside functions compiled with the
    //! matching `#[target_feature]` (see `dispatch`), which run only after the CPU was checked.
    use super::Simd;
    use std::arch::x86_64::*;
    use std::ops::{Add, Mul, Sub};

    macro_rules! vec_type {
        ($name:ident, $reg:ty, $l:expr, $add:ident, $sub:ident, $mul:ident, $load:ident,
         $store:ident, $set1:ident) => {
            #[derive(Clone, Copy)]
            pub(super) struct $name($reg);
            impl Add for $name {
                type Output = $name;
                #[inline(always)]
                fn add(self, o: $name) -> $name {
                    // SAFETY: only reached from code compiled for (and run on) this ISA.
                    $name(unsafe { $add(self.0, o.0) })
                }
            }
            impl Sub for $name {
                type Output = $name;
                #[inline(always)]
                fn sub(self, o: $name) -> $name {
                    // SAFETY: as for `add`.
                    $name(unsafe { $sub(self.0, o.0) })
                }
            }
            impl Mul for $name {
                type Output = $name;
                #[inline(always)]
                fn mul(self, o: $name) -> $name {
                    // SAFETY: as for `add`.
                    $name(unsafe { $mul(self.0, o.0) })
                }
            }
            impl Simd for $name {
                const L: usize = $l;
                #[inline(always)]
                unsafe fn load(p: *const f32) -> Self {
                    $name($load(p))
                }
                #[inline(always)]
                unsafe fn store(self, p: *mut f32) {
                    $store(p, self.0)
                }
                #[inline(always)]
                fn splat(v: f32) -> Self {
                    // SAFETY: as for `add`.
                    $name(unsafe { $set1(v) })
                }
            }
        };
    }
    vec_type!(
        V8,
        __m256,
        8,
        _mm256_add_ps,
        _mm256_sub_ps,
        _mm256_mul_ps,
        _mm256_loadu_ps,
        _mm256_storeu_ps,
        _mm256_set1_ps
    );
    vec_type!(
        V16,
        __m512,
        16,
        _mm512_add_ps,
        _mm512_sub_ps,
        _mm512_mul_ps,
        _mm512_loadu_ps,
        _mm512_storeu_ps,
        _mm512_set1_ps
    );
}

/// The largest vector length: buffers are padded to a multiple of it.
const MAX_L: usize = 16;

/// Over-read room past the last tile row of a polyphase plane: a task's tile columns are
/// rounded up to MAX_L (f32) or to the bf16 micro-tile width [`bf16::NB`] (48).
const SLACK: usize = bf16::NB;

/// A piece of work written once over [`Simd`] and compiled per instruction set.
trait Job {
    fn run<S: Simd>(&self);
}

fn dispatch<J: Job>(isa: Isa, job: &J) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512<J: Job>(job: &J) {
            job.run::<x86::V16>()
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<J: Job>(job: &J) {
            job.run::<x86::V8>()
        }
        match isa {
            // SAFETY: `conv2d_isa` checked that the CPU has the feature.
            Isa::Avx512 => return unsafe { avx512(job) },
            // SAFETY: as above.
            Isa::Avx2 => return unsafe { avx2(job) },
            Isa::Portable => {}
        }
    }
    let _ = isa;
    job.run::<Lanes>()
}

// ---------------------------------------------------------------------------------------------
// Transform matrices

/// Bᵀ (α×α), Aᵀ (m×α) and G (α×3) of F(m×m, 3×3), applied to one column of vectors.
trait Wino<const M: usize, const A: usize> {
    fn bt<S: Simd>(d: [S; A]) -> [S; A];
    fn at<S: Simd>(m: [S; A]) -> [S; M];
    fn g<S: Simd>(w: [S; 3]) -> [S; A];
}

/// F(2×2, 3×3): points 0, ±1, ∞.
struct F2x3;

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
struct F4x3;

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

// ---------------------------------------------------------------------------------------------
// Layout

/// Sizes of the polyphase layout for output tile size M.
#[derive(Debug, Clone, Copy)]
struct Plan {
    ho: usize,
    wo: usize,
    /// tile rows
    nty: usize,
    /// flat row length: tiles per row + 1
    w1: usize,
    /// length of one polyphase plane (room for the shifted reads and a vector of over-read)
    pl: usize,
    /// floats per channel: M² planes
    chan: usize,
}

fn plan<const M: usize>(g: &Geom) -> Plan {
    let (ho, wo) = g.out_hw();
    let (nty, ntx) = (ho.div_ceil(M), wo.div_ceil(M));
    let w1 = ntx + 1;
    let pl = (nty + 1) * w1 + SLACK + 1;
    Plan {
        ho,
        wo,
        nty,
        w1,
        pl,
        chan: M * M * pl,
    }
}

/// The zero-padded input in polyphase layout: (b, ci, M, M, pl).
fn polyphase<const M: usize>(x: &[f32], g: &Geom, p: &Plan) -> Vec<f32> {
    let mut xp = vec![0.0f32; g.b * g.ci * p.chan];
    crate::runtime::advise_huge_pages(&mut xp);
    let (l, t) = (g.pad.0, g.pad.2);
    xp.par_chunks_mut(p.chan)
        .zip(x.par_chunks(g.h * g.w))
        .for_each(|(dst, src)| {
            // One padded row (zeros left and right), then split into its M column phases.
            let mut padded = vec![0.0f32; p.w1 * M];
            for (y, row) in src.chunks_exact(g.w).enumerate() {
                let (ry, yq) = ((y + t) % M, (y + t) / M);
                padded[l..l + g.w].copy_from_slice(row);
                let planes = &mut dst[ry * M * p.pl..(ry + 1) * M * p.pl];
                let mut it = planes.chunks_exact_mut(p.pl);
                let ph: [&mut [f32]; M] = std::array::from_fn(|_| {
                    let pl = it.next().expect("M planes");
                    &mut pl[yq * p.w1..(yq + 1) * p.w1]
                });
                for (q, px) in padded.chunks_exact(M).enumerate() {
                    for rx in 0..M {
                        ph[rx][q] = px[rx];
                    }
                }
            }
        });
    xp
}

#[derive(Clone, Copy)]
struct Ptr(*mut f32);
// SAFETY: used to hand disjoint regions of one buffer to several threads.
unsafe impl Send for Ptr {}
unsafe impl Sync for Ptr {}
impl Ptr {
    /// The pointer (a method, so that closures capture the whole `Ptr`, not its field).
    fn get(self) -> *mut f32 {
        self.0
    }
}

// ---------------------------------------------------------------------------------------------
// Jobs

/// U = G g Gᵀ for output channels o0..o1: u is (α², co, ci).
struct WeightJob<'a, const M: usize, const A: usize, K> {
    w: &'a [f32],
    ci: usize,
    co: usize,
    o0: usize,
    o1: usize,
    u: Ptr,
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
    v: Ptr,
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
    p: Plan,
    co: usize,
    o0: usize,
    o1: usize,
    tp: usize,
    /// tile rows of the task
    ty0: usize,
    rows: usize,
    /// image bi's output, (co, ho, wo)
    out: Ptr,
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
                    // SAFETY: row yy of channel o lies inside this image's output; tasks own
                    // disjoint (channel, tile row) ranges.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut(self.out.0.add((o * p.ho + yy) * p.wo), p.wo)
                    };
                    for (tx, d) in dst.chunks_exact_mut(M).enumerate() {
                        for ox in 0..M {
                            d[ox] = s[ox][tx];
                        }
                    }
                    for ox in 0..rem {
                        dst[full * M + ox] = s[ox][full];
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Driver

/// U = G g Gᵀ of every (co, ci) kernel into `u` (α², co, ci), output channels in parallel.
fn transform_weights<const M: usize, const A: usize, K: Wino<M, A>>(
    w: &[f32],
    ci: usize,
    co: usize,
    u: &mut [f32],
    isa: Isa,
) {
    assert!(u.len() >= A * A * co * ci);
    let up = Ptr(u.as_mut_ptr());
    ranges(co, super::threads() * 4)
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

/// Contiguous ranges covering 0..n in about `parts` pieces.
fn ranges(n: usize, parts: usize) -> Vec<(usize, usize)> {
    let step = n.div_ceil(parts.max(1)).max(1);
    (0..n)
        .step_by(step)
        .map(|a| (a, (a + step).min(n)))
        .collect()
}

thread_local! {
    /// Per-thread buffers kept between calls (transformed weights; a task's transformed input
    /// and products), so that each call does not page in and zero tens of MB afresh.
    static WEIGHTS: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
    static TILES: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` on `len` floats of this thread's `slot` (contents unspecified). The buffer is
/// taken out while `f` runs, so a nested call (rayon may run another conv on this thread while
/// it waits) simply gets a fresh one.
fn with_scratch<R>(
    slot: &'static std::thread::LocalKey<Cell<Vec<f32>>>,
    len: usize,
    f: impl FnOnce(&mut [f32]) -> R,
) -> R {
    let mut buf = slot.with(Cell::take);
    if buf.len() < len {
        buf = vec![0.0; len];
    }
    let r = f(&mut buf[..len]);
    slot.with(|s| {
        let old = s.take();
        s.set(if old.len() > buf.len() { old } else { buf });
    });
    r
}

/// Bytes of transformed input + products one task aims at (at least 128 tile columns). The
/// speed hardly depends on it (1–16 MiB measured within noise at 128 channels @96²).
const TASK_BYTES: usize = 4 << 20;

fn run<const M: usize, const A: usize, K: Wino<M, A>>(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Geom,
    isa: Isa,
) -> Vec<f32> {
    let p = plan::<M>(g);
    let mut out = vec![0.0f32; g.b * g.co * p.ho * p.wo];
    crate::runtime::advise_huge_pages(&mut out);
    if out.is_empty() {
        return out;
    }
    let threads = super::threads();
    let (ci, co, aa) = (g.ci, g.co, A * A);

    // Blocks of tile rows of about `target` flat columns. Blocks of all images run in parallel
    // when there are enough of them, else one after the other with parallel phases.
    let target = (TASK_BYTES / (4 * aa * (ci + co))).clamp(128, 4096);
    let mut rpt = target.div_ceil(p.w1).clamp(1, p.nty);
    let mut nblk = p.nty.div_ceil(rpt);
    let outer = g.b * nblk >= 2 * threads;
    if outer {
        // Even out the number of tasks over the threads.
        let ntasks = (g.b * nblk).div_ceil(threads) * threads;
        rpt = p.nty.div_ceil(ntasks.div_ceil(g.b).min(p.nty));
        nblk = p.nty.div_ceil(rpt);
    }
    let tp_max = (rpt * p.w1).next_multiple_of(MAX_L);
    let xp = polyphase::<M>(x, g, &p);
    let outp = Ptr(out.as_mut_ptr());

    with_scratch(&WEIGHTS, aa * co * ci, |u| {
        transform_weights::<M, A, K>(w, ci, co, u, isa);
        let u: &[f32] = u;
        let task = |t: usize| {
            let (bi, blk) = (t / nblk, t % nblk);
            let ty0 = blk * rpt;
            let rows = rpt.min(p.nty - ty0);
            let cols = rows * p.w1;
            let tp = cols.next_multiple_of(MAX_L);
            let img = &xp[bi * ci * p.chan..(bi + 1) * ci * p.chan];
            with_scratch(&TILES, aa * (ci + co) * tp_max, |buf| {
                let (vb, mb) = buf.split_at_mut(aa * ci * tp_max);
                let vp = Ptr(vb.as_mut_ptr());
                let input = |(c0, c1): (usize, usize)| {
                    let job = InputJob::<M, A, K> {
                        img,
                        p,
                        ci,
                        c0,
                        c1,
                        k0: ty0 * p.w1,
                        tp,
                        v: vp,
                        k: Default::default(),
                    };
                    dispatch(isa, &job)
                };
                let mp = Ptr(mb.as_mut_ptr());
                let product = |e: usize| {
                    // SAFETY: v is (α², ci, tp), u (α², co, ci), mb (α², co, tp); every e
                    // writes its own slice of mb.
                    unsafe {
                        mm(
                            co,
                            cols,
                            ci,
                            mp.get().add(e * co * tp),
                            (tp, 1),
                            false,
                            u.as_ptr().add(e * co * ci),
                            (ci, 1),
                            vp.get().add(e * ci * tp) as *const f32,
                            (tp, 1),
                            Parallelism::None,
                        )
                    }
                };
                if outer {
                    input((0, ci));
                    (0..aa).for_each(product);
                } else {
                    ranges(ci, threads * 4).into_par_iter().for_each(input);
                    (0..aa).into_par_iter().for_each(product);
                }
                let mb: &[f32] = mb;
                let output = |(o0, o1): (usize, usize)| {
                    let job = OutputJob::<M, A, K> {
                        mb,
                        bias,
                        p,
                        co,
                        o0,
                        o1,
                        tp,
                        ty0,
                        rows,
                        // SAFETY: image bi's output starts there.
                        out: Ptr(unsafe { outp.get().add(bi * co * p.ho * p.wo) }),
                        k: Default::default(),
                    };
                    dispatch(isa, &job)
                };
                if outer {
                    output((0, co));
                } else {
                    ranges(co, threads * 4).into_par_iter().for_each(output);
                }
            })
        };
        if outer {
            (0..g.b * nblk).into_par_iter().for_each(task);
        } else {
            (0..g.b * nblk).for_each(task);
        }
    });
    out
}

// ---------------------------------------------------------------------------------------------
// bf16: the α² products on bf16 words (vdpbf16ps), transforms in f32

thread_local! {
    /// Per-thread bf16 words: a task's packed transformed input.
    static WORDS_V: Cell<Vec<u32>> = const { Cell::new(Vec::new()) };
}

/// [`with_scratch`] for words.
fn with_words<R>(
    slot: &'static std::thread::LocalKey<Cell<Vec<u32>>>,
    len: usize,
    f: impl FnOnce(&mut [u32]) -> R,
) -> R {
    let mut buf = slot.with(Cell::take);
    if buf.len() < len {
        buf = vec![0; len];
    }
    let r = f(&mut buf[..len]);
    slot.with(|s| {
        let old = s.take();
        s.set(if old.len() > buf.len() { old } else { buf });
    });
    r
}

/// Whether `auto` may run a bf16 conv of these channels and kernel by [`conv2d_bf16`] (its
/// weights are then packed for both algorithms): 3×3, stride 1, ≥ 128 channels in and out.
pub fn bf16_candidate(ci: usize, co: usize, kh: usize, kw: usize, stride: usize) -> bool {
    kh == 3 && kw == 3 && stride == 1 && ci >= 128 && co >= 128
}

/// Whether `auto` runs this bf16 conv by [`conv2d_bf16`]: a [`bf16_candidate`] with at least
/// 2²⁹ multiply-adds per image. Measured against the direct bf16 conv (`bf16_bench`, AMD EPYC
/// Zen 4, 2 threads): faster at 128 ch from 64² (3.05 vs 3.38 ms) to 384² (125 vs 131 ms),
/// 256 ch at 48² (5.8 vs 7.3), 512 ch at 24² (6.7 vs 7.6); slower below the threshold (128 ch
/// at 48²: 3.3 vs 2.1 ms; 256 ch at 24²: 2.5 vs 2.1) and at ≤ 64 channels at every size
/// (64 ch at 48²: 1.5 vs 0.6 ms; 32 ch at 384²: 13.4 vs 11.1).
pub fn auto_bf16(g: &Geom) -> bool {
    let (ho, wo) = g.out_hw();
    bf16_candidate(g.ci, g.co, g.kh, g.kw, g.s)
        && supports(g)
        && g.ci * g.co * 9 * ho * wo >= 1 << 29
}

/// Winograd F(2×2, 3×3) in bf16: the input and weight transforms in f32 (as [`conv2d`]),
/// their results rounded to bf16 and paired along c_in, the 16 products (co × ci)·(ci × tiles)
/// summed in f32 by the bf16 micro-kernel of [`bf16`] (`vdpbf16ps`, or its portable twin —
/// same bits), the output transform in f32. x (b, ci, h, w) → (b, co, ho, wo); `ua`: the
/// weights from [`pack_weights_bf16`].
///
/// Only F(2,3): its transforms add and subtract (and halve the weights), so bf16 rounding of
/// the transformed operands costs about twice the direct bf16 conv's error (4.6e-3 vs 2.3e-3
/// relative, 64 channels at 24²); F(4,3)'s (×4, ×5, ×8, 1/24) made it 7.5e-2.
pub fn conv2d_bf16(
    x: &[f32],
    ua: &[u32],
    bias: Option<&[f32]>,
    g: &Geom,
    kernel: Kernel,
) -> Vec<f32> {
    assert!(supports(g), "winograd: not a stride-1 3×3 conv: {g:?}");
    assert_eq!(x.len(), g.b * g.ci * g.h * g.w, "winograd: input size");
    let words = 16 * g.co.next_multiple_of(MR) * g.ci.div_ceil(2);
    assert_eq!(ua.len(), words, "winograd: packed weight size");
    run_bf16::<2, 4, F2x3>(x, ua, bias, g, Isa::best(), kernel.checked())
}

/// The transformed weights U = G g Gᵀ of F(2×2, 3×3) of w (co, ci, 3, 3), rounded to bf16
/// and packed as the micro-kernel's A per transformed element: [16][co_pad / MR][⌈ci/2⌉][MR]
/// words (co_pad = co rounded up to MR; zero past co and ci). Done once per model, at load.
pub fn pack_weights_bf16(w: &[f32], ci: usize, co: usize) -> Vec<u32> {
    assert_eq!(w.len(), co * ci * 9, "winograd: weight size");
    let aa = 16;
    let mut u = vec![0f32; aa * co * ci];
    transform_weights::<2, 4, F2x3>(w, ci, co, &mut u, Isa::best());
    let (ci2, blocks) = (ci.div_ceil(2), co.div_ceil(MR));
    let mut ua = vec![0u32; aa * blocks * MR * ci2];
    ua.par_chunks_mut(ci2 * MR)
        .enumerate()
        .for_each(|(eb, dst)| {
            let (e, blk) = (eb / blocks, eb % blocks);
            for r in 0..MR {
                let o = blk * MR + r;
                if o >= co {
                    continue;
                }
                let row = &u[(e * co + o) * ci..][..ci];
                for k in 0..ci2 {
                    let hi = row.get(2 * k + 1).copied().unwrap_or(0.0);
                    dst[k * MR + r] = bf16::word(row[2 * k], hi);
                }
            }
        });
    ua
}

fn run_bf16<const M: usize, const A: usize, K: Wino<M, A>>(
    x: &[f32],
    ua: &[u32],
    bias: Option<&[f32]>,
    g: &Geom,
    isa: Isa,
    kernel: Kernel,
) -> Vec<f32> {
    let p = plan::<M>(g);
    let mut out = vec![0.0f32; g.b * g.co * p.ho * p.wo];
    crate::runtime::advise_huge_pages(&mut out);
    if out.is_empty() {
        return out;
    }
    let threads = super::threads();
    let (ci, co, aa) = (g.ci, g.co, A * A);
    let (ci2, co_pad) = (ci.div_ceil(2), co.next_multiple_of(MR));
    let blocks = co_pad / MR;

    // Task blocks as in `run` (f32 bytes of transformed input + products).
    let target = (TASK_BYTES / (4 * aa * (ci + co_pad))).clamp(128, 4096);
    let mut rpt = target.div_ceil(p.w1).clamp(1, p.nty);
    let mut nblk = p.nty.div_ceil(rpt);
    let outer = g.b * nblk >= 2 * threads;
    if outer {
        let ntasks = (g.b * nblk).div_ceil(threads) * threads;
        rpt = p.nty.div_ceil(ntasks.div_ceil(g.b).min(p.nty));
        nblk = p.nty.div_ceil(rpt);
    }
    let tp_max = (rpt * p.w1).next_multiple_of(NB);
    let xp = polyphase::<M>(x, g, &p);
    let outp = Ptr(out.as_mut_ptr());

    let task = |t: usize| {
        let (bi, blk) = (t / nblk, t % nblk);
        let ty0 = blk * rpt;
        let rows = rpt.min(p.nty - ty0);
        let tp = (rows * p.w1).next_multiple_of(NB);
        let img = &xp[bi * ci * p.chan..(bi + 1) * ci * p.chan];
        with_scratch(&TILES, aa * (ci + co_pad) * tp_max, |buf| {
            let (vb, mb) = buf.split_at_mut(aa * ci * tp_max);
            let vp = Ptr(vb.as_mut_ptr());
            let input = |(c0, c1): (usize, usize)| {
                let job = InputJob::<M, A, K> {
                    img,
                    p,
                    ci,
                    c0,
                    c1,
                    k0: ty0 * p.w1,
                    tp,
                    v: vp,
                    k: Default::default(),
                };
                dispatch(isa, &job)
            };
            if outer {
                input((0, ci));
            } else {
                ranges(ci, threads * 4).into_par_iter().for_each(input);
            }
            let vb: &[f32] = vb;
            with_words(&WORDS_V, aa * ci2 * tp_max, |vw| {
                // V as the micro-kernel's B: (e, ci2, tp) words, channels paired.
                let pack = |(e, k): (usize, usize), dst: &mut [u32]| {
                    let row = |c: usize| &vb[(e * ci + c) * tp..][..tp];
                    let hi = (2 * k + 1 < ci).then(|| row(2 * k + 1));
                    bf16::pack_pairs(dst, row(2 * k), hi);
                };
                let rows_v = vw[..aa * ci2 * tp].chunks_mut(tp).enumerate();
                if outer {
                    rows_v.for_each(|(i, d)| pack((i / ci2, i % ci2), d));
                } else {
                    vw[..aa * ci2 * tp]
                        .par_chunks_mut(tp)
                        .enumerate()
                        .for_each(|(i, d)| pack((i / ci2, i % ci2), d));
                }
                let vw: &[u32] = vw;
                let mp = Ptr(mb.as_mut_ptr());
                let product = |e: usize| {
                    // SAFETY: every e writes its own (co_pad × tp) slice of mb, which
                    // holds α²·co_pad·tp_max floats.
                    let c = unsafe {
                        std::slice::from_raw_parts_mut(mp.get().add(e * co_pad * tp), co_pad * tp)
                    };
                    c.fill(0.0);
                    for k0 in (0..ci2).step_by(KC) {
                        let kc = KC.min(ci2 - k0);
                        for nb in (0..tp).step_by(NB) {
                            let bptr = vw[(e * ci2 + k0) * tp + nb..].as_ptr();
                            for blk in 0..blocks {
                                let a = ua[((e * blocks + blk) * ci2 + k0) * MR..].as_ptr();
                                let cp = c[blk * MR * tp + nb..].as_mut_ptr();
                                // SAFETY: a covers kc·MR words; b's kc rows of NB
                                // words lie in vw (tp is a multiple of NB); c is an
                                // MR × NB corner of this e's products.
                                unsafe { bf16::ukernel(kernel, kc, a, bptr, tp, cp, tp) };
                            }
                        }
                    }
                };
                if outer {
                    (0..aa).for_each(product);
                } else {
                    (0..aa).into_par_iter().for_each(product);
                }
            });
            let mb: &[f32] = mb;
            let output = |(o0, o1): (usize, usize)| {
                let job = OutputJob::<M, A, K> {
                    mb,
                    bias,
                    p,
                    co: co_pad,
                    o0,
                    o1,
                    tp,
                    ty0,
                    rows,
                    // SAFETY: image bi's output starts there.
                    out: Ptr(unsafe { outp.get().add(bi * co * p.ho * p.wo) }),
                    k: Default::default(),
                };
                dispatch(isa, &job)
            };
            if outer {
                output((0, co));
            } else {
                ranges(co, threads * 4).into_par_iter().for_each(output);
            }
        })
    };
    if outer {
        (0..g.b * nblk).into_par_iter().for_each(task);
    } else {
        (0..g.b * nblk).for_each(task);
    }
    out
}
