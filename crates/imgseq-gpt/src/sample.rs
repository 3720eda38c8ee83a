//! Sampling image token sequences: the class token first (and any known first tokens: a
//! completion's kept rows), then the remaining tokens one position at a time through the KV
//! cache, drawn from the codebook entries only.
//!
//! Classifier-free guidance runs the conditional and the unconditional sequence in one batch
//! and samples from `uncond + scale · (cond − uncond)` logits (scale 1: plain conditional).
//! Every image has its own generator seeded from (seed, image index), so an image does not
//! depend on the batch size or on the other images.

use candle_core::{Device, Tensor};
use imgseq_core::data::augment::mix_seed;
use imgseq_core::progress::bar;
use imgseq_core::{Error, Result};
use rand::{Rng, SeedableRng};

use crate::config::{GptConfig, SeqLayout};
use crate::model::{Gpt2LMHeadModel, KvCache};

/// How to draw tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleOptions {
    /// Softmax temperature; 0 = greedy (argmax).
    pub temperature: f64,
    /// Keep only the k most likely codes (None: all).
    pub top_k: Option<usize>,
    /// Keep the smallest set of most likely codes whose probability reaches p (None: all).
    pub top_p: Option<f64>,
    /// Classifier-free guidance scale (1: none).
    pub guidance: f64,
    pub seed: u64,
    /// Images generated together (each costs two rows with guidance).
    pub batch: usize,
}

impl Default for SampleOptions {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: None,
            top_p: None,
            guidance: 1.0,
            seed: 0,
            batch: 100,
        }
    }
}

/// The smallest positive temperature and the largest: the draw divides logits by it in f32,
/// where 1e-50 is 0 (a division giving NaN) and 1e-30 turns every logit gap into infinity.
pub const TEMPERATURE_RANGE: (f64, f64) = (1e-3, 1e3);

/// The largest guidance scale, in size: the guided logits `u + (c − u)·g` are computed in f32,
/// where a scale of 1e308 is infinity (every token the same).
pub const MAX_GUIDANCE: f64 = 100.0;

impl SampleOptions {
    /// Refuses settings the arithmetic cannot honour, in the type it uses (f32): temperature 0
    /// (greedy) or within [`TEMPERATURE_RANGE`], top-k positive, top-p in (0, 1], guidance
    /// within ±[`MAX_GUIDANCE`], batch positive.
    pub fn validate(&self) -> Result<()> {
        let (t_min, t_max) = TEMPERATURE_RANGE;
        let t = self.temperature;
        if !(t == 0.0 || (t_min..=t_max).contains(&t)) {
            return Err(Error::setting(
                "temperature",
                t,
                format!("must be 0 (greedy) or between {t_min} and {t_max}"),
            ));
        }
        if self.top_k == Some(0) {
            return Err(Error::setting("top_k", 0, "must be positive"));
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return Err(Error::setting("top_p", p, "must be in (0, 1]"));
            }
        }
        if self.guidance.is_nan() || self.guidance.abs() > MAX_GUIDANCE {
            return Err(Error::setting(
                "guidance",
                self.guidance,
                format!("must be between -{MAX_GUIDANCE} and {MAX_GUIDANCE} (1: none)"),
            ));
        }
        if self.batch == 0 {
            return Err(Error::setting("batch", 0, "must be positive"));
        }
        Ok(())
    }
}

