//! 2-D convolution (cross-correlation) on NCHW: the geometry every algorithm shares, and the
//! choice of algorithm.
//!
//! * [`direct`]: shifted GEMMs over a zero-padded, phase-split copy of the input (f32/f64,
//!   forward and backward; any shape).
//! * [`winograd`]: Winograd F(2×2 or 4×4, 3×3) for stride-1 3×3 convs (f32, and F(2×2) with
//!   bf16 products).
//! * [`bf16`]: the direct conv on bf16 words (`vdpbf16ps` or its portable twin), inference only.
//! * [`amx`]: the same direct bf16 conv on AMX tiles.
//!
//! This module owns the layout they share — [`Geom`] (shapes and padding) and [`Plan`] (the
//! padded, phase-split input: phase (a, b) holds padded pixels (s·y+a, s·x+b) as rows of
//! length wq; output position (y, x) ↦ p = y·wq + x; kernel tap (i, j) reads element
//! p + (i/s)·wq + j/s of phase (i mod s, j mod s)) — and the dispatch: [`conv2d`] (f32/f64)
//! and [`conv2d_bf16`].
//!
//! Stride-1 3×3 f32 convolutions with enough channels go to Winograd (fewer multiplies; the
//! gradient checks run in f64 and always take the direct path). Which one is used is
//! [`ConvAlgo`]: the environment variable `IMGSEQ_CONV` sets it for the process (read once:
//! `auto`, the default, `direct`, `winograd-f2` or `winograd-f4`), and [`with_conv_algo`]
//! overrides it for the convolutions issued from the calling thread.

pub mod amx;
pub mod bf16;
pub mod direct;
pub mod winograd;

pub use direct::{conv2d_bwd, conv2d_direct};

use super::bf16::Kernel;
use super::Real;
use std::any::TypeId;
use std::cell::Cell;
use std::sync::OnceLock;
use winograd::Tile;

/// How the stride-1 3×3 f32 convolutions are computed (every other convolution is direct).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvAlgo {
    /// Winograd where it was measured to be faster ([`winograd::auto_tile`]), else direct.
    Auto,
    /// Always the shifted-GEMM direct convolution.
    Direct,
    /// Always Winograd with this tile size.
    Winograd(Tile),
}

impl ConvAlgo {
    /// The `IMGSEQ_CONV` spellings: `auto`, `direct`, `winograd-f2`, `winograd-f4`.
    pub fn parse(s: &str) -> Option<ConvAlgo> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Some(ConvAlgo::Auto),
            "direct" => Some(ConvAlgo::Direct),
            "winograd-f2" => Some(ConvAlgo::Winograd(Tile::F2)),
            "winograd-f4" => Some(ConvAlgo::Winograd(Tile::F4)),
            _ => None,
        }
    }

    /// The process default: `IMGSEQ_CONV`, read on first use. An unknown value is reported
    /// once on stderr and treated as `auto`.
    pub fn from_env() -> ConvAlgo {
        static ALGO: OnceLock<ConvAlgo> = OnceLock::new();
        *ALGO.get_or_init(|| match std::env::var("IMGSEQ_CONV") {
            Ok(v) => ConvAlgo::parse(&v).unwrap_or_else(|| {
                eprintln!(
                    "imgseq: IMGSEQ_CONV={v} is not one of auto, direct, winograd-f2, \
                     winograd-f4; using auto"
                );
                ConvAlgo::Auto
            }),
            Err(_) => ConvAlgo::Auto,
        })
    }
}

thread_local! {
    static ALGO_OVERRIDE: Cell<Option<ConvAlgo>> = const { Cell::new(None) };
}

/// The algorithm in force on this thread: the innermost [`with_conv_algo`], else
/// [`ConvAlgo::from_env`].
pub fn conv_algo() -> ConvAlgo {
    ALGO_OVERRIDE
        .with(Cell::get)
        .unwrap_or_else(ConvAlgo::from_env)
}

