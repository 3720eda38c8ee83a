//! The reconstruction benchmark over a set of images, for any tokenizer that turns its
//! output back into pictures: every sample brought to the protocol's picture, encoded,
//! decoded and scored (PSNR, SSIM, sharpness, LPIPS), the Inception features of original and
//! reconstruction accumulated for rFID, the codes counted.
//!
//! The set (the dataset job's source index: folders, lists, WebDataset, Parquet, IDX) is cut
//! into chunks of `chunk` samples; job `I` of `N` takes the chunks with `c mod N = I`, as the
//! dataset job splits its shards. With an output folder every finished chunk is recorded
//! (its lines appended to the job's scores file, then the job's statistics saved atomically),
//! so a stopped run resumes at the next chunk, and [`crate::state::merge`] joins the jobs'
//! statistics exactly into one report.

use crate::protocol::Protocol;
use crate::state::{self, ImageLine, JobState, Report, Settings, SETTINGS};
use image::RgbImage;
use imgseq_core::eval::ImageScore;
use imgseq_core::frechet::Moments;
use imgseq_core::fsutil::{read_json, write_json};
use imgseq_core::image_io;
use imgseq_core::tokenizer::{Encoded, Tokenizer};
use imgseq_core::{Error, Result};
use imgseq_shards::{Plan, SampleRef};
use std::io::Write;
use std::path::Path;

/// A network whose features of the originals and of the reconstructions give rFID.
pub trait FeatureNet {
    /// Width of one picture's features.
    fn dim(&self) -> usize;
    /// Features of 8-bit pictures, picture after picture (`imgs.len() · dim` values).
    fn features(&self, imgs: &[RgbImage]) -> Result<Vec<f32>>;
}

impl FeatureNet for crate::inception::FidInception {
    fn dim(&self) -> usize {
        crate::inception::FEATURES
    }
    fn features(&self, imgs: &[RgbImage]) -> Result<Vec<f32>> {
        let x = crate::pictures_01(imgs)?;
        Ok(crate::inception::FidInception::features(self, &x)?
            .flatten_all()?
            .to_vec1::<f32>()?)
    }
}

/// A distance between pictures and their reconstructions (LPIPS).
pub trait PairDistance {
    fn distances(&self, originals: &[RgbImage], recons: &[RgbImage]) -> Result<Vec<f64>>;
}

/// The optional networks of an evaluation.
#[derive(Default, Clone, Copy)]
pub struct Networks<'a> {
    pub fid: Option<&'a dyn FeatureNet>,
    pub lpips: Option<&'a dyn PairDistance>,
}

/// How the evaluation runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub protocol: Protocol,
    pub upscale: bool,
    /// Pictures per forward pass.
    pub batch: usize,
    /// Samples per chunk (the unit of resuming and of the split).
    pub chunk: usize,
    pub num_jobs: usize,
    pub job_index: usize,
    pub progress: bool,
    /// Stop after this many chunks of this run (a time-boxed run; the next run resumes).
    pub max_chunks: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            protocol: Protocol::Native,
            upscale: false,
            batch: 8,
            chunk: 1000,
            num_jobs: 1,
            job_index: 0,
            progress: false,
            max_chunks: None,
        }
    }
}

/// What a run gives: the report when the whole set is done (this job's, or all jobs' when
/// the folder holds them all), else how far this job is.
#[derive(Debug)]
pub enum Outcome {
    Done(Box<Report>),
    /// This job's chunks done and in all, and the jobs not finished yet.
    Partial {
        chunks_done: usize,
        chunks: usize,
        waiting_for: Vec<usize>,
    },
}