/// One draw from `logits` (a row over the codes) with temperature, top-k and top-p. A logit
/// that is NaN is never drawn (it counts as −∞); a row without a finite logit, or whose
/// probabilities do not sum to a positive finite number, is an error rather than a token.
pub fn draw(logits: &[f32], o: &SampleOptions, rng: &mut impl Rng) -> Result<u32> {
    let finite = |x: f32| if x.is_nan() { f32::NEG_INFINITY } else { x };
    let not_a_distribution = || {
        Error::invalid(format!(
            "the model's logits over {} codes give no probability distribution (NaN or \
             infinite values): nothing to draw from",
            logits.len()
        ))
    };
    let best = logits
        .iter()
        .enumerate()
        .fold((0usize, f32::NEG_INFINITY), |(bi, bv), (i, &x)| {
            if finite(x) > bv {
                (i, finite(x))
            } else {
                (bi, bv)
            }
        });
    if !best.1.is_finite() {
        return Err(not_a_distribution());
    }
    if o.temperature == 0.0 {
        return Ok(best.0 as u32);
    }
    // Candidates by decreasing logit (ties: lower index first).
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| {
        finite(logits[b])
            .total_cmp(&finite(logits[a]))
            .then(a.cmp(&b))
    });
    if let Some(k) = o.top_k {
        order.truncate(k.max(1));
    }
    let t = o.temperature as f32;
    let m = best.1;
    let mut p: Vec<f64> = order
        .iter()
        .map(|&i| (((finite(logits[i]) - m) / t) as f64).exp())
        .collect();
    let z: f64 = p.iter().sum();
    if !(z.is_finite() && z > 0.0) {
        return Err(not_a_distribution());
    }
    p.iter_mut().for_each(|x| *x /= z);
    if let Some(top_p) = o.top_p {
        let mut acc = 0.0;
        let mut keep = p.len();
        for (i, x) in p.iter().enumerate() {
            acc += x;
            if acc >= top_p {
                keep = i + 1;
                break;
            }
        }
        order.truncate(keep);
        p.truncate(keep);
        let z: f64 = p.iter().sum();
        p.iter_mut().for_each(|x| *x /= z);
    }
    let u: f64 = rng.random();
    let mut acc = 0.0;
    for (i, x) in p.iter().enumerate() {
        acc += x;
        if u < acc {
            return Ok(order[i] as u32);
        }
    }
    // Rounding left `acc` just under 1: the last candidate with any probability.
    let last = p.iter().rposition(|&x| x > 0.0).unwrap_or(0);
    Ok(order[last] as u32)
}

/// One request: the class to generate (None: unconditional) and the first tokens to keep.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub class: Option<usize>,
    pub prefix: Vec<u32>,
}

/// Refuses generating (or scoring) `images` sequences `batch` at a time with the model of
/// `cfg` when the memory it needs — a batch's key/value cache, attention scores and logits
/// (doubled for guidance), every sequence's tokens and its decoded picture of `picture_bytes`
/// — would not fit the budget; the error names `batch` when a batch alone is too much.
pub fn check_memory(
    cfg: &GptConfig,
    images: usize,
    batch: usize,
    picture_bytes: u128,
) -> Result<()> {
    let rows = 2 * batch.min(images.max(1)) as u128;
    let (t, e, l) = (
        cfg.n_positions as u128,
        cfg.n_embd as u128,
        cfg.n_layer as u128,
    );
    let per_batch = rows
        * 4
        * (2 * l * t * e + cfg.n_head as u128 * t * t + t * cfg.vocab_size as u128 + 8 * t * e);
    let per_image = t * 8 + picture_bytes + 128;
    let total = per_batch + images as u128 * per_image;
    imgseq_core::budget::check_memory(total).map_err(|e| {
        if imgseq_core::budget::check_memory(per_batch).is_err() {
            Error::setting("batch", batch, e)
        } else {
            Error::resource_limit(format!("{images} images, {batch} at a time, {e}"))
        }
    })
}

/// Generates the h·w tokens of every request (its prefix kept as given). Requests are
/// processed in batches of `o.batch`; the prefixes of one batch must have one length (the
/// CLI's requests always do), else they go one by one.
pub fn generate(
    model: &Gpt2LMHeadModel,
    layout: &SeqLayout,
    requests: &[Request],
    o: &SampleOptions,
    progress: bool,
) -> Result<Vec<Vec<u32>>> {
    generate_rows(model, layout, requests, o, progress, &mut |_| true)
}

/// Where [`generate_rows`] is: after each completed row of tokens of a batch.
#[derive(Debug)]
pub struct RowsDone<'a> {
    /// Index of the batch's first request.
    pub first: usize,
    /// Complete rows of every sequence of the batch (1 ..= h).
    pub rows: usize,
    /// The batch's sequences so far (`rows · w` tokens each, prefix included).
    pub seqs: &'a [Vec<u32>],
}