/// Runs `f` with the convolutions it issues from this thread computed by `algo` (nests;
/// restored on return and on panic). The choice is made where the conv is called, so a model
/// run inside `f` on this thread is covered; work `f` hands to other threads is not.
pub fn with_conv_algo<R>(algo: ConvAlgo, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<ConvAlgo>);
    impl Drop for Restore {
        fn drop(&mut self) {
            ALGO_OVERRIDE.with(|a| a.set(self.0));
        }
    }
    let _restore = Restore(ALGO_OVERRIDE.with(|a| a.replace(Some(algo))));
    f()
}

/// # Safety
/// T must be f32.
unsafe fn as_f32<T>(s: &[T]) -> &[f32] {
    std::slice::from_raw_parts(s.as_ptr() as *const f32, s.len())
}

/// The Winograd tile to use for this conv, or `None` for the direct path.
fn winograd_tile<T: Real>(g: &Geom) -> Option<Tile> {
    if TypeId::of::<T>() != TypeId::of::<f32>() || !winograd::supports(g) {
        return None;
    }
    match conv_algo() {
        ConvAlgo::Auto => winograd::auto_tile(g),
        ConvAlgo::Direct => None,
        ConvAlgo::Winograd(t) => Some(t),
    }
}

/// Forward convolution: x (b, ci, h, w), w (co, ci, kh, kw), bias (co) → (b, co, ho, wo), by
/// Winograd where [`conv_algo`] takes it for this shape, else [`conv2d_direct`].
pub fn conv2d<T: Real>(x: &[T], w: &[T], bias: Option<&[T]>, g: &Geom) -> Vec<T> {
    if let Some(tile) = winograd_tile::<T>(g) {
        // SAFETY: T is f32 (checked by winograd_tile), so these are the same slices and the
        // same Vec, only retyped.
        unsafe {
            let y = winograd::conv2d(as_f32(x), as_f32(w), bias.map(|b| as_f32(b)), g, tile);
            let mut y = std::mem::ManuallyDrop::new(y);
            return Vec::from_raw_parts(y.as_mut_ptr() as *mut T, y.len(), y.capacity());
        }
    }
    conv2d_direct(x, w, bias, g)
}

/// The GroupNorm (+ SiLU) in front of a conv ([`conv2d_normed`]): taming's `Normalize` and
/// the swish after it.
#[derive(Debug, Clone, Copy)]
pub struct PreNorm<'a> {
    pub groups: usize,
    /// (ci) each
    pub weight: &'a [f32],
    pub bias: &'a [f32],
    pub eps: f64,
    pub silu: bool,
}

impl PreNorm<'_> {
    /// Its per-(image, channel) coefficients for x (b, c, hw), for a conv to fold in.
    fn coefs(&self, x: &[f32], c: usize, hw: usize) -> Vec<super::norm::ChannelNorm<f32>> {
        let (w, b) = (self.weight, self.bias);
        super::norm::group_norm_coefs(x, c, hw, self.groups, w, b, self.eps, self.silu)
    }

    /// x (b, c, hw) normalised, written out.
    fn apply(&self, x: &[f32], c: usize, hw: usize) -> Vec<f32> {
        let (w, b) = (self.weight, self.bias);
        super::norm::group_norm(x, c, hw, self.groups, w, b, self.eps, self.silu)
    }
}

/// GroupNorm (+ SiLU) of x, then [`conv2d`], then `residual` added (when given: a map of the
/// output's shape) — what a ResNet block does around each of its convs. Where the conv runs by
/// Winograd, only the GroupNorm's statistics are computed up front: each channel is
/// normalised while the conv packs its input and the residual is added as the output is
/// written ([`winograd::Fold`]), so neither the normalised map nor the conv's own output is
/// written and read back; the bits equal the separate steps'. Else the separate steps.
/// x (b, ci, h, w) f32; `norm.groups` divides ci (the caller checks).
pub fn conv2d_normed(
    x: &[f32],
    norm: &PreNorm,
    w: &[f32],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    g: &Geom,
) -> Vec<f32> {
    let hw = g.h * g.w;
    if let Some(tile) = winograd_tile::<f32>(g) {
        let coefs = norm.coefs(x, g.ci, hw);
        let fold = winograd::Fold {
            norm: Some(&coefs),
            residual,
        };
        return winograd::conv2d_folded(x, fold, w, bias, g, tile);
    }
    let h = norm.apply(x, g.ci, hw);
    let mut y = conv2d(&h, w, bias, g);
    add_residual(&mut y, residual);
    y
}

