//! The whole `ViTForImageClassification` forward and backward written out by hand, for f32
//! training on the CPU (as llm.c does for GPT-2): no autograd graph, no tensor per op.
//!
//! pixels (b, c, s, s)
//!   → patch conv (k = stride = patch, as one GEMM per image) → CLS first → + positions
//!   → L pre-LN blocks: x + Wo·attn(LN(x)), then x + W2·GELU(W1·LN(x))   (HF's exact ops:
//!     erf GELU, `layer_norm_eps`, `qkv_bias`)
//!   → final LayerNorm (of the CLS rows only: nothing else reaches the loss) → classifier
//!   → cross-entropy with label smoothing against hard labels or soft targets.
//!
//! * Parameters and gradients are flat f32 arrays in one fixed order, [`ParamLayout`], mapped
//!   1:1 to the HF safetensors names (q, k and v weights are adjacent, so they are one
//!   (3·hidden, hidden) matrix, and so are their biases).
//! * The batch is cut into shards of a fixed number of images (independent of the thread
//!   count); each shard runs its forward and backward on one thread over activation buffers
//!   allocated once per worker, and writes its own gradient array; the arrays are summed in
//!   shard order. So results are the same on 1 or 16 threads, and every step of a run
//!   (interrupted and resumed or not) is bit-for-bit reproducible.
//! * LayerNorm, bias, GELU and residual are single passes; every gradient is written in place
//!   (no zeroed fresh buffers, no accumulation through generic element-wise ops).
//!
//! The reference is the candle model in [`crate::model`] through candle's autograd
//! (`imgseq vit train --engine autograd`); tests hold the two within 1e-4 of each other and
//! of PyTorch.

use candle_core::{Device, Tensor};
use imgseq_core::optim::state_format;
use imgseq_core::{Error, Result};
use imgseq_kernels::cpu::{dot, dot3, fast_exp_f32_fma, max, sum, sum_sq_dev};
use rayon::prelude::*;
use std::collections::HashMap;
use std::ops::Range;

use crate::config::ViTConfig;

/// Images per shard unless [`FusedViT::with_shard_images`] says otherwise: small enough that
/// a shard's activations stay in cache between its forward and backward, large enough for
/// efficient GEMMs (8 images of the seed model = 520 rows).
pub const SHARD_IMAGES: usize = 8;

/// Whether AdamW's weight decay applies to a parameter: matrices (and the patch conv), not
/// biases, norms, the CLS token or the position embeddings. Both engines use this rule.
pub fn decays(name: &str, rank: usize) -> bool {
    rank >= 2 && !name.contains("embeddings.cls_token") && !name.contains("position_embeddings")
}

/// One parameter: its HF name, shape and place in the flat arrays.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub offset: usize,
    /// Whether weight decay applies ([`decays`]).
    pub decay: bool,
}

impl ParamSpec {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn range(&self) -> Range<usize> {
        self.offset..self.offset + self.len()
    }
}

/// Offsets of one encoder layer's parameters.
#[derive(Debug, Clone, Copy)]
struct LayerParams {
    ln1_w: usize,
    ln1_b: usize,
    /// query, key, value weights back to back: (3·hidden, hidden).
    qkv_w: usize,
    /// query, key, value biases back to back (3·hidden), when `qkv_bias`.
    qkv_b: Option<usize>,
    o_w: usize,
    o_b: usize,
    ln2_w: usize,
    ln2_b: usize,
    fc1_w: usize,
    fc1_b: usize,
    fc2_w: usize,
    fc2_b: usize,
}

/// The order of the parameters in the flat arrays, with their HF names.
#[derive(Debug, Clone)]
pub struct ParamLayout {
    pub specs: Vec<ParamSpec>,
    len: usize,
    cls: usize,
    pos: usize,
    patch_w: usize,
    patch_b: usize,
    layers: Vec<LayerParams>,
    lnf_w: usize,
    lnf_b: usize,
    head_w: usize,
    head_b: usize,
}

impl ParamLayout {
    pub fn new(cfg: &ViTConfig) -> Self {
        let (d, m, c, p) = (
            cfg.hidden_size,
            cfg.intermediate_size,
            cfg.num_channels,
            cfg.patch_size,
        );
        let mut specs: Vec<ParamSpec> = Vec::new();
        let mut len = 0;
        let mut add = |name: String, shape: Vec<usize>| {
            let offset = len;
            len += shape.iter().product::<usize>();
            let decay = decays(&name, shape.len());
            specs.push(ParamSpec {
                name,
                shape,
                offset,
                decay,
            });
            offset
        };
        let e = "vit.embeddings";
        let cls = add(format!("{e}.cls_token"), vec![1, 1, d]);
        let pos = add(
            format!("{e}.position_embeddings"),
            vec![1, cfg.num_tokens(), d],
        );
        let patch_w = add(
            format!("{e}.patch_embeddings.projection.weight"),
            vec![d, c, p, p],
        );
        let patch_b = add(format!("{e}.patch_embeddings.projection.bias"), vec![d]);
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                let l = format!("vit.encoder.layer.{i}");
                let a = format!("{l}.attention.attention");
                let ln1_w = add(format!("{l}.layernorm_before.weight"), vec![d]);
                let ln1_b = add(format!("{l}.layernorm_before.bias"), vec![d]);
                let qkv_w = add(format!("{a}.query.weight"), vec![d, d]);
                add(format!("{a}.key.weight"), vec![d, d]);
                add(format!("{a}.value.weight"), vec![d, d]);
                let qkv_b = cfg.qkv_bias.then(|| {
                    let q = add(format!("{a}.query.bias"), vec![d]);
                    add(format!("{a}.key.bias"), vec![d]);
                    add(format!("{a}.value.bias"), vec![d]);
                    q
                });
                LayerParams {
                    ln1_w,
                    ln1_b,
                    qkv_w,
                    qkv_b,
                    o_w: add(format!("{l}.attention.output.dense.weight"), vec![d, d]),
                    o_b: add(format!("{l}.attention.output.dense.bias"), vec![d]),
                    ln2_w: add(format!("{l}.layernorm_after.weight"), vec![d]),
                    ln2_b: add(format!("{l}.layernorm_after.bias"), vec![d]),
                    fc1_w: add(format!("{l}.intermediate.dense.weight"), vec![m, d]),
                    fc1_b: add(format!("{l}.intermediate.dense.bias"), vec![m]),
                    fc2_w: add(format!("{l}.output.dense.weight"), vec![d, m]),
                    fc2_b: add(format!("{l}.output.dense.bias"), vec![d]),
                }
            })
            .collect();
        let lnf_w = add("vit.layernorm.weight".into(), vec![d]);
        let lnf_b = add("vit.layernorm.bias".into(), vec![d]);
        let k = cfg.num_labels();
        let head_w = add("classifier.weight".into(), vec![k, d]);
        let head_b = add("classifier.bias".into(), vec![k]);
        Self {
            specs,
            len,
            cls,
            pos,
            patch_w,
            patch_b,
            layers,
            lnf_w,
            lnf_b,
            head_w,
            head_b,
        }
    }

    /// Number of f32 values in a flat parameter (or gradient) array.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, name: &str) -> Option<&ParamSpec> {
        self.specs.iter().find(|s| s.name == name)
    }

    /// The flat array `flat` as named tensors with the HF shapes.
    pub fn to_tensors(&self, flat: &[f32]) -> Result<HashMap<String, Tensor>> {
        self.check_len(flat)?;
        self.specs
            .iter()
            .map(|s| {
                let t = Tensor::from_slice(&flat[s.range()], s.shape.as_slice(), &Device::Cpu)?;
                Ok((s.name.clone(), t))
            })
            .collect()
    }

    /// A flat array from named tensors whose names are `prefix` + the HF names (tensors with
    /// other names are ignored). A missing or misshapen tensor is a one-line error naming it.
    pub fn from_tensors(
        &self,
        tensors: &HashMap<String, Tensor>,
        prefix: &str,
    ) -> Result<Vec<f32>> {
        let mut flat = vec![0f32; self.len];
        for s in &self.specs {
            let key = format!("{prefix}{}", s.name);
            let t = tensors
                .get(&key)
                .ok_or_else(|| Error::invalid(format!("missing tensor `{key}`")))?;
            if t.dims() != s.shape.as_slice() {
                return Err(Error::invalid(format!(
                    "tensor `{key}` has shape {:?}, expected {:?}",
                    t.dims(),
                    s.shape
                )));
            }
            let v = t
                .flatten_all()?
                .to_dtype(candle_core::DType::F32)?
                .to_vec1::<f32>()?;
            flat[s.range()].copy_from_slice(&v);
        }
        Ok(flat)
    }

    fn check_len(&self, flat: &[f32]) -> Result<()> {
        if flat.len() != self.len {
            return Err(Error::invalid(format!(
                "a parameter array of {} values for a model of {}",
                flat.len(),
                self.len
            )));
        }
        Ok(())
    }
}

