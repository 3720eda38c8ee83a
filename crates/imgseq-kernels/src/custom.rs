//! candle `CustomOp`s wrapping the CPU kernels in [`crate::cpu`], with their backward passes.
//!
//! Forward ops get contiguous inputs (the callers in [`crate::ops`] make sure of it, except
//! attention which accepts any strides with a unit last stride). Backward passes read the
//! saved tensors directly and build the gradients from fresh vectors.

use crate::cpu::{
    self, act, attn, codebook, conv, depthwise, linear, norm, upsample, with_data, Real,
};
use candle_core::{
    bail, CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor,
};

fn from_vec<T: Real>(v: Vec<T>, shape: &Shape, like: &Tensor) -> Result<Tensor> {
    Tensor::from_vec(v, shape.clone(), like.device())
}

macro_rules! dispatch {
    ($dtype:expr, $f:ident($($args:expr),*)) => {
        match $dtype {
            DType::F32 => $f::<f32>($($args),*),
            DType::F64 => $f::<f64>($($args),*),
            dt => bail!("imgseq-kernels: unsupported dtype {dt:?}"),
        }
    };
}

/// One input of a forward pass: its storage and layout.
type In<'a> = (&'a CpuStorage, &'a Layout);
/// What a forward pass returns.
type Fwd = Result<(CpuStorage, Shape)>;

fn storage_dtype(s: &CpuStorage) -> DType {
    candle_core::backend::BackendStorage::dtype(s)
}

/// Implements candle's `CustomOp1/2/3` for an op: its `name`, a `cpu_fwd` that runs
/// `fwd::<T>(args)` for the first input's dtype (f32 or f64; `fwd_f32`: the function as is, for
/// ops on f32 only) and, when given, a `bwd` that runs `bwd::<T>(args)` for the first input's
/// dtype, binds the gradients it returns to a pattern and hands back the given `Some`s. The
/// names in `fwd(op; s1, l1, ...)` and `bwd(op; x, ...; res, g)` are the op itself and the
/// method's arguments, as the expressions after `=>` use them (the name may use `op` too).
macro_rules! custom_op {
    (@fwd fwd $s1:ident, $f:ident($($a:expr),*)) => {
        dispatch!(storage_dtype($s1), $f($($a),*))
    };
    (@fwd fwd_f32 $s1:ident, $f:ident($($a:expr),*)) => {
        $f($($a),*)
    };
    (@grads CustomOp1) => { Option<Tensor> };
    (@grads CustomOp2) => { (Option<Tensor>, Option<Tensor>) };
    (@grads CustomOp3) => { (Option<Tensor>, Option<Tensor>, Option<Tensor>) };
    (
        $tr:ident for $ty:ty, $name:expr;
        $fwd:ident($op:ident; $s1:ident, $l1:ident $(, $s:ident, $l:ident)*) =>
            $f:ident($($fa:expr),*)
        $(; bwd($bop:ident; $x1:ident $(, $x:ident)*; $res:ident, $g:ident) =>
            $p:pat = $bf:ident($($ba:expr),*) => $out:expr)?
    ) => {
        impl $tr for $ty {
            fn name(&self) -> &'static str {
                let $op = self;
                let _ = $op;
                $name
            }
            fn cpu_fwd(
                &self,
                $s1: &CpuStorage,
                $l1: &Layout,
                $($s: &CpuStorage, $l: &Layout),*
            ) -> Result<(CpuStorage, Shape)> {
                let $op = self;
                custom_op!(@fwd $fwd $s1, $f($($fa),*))
            }
            $(fn bwd(
                &self,
                $x1: &Tensor,
                $($x: &Tensor,)*
                $res: &Tensor,
                $g: &Tensor,
            ) -> Result<custom_op!(@grads $tr)> {
                let $bop = self;
                let $p = dispatch!($x1.dtype(), $bf($($ba),*))?;
                Ok($out)
            })?
        }
    };
}

// ---------------------------------------------------------------------------------------------
// LayerNorm

pub struct LayerNorm {
    pub eps: f64,
}

fn ln_fwd<T: Real>(eps: f64, (s1, l1): In, (s2, l2): In, (s3, l3): In) -> Fwd {
    let x = cpu::slice::<T>(s1, l1)?;
    let w = cpu::slice::<T>(s2, l2)?;
    let b = cpu::slice::<T>(s3, l3)?;
    let d = *l1.dims().last().unwrap_or(&0);
    if w.len() != d || b.len() != d {
        bail!(
            "layer_norm: weight/bias of {} / {} for last dim {d}",
            w.len(),
            b.len()
        );
    }
    Ok((
        T::to_cpu_storage_owned(norm::layer_norm(x, w, b, eps)),
        l1.shape().clone(),
    ))
}