/// Evaluates `tok` on `samples` (see the module docs); `settings` is what the run records
/// (checked against a folder's earlier runs); `out`: the evaluation folder (`None`: in memory,
/// nothing resumable).
pub fn run<T: Tokenizer + ?Sized>(
    tok: &T,
    samples: &[SampleRef],
    settings: &Settings,
    nets: Networks,
    out: Option<&Path>,
    o: &Options,
) -> Result<Outcome> {
    if samples.is_empty() {
        return Err(Error::invalid("eval: no images"));
    }
    if o.batch == 0 {
        return Err(Error::setting("batch_size", o.batch, "must be positive"));
    }
    if o.chunk == 0 {
        return Err(Error::setting("chunk_size", o.chunk, "must be positive"));
    }
    if out.is_none() && o.num_jobs > 1 {
        return Err(Error::invalid(
            "a job array's parts are merged from an output folder: give one",
        ));
    }
    o.protocol.check(&tok.input())?;
    let plan = Plan::new(samples.len(), o.chunk, o.num_jobs, o.job_index)?;
    let chunks = plan.num_shards();
    let fresh = JobState::new(chunks, nets.fid.map(|f| f.dim()), tok.codebook_size());
    let (mut st, files) = match out {
        Some(dir) => {
            let (st, scores, state) = open_folder(dir, settings, &fresh, o)?;
            (st, Some((scores, state)))
        }
        None => (fresh, None),
    };
    let mine: Vec<usize> = plan.my_shards().filter(|&c| !st.done[c]).collect();
    let done_before: usize = plan
        .my_shards()
        .filter(|&c| st.done[c])
        .map(|c| plan.samples_of(c).len())
        .sum();
    let pb = if o.progress {
        imgseq_core::progress::bar(plan.my_samples() as u64, done_before as u64, "eval")
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut memory_lines = Vec::new();
    for (k, &c) in mine.iter().enumerate() {
        if o.max_chunks.is_some_and(|m| k >= m) {
            break;
        }
        let range = plan.samples_of(c);
        let part_of = &samples[range.clone()];
        let (lines, part) = eval_chunk(tok, part_of, (range.start, c, chunks), nets, o)?;
        st.merge(&part)?;
        match &files {
            Some((scores, state)) => {
                append_lines(scores, &lines)?;
                st.save(state)?;
            }
            None => memory_lines.extend(lines),
        }
        pb.inc(range.len() as u64);
    }
    pb.finish_and_clear();
    let mine_done = plan.my_shards().filter(|&c| st.done[c]).count();
    match out {
        None if mine_done == plan.my_shards().count() && o.num_jobs == 1 => Ok(Outcome::Done(
            Box::new(state::report(settings, &st, memory_lines)?),
        )),
        Some(dir) if mine_done == plan.my_shards().count() => match state::merge(dir) {
            Ok(r) => Ok(Outcome::Done(Box::new(r))),
            Err(_) => Ok(partial(dir, settings, mine_done, &plan)),
        },
        _ => Ok(Outcome::Partial {
            chunks_done: mine_done,
            chunks: plan.my_shards().count(),
            waiting_for: vec![o.job_index],
        }),
    }
}

/// Where a finished job leaves the array: which jobs have chunks still to do.
fn partial(dir: &Path, s: &Settings, mine_done: usize, plan: &Plan) -> Outcome {
    let chunks = plan.num_shards();
    let waiting_for = (0..s.num_jobs)
        .filter(|&j| {
            let (_, state) = state::job_files(dir, s.num_jobs, j);
            let done = imgseq_core::weights::load_tensors(&state, &candle_core::Device::Cpu)
                .ok()
                .and_then(|t| t.get("done").and_then(|d| d.to_vec1::<u8>().ok()))
                .unwrap_or_default();
            (j..chunks)
                .step_by(s.num_jobs)
                .any(|c| done.get(c) != Some(&1))
        })
        .collect();
    Outcome::Partial {
        chunks_done: mine_done,
        chunks: plan.my_shards().count(),
        waiting_for,
    }
}

/// Opens (or starts) the evaluation folder for this job: the settings written or checked,
/// the job's state read and its scores file cut back to the chunks the state records.
fn open_folder(
    dir: &Path,
    settings: &Settings,
    fresh: &JobState,
    o: &Options,
) -> Result<(JobState, std::path::PathBuf, std::path::PathBuf)> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let sp = dir.join(SETTINGS);
    if sp.exists() {
        let before: Settings = read_json(&sp, "an evaluation's settings")?;
        if &before != settings {
            return Err(Error::invalid(format!(
                "{}: the evaluation there was started with other settings ({}); use another \
                 folder",
                dir.display(),
                settings_difference(&before, settings)
            )));
        }
    } else {
        write_json(&sp, settings)?;
    }
    let (scores, state) = state::job_files(dir, o.num_jobs, o.job_index);
    let st = if state.exists() {
        JobState::load(&state, fresh)?
    } else {
        fresh.clone()
    };
    state::keep_done_lines(&scores, &st.done)?;
    Ok((st, scores, state))
}

/// The first setting that differs, for the message.
fn settings_difference(a: &Settings, b: &Settings) -> &'static str {
    if a.protocol != b.protocol {
        "protocol"
    } else if a.model != b.model {
        "model"
    } else if a.samples != b.samples {
        "number of samples"
    } else if a.chunk != b.chunk {
        "chunk size"
    } else if a.num_jobs != b.num_jobs {
        "number of jobs"
    } else if a.fid != b.fid {
        "FID weights"
    } else if a.lpips != b.lpips {
        "LPIPS weights"
    } else {
        "upscaling"
    }
}