/// What the loss compares the logits with.
#[derive(Debug, Clone, Copy)]
pub enum Targets<'a> {
    /// One class index per image.
    Labels(&'a [u32]),
    /// Class probabilities per image, (b, num_labels) row-major — e.g. a teacher's softmax.
    Probs(&'a [f32]),
}

/// Sizes the kernels need.
#[derive(Debug, Clone, Copy)]
struct Dims {
    /// channels, image side, patch side, patches per side
    c: usize,
    img: usize,
    ps: usize,
    grid: usize,
    /// patches, tokens (patches + CLS), values per flattened patch (c·p·p)
    np: usize,
    n: usize,
    kp: usize,
    /// hidden, heads, head width, MLP width, labels, layers
    d: usize,
    h: usize,
    hd: usize,
    m: usize,
    k: usize,
    layers: usize,
    eps: f32,
    /// 1/√head width
    scale: f32,
    /// The element-wise kernels' instructions.
    simd: Simd,
}

impl Dims {
    fn new(cfg: &ViTConfig) -> Self {
        let grid = cfg.grid();
        let hd = cfg.head_dim();
        Self {
            c: cfg.num_channels,
            img: cfg.image_size,
            ps: cfg.patch_size,
            grid,
            np: grid * grid,
            n: grid * grid + 1,
            kp: cfg.num_channels * cfg.patch_size * cfg.patch_size,
            d: cfg.hidden_size,
            h: cfg.num_attention_heads,
            hd,
            m: cfg.intermediate_size,
            k: cfg.num_labels(),
            layers: cfg.num_hidden_layers,
            eps: cfg.layer_norm_eps as f32,
            scale: (1.0 / (hd as f64).sqrt()) as f32,
            simd: Simd::best(),
        }
    }

    fn pixels(&self) -> usize {
        self.c * self.img * self.img
    }
}

/// Activations of one shard of `cap` images (saved by the forward for the backward) and the
/// backward's scratch. Per-layer buffers are `layers` slabs of the per-layer size.
struct Workspace {
    cap: usize,
    patches: Vec<f32>, // (cap·np, kp)
    /// Residual stream: x0, then per layer the mid (after attention) and out: (2L+1) × (cap·n, d).
    xs: Vec<f32>,
    ln1: Vec<f32>, // L × (cap·n, d)
    st1: Vec<f32>, // L × (cap·n, 2): mean, 1/std
    qkv: Vec<f32>, // L × (cap·n, 3d)
    /// L × (cap·h, n, n): softmax probabilities.
    att: Vec<f32>,
    ctx: Vec<f32>,    // L × (cap·n, d)
    ln2: Vec<f32>,    // L × (cap·n, d)
    st2: Vec<f32>,    // L × (cap·n, 2)
    fch: Vec<f32>,    // L × (cap·n, m): before GELU, then (the forward) GELU′ there
    fcg: Vec<f32>,    // L × (cap·n, m): after GELU
    lnf: Vec<f32>,    // (cap, d): final LayerNorm of the CLS rows
    stf: Vec<f32>,    // (cap, 2)
    logits: Vec<f32>, // (cap, k); the backward turns them into dL/dlogits
    dx: Vec<f32>,     // (cap·n, d): dL/d residual stream
    dt: Vec<f32>,     // (cap·n, d): dL/d LayerNorm outputs, dL/d ctx
    dqkv: Vec<f32>,   // (cap·n, 3d)
    dfc: Vec<f32>,    // (cap·n, m)
    at: Vec<f32>,     // attention scratch: (n, n)
    row: Vec<f32>,    // (d): x̂ of one row
}

impl Workspace {
    fn new(dm: &Dims, cap: usize) -> Self {
        let rows = cap * dm.n;
        let l = dm.layers;
        let z = |len: usize| vec![0f32; len];
        Self {
            cap,
            patches: z(cap * dm.np * dm.kp),
            xs: z((2 * l + 1) * rows * dm.d),
            ln1: z(l * rows * dm.d),
            st1: z(l * rows * 2),
            qkv: z(l * rows * 3 * dm.d),
            att: z(l * cap * dm.h * dm.n * dm.n),
            ctx: z(l * rows * dm.d),
            ln2: z(l * rows * dm.d),
            st2: z(l * rows * 2),
            fch: z(l * rows * dm.m),
            fcg: z(l * rows * dm.m),
            lnf: z(cap * dm.d),
            stf: z(cap * 2),
            logits: z(cap * dm.k),
            dx: z(rows * dm.d),
            dt: z(rows * dm.d),
            dqkv: z(rows * 3 * dm.d),
            dfc: z(rows * dm.m),
            at: z(dm.n * dm.n),
            row: z(dm.d),
        }
    }
}

/// The fused ViT: buffers and the kernels that run a model's forward and backward on flat
/// parameter arrays laid out by [`ParamLayout`].
pub struct FusedViT {
    dims: Dims,
    layout: ParamLayout,
    shard_images: usize,
    /// One per worker thread, made on first use.
    workers: Vec<Workspace>,
    /// Gradients of shards 1.. (shard 0 writes into the caller's array).
    shard_grads: Vec<Vec<f32>>,
}

impl FusedViT {
    /// The engine for models of `cfg` (checked with [`ViTConfig::validate`]).
    pub fn new(cfg: &ViTConfig) -> Result<Self> {
        cfg.validate()?;
        Ok(Self {
            dims: Dims::new(cfg),
            layout: ParamLayout::new(cfg),
            shard_images: SHARD_IMAGES,
            workers: Vec::new(),
            shard_grads: Vec::new(),
        })
    }

    /// Images per shard (≥ 1): the unit of parallel work; it changes the summation order of
    /// the gradients, nothing else.
    pub fn with_shard_images(mut self, n: usize) -> Self {
        self.shard_images = n.max(1);
        self.workers.clear();
        self
    }

    /// Runs the element-wise kernels with the instructions of `simd`, or of the best level
    /// this CPU has if that is lower ([`Simd::best`]). Every level gives the same bits.
    pub fn with_simd(mut self, simd: Simd) -> Self {
        self.dims.simd = simd.min(Simd::best());
        self
    }

    /// The level the element-wise kernels run at.
    pub fn simd(&self) -> Simd {
        self.dims.simd
    }

    pub fn layout(&self) -> &ParamLayout {
        &self.layout
    }

    /// (shards, workers) for a batch of `b`, with the workers' buffers made.
    fn plan(&mut self, b: usize) -> (usize, usize) {
        let shards = b.div_ceil(self.shard_images);
        let nw = rayon::current_num_threads().clamp(1, shards.max(1));
        while self.workers.len() < nw {
            self.workers
                .push(Workspace::new(&self.dims, self.shard_images));
        }
        (shards, nw)
    }

    fn check_input(&self, params: &[f32], x: &[f32]) -> Result<usize> {
        self.layout.check_len(params)?;
        let px = self.dims.pixels();
        if x.is_empty() || !x.len().is_multiple_of(px) {
            return Err(Error::invalid(format!(
                "an input of {} values is not a batch of {}x{}x{} images",
                x.len(),
                self.dims.c,
                self.dims.img,
                self.dims.img
            )));
        }
        Ok(x.len() / px)
    }

    /// Logits (b, num_labels) of a batch `x` (b, c, s, s) at the configured image size.
    pub fn logits(&mut self, params: &[f32], x: &[f32]) -> Result<Vec<f32>> {
        let b = self.check_input(params, x)?;
        let (_, nw) = self.plan(b);
        let (dm, lay, si, px) = (
            &self.dims,
            &self.layout,
            self.shard_images,
            self.dims.pixels(),
        );
        let k = dm.k;
        let mut out = vec![0f32; b * k];
        let mut jobs: Vec<Vec<(usize, &mut [f32])>> = (0..nw).map(|_| Vec::new()).collect();
        for (s, o) in out.chunks_mut(si * k).enumerate() {
            jobs[s % nw].push((s, o));
        }
        self.workers[..nw]
            .par_iter_mut()
            .zip(jobs)
            .for_each(|(ws, jobs)| {
                for (s, o) in jobs {
                    let nb = o.len() / k;
                    forward_shard(dm, lay, params, ws, &x[s * si * px..][..nb * px], nb, false);
                    o.copy_from_slice(&ws.logits[..nb * k]);
                }
            });
        Ok(out)
    }

    /// One training step's forward and backward: writes dL/dθ into `grads` (same layout as
    /// `params`) and returns the mean loss over the batch. The loss is the cross-entropy with
    /// label smoothing ε against `targets`: −Σ_k t'_k log p_k with t' = (1 − ε)·t + ε/K.
    pub fn forward_backward(
        &mut self,
        params: &[f32],
        grads: &mut [f32],
        x: &[f32],
        targets: Targets,
        label_smoothing: f64,
    ) -> Result<f64> {
        let b = self.check_input(params, x)?;
        self.layout.check_len(grads)?;
        let k = self.dims.k;
        match targets {
            Targets::Labels(y) => {
                if y.len() != b {
                    return Err(Error::invalid(format!(
                        "{} labels for a batch of {b}",
                        y.len()
                    )));
                }
                if let Some(bad) = y.iter().find(|&&c| c as usize >= k) {
                    return Err(Error::invalid(format!(
                        "label {bad} out of range for a {k}-class model"
                    )));
                }
            }
            Targets::Probs(t) => {
                if t.len() != b * k {
                    return Err(Error::invalid(format!(
                        "{} target probabilities for a batch of {b} and {k} classes",
                        t.len()
                    )));
                }
                if t.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
                    return Err(Error::invalid(
                        "target probabilities must be finite and ≥ 0",
                    ));
                }
            }
        }
        if !(0.0..1.0).contains(&label_smoothing) {
            return Err(Error::setting(
                "label_smoothing",
                label_smoothing,
                "must be in [0, 1)",
            ));
        }
        let (shards, nw) = self.plan(b);
        let n_params = self.layout.len();
        while self.shard_grads.len() + 1 < shards {
            self.shard_grads.push(vec![0f32; n_params]);
        }
        let (dm, lay, si, px) = (
            &self.dims,
            &self.layout,
            self.shard_images,
            self.dims.pixels(),
        );
        let loss_cfg = LossCfg {
            eps: label_smoothing as f32,
            batch: b,
        };
        let mut jobs: Vec<Vec<(usize, &mut [f32])>> = (0..nw).map(|_| Vec::new()).collect();
        let slots = std::iter::once(&mut *grads)
            .chain(self.shard_grads.iter_mut().map(|g| g.as_mut_slice()))
            .take(shards);
        for (s, g) in slots.enumerate() {
            jobs[s % nw].push((s, g));
        }
        let losses: Vec<Vec<(usize, f64)>> = self.workers[..nw]
            .par_iter_mut()
            .zip(jobs)
            .map(|(ws, jobs)| {
                jobs.into_iter()
                    .map(|(s, g)| {
                        let lo = s * si;
                        let nb = (b - lo).min(si);
                        forward_shard(dm, lay, params, ws, &x[lo * px..][..nb * px], nb, true);
                        let t = match targets {
                            Targets::Labels(y) => ShardTargets::Labels(&y[lo..lo + nb]),
                            Targets::Probs(t) => ShardTargets::Probs(&t[lo * dm.k..][..nb * dm.k]),
                        };
                        let loss = loss_and_grad(&mut ws.logits[..nb * dm.k], dm.k, t, loss_cfg);
                        backward_shard(dm, lay, params, ws, nb, g);
                        (s, loss)
                    })
                    .collect()
            })
            .collect();
        let mut per_shard = vec![0f64; shards];
        for (s, l) in losses.into_iter().flatten() {
            per_shard[s] = l;
        }
        // The shards' gradients, summed in shard order (the same on any number of threads).
        if shards > 1 {
            let others = &self.shard_grads[..shards - 1];
            let simd = self.dims.simd;
            const CHUNK: usize = 4096;
            grads.par_chunks_mut(CHUNK).enumerate().for_each(|(ci, g)| {
                for o in others {
                    add_assign(simd, g, &o[ci * CHUNK..][..g.len()]);
                }
            });
        }
        Ok(per_shard.iter().sum::<f64>() / b as f64)
    }
}