fn ln_bwd<T: Real>(
    eps: f64,
    x: &Tensor,
    w: &Tensor,
    g: &Tensor,
) -> Result<(Tensor, Tensor, Tensor)> {
    let g = g.contiguous()?;
    let (dx, dw, db) = with_data::<T, _>(x, |xs| {
        with_data::<T, _>(w, |ws| {
            with_data::<T, _>(&g, |gs| Ok(norm::layer_norm_bwd(xs, ws, gs, eps)))
        })
    })?;
    Ok((
        from_vec(dx, x.shape(), x)?,
        from_vec(dw, w.shape(), w)?,
        from_vec(db, w.shape(), w)?,
    ))
}

custom_op!(CustomOp3 for LayerNorm, "imgseq-layer-norm";
    fwd(op; s1, l1, s2, l2, s3, l3) => ln_fwd(op.eps, (s1, l1), (s2, l2), (s3, l3));
    bwd(op; x, w, _b; _res, g) =>
        (dx, dw, db) = ln_bwd(op.eps, x, w, g) => (Some(dx), Some(dw), Some(db)));

// ---------------------------------------------------------------------------------------------
// GroupNorm (+ SiLU)

pub struct GroupNorm {
    pub groups: usize,
    pub eps: f64,
    pub silu: bool,
}

fn gn_fwd<T: Real>(op: &GroupNorm, (s1, l1): In, (s2, l2): In, (s3, l3): In) -> Fwd {
    let x = cpu::slice::<T>(s1, l1)?;
    let w = cpu::slice::<T>(s2, l2)?;
    let b = cpu::slice::<T>(s3, l3)?;
    let c = l1.dims()[1];
    let hw = l1.dims()[2..].iter().product();
    if w.len() != c || b.len() != c || op.groups == 0 || (c / op.groups) * op.groups != c {
        bail!(
            "group_norm: {} groups, weight/bias of {} / {} for {c} channels",
            op.groups,
            w.len(),
            b.len()
        );
    }
    let y = norm::group_norm(x, c, hw, op.groups, w, b, op.eps, op.silu);
    Ok((T::to_cpu_storage_owned(y), l1.shape().clone()))
}

fn gn_bwd<T: Real>(
    op: &GroupNorm,
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    g: &Tensor,
) -> Result<(Tensor, Tensor, Tensor)> {
    let g = g.contiguous()?;
    let c = x.dim(1)?;
    let hw = x.dims()[2..].iter().product();
    let (dx, dw, db) = with_data::<T, _>(x, |xs| {
        with_data::<T, _>(w, |ws| {
            with_data::<T, _>(b, |bs| {
                with_data::<T, _>(&g, |gs| {
                    Ok(norm::group_norm_bwd(
                        xs, c, hw, op.groups, ws, bs, gs, op.eps, op.silu,
                    ))
                })
            })
        })
    })?;
    Ok((
        from_vec(dx, x.shape(), x)?,
        from_vec(dw, w.shape(), w)?,
        from_vec(db, b.shape(), b)?,
    ))
}

custom_op!(CustomOp3 for GroupNorm, "imgseq-group-norm";
    fwd(op; s1, l1, s2, l2, s3, l3) => gn_fwd(op, (s1, l1), (s2, l2), (s3, l3));
    bwd(op; x, w, b; _res, g) =>
        (dx, dw, db) = gn_bwd(op, x, w, b, g) => (Some(dx), Some(dw), Some(db)));

// ---------------------------------------------------------------------------------------------
// Element-wise activations and softmax

#[derive(Clone, Copy)]
pub enum Act {
    Gelu,
    GeluTanh,
    QuickGelu,
    Silu,
}

pub struct Activation(pub Act);

fn act_fwd<T: Real>(a: Act, s: &CpuStorage, l: &Layout) -> Fwd {
    let x = cpu::slice::<T>(s, l)?;
    let y = match a {
        Act::Gelu => act::gelu(x),
        Act::GeluTanh => act::gelu_tanh(x),
        Act::QuickGelu => act::quick_gelu(x),
        Act::Silu => act::silu(x),
    };
    Ok((T::to_cpu_storage_owned(y), l.shape().clone()))
}

