//! What an evaluation keeps between runs and between the jobs of a job array: the settings it
//! was started with (`eval.json`), per job the per-image scores (`scores.jsonl`, one line an
//! image, appended chunk by chunk) and the accumulated statistics (`state.safetensors`: the
//! chunks done, the Inception feature moments of the originals and of the reconstructions,
//! the code histogram), and the merge of all jobs into one report.

use crate::protocol::ProtocolInfo;
use candle_core::{DType, Device, Tensor};
use imgseq_core::frechet::{frechet_distance, Moments};
use imgseq_core::fsutil::{read_json, write_bytes_atomic};
use imgseq_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The settings file of an evaluation folder.
pub const SETTINGS: &str = "eval.json";
/// The merged report of an evaluation folder.
pub const REPORT: &str = "report.json";
/// Most skipped samples a report lists (all are in the scores files).
const LISTED_SKIPS: usize = 100;

/// What an evaluation was started with; a resumed run or another job of the array must match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub protocol: ProtocolInfo,
    /// The tokenizer's description (family, config, weights and their hash, precision).
    pub model: serde_json::Value,
    pub samples: usize,
    /// Samples per chunk: the unit of resuming and of the job array's split.
    pub chunk: usize,
    pub num_jobs: usize,
    /// The FID network's weights file (its name) and feature width; `None`: no rFID.
    pub fid: Option<String>,
    /// The LPIPS weights; `None`: no LPIPS.
    pub lpips: Option<String>,
    pub upscale: bool,
}

/// One image's line of a scores file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageLine {
    /// The sample's position in the source index.
    pub index: usize,
    pub chunk: usize,
    pub key: String,
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psnr: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssim: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharpness: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lpips: Option<f64>,
    /// Why the sample was skipped (unreadable, corrupt, too small).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A job's accumulated statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct JobState {
    /// Which chunks of the whole set are done (by this job).
    pub done: Vec<bool>,
    /// Inception features of the originals and of the reconstructions.
    pub fid: Option<(Moments, Moments)>,
    /// Code histogram of a discrete tokenizer.
    pub codes: Option<Vec<u64>>,
}

impl JobState {
    pub fn new(chunks: usize, fid_dim: Option<usize>, n_codes: Option<usize>) -> Self {
        Self {
            done: vec![false; chunks],
            fid: fid_dim.map(|d| (Moments::empty(d), Moments::empty(d))),
            codes: n_codes.map(|n| vec![0; n]),
        }
    }

    /// Adds another job's statistics (chunks, moments, histogram).
    pub fn merge(&mut self, other: &JobState) -> Result<()> {
        if other.done.len() != self.done.len() {
            return Err(Error::bad_data("job states of different chunk counts"));
        }
        for (a, b) in self.done.iter_mut().zip(&other.done) {
            *a |= b;
        }
        match (&mut self.fid, &other.fid) {
            (Some((r, g)), Some((or, og))) => {
                r.merge(or)?;
                g.merge(og)?;
            }
            (None, None) => {}
            _ => {
                return Err(Error::bad_data(
                    "job states with and without FID statistics",
                ))
            }
        }
        match (&mut self.codes, &other.codes) {
            (Some(a), Some(b)) if a.len() == b.len() => {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
            }
            (None, None) => {}
            _ => return Err(Error::bad_data("job states with different code histograms")),
        }
        Ok(())
    }

    /// Writes the state atomically as safetensors (f64 moments, counts as f64: exact below 2⁵³).
    pub fn save(&self, path: &Path) -> Result<()> {
        let dev = Device::Cpu;
        let mut named: Vec<(String, Tensor)> = Vec::new();
        let done: Vec<u8> = self.done.iter().map(|&d| d as u8).collect();
        named.push((
            "done".into(),
            Tensor::from_vec(done, self.done.len(), &dev)?,
        ));
        if let Some((real, recon)) = &self.fid {
            for (side, m) in [("real", real), ("recon", recon)] {
                let n = Tensor::from_vec(vec![m.n as f64], 1, &dev)?;
                named.push((format!("{side}.n"), n));
                for (part, k) in [("hi", 0), ("lo", 1)] {
                    let s = Tensor::from_slice(&m.sum[k], m.dim, &dev)?;
                    named.push((format!("{side}.sum.{part}"), s));
                    let o = Tensor::from_slice(&m.outer[k], m.outer[k].len(), &dev)?;
                    named.push((format!("{side}.outer.{part}"), o));
                }
            }
        }
        if let Some(c) = &self.codes {
            let v: Vec<f64> = c.iter().map(|&x| x as f64).collect();
            named.push(("codes".into(), Tensor::from_vec(v, c.len(), &dev)?));
        }
        imgseq_core::weights::save_tensors(path, named.iter().map(|(k, t)| (k.as_str(), t)))
    }

