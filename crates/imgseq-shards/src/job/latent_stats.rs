//! A finished latent shard folder read back: per-channel statistics (`imgseq vae stats`).

use crate::manifest::{Manifest, MANIFEST};
use imgseq_core::{Error, Result};
use std::path::Path;

/// Per-channel statistics of a latent shard set ([`latent_stats`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LatentStats {
    pub samples: usize,
    /// Per latent channel: mean, standard deviation, min, max over every value of the set.
    pub channels: Vec<[f64; 4]>,
}

/// Reads every shard of the latent set in `dir` (each checked against its manifest record
/// first when `verify`) and gathers per-channel statistics: channel c of a (C, h, w) map, or
/// of (N, p²·C) patch tokens (value k of a token is channel k / p², FLUX's order).
pub fn latent_stats(dir: &Path, verify: bool) -> Result<(Manifest, LatentStats)> {
    let m = Manifest::read_latents(&dir.join(MANIFEST))?;
    let l = m
        .tokenizer
        .latent
        .clone()
        .expect("a latent set has its settings");
    let p2 = l.patch.map_or(1, |p| p * p);
    let c = match l.patch {
        None => l.shape[0],
        Some(_) => l.shape.last().copied().unwrap_or(1) / p2.max(1),
    }
    .max(1);
    // Sum, sum of squares, min, max, count per channel.
    let mut acc = vec![(0f64, 0f64, f64::INFINITY, f64::NEG_INFINITY, 0u64); c];
    let mut samples = 0;
    for rec in &m.shards {
        if verify {
            rec.verify(dir)?;
        }
        let path = dir.join(&rec.name);
        for s in crate::shard::read_float_shard(&path, m.kind())? {
            if s.shape != l.shape {
                return Err(Error::format(
                    &path,
                    format!(
                        "{} has shape {:?}, the manifest says {:?}",
                        s.key, s.shape, l.shape
                    ),
                ));
            }
            let plane = s.values.len() / c;
            for (i, &v) in s.values.iter().enumerate() {
                let ch = match l.patch {
                    None => i / plane,
                    Some(_) => (i % (c * p2)) / p2,
                };
                let a = &mut acc[ch];
                let v = v as f64;
                a.0 += v;
                a.1 += v * v;
                a.2 = a.2.min(v);
                a.3 = a.3.max(v);
                a.4 += 1;
            }
            samples += 1;
        }
    }
    let channels = acc
        .into_iter()
        .map(|(s, s2, lo, hi, n)| {
            let n = n.max(1) as f64;
            let mean = s / n;
            [mean, (s2 / n - mean * mean).max(0.0).sqrt(), lo, hi]
        })
        .collect();
    Ok((m, LatentStats { samples, channels }))
}