fn act_bwd<T: Real>(a: Act, x: &Tensor, g: &Tensor) -> Result<Tensor> {
    let g = g.contiguous()?;
    let dx = with_data::<T, _>(x, |xs| {
        with_data::<T, _>(&g, |gs| {
            Ok(match a {
                Act::Gelu => act::gelu_bwd(xs, gs),
                Act::GeluTanh => act::gelu_tanh_bwd(xs, gs),
                Act::QuickGelu => act::quick_gelu_bwd(xs, gs),
                Act::Silu => act::silu_bwd(xs, gs),
            })
        })
    })?;
    from_vec(dx, x.shape(), x)
}

custom_op!(CustomOp1 for Activation, match op.0 {
        Act::Gelu => "imgseq-gelu",
        Act::GeluTanh => "imgseq-gelu-tanh",
        Act::QuickGelu => "imgseq-quick-gelu",
        Act::Silu => "imgseq-silu",
    };
    fwd(op; s, l) => act_fwd(op.0, s, l);
    bwd(op; x; _res, g) => dx = act_bwd(op.0, x, g) => Some(dx));

/// Nearest-neighbour 2× upsampling of (b, c, h, w), with its backward (2×2 block sums) instead
/// of candle's, which runs a grouped convolution with a kernel of ones.
pub struct Upsample2x;

fn up_fwd<T: Real>(s: &CpuStorage, l: &Layout) -> Fwd {
    let x = cpu::slice::<T>(s, l)?;
    let (b, c, h, w) = l.shape().dims4()?;
    Ok((
        T::to_cpu_storage_owned(upsample::upsample2x(x, h, w)),
        Shape::from((b, c, 2 * h, 2 * w)),
    ))
}

fn up_bwd<T: Real>(x: &Tensor, g: &Tensor) -> Result<Tensor> {
    let g = g.contiguous()?;
    let (_, _, h, w) = x.dims4()?;
    let dx = with_data::<T, _>(&g, |gs| Ok(upsample::upsample2x_bwd(gs, h, w)))?;
    from_vec(dx, x.shape(), x)
}

custom_op!(CustomOp1 for Upsample2x, "imgseq-upsample2x";
    fwd(_op; s, l) => up_fwd(s, l);
    bwd(_op; x; _res, g) => dx = up_bwd(x, g) => Some(dx));

pub struct Softmax;

fn sm_fwd<T: Real>(s: &CpuStorage, l: &Layout) -> Fwd {
    let x = cpu::slice::<T>(s, l)?;
    let d = *l.dims().last().unwrap_or(&1);
    Ok((
        T::to_cpu_storage_owned(act::softmax(x, d)),
        l.shape().clone(),
    ))
}

fn sm_bwd<T: Real>(y: &Tensor, g: &Tensor) -> Result<Tensor> {
    let y = y.contiguous()?;
    let g = g.contiguous()?;
    let d = *y.dims().last().unwrap_or(&1);
    let dx = with_data::<T, _>(&y, |ys| {
        with_data::<T, _>(&g, |gs| Ok(act::softmax_bwd(ys, gs, d)))
    })?;
    from_vec(dx, y.shape(), &y)
}

custom_op!(CustomOp1 for Softmax, "imgseq-softmax-last-dim";
    fwd(_op; s, l) => sm_fwd(s, l);
    bwd(_op; x; res, g) => dx = sm_bwd(res, g) => Some(dx));

// ---------------------------------------------------------------------------------------------
// Attention

pub struct Attention {
    pub scale: f64,
    /// Query i attends to keys 0..=i only (decoder self-attention).
    pub causal: bool,
}

/// The (b, h, n, d) view of an attention operand (any strides: the GEMMs take them as given).
pub fn attn_view(l: &Layout) -> Result<(attn::View, attn::Dims)> {
    let dims = l.dims();
    let st = l.stride();
    if dims.len() != 4 {
        bail!("attention: expected (b, heads, n, d), got {:?}", dims);
    }
    Ok((
        attn::View {
            start: l.start_offset(),
            sb: st[0],
            sh: st[1],
            sn: st[2],
            sd: st[3],
        },
        attn::Dims {
            b: dims[0],
            h: dims[1],
            n: dims[2],
            d: dims[3],
        },
    ))
}