/// bf16 conv: x (b, ci, h, w) f32 → (b, co, ho, wo) f32, by Winograd F(2×2, 3×3) where the
/// weights' algorithm takes it ([`bf16::ConvWeights::runs_winograd_on`]), else the direct
/// conv on AMX tiles or on `kernel`'s micro-kernel. The caller checks that x has `ci` channels
/// and that the kernel fits the padded input.
pub fn conv2d_bf16(
    x: &[f32],
    b: usize,
    h: usize,
    w: usize,
    wt: &bf16::ConvWeights,
    kernel: Kernel,
) -> Vec<f32> {
    conv2d_bf16_folded(x, winograd::Fold::default(), (b, h, w), wt, kernel)
}

/// [`conv2d_normed`] on bf16 weights: GroupNorm (+ SiLU) of x when `norm` is given, the bf16
/// conv ([`conv2d_bf16`]), then `residual` added. Only the GroupNorm's statistics are
/// computed up front: every algorithm (Winograd, the direct conv on AMX tiles or on the
/// micro-kernel) normalises each channel while it packs its input and adds the residual as it
/// writes its output ([`winograd::Fold`]); the bits equal the separate steps'.
pub fn conv2d_bf16_normed(
    x: &[f32],
    norm: Option<&PreNorm>,
    residual: Option<&[f32]>,
    (b, h, w): (usize, usize, usize),
    wt: &bf16::ConvWeights,
    kernel: Kernel,
) -> Vec<f32> {
    let coefs = norm.map(|n| n.coefs(x, wt.ci, h * w));
    let fold = winograd::Fold {
        norm: coefs.as_deref(),
        residual,
    };
    conv2d_bf16_folded(x, fold, (b, h, w), wt, kernel)
}

/// [`conv2d_bf16`] with a [`winograd::Fold`], on whichever algorithm runs.
fn conv2d_bf16_folded(
    x: &[f32],
    fold: winograd::Fold,
    (b, h, w): (usize, usize, usize),
    wt: &bf16::ConvWeights,
    kernel: Kernel,
) -> Vec<f32> {
    let kernel = kernel.checked();
    if let Some(ua) = wt.winograd_weights(h, w, kernel) {
        let g = wt.geom(b, h, w);
        return winograd::conv2d_bf16_folded(x, fold, ua, Some(wt.bias()), &g, kernel);
    }
    if kernel == Kernel::Amx {
        return amx::conv2d(x, fold, (b, h, w), wt);
    }
    bf16::conv2d_direct(x, fold, (b, h, w), wt, kernel)
}

/// y += residual (when given), in parallel: the skip connection where a conv cannot fold it
/// into its output (the same bits as [`winograd::Fold`]'s, addition being commutative).
fn add_residual(y: &mut [f32], residual: Option<&[f32]>) {
    use rayon::prelude::*;
    if let Some(r) = residual {
        y.par_iter_mut().zip(r).for_each(|(y, r)| *y += *r);
    }
}

/// Shapes and padding of one convolution.
#[derive(Debug, Clone, Copy)]
pub struct Geom {
    pub b: usize,
    pub ci: usize,
    pub h: usize,
    pub w: usize,
    pub co: usize,
    pub kh: usize,
    pub kw: usize,
    pub s: usize,
    /// (left, right, top, bottom)
    pub pad: (usize, usize, usize, usize),
}

impl Geom {
    pub fn out_hw(&self) -> (usize, usize) {
        let (l, r, t, bo) = self.pad;
        (
            (self.h + t + bo - self.kh) / self.s + 1,
            (self.w + l + r - self.kw) / self.s + 1,
        )
    }