fn append_lines(path: &Path, lines: &[ImageLine]) -> Result<()> {
    let mut text = String::new();
    for l in lines {
        text.push_str(&serde_json::to_string(l).map_err(|e| Error::bad_data(e.to_string()))?);
        text.push('\n');
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_data())
        .map_err(|e| Error::io(path, e))
}

/// A sample read, decoded and brought to the protocol's picture; `Err`: why it is skipped.
fn picture<T: Tokenizer + ?Sized>(
    tok: &T,
    s: &SampleRef,
    o: &Options,
) -> std::result::Result<RgbImage, String> {
    let sample = s.load().map_err(|e| e.to_string())?;
    let name = Path::new(&s.source);
    let img = image_io::decode_rgb_bytes(name, &sample.image).map_err(|e| e.to_string())?;
    o.protocol
        .prepare(&tok.input(), name, &img, o.upscale)
        .map_err(|e| e.to_string())
}

/// Scores one chunk: its lines (in sample order) and its statistics.
fn eval_chunk<T: Tokenizer + ?Sized>(
    tok: &T,
    samples: &[SampleRef],
    (first, chunk, n_chunks): (usize, usize, usize),
    nets: Networks,
    o: &Options,
) -> Result<(Vec<ImageLine>, JobState)> {
    let mut st = JobState::new(n_chunks, nets.fid.map(|f| f.dim()), tok.codebook_size());
    st.done[chunk] = true;
    let mut lines = Vec::with_capacity(samples.len());
    let mut feats: (Vec<f32>, Vec<f32>) = (Vec::new(), Vec::new());
    let mut pending: Vec<(usize, RgbImage)> = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        let mut line = ImageLine {
            index: first + i,
            chunk,
            key: s.key.clone(),
            source: s.source.clone(),
            psnr: None,
            ssim: None,
            sharpness: None,
            lpips: None,
            error: None,
        };
        match picture(tok, s, o) {
            Ok(p) => pending.push((lines.len(), p)),
            Err(e) => line.error = Some(e),
        }
        lines.push(line);
        if pending.len() == o.batch || (i + 1 == samples.len() && !pending.is_empty()) {
            let batch = std::mem::take(&mut pending);
            score_batch(tok, &batch, &mut lines, &mut st, &mut feats, nets)?;
        }
    }
    if let (Some(net), Some((real, recon))) = (nets.fid, st.fid.as_mut()) {
        *real = Moments::of_features(&feats.0, net.dim())?;
        *recon = Moments::of_features(&feats.1, net.dim())?;
    }
    Ok((lines, st))
}

/// Reconstructs and scores a batch of (line, picture) pairs.
fn score_batch<T: Tokenizer + ?Sized>(
    tok: &T,
    batch: &[(usize, RgbImage)],
    lines: &mut [ImageLine],
    st: &mut JobState,
    feats: &mut (Vec<f32>, Vec<f32>),
    nets: Networks,
) -> Result<()> {
    let imgs: Vec<RgbImage> = batch.iter().map(|(_, p)| p.clone()).collect();
    let encoded = tok.encode_pictures(&imgs)?;
    if let (Some(counts), Encoded::Tokens(t)) = (st.codes.as_mut(), &encoded) {
        for &c in &t.data {
            let slot = usize::try_from(c).ok().and_then(|c| counts.get_mut(c));
            *slot.ok_or_else(|| Error::bad_data(format!("code {c} outside the codebook")))? += 1;
        }
    }
    let recons = match &encoded {
        Encoded::Tokens(t) => tok.decode_admitted(t)?,
        e => tok.decode_encoded(e)?,
    };
    if recons.len() != imgs.len() {
        return Err(Error::bad_data(format!(
            "the tokenizer gave {} reconstructions of {} pictures",
            recons.len(),
            imgs.len()
        )));
    }
    let lp = match nets.lpips {
        Some(l) => Some(l.distances(&imgs, &recons)?),
        None => None,
    };
    for (k, ((li, img), r)) in batch.iter().zip(&recons).enumerate() {
        let s = ImageScore::new(Path::new(""), img, r)?;
        let line = &mut lines[*li];
        line.psnr = Some(s.psnr);
        line.ssim = Some(s.ssim);
        line.sharpness = s.sharpness;
        line.lpips = lp.as_ref().map(|v| v[k]);
    }
    if let Some(net) = nets.fid {
        feats.0.extend(net.features(&imgs)?);
        feats.1.extend(net.features(&recons)?);
    }
    Ok(())
}
