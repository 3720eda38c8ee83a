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
//!
//! One file per part, in llm.c's shape: `layout` (the flat arrays), `workspace` (sizes and
//! the one preallocated block per worker), `forward` (one `*_forward` per layer, called in
//! order), `backward` (one `*_backward` per layer, called in reverse), `loss`. The numeric
//! rules are not owned here: GEMM, attention heads, LayerNorm, GELU and softmax rows are
//! `imgseq_kernels::cpu::{heads, rows}` at an `imgseq_kernels::cpu::simd::Simd` level, and
//! AdamW is `imgseq_core::optim::FlatAdamW`.

use imgseq_core::{Error, Result};
use imgseq_kernels::cpu::rows::add_assign;
use rayon::prelude::*;

use crate::config::ViTConfig;

mod backward;
mod forward;
mod layout;
mod loss;
mod workspace;

use backward::backward_shard;
use forward::forward_shard;
use loss::{loss_and_grad, LossCfg};
use workspace::{Dims, Workspace};

/// Exponential moving average of weights (the one rule lives in `imgseq_core::optim`).
pub use imgseq_core::optim::ema_update;
/// AdamW on the flat arrays (the one AdamW rule lives in `imgseq_core::optim`).
pub use imgseq_core::optim::{FlatAdamW, ParamSpec};
/// The element-wise kernels' instruction level.
pub use imgseq_kernels::cpu::simd::Simd;
pub use layout::{decays, ParamLayout};
pub use loss::Targets;

/// Images per shard unless [`FusedViT::with_shard_images`] says otherwise: small enough that
/// a shard's activations stay in cache between its forward and backward, large enough for
/// efficient GEMMs (8 images of the seed model = 520 rows).
pub const SHARD_IMAGES: usize = 8;

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
        self.dims.simd = simd.capped();
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
            return Err(Error::bad_data(format!(
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
        let jobs = deal(out.chunks_mut(si * k), nw);
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
        targets.check(b, self.dims.k, label_smoothing)?;
        let (shards, nw) = self.plan(b);
        let n_params = self.layout.len();
        while self.shard_grads.len() + 1 < shards {
            self.shard_grads.push(vec![0f32; n_params]);
        }
        let loss_cfg = LossCfg {
            eps: label_smoothing as f32,
            batch: b,
        };
        let per_shard = self.run_shards(params, grads, x, targets, loss_cfg, (shards, nw));
        self.sum_shard_grads(grads, shards);
        Ok(per_shard.iter().sum::<f64>() / b as f64)
    }

    /// Every shard's forward, loss and backward, shard 0's gradient into `grads` and the
    /// others' into `shard_grads`; returns each shard's summed loss.
    fn run_shards(
        &mut self,
        params: &[f32],
        grads: &mut [f32],
        x: &[f32],
        targets: Targets,
        loss_cfg: LossCfg,
        (shards, nw): (usize, usize),
    ) -> Vec<f64> {
        let (dm, lay, si) = (&self.dims, &self.layout, self.shard_images);
        let (b, px) = (loss_cfg.batch, dm.pixels());
        let slots = std::iter::once(grads)
            .chain(self.shard_grads.iter_mut().map(|g| g.as_mut_slice()))
            .take(shards);
        let jobs = deal(slots, nw);
        let losses: Vec<Vec<(usize, f64)>> = self.workers[..nw]
            .par_iter_mut()
            .zip(jobs)
            .map(|(ws, jobs)| {
                jobs.into_iter()
                    .map(|(s, g)| {
                        let lo = s * si;
                        let nb = (b - lo).min(si);
                        forward_shard(dm, lay, params, ws, &x[lo * px..][..nb * px], nb, true);
                        let t = targets.shard(lo, nb, dm.k);
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
        per_shard
    }

    /// Adds the gradients of shards 1.. to shard 0's in `grads`, in shard order (the same on
    /// any number of threads).
    fn sum_shard_grads(&self, grads: &mut [f32], shards: usize) {
        if shards <= 1 {
            return;
        }
        let others = &self.shard_grads[..shards - 1];
        let simd = self.dims.simd;
        const CHUNK: usize = 4096;
        grads.par_chunks_mut(CHUNK).enumerate().for_each(|(ci, g)| {
            for o in others {
                add_assign(simd, g, &o[ci * CHUNK..][..g.len()]);
            }
        });
    }
}
/// `items` dealt round-robin to `nw` workers, each with its index.
fn deal<T>(items: impl Iterator<Item = T>, nw: usize) -> Vec<Vec<(usize, T)>> {
    let mut jobs: Vec<Vec<(usize, T)>> = (0..nw).map(|_| Vec::new()).collect();
    for (s, item) in items.enumerate() {
        jobs[s % nw].push((s, item));
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

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
}