    /// Reads a state [`Self::save`] wrote, checking it against the expected layout.
    pub fn load(path: &Path, expect: &JobState) -> Result<Self> {
        let t = imgseq_core::weights::load_tensors(path, &Device::Cpu)?;
        let bad = |what: &str| Error::format(path, format!("not this evaluation's state: {what}"));
        let get = |k: &str| t.get(k).ok_or_else(|| bad(&format!("no `{k}`")));
        let done: Vec<bool> = get("done")?
            .to_dtype(DType::U8)?
            .to_vec1::<u8>()?
            .into_iter()
            .map(|d| d != 0)
            .collect();
        if done.len() != expect.done.len() {
            return Err(bad("another chunk count"));
        }
        let moments = |side: &str, dim: usize| -> Result<Moments> {
            if t.contains_key(&format!("{side}.scatter")) {
                return Err(older_form(path));
            }
            let n = get(&format!("{side}.n"))?.to_vec1::<f64>()?;
            let tri = dim * (dim + 1) / 2;
            let mut m = Moments::empty(dim);
            for (part, k) in [("hi", 0), ("lo", 1)] {
                let s = get(&format!("{side}.sum.{part}"))?.to_vec1::<f64>()?;
                let o = get(&format!("{side}.outer.{part}"))?.to_vec1::<f64>()?;
                if s.len() != dim || o.len() != tri {
                    return Err(bad("another feature width"));
                }
                m.sum[k] = s;
                m.outer[k] = o;
            }
            if n.len() != 1 || !(n[0] >= 0.0 && n[0].fract() == 0.0) {
                return Err(bad("a bad vector count"));
            }
            m.n = n[0] as usize;
            Ok(m)
        };
        let fid = match &expect.fid {
            Some((r, _)) => Some((moments("real", r.dim)?, moments("recon", r.dim)?)),
            None => None,
        };
        let codes = match &expect.codes {
            Some(c) => {
                let v = get("codes")?.to_vec1::<f64>()?;
                if v.len() != c.len() {
                    return Err(bad("another codebook size"));
                }
                Some(v.into_iter().map(|x| x as u64).collect())
            }
            None => None,
        };
        Ok(Self { done, fid, codes })
    }
}

/// A state saved by an imgseq whose FID statistics were mean and centred scatter.
fn older_form(path: &Path) -> Error {
    Error::format(
        path,
        "FID statistics in an older form (mean and centred scatter), which does not merge \
         exactly with the current raw sums; evaluate into a new folder",
    )
}

/// A job's files in an evaluation folder: `scores.jsonl` + `state.safetensors` for a single
/// process, `scores-0002-of-0008.jsonl` + `state-0002-of-0008.safetensors` for job 2 of 8.
pub fn job_files(dir: &Path, num_jobs: usize, job: usize) -> (PathBuf, PathBuf) {
    if num_jobs > 1 {
        let tag = format!("{job:04}-of-{num_jobs:04}");
        (
            dir.join(format!("scores-{tag}.jsonl")),
            dir.join(format!("state-{tag}.safetensors")),
        )
    } else {
        (dir.join("scores.jsonl"), dir.join("state.safetensors"))
    }
}

/// Reads a scores file's lines.
pub fn read_lines(path: &Path) -> Result<Vec<ImageLine>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| Error::format(path, format!("line {}: {e}", i + 1)))
        })
        .collect()
}

/// Rewrites a scores file keeping only the lines of chunks marked done (a run stopped after
/// appending a chunk's lines but before saving the state leaves them behind).
pub fn keep_done_lines(path: &Path, done: &[bool]) -> Result<()> {
    let lines = read_lines(path)?;
    let kept: Vec<&ImageLine> = lines
        .iter()
        .filter(|l| done.get(l.chunk).copied().unwrap_or(false))
        .collect();
    if kept.len() == lines.len() {
        return Ok(());
    }
    let mut text = String::new();
    for l in kept {
        text.push_str(&serde_json::to_string(l).map_err(|e| Error::bad_data(e.to_string()))?);
        text.push('\n');
    }
    write_bytes_atomic(path, text.as_bytes())
}

/// The figures of a whole evaluation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub protocol: ProtocolInfo,
    pub model: serde_json::Value,
    /// Samples in the set, images scored, samples skipped.
    pub samples: usize,
    pub images: usize,
    pub skipped: usize,
    /// The first skipped samples: `source: why`.
    pub skipped_samples: Vec<String>,
    pub psnr: f64,
    pub ssim: f64,
    pub sharpness: f64,
    pub lpips: Option<f64>,
    pub rfid: Option<f64>,
    pub fid_weights: Option<String>,
    pub lpips_weights: Option<String>,
    pub codes_used: Option<usize>,
    pub n_embed: Option<usize>,
    pub usage_percent: Option<f64>,
    pub perplexity: Option<f64>,
    /// Jobs whose parts were merged.
    pub jobs: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_image: Vec<ImageLine>,
}

/// Mean of the present values (NaN when none).
fn mean_of(v: impl Iterator<Item = Option<f64>>) -> f64 {
    let (s, n) = v.flatten().fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    s / n as f64
}

