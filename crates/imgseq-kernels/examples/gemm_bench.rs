//! GFLOP/s of the f32 linear layer at the towers' and the seed ViT's shapes, on this CPU.
//!
//! `cargo run --release -p imgseq-kernels --example gemm_bench` — set `IMGSEQ_GEMM=crate` to
//! time the `gemm` crate instead of the packed kernel, `RAYON_NUM_THREADS=1` for one thread.

use imgseq_kernels::cpu::linear::linear;
use std::time::Instant;

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

fn main() {
    let shapes: &[(&str, usize, usize, usize)] = &[
        ("CLIP-L/336 fc1 (577 x 1024 -> 4096)", 577, 1024, 4096),
        ("CLIP-L/336 fc2 (577 x 4096 -> 1024)", 577, 4096, 1024),
        ("CLIP-L/336 q (577 x 1024 -> 1024)", 577, 1024, 1024),
        ("SigLIP so400m fc1 (729 x 1152 -> 4304)", 729, 1152, 4304),
        ("batch 16 fc1 (9232 x 1024 -> 4096)", 9232, 1024, 4096),
        ("seed ViT batch 256 fc1 (16640 x 48 -> 192)", 16640, 48, 192),
        ("seed ViT batch 256 fc2 (16640 x 192 -> 48)", 16640, 192, 48),
    ];
    for &(name, rows, inp, out) in shapes {
        let x = rand(rows * inp, 1);
        let w = rand(out * inp, 2);
        let b = rand(out, 3);
        let _ = linear(&x, &w, Some(&b), inp, out);
        let mut ts = vec![];
        let start = Instant::now();
        while ts.len() < 3 || (start.elapsed().as_secs_f64() < 2.0 && ts.len() < 50) {
            let t = Instant::now();
            std::hint::black_box(linear(&x, &w, Some(&b), inp, out));
            ts.push(t.elapsed().as_secs_f64());
        }
        ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let t = ts[ts.len() / 2];
        let gf = 2.0 * (rows * inp * out) as f64 / t / 1e9;
        println!("{name:48} {:8.2} ms {gf:7.1} GFLOP/s", t * 1e3);
    }
}