fn attn_fwd<T: Real>(mode: attn::Mode, (s1, l1): In, (s2, l2): In, (s3, l3): In) -> Fwd {
    let (qv, dims) = attn_view(l1)?;
    let (kv, kd) = attn_view(l2)?;
    let (vv, vd) = attn_view(l3)?;
    if l1.dims() != l2.dims() || l1.dims() != l3.dims() {
        bail!(
            "attention: q/k/v shapes differ: {:?} {:?} {:?}",
            l1.dims(),
            l2.dims(),
            l3.dims()
        );
    }
    let _ = (kd, vd);
    let q = T::cpu_storage_as_slice(s1)?;
    let k = T::cpu_storage_as_slice(s2)?;
    let v = T::cpu_storage_as_slice(s3)?;
    let out = attn::attention(q, qv, k, kv, v, vv, dims, mode);
    // Laid out (b, n, h, d); ops::attention transposes it back to (b, h, n, d).
    Ok((
        T::to_cpu_storage_owned(out),
        Shape::from((dims.b, dims.n, dims.h, dims.d)),
    ))
}

fn attn_bwd<T: Real>(
    mode: attn::Mode,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    g: &Tensor,
) -> Result<(Tensor, Tensor, Tensor)> {
    let g = g.contiguous()?;
    let (dq, dk, dv) = cpu::with_storage(q, |sq, lq| {
        cpu::with_storage(k, |sk, lk| {
            cpu::with_storage(v, |sv, lv| {
                with_data::<T, _>(&g, |gs| {
                    let (qv, dims) = attn_view(lq)?;
                    let (kv, _) = attn_view(lk)?;
                    let (vv, _) = attn_view(lv)?;
                    Ok(attn::attention_bwd(
                        T::cpu_storage_as_slice(sq)?,
                        qv,
                        T::cpu_storage_as_slice(sk)?,
                        kv,
                        T::cpu_storage_as_slice(sv)?,
                        vv,
                        gs,
                        dims,
                        mode,
                    ))
                })
            })
        })
    })?;
    // The kernels write (b, n, h, d); hand them back as (b, h, n, d) views.
    let (b, h, n, d) = q.dims4()?;
    let back = |x: Vec<T>| Tensor::from_vec(x, (b, n, h, d), q.device())?.transpose(1, 2);
    Ok((back(dq)?, back(dk)?, back(dv)?))
}

impl Attention {
    fn mode(&self) -> attn::Mode {
        attn::Mode {
            scale: self.scale,
            causal: self.causal,
        }
    }
}

custom_op!(CustomOp3 for Attention, "imgseq-attention";
    fwd(op; s1, l1, s2, l2, s3, l3) => attn_fwd(op.mode(), (s1, l1), (s2, l2), (s3, l3));
    bwd(op; q, k, v; _res, g) =>
        (dq, dk, dv) = attn_bwd(op.mode(), q, k, v, g) => (Some(dq), Some(dk), Some(dv)));

// ---------------------------------------------------------------------------------------------
// Conv2d

pub struct Conv2d {
    pub stride: usize,
    /// (left, right, top, bottom)
    pub pad: (usize, usize, usize, usize),
}

impl Conv2d {
    pub(crate) fn geom(&self, x: &[usize], w: &[usize]) -> Result<conv::Geom> {
        if x.len() != 4 || w.len() != 4 || x[1] != w[1] {
            bail!("conv2d: input {x:?} and weight {w:?} do not match");
        }
        let (l, r, t, b) = self.pad;
        if x[2] + t + b < w[2] || x[3] + l + r < w[3] || self.stride == 0 {
            bail!("conv2d: kernel {w:?} larger than padded input {x:?}");
        }
        Ok(conv::Geom {
            b: x[0],
            ci: x[1],
            h: x[2],
            w: x[3],
            co: w[0],
            kh: w[2],
            kw: w[3],
            s: self.stride,
            pad: self.pad,
        })
    }
}

fn conv_fwd<T: Real>(op: &Conv2d, (sx, lx): In, (sw, lw): In, b: Option<In>) -> Fwd {
    let g = op.geom(lx.dims(), lw.dims())?;
    let x = cpu::slice::<T>(sx, lx)?;
    let w = cpu::slice::<T>(sw, lw)?;
    let b = match b {
        Some((s, l)) => {
            let b = cpu::slice::<T>(s, l)?;
            if b.len() != g.co {
                bail!("conv2d: bias of {} for {} output channels", b.len(), g.co);
            }
            Some(b)
        }
        None => None,
    };
    let (ho, wo) = g.out_hw();
    Ok((
        T::to_cpu_storage_owned(conv::conv2d(x, w, b, &g)),
        Shape::from((g.b, g.co, ho, wo)),
    ))
}