#[derive(Debug, Clone, Copy)]
struct LossCfg {
    eps: f32,
    /// Images in the whole batch (the loss is their mean).
    batch: usize,
}

enum ShardTargets<'a> {
    Labels(&'a [u32]),
    Probs(&'a [f32]),
}

/// Σ over the shard's images of the smoothed cross-entropy; replaces the logits (nb, k) by
/// dL/dlogits of the batch mean: (p·Σt' − t') / batch.
fn loss_and_grad(z: &mut [f32], k: usize, t: ShardTargets, cfg: LossCfg) -> f64 {
    let mut total = 0f64;
    let uniform = cfg.eps / k as f32;
    let inv_b = 1.0 / cfg.batch as f32;
    for (i, z) in z.chunks_exact_mut(k).enumerate() {
        let mx = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let se: f32 = z.iter().map(|v| (v - mx).exp()).sum();
        let lse = mx + se.ln();
        let target = |j: usize| -> f32 {
            let tj = match &t {
                ShardTargets::Labels(y) => {
                    if y[i] as usize == j {
                        1.0
                    } else {
                        0.0
                    }
                }
                ShardTargets::Probs(p) => p[i * k + j],
            };
            (1.0 - cfg.eps) * tj + uniform
        };
        let t_sum: f32 = (0..k).map(target).sum();
        let mut loss = 0f64;
        for (j, zj) in z.iter_mut().enumerate() {
            let tj = target(j);
            loss += (tj * (lse - *zj)) as f64;
            *zj = ((*zj - lse).exp() * t_sum - tj) * inv_b;
        }
        total += loss;
    }
    total
}

// ------------------------------------------------------------------ forward and backward

/// Forward of `nb` images `x` (nb, c, s, s) through the whole model into `ws` (logits in
/// `ws.logits`); `for_backward`: also leave every activation the backward needs (GELU's
/// derivative in `ws.fch`), else skip computing what only the backward reads.
#[allow(clippy::too_many_arguments)]
fn forward_shard(
    dm: &Dims,
    lay: &ParamLayout,
    p: &[f32],
    ws: &mut Workspace,
    x: &[f32],
    nb: usize,
    for_backward: bool,
) {
    let Dims {
        c,
        img,
        ps,
        grid,
        np,
        n,
        kp,
        d,
        h,
        hd,
        m,
        k,
        layers,
        eps,
        scale,
        simd,
    } = *dm;
    let cap = ws.cap;
    let r = nb * n;
    let (d3, rd, nn) = (3 * d, cap * n * d, n * n);
    // Patches in (c, py, px) order, raster over the grid: (nb·np, kp).
    for b in 0..nb {
        for gy in 0..grid {
            for gx in 0..grid {
                let row = &mut ws.patches[(b * np + gy * grid + gx) * kp..][..kp];
                for ch in 0..c {
                    for py in 0..ps {
                        let src = &x[((b * c + ch) * img + gy * ps + py) * img + gx * ps..][..ps];
                        row[(ch * ps + py) * ps..][..ps].copy_from_slice(src);
                    }
                }
            }
        }
    }
    // Embeddings: row 0 = CLS + pos 0, row 1 + i = patch_i·Wᵀ + bias + pos (1 + i).
    {
        let (cls, pos, pb) = (
            &p[lay.cls..][..d],
            &p[lay.pos..][..n * d],
            &p[lay.patch_b..][..d],
        );
        let x0 = &mut ws.xs[..r * d];
        for b in 0..nb {
            let xb = &mut x0[b * n * d..][..n * d];
            add_rows(simd, &mut xb[..d], &pos[..d], cls);
            add_rows(simd, &mut xb[d..], &pos[d..], pb);
            mm(
                np,
                d,
                kp,
                &mut xb[d..],
                d,
                true,
                &ws.patches[b * np * kp..],
                (kp, 1),
                &p[lay.patch_w..],
                (1, kp),
                1.0,
            );
        }
    }
    for (li, lp) in lay.layers.iter().enumerate() {
        let (x_in, x_mid, x_out) = residuals(&mut ws.xs, li, rd, r * d);
        let ln1 = &mut ws.ln1[li * rd..][..r * d];
        let st1 = &mut ws.st1[li * cap * n * 2..][..r * 2];
        ln_fwd_rows(
            simd,
            x_in,
            &p[lp.ln1_w..][..d],
            &p[lp.ln1_b..][..d],
            ln1,
            st1,
            eps,
        );
        let qkv = &mut ws.qkv[li * cap * n * d3..][..r * d3];
        match lp.qkv_b {
            Some(o) => fill_rows(qkv, &p[o..][..d3]),
            None => qkv.fill(0.0),
        }
        mm(
            r,
            d3,
            d,
            qkv,
            d3,
            true,
            ln1,
            (d, 1),
            &p[lp.qkv_w..],
            (1, d),
            1.0,
        );
        let att = &mut ws.att[li * cap * h * nn..][..nb * h * nn];
        let ctx = &mut ws.ctx[li * rd..][..r * d];
        for b in 0..nb {
            for hh in 0..h {
                let base = b * n * d3 + hh * hd;
                let hc = HeadCols {
                    q: base,
                    k: base + d,
                    v: base + 2 * d,
                    ld: d3,
                    n,
                    hd,
                    scale,
                };
                attn_fwd_head(
                    simd,
                    qkv,
                    hc,
                    &mut att[(b * h + hh) * nn..][..nn],
                    &mut ctx[b * n * d + hh * hd..],
                    d,
                );
            }
        }
        add_rows(simd, x_mid, x_in, &p[lp.o_b..][..d]);
        mm(
            r,
            d,
            d,
            x_mid,
            d,
            true,
            ctx,
            (d, 1),
            &p[lp.o_w..],
            (1, d),
            1.0,
        );
        let ln2 = &mut ws.ln2[li * rd..][..r * d];
        let st2 = &mut ws.st2[li * cap * n * 2..][..r * 2];
        ln_fwd_rows(
            simd,
            x_mid,
            &p[lp.ln2_w..][..d],
            &p[lp.ln2_b..][..d],
            ln2,
            st2,
            eps,
        );
        let fch = &mut ws.fch[li * cap * n * m..][..r * m];
        fill_rows(fch, &p[lp.fc1_b..][..m]);
        mm(
            r,
            m,
            d,
            fch,
            m,
            true,
            ln2,
            (d, 1),
            &p[lp.fc1_w..],
            (1, d),
            1.0,
        );
        let fcg = &mut ws.fcg[li * cap * n * m..][..r * m];
        if for_backward {
            gelu_fwd(simd, fch, fcg);
        } else {
            gelu_only(simd, fch, fcg);
        }
        add_rows(simd, x_out, x_mid, &p[lp.fc2_b..][..d]);
        mm(
            r,
            d,
            m,
            x_out,
            d,
            true,
            fcg,
            (m, 1),
            &p[lp.fc2_w..],
            (1, m),
            1.0,
        );
    }
    // Final LayerNorm of the CLS rows and the classifier.
    let x_last = &ws.xs[2 * layers * rd..][..r * d];
    for b in 0..nb {
        ln_fwd_rows(
            simd,
            &x_last[b * n * d..][..d],
            &p[lay.lnf_w..][..d],
            &p[lay.lnf_b..][..d],
            &mut ws.lnf[b * d..][..d],
            &mut ws.stf[b * 2..][..2],
            eps,
        );
    }
    let logits = &mut ws.logits[..nb * k];
    fill_rows(logits, &p[lay.head_b..][..k]);
    mm(
        nb,
        k,
        d,
        logits,
        k,
        true,
        &ws.lnf,
        (d, 1),
        &p[lay.head_w..],
        (1, d),
        1.0,
    );
}

/// Backward of [`forward_shard`] from dL/dlogits (in `ws.logits`): writes the shard's
/// gradient of every parameter into `g` (set, not accumulated).
fn backward_shard(
    dm: &Dims,
    lay: &ParamLayout,
    p: &[f32],
    ws: &mut Workspace,
    nb: usize,
    g: &mut [f32],
) {
    let Dims {
        np,
        n,
        kp,
        d,
        h,
        hd,
        m,
        k,
        layers,
        scale,
        simd,
        ..
    } = *dm;
    let cap = ws.cap;
    let r = nb * n;
    let (d3, rd, nn) = (3 * d, cap * n * d, n * n);
    let Workspace {
        patches,
        xs,
        ln1,
        st1,
        qkv,
        att,
        ctx,
        ln2,
        st2,
        fch,
        fcg,
        lnf,
        stf,
        logits,
        dx,
        dt,
        dqkv,
        dfc,
        at: at_scratch,
        row,
        ..
    } = ws;
    let dlogits = &logits[..nb * k];
    // Classifier: dW = dzᵀ·lnf, db = Σ dz, dlnf = dz·W.
    mm(
        k,
        d,
        nb,
        &mut g[lay.head_w..],
        d,
        false,
        dlogits,
        (1, k),
        lnf,
        (d, 1),
        1.0,
    );
    col_sum(simd, dlogits, &mut g[lay.head_b..][..k]);
    let dx = &mut dx[..r * d];
    let dt = &mut dt[..r * d];
    mm(
        nb,
        d,
        k,
        dt,
        d,
        false,
        dlogits,
        (k, 1),
        &p[lay.head_w..],
        (d, 1),
        1.0,
    );
    // Final LayerNorm: only the CLS rows get a gradient.
    dx.fill(0.0);
    {
        let (gw, gb) = two_mut(g, lay.lnf_w, lay.lnf_b, d);
        gw.fill(0.0);
        gb.fill(0.0);
        let x_last = &xs[2 * layers * rd..][..r * d];
        for b in 0..nb {
            ln_bwd_rows(
                simd,
                &dt[b * d..][..d],
                &x_last[b * n * d..][..d],
                &stf[b * 2..][..2],
                &p[lay.lnf_w..][..d],
                &mut dx[b * n * d..][..d],
                gw,
                gb,
                row,
            );
        }
    }
    for (li, lp) in lay.layers.iter().enumerate().rev() {
        let x_in = &xs[2 * li * rd..][..r * d];
        let x_mid = &xs[(2 * li + 1) * rd..][..r * d];
        let (ln1, st1) = (&ln1[li * rd..][..r * d], &st1[li * cap * n * 2..][..r * 2]);
        let (ln2, st2) = (&ln2[li * rd..][..r * d], &st2[li * cap * n * 2..][..r * 2]);
        let qkv = &qkv[li * cap * n * d3..][..r * d3];
        let att = &att[li * cap * h * nn..][..nb * h * nn];
        let ctx = &ctx[li * rd..][..r * d];
        let fch = &fch[li * cap * n * m..][..r * m];
        let fcg = &fcg[li * cap * n * m..][..r * m];
        let dfc = &mut dfc[..r * m];
        let dqkv = &mut dqkv[..r * d3];
        // MLP out: dgelu = dx·W2, dW2 = dxᵀ·gelu, db2 = Σ dx.
        mm(
            r,
            m,
            d,
            dfc,
            m,
            false,
            dx,
            (d, 1),
            &p[lp.fc2_w..],
            (m, 1),
            1.0,
        );
        mm(
            d,
            m,
            r,
            &mut g[lp.fc2_w..],
            m,
            false,
            dx,
            (1, d),
            fcg,
            (m, 1),
            1.0,
        );
        col_sum(simd, dx, &mut g[lp.fc2_b..][..d]);
        // GELU, then MLP in: dW1 = dhᵀ·ln2, db1 = Σ dh, dln2 = dh·W1.
        mul_assign(simd, dfc, fch); // GELU′ (the forward left it in fch)
        mm(
            m,
            d,
            r,
            &mut g[lp.fc1_w..],
            d,
            false,
            dfc,
            (1, m),
            ln2,
            (d, 1),
            1.0,
        );
        col_sum(simd, dfc, &mut g[lp.fc1_b..][..m]);
        mm(
            r,
            d,
            m,
            dt,
            d,
            false,
            dfc,
            (m, 1),
            &p[lp.fc1_w..],
            (d, 1),
            1.0,
        );
        {
            let (gw, gb) = two_mut(g, lp.ln2_w, lp.ln2_b, d);
            gw.fill(0.0);
            gb.fill(0.0);
            ln_bwd_rows(simd, dt, x_mid, st2, &p[lp.ln2_w..][..d], dx, gw, gb, row);
        }
        // Attention output: dctx = dx·Wo, dWo = dxᵀ·ctx, dbo = Σ dx.
        mm(r, d, d, dt, d, false, dx, (d, 1), &p[lp.o_w..], (d, 1), 1.0);
        mm(
            d,
            d,
            r,
            &mut g[lp.o_w..],
            d,
            false,
            dx,
            (1, d),
            ctx,
            (d, 1),
            1.0,
        );
        col_sum(simd, dx, &mut g[lp.o_b..][..d]);
        // Attention per image and head (dO = dctx of the head).
        for b in 0..nb {
            for hh in 0..h {
                let base = b * n * d3 + hh * hd;
                let hc = HeadCols {
                    q: base,
                    k: base + d,
                    v: base + 2 * d,
                    ld: d3,
                    n,
                    hd,
                    scale,
                };
                attn_bwd_head(
                    simd,
                    qkv,
                    hc,
                    &att[(b * h + hh) * nn..][..nn],
                    &dt[b * n * d + hh * hd..],
                    d,
                    dqkv,
                    at_scratch,
                );
            }
        }
        // QKV: dW = dqkvᵀ·ln1, db = Σ dqkv, dln1 = dqkv·W.
        mm(
            d3,
            d,
            r,
            &mut g[lp.qkv_w..],
            d,
            false,
            dqkv,
            (1, d3),
            ln1,
            (d, 1),
            1.0,
        );
        if let Some(o) = lp.qkv_b {
            col_sum(simd, dqkv, &mut g[o..][..d3]);
        }
        mm(
            r,
            d,
            d3,
            dt,
            d,
            false,
            dqkv,
            (d3, 1),
            &p[lp.qkv_w..],
            (d, 1),
            1.0,
        );
        {
            let (gw, gb) = two_mut(g, lp.ln1_w, lp.ln1_b, d);
            gw.fill(0.0);
            gb.fill(0.0);
            ln_bwd_rows(simd, dt, x_in, st1, &p[lp.ln1_w..][..d], dx, gw, gb, row);
        }
    }
    // Embeddings: CLS and positions sum over images; the patch conv over patch rows.
    {
        let gc = &mut g[lay.cls..][..d];
        gc.fill(0.0);
        for b in 0..nb {
            add_assign(simd, gc, &dx[b * n * d..][..d]);
        }
    }
    {
        let gp = &mut g[lay.pos..][..n * d];
        gp.copy_from_slice(&dx[..n * d]);
        for b in 1..nb {
            add_assign(simd, gp, &dx[b * n * d..][..n * d]);
        }
    }
    {
        let gb = &mut g[lay.patch_b..][..d];
        gb.fill(0.0);
        for b in 0..nb {
            col_sum_acc(simd, &dx[(b * n + 1) * d..][..np * d], gb);
        }
    }
    for b in 0..nb {
        mm(
            d,
            kp,
            np,
            &mut g[lay.patch_w..],
            kp,
            b > 0,
            &dx[(b * n + 1) * d..],
            (1, d),
            &patches[b * np * kp..],
            (kp, 1),
            1.0,
        );
    }
}

/// The layer's input, mid (after attention) and output slabs of the residual stream.
fn residuals(
    xs: &mut [f32],
    li: usize,
    slab: usize,
    len: usize,
) -> (&[f32], &mut [f32], &mut [f32]) {
    let (before, after) = xs.split_at_mut((2 * li + 1) * slab);
    let (mid, out) = after.split_at_mut(slab);
    (
        &before[2 * li * slab..][..len],
        &mut mid[..len],
        &mut out[..len],
    )
}

/// Two disjoint `len`-long windows of `g` starting at `a` < `b`.
fn two_mut(g: &mut [f32], a: usize, b: usize, len: usize) -> (&mut [f32], &mut [f32]) {
    assert!(a + len <= b);
    let (lo, hi) = g.split_at_mut(b);
    (&mut lo[a..][..len], &mut hi[..len])
}

// ------------------------------------------------------------------ GEMM

/// dst (m×n, row stride `ld`) = [dst +] alpha · a (m×k) · b (k×n), with a and b given by
/// (row, column) strides. Single-threaded: the shards are the parallelism.
#[allow(clippy::too_many_arguments)]
fn mm(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    ld: usize,
    acc: bool,
    a: &[f32],
    (ars, acs): (usize, usize),
    b: &[f32],
    (brs, bcs): (usize, usize),
    alpha: f32,
) {
    if m == 0 || n == 0 {
        return;
    }
    let covers = |len: usize, rows: usize, cols: usize, rs: usize, cs: usize| {
        rows == 0 || cols == 0 || len > (rows - 1) * rs + (cols - 1) * cs
    };
    assert!(covers(dst.len(), m, n, ld, 1), "mm: destination too short");
    if k == 0 {
        if !acc {
            for i in 0..m {
                dst[i * ld..][..n].fill(0.0);
            }
        }
        return;
    }
    assert!(
        covers(a.len(), m, k, ars, acs) && covers(b.len(), k, n, brs, bcs),
        "mm: operand too short"
    );
    // SAFETY: every operand covers its strided range (checked above); `dst` is a unique
    // borrow, so it does not overlap `a` or `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            ld as isize,
            acc,
            a.as_ptr(),
            acs as isize,
            ars as isize,
            b.as_ptr(),
            bcs as isize,
            brs as isize,
            if acc { 1.0 } else { 0.0 },
            alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

// ------------------------------------------------------------------ row kernels

/// The vector instructions the element-wise kernels (LayerNorm, softmax, GELU, bias,
/// residual) are compiled for, picked at run time. All levels compute the same arithmetic
/// in the same order (no implicit FMA contraction; the explicit `mul_add`s of GELU and exp
/// are one rounding everywhere, libm's `fmaf` on the portable path; reductions over 8 fixed
/// lanes), so they give the same bits; the GEMMs pick their own kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Simd {
    /// Baseline x86-64 (SSE2) or another architecture.
    Portable,
    /// AVX2 + FMA.
    Avx2,
    /// AVX-512 (F, VL) + AVX2 + FMA.
    Avx512,
}

impl Simd {
    /// The best level this CPU has.
    pub fn best() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512vl")
                && std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
            {
                return Simd::Avx512;
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return Simd::Avx2;
            }
        }
        Simd::Portable
    }
}

