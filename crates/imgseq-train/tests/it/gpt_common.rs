//! Tiny synthetic token shards (as `imgseq vq tokenize` writes them) and models for the GPT
//! training tests.
#![allow(dead_code)]

use imgseq_shards::manifest::{shard_name, ShardRecord, FORMAT, MANIFEST};
use imgseq_shards::wds::{tokens_npy, ShardWriter};
use imgseq_shards::{Manifest, TokenizerInfo};
use serde_json::json;
use std::path::Path;

pub use crate::gpt_models::{tiny_config, CLASSES};

/// The tokens of image `i` of class `c`: a class-dependent pattern plus a little seeded
/// noise, so a model can learn the classes apart.
pub fn image_tokens(c: usize, i: usize, h: usize, w: usize, n_codes: usize) -> Vec<i64> {
    (0..h * w)
        .map(|p| {
            let (r, q) = (p / w, p % w);
            let noise = (i * 7919 + p * 104_729).is_multiple_of(13) as usize;
            ((c * 5 + r * 3 + q + noise) % n_codes) as i64
        })
        .collect()
}

/// Writes `n` labelled samples (labels cycling over the classes, some unlabelled when
/// `unlabelled_every` > 0) as `shards` shards with a manifest into `dir`.
pub fn write_shards(
    dir: &Path,
    n: usize,
    shards: usize,
    h: usize,
    w: usize,
    n_codes: usize,
    unlabelled_every: usize,
) {
    std::fs::create_dir_all(dir).unwrap();
    let per = n.div_ceil(shards);
    let mut records = Vec::new();
    for s in 0..shards {
        let name = shard_name(s);
        let mut wr = ShardWriter::create(dir.join(&name)).unwrap();
        let (first, end) = (s * per, ((s + 1) * per).min(n));
        for i in first..end {
            let c = i % CLASSES.len();
            let toks = image_tokens(c, i, h, w, n_codes);
            let j = if unlabelled_every > 0 && i % unlabelled_every == unlabelled_every - 1 {
                json!({"key": format!("{i:06}"), "source": "synthetic"})
            } else {
                json!({"key": format!("{i:06}"), "label": c, "class": CLASSES[c]})
            };
            wr.append(&format!("{i:06}"), &tokens_npy(h, w, &toks, n_codes), &j)
                .unwrap();
        }
        let f = wr.finish().unwrap();
        records.push(ShardRecord {
            index: s,
            name,
            samples: f.samples,
            errors: 0,
            first,
            end,
            bytes: f.bytes,
            sha256: f.sha256,
        });
    }
    let mut m = Manifest {
        format: FORMAT.into(),
        tokenizer: TokenizerInfo {
            family: "taming".into(),
            weights: "weights/vq-test".into(),
            weights_sha256: String::new(),
            config: json!({}),
            n_codes,
            size: (h * 4) as u32,
            grid: [h, w],
            crop: "center".into(),
            upscale: false,
            precision: "f32".into(),
            latent: None,
            features: None,
            scales: None,
        },
        inputs: vec!["synthetic".into()],
        input_samples: n,
        shard_size: per,
        num_shards: shards,
        job: None,
        shards: records,
        samples: 0,
        errors: 0,
    };
    m.recount();
    m.write(&dir.join(MANIFEST)).unwrap();
}