fn conv_bwd<T: Real>(
    op: &Conv2d,
    x: &Tensor,
    w: &Tensor,
    g: &Tensor,
) -> Result<(Tensor, Tensor, Tensor)> {
    let gm = op.geom(x.dims(), w.dims())?;
    let gc = g.contiguous()?;
    let (dx, dw, db) = with_data::<T, _>(x, |xs| {
        with_data::<T, _>(w, |ws| {
            with_data::<T, _>(&gc, |gs| Ok(conv::conv2d_bwd(xs, ws, gs, &gm)))
        })
    })?;
    let dev = x.device();
    Ok((
        Tensor::from_vec(dx, x.shape(), dev)?,
        Tensor::from_vec(dw, w.shape(), dev)?,
        Tensor::from_vec(db, gm.co, dev)?,
    ))
}

custom_op!(CustomOp3 for Conv2d, "imgseq-conv2d";
    fwd(op; s1, l1, s2, l2, s3, l3) => conv_fwd(op, (s1, l1), (s2, l2), Some((s3, l3)));
    bwd(op; x, w, _b; _res, g) =>
        (dx, dw, db) = conv_bwd(op, x, w, g) => (Some(dx), Some(dw), Some(db)));

custom_op!(CustomOp2 for Conv2d, "imgseq-conv2d-nobias";
    fwd(op; s1, l1, s2, l2) => conv_fwd(op, (s1, l1), (s2, l2), None);
    bwd(op; x, w; _res, g) => (dx, dw, _) = conv_bwd(op, x, w, g) => (Some(dx), Some(dw)));

// ---------------------------------------------------------------------------------------------
// Depthwise convolution (stride 1, symmetric zero padding)

/// `Conv2d(c, c, k, padding=pad, groups=c, bias=False)` of (b, c, h, w) with weight
/// (c, 1, k, k).
pub struct DepthwiseConv2d {
    pub pad: usize,
}

impl DepthwiseConv2d {
    fn geom(&self, x: &[usize], w: &[usize]) -> Result<depthwise::Geom> {
        if x.len() != 4 || w.len() != 4 || w[0] != x[1] || w[1] != 1 || w[2] != w[3] {
            bail!("depthwise conv2d: input {x:?} and weight {w:?} do not match");
        }
        if x[2] + 2 * self.pad < w[2] || x[3] + 2 * self.pad < w[3] {
            bail!("depthwise conv2d: kernel {w:?} larger than padded input {x:?}");
        }
        Ok(depthwise::Geom {
            c: x[1],
            h: x[2],
            w: x[3],
            k: w[2],
            p: self.pad,
        })
    }
}

fn dw_fwd<T: Real>(op: &DepthwiseConv2d, (sx, lx): In, (sw, lw): In) -> Fwd {
    let g = op.geom(lx.dims(), lw.dims())?;
    let x = cpu::slice::<T>(sx, lx)?;
    let w = cpu::slice::<T>(sw, lw)?;
    let (ho, wo) = g.out_hw();
    Ok((
        T::to_cpu_storage_owned(depthwise::forward(x, w, &g)),
        Shape::from((lx.dims()[0], g.c, ho, wo)),
    ))
}

fn dw_bwd<T: Real>(
    op: &DepthwiseConv2d,
    x: &Tensor,
    w: &Tensor,
    g: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let gm = op.geom(x.dims(), w.dims())?;
    let gc = g.contiguous()?;
    let (dx, dw) = with_data::<T, _>(x, |xs| {
        with_data::<T, _>(w, |ws| {
            with_data::<T, _>(&gc, |gs| Ok(depthwise::backward(xs, ws, gs, &gm)))
        })
    })?;
    Ok((from_vec(dx, x.shape(), x)?, from_vec(dw, w.shape(), w)?))
}

custom_op!(CustomOp2 for DepthwiseConv2d, "imgseq-depthwise-conv2d";
    fwd(op; s1, l1, s2, l2) => dw_fwd(op, (s1, l1), (s2, l2));
    bwd(op; x, w; _res, g) => (dx, dw) = dw_bwd(op, x, w, g) => (Some(dx), Some(dw)));