/// `source: why` of a skipped sample's line (the reason alone where it names the source).
fn skip_reason(l: &ImageLine) -> Option<String> {
    l.error.as_ref().map(|e| match e.starts_with(&l.source) {
        true => e.clone(),
        false => format!("{}: {e}", l.source),
    })
}

/// The report of the merged statistics and all scores lines (sorted by sample).
pub fn report(settings: &Settings, state: &JobState, mut lines: Vec<ImageLine>) -> Result<Report> {
    lines.sort_by_key(|l| l.index);
    let scored: Vec<&ImageLine> = lines.iter().filter(|l| l.error.is_none()).collect();
    if scored.is_empty() {
        let first = lines.iter().find_map(skip_reason);
        return Err(Error::invalid(format!(
            "no image of the {} samples could be scored ({})",
            lines.len(),
            first.as_deref().unwrap_or("the set is empty")
        )));
    }
    let skipped: Vec<String> = lines.iter().filter_map(skip_reason).collect();
    let rfid = match &state.fid {
        Some((real, recon)) => Some(frechet_distance(&real.stats()?, &recon.stats()?)?),
        None => None,
    };
    let usage = state
        .codes
        .as_ref()
        .map(|c| (c.len(), imgseq_core::codes::usage_from_counts(c)));
    Ok(Report {
        protocol: settings.protocol.clone(),
        model: settings.model.clone(),
        samples: settings.samples,
        images: scored.len(),
        skipped: skipped.len(),
        skipped_samples: skipped.into_iter().take(LISTED_SKIPS).collect(),
        psnr: mean_of(scored.iter().map(|l| l.psnr.map(|p| p.min(100.0)))),
        ssim: mean_of(scored.iter().map(|l| l.ssim)),
        sharpness: mean_of(scored.iter().map(|l| l.sharpness)),
        lpips: settings
            .lpips
            .as_ref()
            .map(|_| mean_of(scored.iter().map(|l| l.lpips))),
        rfid,
        fid_weights: settings.fid.clone(),
        lpips_weights: settings.lpips.clone(),
        codes_used: usage.map(|u| u.1 .0),
        n_embed: usage.map(|u| u.0),
        usage_percent: usage.map(|u| 100.0 * u.1 .0 as f64 / u.0 as f64),
        perplexity: usage.map(|u| u.1 .1),
        jobs: settings.num_jobs,
        per_image: lines,
    })
}

/// Merges every job of the evaluation in `dir` into its report (written to `report.json`,
/// without the per-image lines); fails naming the jobs not finished.
pub fn merge(dir: &Path) -> Result<Report> {
    let settings: Settings = read_json(dir.join(SETTINGS), "an evaluation's settings")?;
    let chunks = settings.samples.div_ceil(settings.chunk);
    let (fid_dim, n_codes) = expected_layout(dir, &settings)?;
    let mut all = JobState::new(chunks, fid_dim, n_codes);
    let mut lines = Vec::new();
    for job in 0..settings.num_jobs {
        let (scores, state) = job_files(dir, settings.num_jobs, job);
        let expect = JobState::new(chunks, fid_dim, n_codes);
        let s = if state.exists() {
            JobState::load(&state, &expect)?
        } else {
            expect
        };
        all.merge(&s)?;
        lines.extend(
            read_lines(&scores)?
                .into_iter()
                .filter(|l| s.done.get(l.chunk).copied().unwrap_or(false)),
        );
    }
    let missing: Vec<usize> = (0..chunks)
        .filter(|&c| !all.done[c])
        .map(|c| c % settings.num_jobs)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if !missing.is_empty() {
        return Err(Error::invalid(format!(
            "{}: jobs {missing:?} of {} have not finished (run them, then merge again)",
            dir.display(),
            settings.num_jobs
        )));
    }
    let mut r = report(&settings, &all, lines)?;
    let path = dir.join(REPORT);
    let per_image = std::mem::take(&mut r.per_image);
    imgseq_core::fsutil::write_json(&path, &r)?;
    r.per_image = per_image;
    Ok(r)
}

/// The feature width and codebook size the folder's states hold (read from any state file).
fn expected_layout(dir: &Path, s: &Settings) -> Result<(Option<usize>, Option<usize>)> {
    for job in 0..s.num_jobs {
        let (_, state) = job_files(dir, s.num_jobs, job);
        if state.exists() {
            let t: HashMap<String, Tensor> =
                imgseq_core::weights::load_tensors(&state, &Device::Cpu)?;
            if t.contains_key("real.scatter") {
                return Err(older_form(&state));
            }
            let dim = t.get("real.sum.hi").map(|m| m.elem_count());
            let codes = t.get("codes").map(|c| c.elem_count());
            if s.fid.is_some() != dim.is_some() {
                return Err(Error::format(
                    &state,
                    "FID statistics do not match eval.json",
                ));
            }
            return Ok((dim, codes));
        }
    }
    Err(Error::invalid(format!(
        "{}: no job of the evaluation has finished a chunk yet",
        dir.display()
    )))
}
