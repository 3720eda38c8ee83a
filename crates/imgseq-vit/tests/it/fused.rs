//! The fused engine against candle's autograd through the model in `model.rs` (the
//! reference): logits, loss and every parameter gradient within 1e-4, on an odd-sized config
//! and on the seed config, with hard labels and soft targets, label smoothing, uneven shards;
//! and results that do not depend on the thread count.

use crate::common::{
    assert_grads_close, autograd_step, odd_config, random_params, rel_err_slice, Noise, RefTargets,
};
use imgseq_vit::fused::{FusedViT, ParamLayout, Simd, Targets};
use imgseq_vit::ViTConfig;

struct Case {
    cfg: ViTConfig,
    batch: usize,
    shard_images: usize,
    smoothing: f64,
    soft: bool,
    param_std: f32,
}

/// Runs the fused step and the reference on the same weights, batch and targets, and checks
/// logits, loss and gradients.
fn check(case: Case, what: &str) {
    let Case {
        cfg,
        batch,
        shard_images,
        smoothing,
        soft,
        param_std,
    } = case;
    let layout = ParamLayout::new(&cfg);
    let params = random_params(&layout, param_std, 7);
    let mut rng = Noise::new(11);
    let x = rng.vec(
        batch * cfg.num_channels * cfg.image_size * cfg.image_size,
        1.0,
    );
    let k = cfg.num_labels();
    let labels: Vec<u32> = (0..batch as u32).map(|i| (i * 5 + 3) % k as u32).collect();
    // Soft targets: a softmax of random scores per image (rows sum to 1).
    let probs: Vec<f32> = rng
        .vec(batch * k, 1.5)
        .chunks(k)
        .flat_map(|r| {
            let e: Vec<f32> = r.iter().map(|v| v.exp()).collect();
            let s: f32 = e.iter().sum();
            e.into_iter().map(move |v| v / s)
        })
        .collect();
    let (fused_targets, ref_targets) = if soft {
        (Targets::Probs(&probs), RefTargets::Probs(&probs))
    } else {
        (Targets::Labels(&labels), RefTargets::Labels(&labels))
    };
    let (want_logits, want_loss, want_grads) =
        autograd_step(&cfg, &params, &x, ref_targets, smoothing);

    let mut net = FusedViT::new(&cfg).unwrap().with_shard_images(shard_images);
    let logits = net.logits(&params, &x).unwrap();
    let e = rel_err_slice(&logits, &want_logits);
    assert!(e <= 1e-4, "{what}: logits rel err {e}");
    let mut grads = vec![f32::NAN; layout.len()];
    let loss = net
        .forward_backward(&params, &mut grads, &x, fused_targets, smoothing)
        .unwrap();
    assert!(
        (loss - want_loss).abs() <= 1e-5 * want_loss.abs().max(1.0),
        "{what}: loss {loss} vs {want_loss}"
    );
    assert!(
        grads.iter().all(|g| g.is_finite()),
        "{what}: a gradient was not written"
    );
    assert_grads_close(&layout, &grads, &want_grads, 1e-4, what);
}

#[test]
fn fused_matches_autograd_on_an_odd_two_layer_config() {
    check(
        Case {
            cfg: odd_config(true),
            batch: 5,
            shard_images: 2, // shards of 2, 2 and 1 images
            smoothing: 0.1,
            soft: false,
            param_std: 0.3,
        },
        "odd, labels",
    );
}

#[test]
fn fused_matches_autograd_with_soft_targets_and_no_qkv_bias() {
    check(
        Case {
            cfg: odd_config(false),
            batch: 4,
            shard_images: 3,
            smoothing: 0.2,
            soft: true,
            param_std: 0.3,
        },
        "odd, soft targets",
    );
}

#[test]
fn fused_matches_autograd_on_the_seed_config() {
    check(
        Case {
            cfg: ViTConfig::fashion_mnist(),
            batch: 12,
            shard_images: imgseq_vit::fused::SHARD_IMAGES,
            smoothing: 0.1,
            soft: false,
            param_std: 0.15,
        },
        "seed",
    );
}

/// Shards are fixed by the batch, not by the threads: 1 thread and 3 threads give the same
/// bits (what makes a resumed run equal an uninterrupted one on any machine of one ISA).
#[test]
fn fused_step_is_bitwise_the_same_on_any_thread_count() {
    let cfg = odd_config(true);
    let layout = ParamLayout::new(&cfg);
    let params = random_params(&layout, 0.3, 3);
    let x = Noise::new(5).vec(7 * 3 * 15 * 15, 1.0);
    let labels: Vec<u32> = (0..7).map(|i| i % 7).collect();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut net = FusedViT::new(&cfg).unwrap().with_shard_images(2);
            let mut g = vec![0f32; layout.len()];
            let loss = net
                .forward_backward(&params, &mut g, &x, Targets::Labels(&labels), 0.1)
                .unwrap();
            (loss, g, net.logits(&params, &x).unwrap())
        })
    };
    let (a, b) = (run(1), run(3));
    assert_eq!(a.0, b.0);
    assert!(a.1 == b.1, "gradients differ between 1 and 3 threads");
    assert!(a.2 == b.2, "logits differ between 1 and 3 threads");
}