// ---------------------------------------------------------------------------------------------
// Nearest codebook entry (no backward: the output is an index)

pub struct NearestCodebook;

custom_op!(CustomOp2 for NearestCodebook, "imgseq-nearest-codebook";
    fwd_f32(_op; s1, l1, s2, l2) => codebook_fwd((s1, l1), (s2, l2), codebook::Metric::Euclidean));

/// The codebook row of largest inner product (IBQ's search).
pub struct MaxInnerProduct;

custom_op!(CustomOp2 for MaxInnerProduct, "imgseq-max-inner-product";
    fwd_f32(_op; s1, l1, s2, l2) => codebook_fwd((s1, l1), (s2, l2), codebook::Metric::InnerProduct));

fn codebook_fwd((s1, l1): In, (s2, l2): In, metric: codebook::Metric) -> Fwd {
    let (zd, ed) = (l1.dims(), l2.dims());
    if zd.len() != 2 || ed.len() != 2 || zd[1] != ed[1] {
        bail!("nearest_codebook: z {zd:?} and codebook {ed:?} do not match");
    }
    let z = cpu::slice::<f32>(s1, l1)?;
    let e = cpu::slice::<f32>(s2, l2)?;
    Ok((
        CpuStorage::U32(codebook::nearest_by(z, e, zd[1], metric)),
        Shape::from(zd[0]),
    ))
}

// ---------------------------------------------------------------------------------------------
// Linear

pub struct Linear;

fn lin_dims(lx: &[usize], lw: &[usize]) -> Result<(usize, usize)> {
    let inp = *lx.last().unwrap_or(&0);
    if lw.len() != 2 || lw[1] != inp {
        bail!("linear: input {lx:?} and weight {lw:?} do not match");
    }
    Ok((inp, lw[0]))
}

fn lin_fwd<T: Real>((sx, lx): In, (sw, lw): In, b: Option<In>) -> Fwd {
    let (inp, out) = lin_dims(lx.dims(), lw.dims())?;
    let x = cpu::slice::<T>(sx, lx)?;
    let w = cpu::slice::<T>(sw, lw)?;
    let b = match b {
        Some((s, l)) => Some(cpu::slice::<T>(s, l)?),
        None => None,
    };
    if b.is_some_and(|b| b.len() != out) {
        bail!("linear: bias does not have {out} elements");
    }
    let mut dims = lx.dims().to_vec();
    *dims.last_mut().unwrap() = out;
    Ok((
        T::to_cpu_storage_owned(linear::linear(x, w, b, inp, out)),
        Shape::from(dims),
    ))
}

fn lin_bwd<T: Real>(x: &Tensor, w: &Tensor, g: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    let (inp, out) = lin_dims(x.dims(), w.dims())?;
    let gc = g.contiguous()?;
    let (dx, dw, db) = with_data::<T, _>(x, |xs| {
        with_data::<T, _>(w, |ws| {
            with_data::<T, _>(&gc, |gs| Ok(linear::linear_bwd(xs, ws, gs, inp, out)))
        })
    })?;
    let dev = x.device();
    Ok((
        Tensor::from_vec(dx, x.shape(), dev)?,
        Tensor::from_vec(dw, w.shape(), dev)?,
        Tensor::from_vec(db, out, dev)?,
    ))
}

custom_op!(CustomOp3 for Linear, "imgseq-linear";
    fwd(_op; s1, l1, s2, l2, s3, l3) => lin_fwd((s1, l1), (s2, l2), Some((s3, l3)));
    bwd(_op; x, w, _b; _res, g) =>
        (dx, dw, db) = lin_bwd(x, w, g) => (Some(dx), Some(dw), Some(db)));

custom_op!(CustomOp2 for Linear, "imgseq-linear-nobias";
    fwd(_op; s1, l1, s2, l2) => lin_fwd((s1, l1), (s2, l2), None);
    bwd(_op; x, w; _res, g) => (dx, dw, _) = lin_bwd(x, w, g) => (Some(dx), Some(dw)));

// ---------------------------------------------------------------------------------------------
// bf16 inference: conv and linear on weights packed once (no backward)

/// Conv on bf16-packed weights ([`crate::ops::conv2d_bf16`]).
pub struct Bf16ConvOp {
    pub weights: std::sync::Arc<cpu::bf16::ConvWeights>,
    pub kernel: cpu::bf16::Kernel,
}

