//! Time of one Fréchet distance between two sets of `DIM`-dimensional features (2048: the
//! FID Inception's pool3), on random features.
//!
//!     cargo run --release -p imgseq-core --example frechet_speed -- [DIM] [N]

use imgseq_core::frechet::{frechet_distance, GaussianStats};
use rand::{Rng, SeedableRng};
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let dim = args.first().copied().unwrap_or(2048);
    let n = args.get(1).copied().unwrap_or(dim + 500);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let mut set =
        |shift: f32| -> Vec<f32> { (0..n * dim).map(|_| rng.random::<f32>() + shift).collect() };
    let (a, b) = (set(0.0), set(0.1));
    let t = Instant::now();
    let (sa, sb) = (
        GaussianStats::from_features(&a, dim).expect("stats"),
        GaussianStats::from_features(&b, dim).expect("stats"),
    );
    let t_stats = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let d = frechet_distance(&sa, &sb).expect("distance");
    println!(
        "dim {dim}, {n} vectors a set: statistics {t_stats:.2} s, distance {:.2} s (= {d:.6})",
        t.elapsed().as_secs_f64()
    );
}