/// The shard size only changes the order in which gradients are summed.
#[test]
fn shard_size_changes_only_rounding() {
    let cfg = odd_config(true);
    let layout = ParamLayout::new(&cfg);
    let params = random_params(&layout, 0.3, 9);
    let x = Noise::new(1).vec(6 * 3 * 15 * 15, 1.0);
    let labels = [0u32, 1, 2, 3, 4, 5];
    let step = |si: usize| {
        let mut net = FusedViT::new(&cfg).unwrap().with_shard_images(si);
        let mut g = vec![0f32; layout.len()];
        let l = net
            .forward_backward(&params, &mut g, &x, Targets::Labels(&labels), 0.0)
            .unwrap();
        (l, g)
    };
    let (l1, g1) = step(1);
    let (l6, g6) = step(6);
    assert!((l1 - l6).abs() < 1e-6 * l6.abs());
    assert_grads_close(&layout, &g1, &g6, 1e-5, "1 vs 6 images per shard");
}

/// The element-wise kernels compiled for AVX-512, AVX2 and the baseline compute the same
/// arithmetic in the same order: every level this CPU has gives the same bits as the portable
/// one (a level it lacks is skipped, saying so).
#[test]
fn every_simd_level_gives_the_portable_bits() {
    let cfg = odd_config(true);
    let layout = ParamLayout::new(&cfg);
    let params = random_params(&layout, 0.3, 4);
    let x = Noise::new(8).vec(3 * 3 * 15 * 15, 1.0);
    let labels = [6u32, 0, 3];
    let run = |simd: Simd| {
        let mut net = FusedViT::new(&cfg).unwrap().with_simd(simd);
        assert_eq!(net.simd(), simd);
        let mut g = vec![0f32; layout.len()];
        let loss = net
            .forward_backward(&params, &mut g, &x, Targets::Labels(&labels), 0.1)
            .unwrap();
        (loss, g)
    };
    let portable = run(Simd::Portable);
    for level in [Simd::Avx2, Simd::Avx512] {
        if level > Simd::best() {
            println!("skipping {level:?}: this CPU lacks it");
            continue;
        }
        let got = run(level);
        assert_eq!(got.0, portable.0, "{level:?}: loss");
        assert!(
            got.1 == portable.1,
            "{level:?}: gradients differ from the portable kernels"
        );
    }
}

/// Three AdamW steps of the seed model from a fixed seed keep the losses, parameter sum and
/// logits the engine gave before its layers, GEMM, row kernels and AdamW moved to their
/// shared owners (`imgseq_kernels::cpu::{heads, rows}`, `imgseq_core::optim`) — to float
/// tolerance, as the GEMM's kernels may differ by CPU. The same run as
/// `examples/vit_fused_probe.rs 16 3`.
#[test]
fn fused_training_steps_keep_the_recorded_losses() {
    use imgseq_vit::fused::FlatAdamW;
    let cfg = ViTConfig::seed(3, &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]);
    let layout = ParamLayout::new(&cfg);
    let mut params = imgseq_vit::init::init_flat(&layout, 0.02, 0);
    let mut grads = vec![0f32; layout.len()];
    let (batch, px) = (16, 3 * 32 * 32);
    let x: Vec<f32> = (0..batch * px)
        .map(|i| ((i as f32 * 0.618_034).fract() - 0.5) * 2.0)
        .collect();
    let y: Vec<u32> = (0..batch as u32).map(|i| (i * 7 + 3) % 10).collect();
    let mut net = FusedViT::new(&cfg).unwrap();
    let mut opt = FlatAdamW::new(&layout, 1e-3, 0.05);
    let want = [2.307_521_400, 2.266_793_911, 2.252_965_731];
    for (s, want) in want.iter().enumerate() {
        let loss = net
            .forward_backward(&params, &mut grads, &x, Targets::Labels(&y), 0.1)
            .unwrap();
        opt.update(&mut params, &grads).unwrap();
        assert!(
            (loss - want).abs() < 1e-5,
            "step {s}: loss {loss} vs {want}"
        );
    }
    let sum: f64 = params.iter().map(|&v| v as f64).sum();
    assert!((sum - 436.034_046_302).abs() < 1e-3, "parameter sum {sum}");
    let logits = net.logits(&params, &x[..8 * px]).unwrap();
    for (got, want) in logits
        .iter()
        .zip([0.214_152_71, 0.224_045_56, -0.260_011_14, 0.350_919_96])
    {
        assert!((got - want).abs() < 1e-4, "logit {got} vs {want}");
    }
}
