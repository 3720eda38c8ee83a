//! The convolutions of one VQGAN training step, timed: forward and backward of every conv
//! shape the `photo` preset runs at 256² crops, batch 2 (`vq train`'s second stage).
//!
//! `cargo run --release -p imgseq-kernels --example conv_train_bench [-- filter]`
//!
//! Each row: the best of ≥ 3 runs (≥ 0.3 s in all) of `cpu::conv::conv2d` (forward) and
//! `cpu::conv::conv2d_bwd` (dx, dw, db), with the direct conv's multiply-adds per second
//! (Winograd shows above the FMA peak) and the row's count per step; the last line sums
//! count × time, the convolutions' share of a training step.

use imgseq_kernels::cpu::conv::{conv2d, conv2d_bwd, Geom};
use std::time::Instant;

fn best_ms(mut f: impl FnMut()) -> f64 {
    f();
    let (mut best, mut total, mut n) = (f64::INFINITY, 0.0, 0);
    while n < 3 || total < 0.3 {
        let t = Instant::now();
        f();
        let s = t.elapsed().as_secs_f64();
        best = best.min(s);
        total += s;
        n += 1;
    }
    best * 1e3
}

fn rand(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// (count per step, ci, co, side in, kernel, stride, padding (left, right, top, bottom)).
type Row = (
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    (usize, usize, usize, usize),
);

fn main() {
    imgseq_kernels::tune_allocator();
    let filter = std::env::args().nth(1).unwrap_or_default();
    let b = 2;
    let same = (1, 1, 1, 1);
    let down = (0, 1, 0, 1);
    #[rustfmt::skip]
    let rows: &[Row] = &[
        (1, 3, 32, 256, 3, 1, same),      // encoder conv_in
        (7, 32, 32, 256, 3, 1, same),     // encoder level 0 (2), upsample conv, decoder level 0 (4)
        (1, 32, 32, 256, 3, 2, down),     // downsample 256 → 128
        (1, 32, 3, 256, 3, 1, same),      // decoder conv_out
        (5, 32, 32, 128, 3, 1, same),     // encoder level 1 (2), decoder level 1 (3)
        (1, 32, 32, 128, 3, 2, down),
        (1, 64, 32, 128, 3, 1, same),     // decoder level 1, first block
        (1, 64, 32, 128, 1, 1, (0, 0, 0, 0)),
        (1, 64, 64, 128, 3, 1, same),     // upsample conv @128
        (6, 64, 64, 64, 3, 1, same),      // encoder level 2, upsample conv @64, decoder level 2 (4)
        (1, 32, 64, 64, 3, 1, same),
        (1, 32, 64, 64, 1, 1, (0, 0, 0, 0)),
        (1, 64, 64, 64, 3, 2, down),
        (5, 64, 64, 32, 3, 1, same),      // encoder level 3 (2), decoder level 3 (3)
        (1, 128, 64, 32, 3, 1, same),
        (1, 128, 64, 32, 1, 1, (0, 0, 0, 0)),
        (1, 128, 128, 32, 3, 1, same),    // upsample conv @32
        (1, 64, 64, 32, 3, 2, down),
        (13, 128, 128, 16, 3, 1, same),   // level 4, middle blocks, decoder conv_in (approx.)
    ];
    println!("threads: {}  batch {b}", rayon::current_num_threads());
    let (mut fwd_total, mut bwd_total) = (0.0, 0.0);
    for &(count, ci, co, side, k, s, pad) in rows {
        let name = format!("{ci}->{co} @{side}^2 k{k} s{s}");
        if !name.contains(&filter) {
            continue;
        }
        let g = Geom {
            b,
            ci,
            h: side,
            w: side,
            co,
            kh: k,
            kw: k,
            s,
            pad,
        };
        let (ho, wo) = g.out_hw();
        let x = rand(b * ci * side * side, 1);
        let w = rand(co * ci * k * k, 2);
        let bias = rand(co, 3);
        let dy = rand(b * co * ho * wo, 4);
        let macs = (b * co * ho * wo * ci * k * k) as f64;
        let f = best_ms(|| {
            std::hint::black_box(conv2d(&x, &w, Some(&bias), &g));
        });
        let bw = best_ms(|| {
            std::hint::black_box(conv2d_bwd(&x, &w, &dy, &g));
        });
        fwd_total += count as f64 * f;
        bwd_total += count as f64 * bw;
        println!(
            "{name:<24} x{count}  fwd {f:8.2} ms ({:6.1} GMAC/s)  bwd {bw:8.2} ms ({:6.1} GMAC/s, 2 products)",
            macs / f / 1e6,
            2.0 * macs / bw / 1e6
        );
    }
    println!(
        "per step: fwd {fwd_total:.0} ms, bwd {bwd_total:.0} ms, total {:.0} ms",
        fwd_total + bwd_total
    );
}
