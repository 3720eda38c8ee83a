//! Token sequences for the GPT: every image's token grid and its class, read from
//!
//! * token shard folders written by `imgseq vq tokenize` (`manifest.json` + WebDataset tars;
//!   each sample's `KEY.json` carries `"label"` (int) and `"class"` (its name) when the source
//!   had labels),
//! * single shard `.tar` files,
//! * `.npy` token files ([`TokenGrid`]: (h, w) or (n, h, w); unlabelled).
//!
//! A sample without a label gets the unconditional class.

use imgseq_core::{Error, Result};
use imgseq_shards::manifest::MANIFEST;
use imgseq_shards::shard::read_shard;
use imgseq_shards::wds::TokenSample;
use imgseq_shards::Manifest;
use imgseq_shards::TokenGrid;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Token grids of one (h, w) shape with their labels.
#[derive(Debug, Clone, Default)]
pub struct TokenSet {
    pub h: usize,
    pub w: usize,
    /// n·h·w codes, image after image in raster order.
    pub tokens: Vec<u32>,
    /// Class of each image; `None`: unlabelled (trained as unconditional).
    pub labels: Vec<Option<usize>>,
    /// Class names seen in the samples' json (`"class"`), by label.
    pub class_names: BTreeMap<usize, String>,
    /// Codebook size from the manifests' tokenizer, when they say.
    pub n_codes: Option<usize>,
    /// The tokenizer weights the manifests name.
    pub vq: Option<String>,
}

impl TokenSet {
    pub fn len(&self) -> usize {
        self.labels.len()
    }
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
    pub fn n_tokens(&self) -> usize {
        self.h * self.w
    }
    /// The codes of image `i`.
    pub fn image(&self, i: usize) -> &[u32] {
        let p = self.n_tokens();
        &self.tokens[i * p..(i + 1) * p]
    }
    /// Number of classes implied by the labels (largest + 1).
    pub fn n_classes(&self) -> usize {
        self.labels
            .iter()
            .flatten()
            .map(|&l| l + 1)
            .max()
            .unwrap_or(0)
    }
    /// The first `n` sequences (all when there are fewer).
    pub fn first(&self, n: usize) -> TokenSet {
        let n = n.min(self.len());
        TokenSet {
            tokens: self.tokens[..n * self.n_tokens()].to_vec(),
            labels: self.labels[..n].to_vec(),
            ..self.clone_meta()
        }
    }

    fn clone_meta(&self) -> TokenSet {
        TokenSet {
            h: self.h,
            w: self.w,
            tokens: vec![],
            labels: vec![],
            class_names: self.class_names.clone(),
            n_codes: self.n_codes,
            vq: self.vq.clone(),
        }
    }

    /// Largest code + 1.
    pub fn max_code(&self) -> usize {
        self.tokens
            .iter()
            .map(|&t| t as usize + 1)
            .max()
            .unwrap_or(0)
    }

    fn add_grid(
        &mut self,
        path: &Path,
        h: usize,
        w: usize,
        codes: &[i64],
        label: Option<usize>,
    ) -> Result<()> {
        if self.labels.is_empty() && self.h == 0 {
            self.h = h;
            self.w = w;
        } else if (h, w) != (self.h, self.w) {
            return Err(Error::format(
                path,
                format!(
                    "token grid {h}x{w} differs from the {}x{} seen before",
                    self.h, self.w
                ),
            ));
        }
        if h == 0 || w == 0 {
            return Err(Error::format(path, "empty token grid"));
        }
        for &c in codes {
            if !(0..=u32::MAX as i64).contains(&c) {
                return Err(Error::format(
                    path,
                    format!("token {c} is not a codebook index"),
                ));
            }
            self.tokens.push(c as u32);
        }
        self.labels.push(label);
        Ok(())
    }

    fn add_sample(&mut self, path: &Path, s: &TokenSample) -> Result<()> {
        let label = match s.json.get("label") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let l = v
                    .as_u64()
                    .or_else(|| v.as_str().and_then(|t| t.trim().parse::<u64>().ok()))
                    .ok_or_else(|| {
                        Error::format(
                            path,
                            format!("{}: label {v} is not a non-negative integer", s.key),
                        )
                    })?;
                if l > 1 << 20 {
                    return Err(Error::format(
                        path,
                        format!("{}: label {l} is implausibly large", s.key),
                    ));
                }
                Some(l as usize)
            }
        };
        if let (Some(l), Some(name)) = (label, s.json.get("class").and_then(Value::as_str)) {
            match self.class_names.get(&l) {
                Some(old) if old != name => {
                    return Err(Error::format(
                        path,
                        format!(
                            "{}: label {l} is named {name:?} here but {old:?} before",
                            s.key
                        ),
                    ))
                }
                Some(_) => {}
                None => {
                    self.class_names.insert(l, name.to_string());
                }
            }
        }
        self.add_grid(path, s.h, s.w, &s.tokens, label)
    }

    fn note_manifest(&mut self, path: &Path, m: &Manifest) -> Result<()> {
        let n = m.tokenizer.n_codes;
        match self.n_codes {
            Some(old) if old != n => Err(Error::format(
                path,
                format!("tokenizer has {n} codes but an earlier input's has {old}"),
            )),
            _ => {
                self.n_codes = Some(n);
                self.vq.get_or_insert_with(|| m.tokenizer.weights.clone());
                Ok(())
            }
        }
    }
}

/// Reads every input (shard folders, shard `.tar`s, `.npy` token files) into one set.
pub fn load(inputs: &[PathBuf]) -> Result<TokenSet> {
    let mut set = TokenSet::default();
    for input in inputs {
        if input.is_dir() {
            let mpath = input.join(MANIFEST);
            if std::fs::symlink_metadata(&mpath).is_err() {
                return Err(Error::format(
                    input,
                    "a folder without manifest.json (not a token shard set; run `imgseq vq tokenize`, or merge its job manifests)",
                ));
            }
            let m = Manifest::read(&mpath)?;
            set.note_manifest(&mpath, &m)?;
            for rec in &m.shards {
                // Each shard as the manifest recorded it (size and SHA-256).
                rec.verify(input)?;
                let shard = input.join(&rec.name);
                for s in read_shard(&shard)? {
                    set.add_sample(&shard, &s)?;
                }
            }
        } else if input.extension().is_some_and(|e| e == "tar") {
            for s in read_shard(input)? {
                set.add_sample(input, &s)?;
            }
        } else if input.extension().is_some_and(|e| e == "npy") {
            let g = TokenGrid::read(input)?;
            for i in 0..g.n {
                set.add_grid(input, g.h, g.w, g.image(i), None)?;
            }
        } else if !input.exists() {
            return Err(Error::io(
                input,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
            ));
        } else {
            return Err(Error::format(
                input,
                "not a token shard folder (manifest.json), a shard .tar or a .npy token file",
            ));
        }
    }
    if set.is_empty() {
        return Err(Error::invalid("the token inputs hold no samples"));
    }
    Ok(set)
}

/// The sequence of image `i` of `set` as model input and targets, with class token `cls`:
/// input = [cls, t_0, …, t_{n−2}], targets = [t_0, …, t_{n−1}] (the class token is never
/// predicted; position j predicts image token j).
pub fn sequence(set: &TokenSet, i: usize, cls: u32, input: &mut Vec<u32>, targets: &mut Vec<u32>) {
    let img = set.image(i);
    input.push(cls);
    input.extend_from_slice(&img[..img.len() - 1]);
    targets.extend_from_slice(img);
}