/// Defines `fn name(simd: Simd, args)` whose body is compiled for AVX-512, AVX2 + FMA and the
/// baseline target, running the version `simd` names (a level the CPU has: [`Simd::best`]
/// caps every level a [`FusedViT`] uses).
macro_rules! simd_kernel {
    ($(#[$m:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        #[allow(clippy::too_many_arguments)]
        fn $name(simd: Simd, $($arg: $ty),*) {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn inner($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn v4($($arg: $ty),*) {
                inner($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn v3($($arg: $ty),*) {
                inner($($arg),*)
            }
            match simd {
                // SAFETY: a `FusedViT` only uses levels up to `Simd::best()`, i.e. levels
                // whose instructions this CPU has.
                #[cfg(target_arch = "x86_64")]
                Simd::Avx512 => unsafe { v4($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                Simd::Avx2 => unsafe { v3($($arg),*) },
                _ => inner($($arg),*),
            }
        }
    };
}

simd_kernel! {
    /// LayerNorm of rows of `w.len()`: y = (x − mean)/√(var + eps)·w + b; keeps (mean, 1/std)
    /// per row in `st`.
    fn ln_fwd_rows(x: &[f32], w: &[f32], b: &[f32], y: &mut [f32], st: &mut [f32], eps: f32) {
        let d = w.len();
        let inv_d = 1.0 / d as f32;
        for ((x, y), st) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)).zip(st.chunks_exact_mut(2)) {
            let mean = sum(x) * inv_d;
            let var = sum_sq_dev(x, mean) * inv_d;
            let rstd = 1.0 / (var + eps).sqrt();
            st[0] = mean;
            st[1] = rstd;
            for (((y, x), w), b) in y.iter_mut().zip(x).zip(w).zip(b) {
                *y = (*x - mean) * rstd * *w + *b;
            }
        }
    }
}

simd_kernel! {
    /// LayerNorm backward given dL/dy `g`: dx += rstd·(g·w − mean(g·w) − x̂·mean(g·w·x̂)),
    /// dw += g·x̂, db += g. `xh` is one row of scratch.
    fn ln_bwd_rows(g: &[f32], x: &[f32], st: &[f32], w: &[f32], dx: &mut [f32], dw: &mut [f32], db: &mut [f32], xh: &mut [f32]) {
        let d = w.len();
        let inv_d = 1.0 / d as f32;
        let xh = &mut xh[..d];
        for (((g, x), st), dx) in g.chunks_exact(d).zip(x.chunks_exact(d)).zip(st.chunks_exact(2)).zip(dx.chunks_exact_mut(d)) {
            let (mean, rstd) = (st[0], st[1]);
            for ((((xh, x), g), dw), db) in xh.iter_mut().zip(x).zip(g).zip(dw.iter_mut()).zip(db.iter_mut()) {
                *xh = (*x - mean) * rstd;
                *dw += *g * *xh;
                *db += *g;
            }
            let a = dot(g, w) * inv_d;
            let c = dot3(g, w, xh) * inv_d;
            for (((dx, g), w), xh) in dx.iter_mut().zip(g).zip(w).zip(xh.iter()) {
                *dx += rstd * (*g * *w - a - *xh * c);
            }
        }
    }
}

simd_kernel! {
    /// Every row of `dst` (rows of `bias.len()`) = the same row of `src` + bias.
    fn add_rows(dst: &mut [f32], src: &[f32], bias: &[f32]) {
        let d = bias.len();
        for (y, x) in dst.chunks_exact_mut(d).zip(src.chunks_exact(d)) {
            for ((y, x), b) in y.iter_mut().zip(x).zip(bias) {
                *y = *x + *b;
            }
        }
    }
}

/// Every row of `dst` = `row`.
fn fill_rows(dst: &mut [f32], row: &[f32]) {
    for y in dst.chunks_exact_mut(row.len()) {
        y.copy_from_slice(row);
    }
}

simd_kernel! {
    /// out += Σ rows (rows of `out.len()`).
    fn col_sum_acc(rows: &[f32], out: &mut [f32]) {
        for r in rows.chunks_exact(out.len()) {
            for (o, v) in out.iter_mut().zip(r) {
                *o += *v;
            }
        }
    }
}

/// out = Σ rows (rows of `out.len()`).
fn col_sum(simd: Simd, rows: &[f32], out: &mut [f32]) {
    out.fill(0.0);
    col_sum_acc(simd, rows, out);
}

simd_kernel! {
    /// y += x
    fn add_assign(y: &mut [f32], x: &[f32]) {
        for (y, x) in y.iter_mut().zip(x) {
            *y += *x;
        }
    }
}

simd_kernel! {
    /// y *= x
    fn mul_assign(y: &mut [f32], x: &[f32]) {
        for (y, x) in y.iter_mut().zip(x) {
            *y *= *x;
        }
    }
}

// GELU (erf form) with the erfc approximation of `imgseq_kernels` (relative error < 1.2e-7,
// exact in the tails), so that both engines compute the same function.

const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// 1/√(2π)
const INV_SQRT_2PI: f32 = 0.398_942_3;

/// erfc(z) for z ≥ 0 (Numerical Recipes `erfcc`; the coefficients as printed there and in
/// `imgseq_kernels::cpu::act`, whose generic version this f32 one mirrors for the SIMD loops).
/// Horner steps are fused multiply-adds (`mul_add`: one rounding each, so every SIMD level and
/// the portable path, where it is libm's `fmaf`, give the same bits).
#[inline(always)]
#[allow(clippy::excessive_precision)]
fn erfc_pos(z: f32) -> f32 {
    let t = 1.0 / 0.5f32.mul_add(z, 1.0);
    let mut p = 0.17087277f32;
    for c in [
        -0.82215223,
        1.48851587,
        -1.13520398,
        0.27886807,
        -0.18628806,
        0.09678418,
        0.37409196,
        1.00002368,
        -1.26551223,
    ] {
        p = p.mul_add(t, c);
    }
    t * fast_exp_f32_fma((-z).mul_add(z, p))
}

/// Φ(x), the normal CDF: what GELU's y = x·Φ(x) multiplies by (one owner for the training
/// and inference forwards, so their y agree bit for bit).
#[inline(always)]
fn gelu_cdf(x: f32) -> f32 {
    let half = 0.5 * erfc_pos(x.abs() * FRAC_1_SQRT_2);
    if x < 0.0 {
        half
    } else {
        1.0 - half
    }
}

simd_kernel! {
    /// GELU forward: y = x·Φ(x); `h` (the pre-activation x) is replaced by the derivative
    /// Φ(x) + x·φ(x), all the backward needs.
    fn gelu_fwd(h: &mut [f32], y: &mut [f32]) {
        for (h, y) in h.iter_mut().zip(y.iter_mut()) {
            let x = *h;
            let cdf = gelu_cdf(x);
            *y = x * cdf;
            *h = (x * INV_SQRT_2PI).mul_add(fast_exp_f32_fma(-0.5 * x * x), cdf);
        }
    }
}

simd_kernel! {
    /// GELU forward without the derivative (inference): the same y as [`gelu_fwd`], bit for
    /// bit, at one exp per value instead of two.
    fn gelu_only(h: &[f32], y: &mut [f32]) {
        for (h, y) in h.iter().zip(y.iter_mut()) {
            *y = *h * gelu_cdf(*h);
        }
    }
}

// ------------------------------------------------------------------ attention

/// Where one head's q, k and v columns are in the (rows, 3·hidden) qkv buffer.
#[derive(Debug, Clone, Copy)]
struct HeadCols {
    q: usize,
    k: usize,
    v: usize,
    /// Row stride of qkv (3·hidden).
    ld: usize,
    /// Tokens, head width, softmax scale.
    n: usize,
    hd: usize,
    scale: f32,
}

simd_kernel! {
    /// Row softmax of the n×n scores `s`, in place. The exp runs as one loop over all n²
    /// values (rows of 65 would leave a scalar tail of one value in every row's loop).
    fn softmax_rows(s: &mut [f32], n: usize) {
        for row in s.chunks_exact_mut(n) {
            let m = max(row);
            for x in row.iter_mut() {
                *x -= m;
            }
        }
        for x in s.iter_mut() {
            *x = fast_exp_f32_fma(*x);
        }
        for row in s.chunks_exact_mut(n) {
            let inv = 1.0 / sum(row);
            for x in row.iter_mut() {
                *x *= inv;
            }
        }
    }
}

simd_kernel! {
    /// dS ← P ⊙ (dP − rowsum(P ⊙ dP)) · scale, row by row (dP in `ds`).
    fn softmax_bwd_rows(p: &[f32], ds: &mut [f32], n: usize, scale: f32) {
        for (p, ds) in p.chunks_exact(n).zip(ds.chunks_exact_mut(n)) {
            let r = dot(p, ds);
            for (g, p) in ds.iter_mut().zip(p) {
                *g = *p * (*g - r) * scale;
            }
        }
    }
}

/// One head's attention: `p` (n × n) ← P = softmax(scale·Q·Kᵀ) (kept for the backward),
/// ctx rows (stride ldc) ← P·V. The two products are GEMMs.
fn attn_fwd_head(
    simd: Simd,
    qkv: &[f32],
    hc: HeadCols,
    p: &mut [f32],
    ctx: &mut [f32],
    ldc: usize,
) {
    let HeadCols {
        q,
        k,
        v,
        ld,
        n,
        hd,
        scale,
    } = hc;
    // S = scale · Q·Kᵀ: Kᵀ's (row, col) strides are (1, ld).
    mm(
        n,
        n,
        hd,
        p,
        n,
        false,
        &qkv[q..],
        (ld, 1),
        &qkv[k..],
        (1, ld),
        scale,
    );
    softmax_rows(simd, &mut p[..n * n], n);
    mm(
        n,
        hd,
        n,
        ctx,
        ldc,
        false,
        p,
        (n, 1),
        &qkv[v..],
        (ld, 1),
        1.0,
    ); // P·V
}

/// Backward of [`attn_fwd_head`] given P and dL/dctx `d_o` (rows at stride ldo): writes dQ,
/// dK, dV into dqkv's head columns. `ds`: n × n scratch.
#[allow(clippy::too_many_arguments)]
fn attn_bwd_head(
    simd: Simd,
    qkv: &[f32],
    hc: HeadCols,
    p: &[f32],
    d_o: &[f32],
    ldo: usize,
    dqkv: &mut [f32],
    ds: &mut [f32],
) {
    let HeadCols {
        q,
        k,
        v,
        ld,
        n,
        hd,
        scale,
    } = hc;
    let ds = &mut ds[..n * n];
    mm(
        n,
        hd,
        n,
        &mut dqkv[v..],
        ld,
        false,
        p,
        (1, n),
        d_o,
        (ldo, 1),
        1.0,
    ); // dV = Pᵀ·dO
    mm(
        n,
        n,
        hd,
        ds,
        n,
        false,
        d_o,
        (ldo, 1),
        &qkv[v..],
        (1, ld),
        1.0,
    ); // dP = dO·Vᵀ
    softmax_bwd_rows(simd, &p[..n * n], ds, n, scale); // dS
    mm(
        n,
        hd,
        n,
        &mut dqkv[q..],
        ld,
        false,
        ds,
        (n, 1),
        &qkv[k..],
        (ld, 1),
        1.0,
    ); // dQ = dS·K
    mm(
        n,
        hd,
        n,
        &mut dqkv[k..],
        ld,
        false,
        ds,
        (1, n),
        &qkv[q..],
        (ld, 1),
        1.0,
    ); // dK = dSᵀ·Q
}

// ------------------------------------------------------------------ optimizer and EMA

/// AdamW on flat arrays with exactly the arithmetic of [`imgseq_core::optim::AdamW`]
/// (torch's AdamW, amsgrad off) and the same saved state (`<name>.exp_avg`,
/// `<name>.exp_avg_sq`, `step`), so a run can switch engines on resume.
pub struct FlatAdamW {
    layout: ParamLayout,
    m: Vec<f32>,
    v: Vec<f32>,
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Updates done so far (the bias-correction step `t`).
    pub step: usize,
}

impl FlatAdamW {
    /// β = (0.9, 0.999), ε = 1e-8 (as the candle-side AdamW).
    pub fn new(layout: &ParamLayout, lr: f64, weight_decay: f64) -> Self {
        Self {
            layout: layout.clone(),
            m: vec![0.0; layout.len()],
            v: vec![0.0; layout.len()],
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay,
            step: 0,
        }
    }

    /// One update of `params` from `grads`.
    pub fn update(&mut self, params: &mut [f32], grads: &[f32]) -> Result<()> {
        self.layout.check_len(params)?;
        self.layout.check_len(grads)?;
        self.step += 1;
        let t = self.step as i32;
        let (b1, b2) = (self.beta1 as f32, self.beta2 as f32);
        let bc1 = 1.0 - self.beta1.powi(t);
        let bc2_sqrt = (1.0 - self.beta2.powi(t)).sqrt() as f32;
        let step_size = (self.lr / bc1) as f32;
        let eps = self.eps as f32;
        let decayed = 1.0 - (self.lr * self.weight_decay) as f32;
        let c = AdamConsts {
            b1,
            b2,
            bc2_sqrt,
            step_size,
            eps,
        };
        for s in &self.layout.specs {
            let r = s.range();
            let shrink = if s.decay { decayed } else { 1.0 };
            adamw_slice(
                &mut params[r.clone()],
                &grads[r.clone()],
                &mut self.m[r.clone()],
                &mut self.v[r],
                shrink,
                c,
            );
        }
        Ok(())
    }

    /// Moment tensors by name plus the step count, in `imgseq_core::optim::state_format`
    /// (the candle-side AdamW's form too).
    pub fn state(&self) -> Result<HashMap<String, Tensor>> {
        let mut out = HashMap::new();
        for s in &self.layout.specs {
            let (m, v) = (&self.m[s.range()], &self.v[s.range()]);
            state_format::put_moments(&mut out, &s.name, &s.shape, m, v)?;
        }
        state_format::put_step(&mut out, self.step)?;
        Ok(out)
    }

    /// Restores what [`state`](Self::state) (or the candle-side AdamW) saved. The error is a
    /// one-line description (the caller adds the file name).
    pub fn load_state(
        &mut self,
        state: &HashMap<String, Tensor>,
    ) -> std::result::Result<(), String> {
        for s in &self.layout.specs {
            let (m, v) = (&mut self.m[s.range()], &mut self.v[s.range()]);
            state_format::take_moments(state, &s.name, &s.shape, m, v)?;
        }
        self.step = state_format::take_step(state)?;
        Ok(())
    }
}

#[derive(Clone, Copy)]
struct AdamConsts {
    b1: f32,
    b2: f32,
    bc2_sqrt: f32,
    step_size: f32,
    eps: f32,
}

/// The AdamW update of one parameter, term for term as `imgseq_core::optim::AdamW::step`.
fn adamw_slice(
    theta: &mut [f32],
    g: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    shrink: f32,
    c: AdamConsts,
) {
    for i in 0..theta.len() {
        m[i] = c.b1 * m[i] + (1.0 - c.b1) * g[i];
        v[i] = c.b2 * v[i] + (1.0 - c.b2) * g[i] * g[i];
        let denom = v[i].sqrt() / c.bc2_sqrt + c.eps;
        theta[i] = theta[i] * shrink - c.step_size * m[i] / denom;
    }
}

/// Exponential moving average of weights (the one rule lives in `imgseq_core::optim`).
pub use imgseq_core::optim::ema_update;

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_cfg() -> ViTConfig {
        let mut c = ViTConfig::seed(2, &["a", "b", "c"]);
        c.image_size = 8;
        c.patch_size = 4;
        c.hidden_size = 6;
        c.num_attention_heads = 2;
        c.intermediate_size = 5;
        c.num_hidden_layers = 1;
        c
    }

    #[test]
    fn layout_covers_every_parameter_once_in_hf_names() {
        let cfg = ViTConfig::fashion_mnist();
        let lay = ParamLayout::new(&cfg);
        assert_eq!(lay.len(), crate::model::param_count(&cfg));
        let mut end = 0;
        for s in &lay.specs {
            assert_eq!(s.offset, end, "{}", s.name);
            end += s.len();
        }
        assert_eq!(end, lay.len());
        // q, k, v weights form one (3d, d) matrix, and their biases one (3d) vector.
        let q = lay
            .get("vit.encoder.layer.1.attention.attention.query.weight")
            .unwrap();
        let v = lay
            .get("vit.encoder.layer.1.attention.attention.value.weight")
            .unwrap();
        assert_eq!(v.offset, q.offset + 2 * 48 * 48);
        let qb = lay
            .get("vit.encoder.layer.1.attention.attention.query.bias")
            .unwrap();
        let vb = lay
            .get("vit.encoder.layer.1.attention.attention.value.bias")
            .unwrap();
        assert_eq!(vb.offset, qb.offset + 2 * 48);
        assert!(lay.get("classifier.weight").unwrap().decay);
        assert!(!lay.get("vit.embeddings.position_embeddings").unwrap().decay);
        assert!(!lay.get("vit.layernorm.weight").unwrap().decay);
    }

    #[test]
    fn inference_gelu_and_softmax_are_the_training_ones_bit_for_bit_at_every_simd_level() {
        // gelu_only (no derivative) must give gelu_fwd's y; softmax_rows must give the
        // row-at-a-time softmax it replaced; every level the same bits.
        let xs: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.731).sin() * 9.0).collect();
        let levels: Vec<Simd> = [Simd::Portable, Simd::Avx2, Simd::Avx512]
            .into_iter()
            .filter(|&l| l <= Simd::best())
            .collect();
        for &l in &levels {
            let (mut h, mut y1, mut y2) = (xs.clone(), vec![0f32; 1000], vec![0f32; 1000]);
            gelu_only(l, &xs, &mut y2);
            gelu_fwd(l, &mut h, &mut y1);
            assert!(
                y1.iter().zip(&y2).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{l:?}"
            );
            let n = 65;
            let mut s: Vec<f32> = (0..n * n).map(|i| (i as f32 * 0.37).cos() * 30.0).collect();
            let mut want = s.clone();
            for row in want.chunks_exact_mut(n) {
                let m = max(row);
                row.iter_mut().for_each(|x| *x = fast_exp_f32_fma(*x - m));
                let inv = 1.0 / sum(row);
                row.iter_mut().for_each(|x| *x *= inv);
            }
            softmax_rows(l, &mut s, n);
            assert!(
                s.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{l:?}"
            );
        }
        if levels.len() < 3 {
            eprintln!("note: this CPU lacks AVX-512 or AVX2; tested levels {levels:?} only");
        }
    }

    #[test]
    fn layout_without_qkv_bias_has_no_qkv_biases() {
        let mut cfg = tiny_cfg();
        cfg.qkv_bias = false;
        let lay = ParamLayout::new(&cfg);
        assert!(lay.specs.iter().all(|s| !s.name.ends_with("query.bias")));
        assert_eq!(lay.len(), crate::model::param_count(&cfg) - 3 * 6);
    }

    #[test]
    fn from_tensors_names_a_missing_or_misshapen_tensor() {
        let cfg = tiny_cfg();
        let lay = ParamLayout::new(&cfg);
        let flat: Vec<f32> = (0..lay.len()).map(|i| i as f32).collect();
        let mut t = lay.to_tensors(&flat).unwrap();
        assert_eq!(lay.from_tensors(&t, "").unwrap(), flat);
        t.insert(
            "vit.layernorm.bias".into(),
            Tensor::zeros(7, candle_core::DType::F32, &Device::Cpu).unwrap(),
        );
        let e = lay.from_tensors(&t, "").unwrap_err().to_string();
        assert_eq!(e, "tensor `vit.layernorm.bias` has shape [7], expected [6]");
        t.insert(
            "vit.layernorm.bias".into(),
            Tensor::zeros(6, candle_core::DType::F32, &Device::Cpu).unwrap(),
        );
        t.remove("classifier.bias");
        let e = lay.from_tensors(&t, "").unwrap_err().to_string();
        assert!(e.contains("missing tensor `classifier.bias`"), "{e}");
    }

    #[test]
    fn bad_inputs_and_targets_are_one_line_errors() {
        let cfg = tiny_cfg();
        let mut net = FusedViT::new(&cfg).unwrap();
        let p = vec![0.1f32; net.layout().len()];
        let mut g = vec![0f32; p.len()];
        let x = vec![0f32; 2 * 2 * 8 * 8];
        let e = net.logits(&p, &x[1..]).unwrap_err().to_string();
        assert!(e.contains("not a batch of 2x8x8 images"), "{e}");
        let e = net
            .forward_backward(&p, &mut g, &x, Targets::Labels(&[0, 3]), 0.0)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "label 3 out of range for a 3-class model");
        let e = net
            .forward_backward(&p, &mut g, &x, Targets::Probs(&[0.5; 5]), 0.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("5 target probabilities"), "{e}");
        let e = net
            .forward_backward(&p, &mut g, &x, Targets::Labels(&[0, 1]), 1.0)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("label_smoothing 1"), "{e}");
    }

    /// Uniform logits: the loss is ln K whatever the targets, and with labels the gradient of
    /// the logits is (1/K − t')/b — checked through the classifier bias gradient.
    #[test]
    fn loss_of_uniform_logits_is_ln_k() {
        let mut z = vec![0.0f32; 6];
        let l = loss_and_grad(
            &mut z,
            3,
            ShardTargets::Labels(&[2, 0]),
            LossCfg { eps: 0.3, batch: 4 },
        );
        assert!((l - 2.0 * 3f64.ln()).abs() < 1e-6, "{l}");
        let t2 = 0.7 + 0.1;
        assert!((z[2] - (1.0 / 3.0 - t2) / 4.0).abs() < 1e-7);
        assert!((z[0] - (1.0 / 3.0 - 0.1) / 4.0).abs() < 1e-7);
    }

    #[test]
    fn flat_adamw_is_bitwise_the_candle_side_adamw() {
        use candle_core::Var;
        let cfg = tiny_cfg();
        let lay = ParamLayout::new(&cfg);
        let mut theta: Vec<f32> = (0..lay.len())
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0)
            .collect();
        let vars: Vec<(String, Var, bool)> = lay
            .specs
            .iter()
            .map(|s| {
                let t = Tensor::from_slice(&theta[s.range()], s.shape.as_slice(), &Device::Cpu)
                    .unwrap();
                (s.name.clone(), Var::from_tensor(&t).unwrap(), s.decay)
            })
            .collect();
        let mut reference = imgseq_core::optim::AdamW::new(vars.clone(), 3e-3, 0.05).unwrap();
        let mut flat = FlatAdamW::new(&lay, 3e-3, 0.05);
        for step in 0..3 {
            // loss = Σ θ³/3 + step·Σ θ → g = θ² + step
            let loss = vars
                .iter()
                .map(|(_, v, _)| {
                    let t = v.as_tensor();
                    ((t.powf(3.0).unwrap() / 3.0).unwrap() + (t * step as f64).unwrap())
                        .unwrap()
                        .sum_all()
                        .unwrap()
                })
                .reduce(|a, b| (a + b).unwrap())
                .unwrap();
            let grads = loss.backward().unwrap();
            let mut g = vec![0f32; lay.len()];
            for (s, (_, v, _)) in lay.specs.iter().zip(&vars) {
                let gv = grads.get(v.as_tensor()).unwrap().flatten_all().unwrap();
                g[s.range()].copy_from_slice(&gv.to_vec1::<f32>().unwrap());
            }
            reference.lr = 3e-3 / (step + 1) as f64;
            flat.lr = reference.lr;
            reference.step(&grads).unwrap();
            flat.update(&mut theta, &g).unwrap();
        }
        for (s, (_, v, _)) in lay.specs.iter().zip(&vars) {
            let want = v
                .as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            assert_eq!(&theta[s.range()], want.as_slice(), "{}", s.name);
        }
        let (a, b) = (reference.state().unwrap(), flat.state().unwrap());
        assert_eq!(a.len(), b.len());
        for (k, t) in &a {
            let u = &b[k];
            let flat = |t: &Tensor| {
                t.flatten_all()
                    .unwrap()
                    .to_dtype(candle_core::DType::F64)
                    .unwrap()
                    .to_vec1::<f64>()
                    .unwrap()
            };
            assert_eq!(flat(t), flat(u), "{k}");
        }
        let mut again = FlatAdamW::new(&lay, 3e-3, 0.05);
        again.load_state(&a).unwrap();
        assert_eq!(again.step, 3);
        assert_eq!(
            (again.m.clone(), again.v.clone()),
            (flat.m.clone(), flat.v.clone())
        );
    }
}