    /// The padded, phase-split layout of this conv's input.
    fn plan(&self) -> Plan {
        let (l, r, t, bo) = self.pad;
        let s = self.s;
        let (ho, wo) = self.out_hw();
        let wq = (self.w + l + r).div_ceil(s);
        let np = ho * wq;
        let need = np + ((self.kh - 1) / s) * wq + (self.kw - 1) / s;
        let hq = (self.h + t + bo).div_ceil(s).max(need.div_ceil(wq));
        Plan {
            h: self.h,
            w: self.w,
            ho,
            wo,
            s,
            wq,
            hq,
            np,
            plane: s * s * hq * wq,
            top: t,
            left: l,
        }
    }

    fn is_pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.s == 1 && self.pad == (0, 0, 0, 0)
    }
}

/// Derived sizes of the padded, phase-split layout of one conv input (per channel, or per
/// channel pair for bf16 words).
#[derive(Debug, Clone, Copy)]
struct Plan {
    /// input rows and columns
    h: usize,
    w: usize,
    ho: usize,
    wo: usize,
    s: usize,
    /// row length of a phase (padded width / s, rounded up)
    wq: usize,
    /// rows of a phase
    hq: usize,
    /// p-space length (ho · wq)
    np: usize,
    /// elements per channel (s² phases of hq × wq)
    plane: usize,
    /// top and left padding
    top: usize,
    left: usize,
}

impl Plan {
    /// Offset of tap (i, j)'s view inside a channel's plane.
    fn off(&self, i: usize, j: usize) -> usize {
        let s = self.s;
        ((i % s) * s + j % s) * self.hq * self.wq + (i / s) * self.wq + j / s
    }

    /// Index of input pixel (y, x) inside a channel's padded, phase-split plane.
    #[inline]
    fn index(&self, y: usize, x: usize) -> usize {
        let (yy, xx) = (y + self.top, x + self.left);
        let s = self.s;
        ((yy % s) * s + xx % s) * self.hq * self.wq + (yy / s) * self.wq + xx / s
    }

    /// Calls `f(x, j)` for every pixel x of input row y with its index j in the channel's
    /// padded, phase-split plane (no divisions per pixel).
    #[inline]
    fn for_row(&self, y: usize, mut f: impl FnMut(usize, usize)) {
        let s = self.s;
        let yy = y + self.top;
        let l = self.left;
        for b in 0..s {
            let base = (((yy % s) * s + b) * self.hq + yy / s) * self.wq;
            // padded column xx = x'·s + b, input column x = xx − l
            let mut xq = if l > b { (l - b).div_ceil(s) } else { 0 };
            loop {
                let xx = xq * s + b;
                if xx - l >= self.w {
                    break;
                }
                f(xx - l, base + xq);
                xq += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bf16 conv lays its input out by the same [`Plan`] as the f32 direct conv.
    #[test]
    fn bf16_conv_weights_share_the_conv_geometry() {
        for (k, s, pad, h, w) in [
            (3, 1, (1, 1, 1, 1), 9, 7),
            (3, 2, (0, 1, 0, 1), 8, 11),
            (4, 2, (1, 1, 1, 1), 10, 6),
            (1, 1, (0, 0, 0, 0), 5, 5),
        ] {
            let wt = bf16::ConvWeights::new(&vec![0.5; 4 * 3 * k * k], None, (4, 3, k, k), s, pad);
            let g = Geom {
                b: 2,
                ci: 3,
                h,
                w,
                co: 4,
                kh: k,
                kw: k,
                s,
                pad,
            };
            assert_eq!(wt.out_hw(h, w), g.out_hw());
            let (a, b) = (wt.geom(2, h, w).plan(), g.plan());
            assert_eq!(
                (a.ho, a.wo, a.wq, a.hq, a.np, a.plane, a.top, a.left),
                (b.ho, b.wo, b.wq, b.hq, b.np, b.plane, b.top, b.left)
            );
            // Every input pixel has its own place in the plane, inside it.
            let mut seen = vec![false; b.plane];
            for y in 0..h {
                let mut row = vec![];
                b.for_row(y, |x, j| row.push((x, j)));
                row.sort();
                assert_eq!(row.len(), w);
                for (x, j) in row {
                    assert_eq!(j, b.index(y, x));
                    assert!(!std::mem::replace(&mut seen[j], true));
                }
            }
        }
    }
}
