//! The sizes the engine's layers need and the one preallocated block of a shard: the
//! activations the forward saves for the backward, and the backward's scratch.

use imgseq_kernels::cpu::simd::Simd;

use crate::config::ViTConfig;

/// Sizes the kernels need.
#[derive(Debug, Clone, Copy)]
pub(super) struct Dims {
    /// channels, image side, patch side, patches per side
    pub c: usize,
    pub img: usize,
    pub ps: usize,
    pub grid: usize,
    /// patches, tokens (patches + CLS), values per flattened patch (c·p·p)
    pub np: usize,
    pub n: usize,
    pub kp: usize,
    /// hidden, heads, head width, MLP width, labels, layers
    pub d: usize,
    pub h: usize,
    pub hd: usize,
    pub m: usize,
    pub k: usize,
    pub layers: usize,
    pub eps: f32,
    /// 1/√head width
    pub scale: f32,
    /// The element-wise kernels' instructions.
    pub simd: Simd,
}

impl Dims {
    pub fn new(cfg: &ViTConfig) -> Self {
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

    pub fn pixels(&self) -> usize {
        self.c * self.img * self.img
    }
}

/// Per-layer activations of a shard of `cap` images: `layers` slabs of the per-layer size.
pub(super) struct Acts {
    ln1: Vec<f32>, // L × (cap·n, d)
    st1: Vec<f32>, // L × (cap·n, 2): mean, 1/std
    qkv: Vec<f32>, // L × (cap·n, 3d)
    /// L × (cap·h, n, n): softmax probabilities.
    att: Vec<f32>,
    ctx: Vec<f32>, // L × (cap·n, d)
    ln2: Vec<f32>, // L × (cap·n, d)
    st2: Vec<f32>, // L × (cap·n, 2)
    fch: Vec<f32>, // L × (cap·n, m): before GELU, then (the forward) GELU′ there
    fcg: Vec<f32>, // L × (cap·n, m): after GELU
}

/// One layer's activations for a shard of `nb` images.
pub(super) struct LayerActs<'a> {
    pub ln1: &'a mut [f32],
    pub st1: &'a mut [f32],
    pub qkv: &'a mut [f32],
    pub att: &'a mut [f32],
    pub ctx: &'a mut [f32],
    pub ln2: &'a mut [f32],
    pub st2: &'a mut [f32],
    pub fch: &'a mut [f32],
    pub fcg: &'a mut [f32],
}

/// The backward's scratch (one layer at a time).
pub(super) struct Scratch {
    pub dx: Vec<f32>,   // (cap·n, d): dL/d residual stream
    pub dt: Vec<f32>,   // (cap·n, d): dL/d LayerNorm outputs, dL/d ctx
    pub dqkv: Vec<f32>, // (cap·n, 3d)
    pub dfc: Vec<f32>,  // (cap·n, m)
    pub at: Vec<f32>,   // attention scratch: (n, n)
    pub row: Vec<f32>,  // (d): x̂ of one row
}

/// Activations of one shard of `cap` images (saved by the forward for the backward) and the
/// backward's scratch, allocated once per worker.
pub(super) struct Workspace {
    pub cap: usize,
    pub patches: Vec<f32>, // (cap·np, kp)
    /// Residual stream: x0, then per layer the mid (after attention) and out: (2L+1) × (cap·n, d).
    pub xs: Vec<f32>,
    pub acts: Acts,
    pub lnf: Vec<f32>,    // (cap, d): final LayerNorm of the CLS rows
    pub stf: Vec<f32>,    // (cap, 2)
    pub logits: Vec<f32>, // (cap, k); the backward turns them into dL/dlogits
    pub scratch: Scratch,
}

impl Workspace {
    pub fn new(dm: &Dims, cap: usize) -> Self {
        let rows = cap * dm.n;
        let l = dm.layers;
        let z = |len: usize| vec![0f32; len];
        Self {
            cap,
            patches: z(cap * dm.np * dm.kp),
            xs: z((2 * l + 1) * rows * dm.d),
            acts: Acts {
                ln1: z(l * rows * dm.d),
                st1: z(l * rows * 2),
                qkv: z(l * rows * 3 * dm.d),
                att: z(l * cap * dm.h * dm.n * dm.n),
                ctx: z(l * rows * dm.d),
                ln2: z(l * rows * dm.d),
                st2: z(l * rows * 2),
                fch: z(l * rows * dm.m),
                fcg: z(l * rows * dm.m),
            },
            lnf: z(cap * dm.d),
            stf: z(cap * 2),
            logits: z(cap * dm.k),
            scratch: Scratch {
                dx: z(rows * dm.d),
                dt: z(rows * dm.d),
                dqkv: z(rows * 3 * dm.d),
                dfc: z(rows * dm.m),
                at: z(dm.n * dm.n),
                row: z(dm.d),
            },
        }
    }
}

impl Acts {
    /// Layer `li`'s activations of the first `nb` of `cap` images.
    pub fn layer(&mut self, dm: &Dims, cap: usize, li: usize, nb: usize) -> LayerActs<'_> {
        let (slab, r) = (cap * dm.n, nb * dm.n);
        let (d, d3, m, nn) = (dm.d, 3 * dm.d, dm.m, dm.n * dm.n);
        LayerActs {
            ln1: &mut self.ln1[li * slab * d..][..r * d],
            st1: &mut self.st1[li * slab * 2..][..r * 2],
            qkv: &mut self.qkv[li * slab * d3..][..r * d3],
            att: &mut self.att[li * cap * dm.h * nn..][..nb * dm.h * nn],
            ctx: &mut self.ctx[li * slab * d..][..r * d],
            ln2: &mut self.ln2[li * slab * d..][..r * d],
            st2: &mut self.st2[li * slab * 2..][..r * 2],
            fch: &mut self.fch[li * slab * m..][..r * m],
            fcg: &mut self.fcg[li * slab * m..][..r * m],
        }
    }
}

/// The layer's input, mid (after attention) and output slabs of the residual stream.
pub(super) fn residuals(
    xs: &mut [f32],
    li: usize,
    slab: usize,
    len: usize,
) -> (&mut [f32], &mut [f32], &mut [f32]) {
    let (before, after) = xs.split_at_mut((2 * li + 1) * slab);
    let (mid, out) = after.split_at_mut(slab);
    (
        &mut before[2 * li * slab..][..len],
        &mut mid[..len],
        &mut out[..len],
    )
}