/// [`generate`], calling `on_row` each time the sequences of a batch complete a row of
/// tokens (rows a prefix already fills are not reported). When `on_row` answers `false`,
/// sampling stops at once with a [`imgseq_core::error::ErrorKind::ResourceLimit`] error (a caller
/// that went away, a deadline that passed). The tokens equal [`generate`]'s.
pub fn generate_rows(
    model: &Gpt2LMHeadModel,
    layout: &SeqLayout,
    requests: &[Request],
    o: &SampleOptions,
    progress: bool,
    on_row: &mut dyn FnMut(&RowsDone) -> bool,
) -> Result<Vec<Vec<u32>>> {
    o.validate()?;
    let n = layout.n_tokens();
    for r in requests {
        if let Some(c) = r.class {
            if c >= layout.n_classes() {
                return Err(Error::setting(
                    "class",
                    c,
                    format!(
                        "is out of range: the model has {} classes",
                        layout.n_classes()
                    ),
                ));
            }
        }
        if r.prefix.len() > n {
            return Err(Error::invalid(format!(
                "a prefix of {} tokens is longer than the {n}-token image",
                r.prefix.len()
            )));
        }
        if let Some(&t) = r.prefix.iter().find(|&&t| t as usize >= layout.n_codes) {
            return Err(Error::invalid(format!(
                "prefix token {t} is outside the {}-entry codebook",
                layout.n_codes
            )));
        }
    }
    let pb = progress.then(|| bar(requests.len() as u64, 0, "sampling"));
    let mut out = Vec::with_capacity(requests.len());
    let mut start = 0;
    while start < requests.len() {
        let k = requests[start].prefix.len();
        let mut end = start + 1;
        while end < requests.len() && end - start < o.batch && requests[end].prefix.len() == k {
            end += 1;
        }
        out.extend(generate_batch(
            model,
            layout,
            &requests[start..end],
            start,
            o,
            on_row,
        )?);
        if let Some(pb) = &pb {
            pb.inc((end - start) as u64);
        }
        start = end;
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    Ok(out)
}

/// [`generate`] for requests with prefixes of one length; `first` is the index of the first
/// request (it seeds the generators).
fn generate_batch(
    model: &Gpt2LMHeadModel,
    layout: &SeqLayout,
    reqs: &[Request],
    first: usize,
    o: &SampleOptions,
    on_row: &mut dyn FnMut(&RowsDone) -> bool,
) -> Result<Vec<Vec<u32>>> {
    let dev = Device::Cpu;
    let (b, n, k) = (reqs.len(), layout.n_tokens(), reqs[0].prefix.len());
    let cfg_on = o.guidance != 1.0;
    let rows = if cfg_on { 2 * b } else { b };
    let mut seqs: Vec<Vec<u32>> = reqs.iter().map(|r| r.prefix.clone()).collect();
    if k == n {
        return Ok(seqs);
    }
    let mut rngs: Vec<rand::rngs::StdRng> = (0..b)
        .map(|i| rand::rngs::StdRng::seed_from_u64(mix_seed(&[o.seed, 0x5a3e, (first + i) as u64])))
        .collect();
    // Prefill: [class] + prefix for every row (the unconditional copies after the conditional).
    let mut ids: Vec<u32> = Vec::with_capacity(rows * (1 + k));
    for pass in 0..(if cfg_on { 2 } else { 1 }) {
        for r in reqs {
            let cls = match (pass, r.class) {
                (0, Some(c)) => layout.class_token(c),
                _ => layout.uncond_token(),
            };
            ids.push(cls);
            ids.extend_from_slice(&r.prefix);
        }
    }
    let mut cache = KvCache::new(model.h.len());
    let mut x = Tensor::from_vec(ids, (rows, 1 + k), &dev)?;
    for _ in k..n {
        let logits = model.forward_first(&x, layout.n_codes, Some(&mut cache))?; // (rows, t, n_codes)
        let t = logits.dim(1)?;
        let last = logits.narrow(1, t - 1, 1)?.squeeze(1)?; // (rows, n_codes)
        let last = if cfg_on {
            let c = last.narrow(0, 0, b)?;
            let u = last.narrow(0, b, b)?;
            (&u + ((c - &u)? * o.guidance)?)?
        } else {
            last
        };
        let rows_v = last.to_vec2::<f32>()?;
        let mut next = Vec::with_capacity(rows);
        for (i, row) in rows_v.iter().enumerate() {
            let tok = draw(row, o, &mut rngs[i])?;
            seqs[i].push(tok);
            next.push(tok);
        }
        if cfg_on {
            next.extend_from_within(..);
        }
        let len = seqs[0].len();
        if layout.w > 0 && len.is_multiple_of(layout.w) {
            let done = RowsDone {
                first,
                rows: len / layout.w,
                seqs: &seqs,
            };
            if !on_row(&done) {
                return Err(Error::resource_limit(
                    "sampling stopped: its caller no longer waits for it",
                ));
            }
        }
        if len == n {
            break;
        }
        x = Tensor::from_vec(next, (rows, 1), &dev)?;
    }
    Ok(seqs)
}