custom_op!(CustomOp1 for Bf16ConvOp, "imgseq-conv2d-bf16";
    fwd_f32(op; s, l) => bf16_conv_fwd(op, s, l));

fn bf16_conv_fwd(op: &Bf16ConvOp, s: &CpuStorage, l: &Layout) -> Fwd {
    let (w, d) = (&op.weights, l.dims());
    let (ho, wo) = bf16_out_hw(w, d)?;
    let x = cpu::slice::<f32>(s, l)?;
    let y = cpu::bf16::conv2d(x, d[0], d[2], d[3], w, op.kernel);
    Ok((CpuStorage::F32(y), Shape::from((d[0], w.co, ho, wo))))
}

/// The output size of a bf16 conv of input dims `d`, or why the input does not fit.
pub(crate) fn bf16_out_hw(w: &cpu::bf16::ConvWeights, d: &[usize]) -> Result<(usize, usize)> {
    if d.len() != 4 || d[1] != w.ci {
        bail!(
            "conv2d_bf16: input {d:?} does not match weight ({}, {}, {}, {})",
            w.co,
            w.ci,
            w.kh,
            w.kw
        );
    }
    let (l_, r, t, b) = w.pad;
    if d[2] + t + b < w.kh || d[3] + l_ + r < w.kw {
        bail!(
            "conv2d_bf16: kernel {}x{} larger than padded input {d:?}",
            w.kh,
            w.kw
        );
    }
    Ok(w.out_hw(d[2], d[3]))
}

/// Linear on bf16-packed weights ([`crate::ops::linear_bf16`]).
pub struct Bf16LinearOp {
    pub weights: std::sync::Arc<cpu::bf16::LinearWeights>,
    pub kernel: cpu::bf16::Kernel,
}

custom_op!(CustomOp1 for Bf16LinearOp, "imgseq-linear-bf16";
    fwd_f32(op; s, l) => bf16_linear_fwd(op, s, l));

fn bf16_linear_fwd(op: &Bf16LinearOp, s: &CpuStorage, l: &Layout) -> Fwd {
    let w = &op.weights;
    let mut dims = l.dims().to_vec();
    if dims.last() != Some(&w.inp) {
        bail!(
            "linear_bf16: input {dims:?} does not match weight ({}, {})",
            w.out,
            w.inp
        );
    }
    let x = cpu::slice::<f32>(s, l)?;
    *dims.last_mut().expect("rank ≥ 1") = w.out;
    Ok((
        CpuStorage::F32(cpu::bf16::linear(x, w, op.kernel)),
        Shape::from(dims),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names candle reports for the ops (in errors and graphs) come from `custom_op!`.
    #[test]
    fn custom_ops_keep_their_names() {
        let names3: [&dyn CustomOp3; 5] = [
            &LayerNorm { eps: 1e-5 },
            &GroupNorm {
                groups: 1,
                eps: 1e-5,
                silu: false,
            },
            &Attention {
                scale: 1.0,
                causal: false,
            },
            &Conv2d {
                stride: 1,
                pad: (0, 0, 0, 0),
            },
            &Linear,
        ];
        let got: Vec<_> = names3.iter().map(|o| o.name()).collect();
        assert_eq!(
            got,
            [
                "imgseq-layer-norm",
                "imgseq-group-norm",
                "imgseq-attention",
                "imgseq-conv2d",
                "imgseq-linear"
            ]
        );
        let conv = Conv2d {
            stride: 1,
            pad: (0, 0, 0, 0),
        };
        let names2: [&dyn CustomOp2; 3] = [&conv, &Linear, &NearestCodebook];
        let got: Vec<_> = names2.iter().map(|o| o.name()).collect();
        assert_eq!(
            got,
            [
                "imgseq-conv2d-nobias",
                "imgseq-linear-nobias",
                "imgseq-nearest-codebook"
            ]
        );
        let names1: [&dyn CustomOp1; 6] = [
            &Activation(Act::Gelu),
            &Activation(Act::GeluTanh),
            &Activation(Act::QuickGelu),
            &Activation(Act::Silu),
            &Upsample2x,
            &Softmax,
        ];
        let got: Vec<_> = names1.iter().map(|o| o.name()).collect();
        assert_eq!(
            got,
            [
                "imgseq-gelu",
                "imgseq-gelu-tanh",
                "imgseq-quick-gelu",
                "imgseq-silu",
                "imgseq-upsample2x",
                "imgseq-softmax-last-dim"
            ]
        );
    }
}
