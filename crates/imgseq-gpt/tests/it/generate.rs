//! Generation: the KV cache against full recomputation, sampling rules, determinism.

use crate::common;
use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use common::*;
use imgseq_gpt::init::init_weights;
use imgseq_gpt::model::KvCache;
use imgseq_gpt::sample::{draw, generate, generate_rows, Request, SampleOptions};
use imgseq_gpt::Gpt2LMHeadModel;
use rand::SeedableRng;

fn random_model(h: usize, w: usize, n_codes: usize, seed: u64) -> Gpt2LMHeadModel {
    let cfg = tiny_config(h, w, n_codes);
    let vars = VarMap::new();
    let m = Gpt2LMHeadModel::new(
        &cfg,
        VarBuilder::from_varmap(&vars, DType::F32, &Device::Cpu),
    )
    .unwrap();
    let mut c = cfg.clone();
    c.initializer_range = 0.5; // large weights: logits far from uniform
    init_weights(&vars, &c, seed).unwrap();
    m
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// Feeding a sequence one token at a time through the cache gives the logits of the full
/// forward pass at every position; so does a cached prefix followed by a multi-token chunk.
#[test]
fn kv_cache_logits_match_full_recompute_at_every_step() {
    let m = random_model(3, 4, 16, 3);
    let ids: Vec<u32> = vec![
        17, 3, 9, 0, 15, 4, 4, 8, 1, 2, 11, 6, 7, 18, 2, 5, 1, 0, 12, 3, 19, 0, 9, 9, 13, 2,
    ];
    let ids = Tensor::from_vec(ids, (2, 13), &Device::Cpu).unwrap(); // 1 + 12 positions
    let full = m.forward(&ids, None).unwrap(); // (2, 13, vocab)
    let mut cache = KvCache::new(m.h.len());
    for t in 0..13 {
        let step = m
            .forward(&ids.narrow(1, t, 1).unwrap(), Some(&mut cache))
            .unwrap();
        let d = max_abs_diff(
            &step.squeeze(1).unwrap(),
            &full.narrow(1, t, 1).unwrap().squeeze(1).unwrap(),
        );
        assert!(d < 1e-4, "position {t}: cached logits differ by {d}");
    }
    assert_eq!(cache.len(), 13);
    // Prefill 5, then a chunk of 4 (masked within the chunk), then the rest one by one.
    let mut cache = KvCache::new(m.h.len());
    let a = m
        .forward(&ids.narrow(1, 0, 5).unwrap(), Some(&mut cache))
        .unwrap();
    let b = m
        .forward(&ids.narrow(1, 5, 4).unwrap(), Some(&mut cache))
        .unwrap();
    assert!(max_abs_diff(&a, &full.narrow(1, 0, 5).unwrap()) < 1e-4);
    assert!(max_abs_diff(&b, &full.narrow(1, 5, 4).unwrap()) < 1e-4);
    // Beyond n_positions is an error, not a panic.
    let e = m
        .forward(&ids.narrow(1, 0, 5).unwrap(), Some(&mut cache))
        .unwrap_err();
    assert!(e.to_string().contains("n_positions"), "{e}");
}

#[test]
fn sampling_is_seeded_and_independent_of_batch_size() {
    let m = random_model(3, 4, 16, 4);
    let l = layout(3, 4, 16);
    let reqs: Vec<Request> = (0..5)
        .map(|i| Request {
            class: if i == 4 { None } else { Some(i % 3) },
            prefix: vec![],
        })
        .collect();
    let o = SampleOptions {
        temperature: 1.0,
        top_k: Some(8),
        top_p: Some(0.9),
        guidance: 2.0,
        seed: 11,
        batch: 5,
    };
    let a = generate(&m, &l, &reqs, &o, false).unwrap();
    let b = generate(
        &m,
        &l,
        &reqs,
        &SampleOptions {
            batch: 2,
            ..o.clone()
        },
        false,
    )
    .unwrap();
    assert_eq!(a, b);
    assert!(a.iter().all(|s| s.len() == 12 && s.iter().all(|&t| t < 16)));
    let c = generate(
        &m,
        &l,
        &reqs,
        &SampleOptions {
            seed: 12,
            ..o.clone()
        },
        false,
    )
    .unwrap();
    assert_ne!(a, c);
    // A prefix is kept as given.
    let pre = vec![Request {
        class: Some(1),
        prefix: vec![5, 6, 7, 8],
    }];
    let p = generate(&m, &l, &pre, &o, false).unwrap();
    assert_eq!(&p[0][..4], &[5, 6, 7, 8]);
    // Bad requests are one-line errors.
    let bad = vec![Request {
        class: Some(3),
        prefix: vec![],
    }];
    let e = generate(&m, &l, &bad, &o, false).unwrap_err().to_string();
    assert!(e.contains("out of range"), "{e}");
    let bad = vec![Request {
        class: Some(0),
        prefix: vec![16],
    }];
    assert!(generate(&m, &l, &bad, &o, false).is_err());
}

/// Greedy decoding through the cache picks, at every position, the argmax of the full
/// forward pass's logits over the codes (with guidance combining the two passes).
#[test]
fn greedy_generation_agrees_with_full_forward_argmax() {
    let m = random_model(2, 3, 16, 5);
    let l = layout(2, 3, 16);
    for guidance in [1.0, 3.0] {
        let o = SampleOptions {
            temperature: 0.0,
            guidance,
            ..Default::default()
        };
        let s = generate(
            &m,
            &l,
            &[Request {
                class: Some(2),
                prefix: vec![],
            }],
            &o,
            false,
        )
        .unwrap();
        let mut c: Vec<u32> = vec![l.class_token(2)];
        c.extend(&s[0]);
        let mut u: Vec<u32> = vec![l.uncond_token()];
        u.extend(&s[0]);
        let x = Tensor::from_vec([c, u].concat(), (2, 7), &Device::Cpu).unwrap();
        let lg = m
            .forward_first(&x, 16, None)
            .unwrap()
            .to_vec3::<f32>()
            .unwrap();
        for p in 0..6 {
            let row: Vec<f32> = (0..16)
                .map(|k| lg[1][p][k] + guidance as f32 * (lg[0][p][k] - lg[1][p][k]))
                .collect();
            let best = (0..16).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap() as u32;
            assert_eq!(s[0][p], best, "guidance {guidance} position {p}");
        }
    }
}

#[test]
fn draw_respects_top_k_top_p_and_temperature() {
    let logits = [0.0f32, 3.0, 2.9, -1.0, 1.0];
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let o = |k, p, t| SampleOptions {
        temperature: t,
        top_k: k,
        top_p: p,
        ..Default::default()
    };
    for _ in 0..200 {
        let t = draw(&logits, &o(Some(2), None, 1.0), &mut rng).unwrap();
        assert!(t == 1 || t == 2);
        assert_eq!(
            draw(&logits, &o(None, Some(0.01), 1.0), &mut rng).unwrap(),
            1
        );
        assert_eq!(draw(&logits, &o(None, None, 0.0), &mut rng).unwrap(), 1);
    }
    // Plain sampling reaches every code; frequencies follow the softmax.
    let mut counts = [0usize; 5];
    for _ in 0..20000 {
        counts[draw(&logits, &o(None, None, 1.0), &mut rng).unwrap() as usize] += 1;
    }
    let z: f32 = logits.iter().map(|x| x.exp()).sum();
    for (i, &c) in counts.iter().enumerate() {
        let want = logits[i].exp() / z;
        assert!(
            (c as f32 / 20000.0 - want).abs() < 0.015,
            "code {i}: {c} vs {want}"
        );
    }
}

/// The row callback sees every row of every batch once, in order, as prefixes of the final
/// tokens (which equal `generate`'s); answering `false` stops sampling with an error.
#[test]
fn row_callback_reports_each_row_and_can_stop_sampling() {
    let m = random_model(2, 3, 16, 5);
    let l = layout(2, 3, 16);
    let reqs: Vec<Request> = (0..3)
        .map(|i| Request {
            class: Some(i % 2),
            prefix: vec![],
        })
        .collect();
    let o = SampleOptions {
        seed: 4,
        batch: 2,
        ..Default::default()
    };
    let want = generate(&m, &l, &reqs, &o, false).unwrap();
    let mut seen: Vec<(usize, usize, Vec<Vec<u32>>)> = Vec::new();
    let got = generate_rows(&m, &l, &reqs, &o, false, &mut |d| {
        seen.push((d.first, d.rows, d.seqs.to_vec()));
        true
    })
    .unwrap();
    assert_eq!(got, want);
    let firsts_rows: Vec<(usize, usize)> = seen.iter().map(|s| (s.0, s.1)).collect();
    assert_eq!(firsts_rows, vec![(0, 1), (0, 2), (2, 1), (2, 2)]);
    for (first, rows, seqs) in &seen {
        for (i, s) in seqs.iter().enumerate() {
            assert_eq!(s.len(), rows * 3);
            assert_eq!(&want[first + i][..s.len()], &s[..]);
        }
    }
    let mut calls = 0;
    let e = generate_rows(&m, &l, &reqs, &o, false, &mut |_| {
        calls += 1;
        false
    })
    .unwrap_err();
    assert_eq!(calls, 1);
    assert_eq!(
        e.kind(),
        imgseq_core::error::ErrorKind::ResourceLimit,
        "{e}"
    );
}

/// A temperature of 1e-50 is 0 in the f32 the draw divides in (NaN logits, and the draw then
/// returned the least likely code); a guidance of 1e308 is infinity in f32. Both are refused
/// by `validate`, in the type the arithmetic uses, and a row of logits with NaN never yields
/// a NaN's code: NaN counts as −∞, and a row with nothing finite is an error.
#[test]
fn tiny_temperature_huge_guidance_and_nan_logits_never_draw_a_wrong_token() {
    let with = |t: f64, g: f64| SampleOptions {
        temperature: t,
        guidance: g,
        ..Default::default()
    };
    for t in [1e-50, 1e-30, 1e-4, -1.0, f64::NAN, f64::INFINITY, 1e5] {
        let e = with(t, 1.0).validate().unwrap_err().to_string();
        assert!(e.contains("temperature"), "{t}: {e}");
    }
    for t in [0.0, 1e-3, 0.7, 1.0, 1e3] {
        with(t, 1.0).validate().unwrap();
    }
    for g in [1e308, -1e308, 101.0, f64::NAN] {
        let e = with(1.0, g).validate().unwrap_err().to_string();
        assert!(e.contains("guidance"), "{g}: {e}");
    }
    for g in [-100.0, 0.0, 1.0, 7.5, 100.0] {
        with(1.0, g).validate().unwrap();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let nan = [0.0f32, f32::NAN, 2.0, -1.0];
    for t in [0.0, 1e-3, 1.0] {
        for _ in 0..200 {
            let code = draw(&nan, &with(t, 1.0), &mut rng).unwrap();
            assert_ne!(code, 1, "temperature {t} drew the NaN's code");
        }
    }
    // At the smallest temperature the most likely code is the draw.
    assert_eq!(
        draw(&[0.0, 5.0, 4.9], &with(1e-3, 1.0), &mut rng).unwrap(),
        1
    );
    for row in [
        [f32::NAN; 3],
        [f32::NEG_INFINITY; 3],
        [0.0, f32::INFINITY, 1.0],
    ] {
        let e = draw(&row, &with(1.0, 1.0), &mut rng)
            .unwrap_err()
            .to_string();
        assert!(e.contains("NaN or infinite"), "{row:?}: {e}");
    }
}
