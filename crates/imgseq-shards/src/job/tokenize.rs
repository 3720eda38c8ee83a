//! Whole datasets → token shards (`imgseq vq tokenize`) with any discrete
//! [`Tokenizer`], latent shards (`imgseq vae tokenize`) or feature shards (a vision tower's
//! embeddings, `imgseq tokenize --model TOWER`) with any [`SampleEncoder`]: one machinery
//! whatever a sample's payload is. The sources' sample index ([`crate::source`]) split into shards ([`Plan`]),
//! images decoded and brought to the tokenizer's input ([`InputSpec`]) on a separate thread
//! while the tokenizer encodes the previous batch, batches formed across files and shards,
//! every shard written whole and renamed into place. A killed run started again with the same
//! command skips the shards that exist and redoes the one it was writing: the result is
//! identical to an uninterrupted run. A sample that cannot be read, decoded or is too small is
//! skipped and listed in its shard's `errors.jsonl`; nothing short of an unwritable output
//! stops the run.

use super::files::{finished_record, job_files, remove_stale_temporaries, write_errors_list};
use crate::manifest::{
    errors_name, record_name, Job, Manifest, ShardRecord, TokenizerInfo, FEATURE_FORMAT, FORMAT,
    LATENT_FORMAT,
};
use crate::shard::FloatDtype;
use crate::source::{self, SampleRef, SourceOptions};
use crate::{Payload, Plan, ShardFormat, ShardKind, TokenShardWriter};
use image::RgbImage;
use imgseq_core::fsutil::{read_json, temp_target, write_bytes_atomic, write_json};
use imgseq_core::image_io;
use imgseq_core::input::InputSpec;
use imgseq_core::tokenizer::{Encoded, OutputKind, Tokenizer};
use imgseq_core::{Error, Result};
use indicatif::ProgressBar;
use rayon::prelude::*;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver};
use std::time::Instant;

/// How to tokenize (the input side, crop and channels are the tokenizer's).
#[derive(Debug, Clone)]
pub struct Options {
    pub upscale: bool,
    /// Images no larger than the input side are centred on a zero canvas of that side instead
    /// (Fashion-MNIST's 28×28 on 32×32, as the ViT sees them); larger ones are resized and
    /// cropped as usual.
    pub pad: bool,
    /// Images per forward pass.
    pub batch: usize,
    /// Samples per output shard.
    pub shard_size: usize,
    /// This process is job `job_index` of `num_jobs`.
    pub num_jobs: usize,
    pub job_index: usize,
    pub progress: bool,
    /// Output shards: WebDataset tars or Parquet files.
    pub format: ShardFormat,
    /// How sources are read (the image column of Parquet sources).
    pub sources: SourceOptions,
    /// How latent and feature shards store their floats (token shards: float16 only, as the
    /// option does not apply).
    pub dtype: FloatDtype,
}

/// What the job writes per sample: a batch of prepared pictures (brought to [`Self::input`])
/// → one payload each, all of [`Self::kind`].
pub trait SampleEncoder {
    fn input(&self) -> InputSpec;
    fn kind(&self) -> ShardKind;
    fn encode_batch(&self, imgs: &[RgbImage]) -> Result<Vec<Payload>>;
}

/// Any [`Tokenizer`] as a [`SampleEncoder`]: a discrete one's token grids, a continuous one's
/// latents (a description with a latent block) or embeddings (features), as float arrays of
/// its output shape, float16 unless the job's options say otherwise.
pub struct Through<'a, T: ?Sized>(pub &'a T);

impl<T: Tokenizer + ?Sized> SampleEncoder for Through<'_, T> {
    fn input(&self) -> InputSpec {
        self.0.input()
    }

    fn kind(&self) -> ShardKind {
        let dtype = FloatDtype::F16;
        match self.0.codebook_size() {
            Some(n_codes) => ShardKind::Tokens { n_codes },
            None => {
                let d = self.0.describe();
                if d.latent.is_none() && d.output.kind == OutputKind::Embeddings {
                    ShardKind::Features { dtype }
                } else {
                    ShardKind::Latents { dtype }
                }
            }
        }
    }

    fn encode_batch(&self, imgs: &[RgbImage]) -> Result<Vec<Payload>> {
        let e = self.0.encode_pictures(imgs)?;
        if let Encoded::Tokens(g) = &e {
            return Ok((0..g.n)
                .map(|i| Payload::Tokens {
                    h: g.h,
                    w: g.w,
                    tokens: g.image(i).to_vec(),
                })
                .collect());
        }
        let shape = e.item_shape();
        (0..e.len())
            .map(|i| {
                let values = e
                    .values(i)
                    .ok_or_else(|| Error::invalid("short encoder output"))?;
                Ok(Payload::Latent {
                    shape: shape.clone(),
                    values: values.to_vec(),
                })
            })
            .collect()
    }
}

/// The manifest format of a set of `kind` shards.
fn format_of(kind: ShardKind) -> &'static str {
    match kind {
        ShardKind::Tokens { .. } => FORMAT,
        ShardKind::Latents { .. } => LATENT_FORMAT,
        ShardKind::Features { .. } => FEATURE_FORMAT,
    }
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Report {
    pub manifest: PathBuf,
    /// Shards this job covers, written now, and found finished from an earlier run.
    pub shards: usize,
    pub written: usize,
    pub skipped: usize,
    /// Samples tokenized and skipped as errors in this job's shards (all of them, old and new).
    pub samples: usize,
    pub errors: usize,
    /// Images encoded in this process and the rate.
    pub encoded: usize,
    pub images_per_s: f64,
}

/// Settings every job of a run must share (`run.json`): a folder holds one tokenization.
fn run_settings(
    format: &str,
    tok: &TokenizerInfo,
    inputs: &[String],
    n: usize,
    o: &Options,
) -> Value {
    let mut v = json!({"format": format, "tokenizer": tok, "inputs": inputs, "input_samples": n,
           "shard_size": o.shard_size});
    if o.pad {
        v["pad"] = json!(true);
    }
    if o.format != ShardFormat::Wds {
        v["shard_format"] = json!(o.format.name());
    }
    v
}

/// The first setting (a dotted path into `run.json`) whose value differs between the folder's
/// `had` and this run's `now`, with both values: `tokenizer.precision is "f32" here, "bf16"
/// now`.
fn first_difference(at: &str, had: &Value, now: &Value) -> Option<String> {
    if had == now {
        return None;
    }
    if let (Value::Object(a), Value::Object(b)) = (had, now) {
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for k in keys {
            let path = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            let (x, y) = (
                a.get(k).unwrap_or(&Value::Null),
                b.get(k).unwrap_or(&Value::Null),
            );
            if let Some(d) = first_difference(&path, x, y) {
                return Some(d);
            }
        }
    }
    let short = |v: &Value| {
        let t = v.to_string();
        if t.chars().count() > 60 {
            format!("{}...", t.chars().take(57).collect::<String>())
        } else {
            t
        }
    };
    Some(format!("{at} is {} here, {} now", short(had), short(now)))
}

/// One decoded sample on its way to the model, or the reason it was skipped.
struct Item {
    shard: usize,
    sample: SampleRef,
    image: std::result::Result<(RgbImage, Value), String>,
}

/// The JSON record that goes beside a sample's tokens: key, source, original size, then
/// `extra`, the input side and the sample's own metadata.
fn record(
    s: &SampleRef,
    (w, h): (u32, u32),
    extra: (&str, Value),
    size: u32,
) -> Map<String, Value> {
    let mut rec = Map::new();
    rec.insert("key".into(), json!(s.key));
    rec.insert("source".into(), json!(s.source));
    rec.insert("original_size".into(), json!([w, h]));
    rec.insert(extra.0.into(), extra.1);
    rec.insert("size".into(), json!(size));
    rec
}

/// Reads, decodes and brings a sample to the input; the JSON record that goes beside its
/// tokens.
fn prepare(
    s: &SampleRef,
    spec: &InputSpec,
    upscale: bool,
    pad: bool,
) -> std::result::Result<(RgbImage, Value), String> {
    let size = spec.size;
    let sample = s.load().map_err(|e| e.to_string())?;
    let name = Path::new(&s.source);
    let img = image_io::decode_rgb_bytes(name, &sample.image).map_err(|e| e.to_string())?;
    let (w, h) = img.dimensions();
    if pad && w <= size && h <= size {
        let (ox, oy) = ((size - w) / 2, (size - h) / 2);
        let mut canvas = RgbImage::new(size, size);
        image::imageops::replace(&mut canvas, &img, ox as i64, oy as i64);
        let mut rec = record(s, (w, h), ("canvas_offset", json!([ox, oy])), size);
        rec.extend(sample.meta);
        return Ok((spec.channels_of(canvas), Value::Object(rec)));
    }
    // The tokenizer's resize and crop (LlamaGen: ADM's centre crop) and channels.
    let crop = spec
        .prepare(name, &img, upscale)
        .map_err(|e| e.to_string())?;
    // The centre square kept, in the original's pixels.
    let side = w.min(h) as f64;
    let (x0, y0) = ((w as f64 - side) / 2.0, (h as f64 - side) / 2.0);
    let mut rec = record(
        s,
        (w, h),
        ("crop", json!([x0, y0, x0 + side, y0 + side])),
        size,
    );
    rec.extend(sample.meta);
    Ok((crop, Value::Object(rec)))
}

/// What [`start_run`] made: the index, its plan, the inputs as recorded, and whether this
/// run started the folder (created it, wrote its `run.json`).
struct Started {
    index: Vec<SampleRef>,
    plan: Plan,
    inputs: Vec<String>,
    created_dir: bool,
    new_run: bool,
}

/// The first entry of `out` that is not a temporary ([`temp_target`]): a folder without
/// `run.json` that holds one is not a tokenize run's.
fn first_entry(out: &Path) -> Result<Option<String>> {
    for e in std::fs::read_dir(out).map_err(|e| Error::io(out, e))? {
        let name = e.map_err(|e| Error::io(out, e))?.file_name();
        let name = name.to_string_lossy();
        if temp_target(&name).is_none() {
            return Ok(Some(name.into_owned()));
        }
    }
    Ok(None)
}

/// The sample index of `sources` and its plan, with the folder's `run.json` written or
/// checked against this run's settings. A folder without `run.json` must be empty: shards of
/// unknown settings are never reused.
fn start_run(
    format: &str,
    info: &TokenizerInfo,
    sources: &[PathBuf],
    out: &Path,
    o: &Options,
) -> Result<Started> {
    if o.batch == 0 {
        return Err(Error::setting("batch_size", 0, "must be positive"));
    }
    let index = source::index_with(sources, &o.sources)?;
    if index.is_empty() {
        return Err(Error::invalid("the sources hold no images"));
    }
    let plan = Plan::new(index.len(), o.shard_size, o.num_jobs, o.job_index)?;
    let inputs: Vec<String> = sources.iter().map(|p| p.display().to_string()).collect();
    let created_dir = std::fs::symlink_metadata(out).is_err();
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let settings = run_settings(format, info, &inputs, index.len(), o);
    let run_file = out.join("run.json");
    let new_run = std::fs::symlink_metadata(&run_file).is_err();
    if !new_run {
        let had: Value = read_json(&run_file, "run.json")?;
        if let Some(what) = first_difference("", &had, &settings) {
            return Err(Error::format(
                &run_file,
                format!(
                    "this folder holds tokens made with other settings: {what}; resume with the \
                     same settings or tokenize into a new folder"
                ),
            ));
        }
    } else {
        if let Some(name) = first_entry(out)? {
            return Err(Error::format(
                out,
                format!(
                    "holds {name} but no run.json: not the folder of a tokenize run; tokenize \
                     into a new or empty folder"
                ),
            ));
        }
        write_json(&run_file, &settings)?;
    }
    Ok(Started {
        index,
        plan,
        inputs,
        created_dir,
        new_run,
    })
}

/// A run that started the folder failed before finishing a shard: what it wrote goes
/// (`run.json`, errors lists, the folder if it made it), so that nothing is left behind.
fn undo_start(out: &Path, created_dir: bool) {
    let Ok(rd) = std::fs::read_dir(out) else {
        return;
    };
    let names: Vec<String> = rd
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    let finished = names
        .iter()
        .any(|n| n.starts_with("shard-") && (n.ends_with(".tar") || n.ends_with(".parquet")));
    if finished {
        return;
    }
    for n in &names {
        if n == "run.json" || (n.starts_with("shard-") && n.ends_with(".errors.jsonl")) {
            let _ = std::fs::remove_file(out.join(n));
        }
    }
    if created_dir {
        let _ = std::fs::remove_dir(out);
    }
}

/// Tokenizes `sources` into `out` with `tok` (described by `info`): token shards of a
/// discrete tokenizer, latent shards of one whose description has a latent block, feature
/// shards of an embeddings model.
pub fn tokenize<T: Tokenizer + ?Sized>(
    tok: &T,
    info: &TokenizerInfo,
    sources: &[PathBuf],
    out: &Path,
    o: &Options,
) -> Result<Report> {
    if tok.codebook_size().is_none() && info.latent.is_none() && info.features.is_none() {
        return Err(Error::invalid(format!(
            "shards hold codebook tokens, latents or (tokens, dim) features; a {} gives none of \
             them",
            tok.label()
        )));
    }
    run(&Through(tok), info, sources, out, o)
}

/// Writes the payloads `enc` makes of `sources` into `out` (described by `info`): token,
/// latent or feature shards, resumable and split by job arrays alike.
pub fn run<E: SampleEncoder>(
    enc: &E,
    info: &TokenizerInfo,
    sources: &[PathBuf],
    out: &Path,
    o: &Options,
) -> Result<Report> {
    let (kind, info) = super::files::stored_as(enc.kind(), info, o.dtype)?;
    let info = &info;
    let started = start_run(format_of(kind), info, sources, out, o)?;
    let (fresh, created_dir) = (started.new_run, started.created_dir);
    let r = run_job(enc, kind, info, started, out, o);
    if r.is_err() && fresh {
        undo_start(out, created_dir);
    }
    r
}

/// [`tokenize`] once the folder is started.
fn run_job<E: SampleEncoder>(
    enc: &E,
    kind: ShardKind,
    info: &TokenizerInfo,
    started: Started,
    out: &Path,
    o: &Options,
) -> Result<Report> {
    let Started {
        index,
        plan,
        inputs,
        ..
    } = started;
    remove_stale_temporaries(out, &plan, o.num_jobs, o.job_index)?;
    // Shards finished by an earlier run are kept as they are.
    let mut records: Vec<ShardRecord> = Vec::new();
    let mut todo: Vec<usize> = Vec::new();
    for s in plan.my_shards() {
        match finished_record(out, &plan, s, o.format, kind)? {
            Some(r) => records.push(r),
            None => todo.push(s),
        }
    }
    let skipped = records.len();
    let todo_samples: usize = todo.iter().map(|&s| plan.samples_of(s).len()).sum();
    let pb = if o.progress {
        imgseq_core::progress::bar(todo_samples as u64, 0, "tokenize")
    } else {
        ProgressBar::hidden()
    };
    if skipped > 0 {
        eprintln!(
            "{}: {skipped} shard(s) already finished, {} to write",
            out.display(),
            todo.len()
        );
    }
    let work: Vec<(usize, SampleRef)> = todo
        .iter()
        .flat_map(|&s| plan.samples_of(s).map(move |i| (s, i)))
        .map(|(s, i)| (s, index[i].clone()))
        .collect();
    let mut run = Run {
        enc,
        out,
        plan: &plan,
        o,
        kind,
        pb,
        todo_samples,
        t0: Instant::now(),
        encoded: 0,
        current: None,
        records,
    };
    run.encode_all(work, enc.input())?;
    run.pb.finish_and_clear();
    let (encoded, t0) = (run.encoded, run.t0);
    let mut m = Manifest {
        format: format_of(kind).into(),
        tokenizer: info.clone(),
        inputs,
        input_samples: index.len(),
        shard_size: o.shard_size,
        num_shards: plan.num_shards(),
        job: (o.num_jobs > 1).then_some(Job {
            index: o.job_index,
            count: o.num_jobs,
        }),
        shards: run.records,
        samples: 0,
        errors: 0,
    };
    m.recount();
    let (manifest_name, errors_list) = job_files(o.num_jobs, o.job_index);
    let path = out.join(manifest_name);
    write_errors_list(&out.join(errors_list), out, &m)?;
    m.write(&path)?;
    let secs = t0.elapsed().as_secs_f64();
    Ok(Report {
        manifest: path,
        shards: m.shards.len(),
        written: m.shards.len() - skipped,
        skipped,
        samples: m.samples,
        errors: m.errors,
        encoded,
        images_per_s: encoded as f64 / secs.max(1e-9),
    })
}

/// A run's encoding state: the shard being written and the records of those done.
struct Run<'a, E> {
    enc: &'a E,
    out: &'a Path,
    plan: &'a Plan,
    o: &'a Options,
    kind: ShardKind,
    pb: ProgressBar,
    todo_samples: usize,
    t0: Instant,
    encoded: usize,
    current: Option<Open>,
    records: Vec<ShardRecord>,
}

impl<E: SampleEncoder> Run<'_, E> {
    /// Decodes `work` on its own thread while the tokenizer encodes the previous batch, and
    /// writes every sample, in order, into its shard.
    fn encode_all(&mut self, work: Vec<(usize, SampleRef)>, spec: InputSpec) -> Result<()> {
        let (tx, rx) = sync_channel::<Item>(2 * self.o.batch);
        let (upscale, pad, chunk) = (self.o.upscale, self.o.pad, self.o.batch);
        let producer = std::thread::spawn(move || {
            // A batch's worth of files at a time, decoded in parallel (the rayon pool is
            // shared with the model, so both cores stay busy), sent on in order.
            for part in work.chunks(chunk) {
                let items: Vec<Item> = part
                    .par_iter()
                    .map(|(shard, sample)| Item {
                        shard: *shard,
                        sample: sample.clone(),
                        image: prepare(sample, &spec, upscale, pad),
                    })
                    .collect();
                for item in items {
                    if tx.send(item).is_err() {
                        return;
                    }
                }
            }
        });
        self.consume(rx)?;
        if let Some(c) = self.current.take() {
            self.records.push(c.finish(self.out, self.plan)?);
        }
        producer
            .join()
            .map_err(|_| Error::invalid("the image decoding thread panicked"))
    }

    /// Batches of `batch` images (and the skipped samples between them) from `rx`, each
    /// encoded and written.
    fn consume(&mut self, rx: Receiver<Item>) -> Result<()> {
        let mut pending: Vec<Item> = Vec::new();
        let mut n_images = 0usize;
        let mut done = false;
        while !done {
            match rx.recv() {
                Ok(item) => {
                    n_images += usize::from(item.image.is_ok());
                    pending.push(item);
                    if n_images < self.o.batch {
                        continue;
                    }
                }
                Err(_) => done = true,
            }
            self.write_batch(&mut pending)?;
            n_images = 0;
        }
        Ok(())
    }

    /// Encodes the images of `pending`, then hands every item, in order, to its shard.
    fn write_batch(&mut self, pending: &mut Vec<Item>) -> Result<()> {
        let imgs: Vec<RgbImage> = pending
            .iter()
            .filter_map(|it| it.image.as_ref().ok().map(|(img, _)| img.clone()))
            .collect();
        let mut payloads = if imgs.is_empty() {
            Vec::new()
        } else {
            self.enc.encode_batch(&imgs)?
        }
        .into_iter();
        self.encoded += imgs.len();
        for item in pending.drain(..) {
            if self.current.as_ref().is_none_or(|c| c.shard != item.shard) {
                if let Some(c) = self.current.take() {
                    self.records.push(c.finish(self.out, self.plan)?);
                }
                self.current = Some(Open::new(self.out, item.shard, self.o.format, self.kind)?);
            }
            let c = self.current.as_mut().expect("opened above");
            match item.image {
                Ok((_, mut rec)) => {
                    let p = payloads.next().ok_or_else(|| {
                        Error::invalid("the encoder gave fewer payloads than images")
                    })?;
                    match &p {
                        Payload::Tokens { h, w, .. } => rec["grid"] = json!([h, w]),
                        Payload::Latent { shape, .. } => rec["shape"] = json!(shape),
                    }
                    c.writer.append_payload(&item.sample.key, &p, &rec)?;
                }
                Err(reason) => c.errors.push(json!({
                    "key": item.sample.key, "source": item.sample.source, "reason": reason
                })),
            }
            self.tick();
        }
        Ok(())
    }

    /// One sample done: the bar, or without a terminal a plain log line every 10% of the work.
    fn tick(&self) {
        self.pb.inc(1);
        if self.o.progress {
            return;
        }
        let k = self.pb.position() as usize;
        let n = self.todo_samples;
        if n >= 10 && k.is_multiple_of(n / 10) {
            eprintln!(
                "tokenize: {k}/{n} samples, {:.1} images/s",
                self.encoded as f64 / self.t0.elapsed().as_secs_f64().max(1e-9)
            );
        }
    }
}

/// A shard being written.
struct Open {
    shard: usize,
    name: String,
    writer: TokenShardWriter,
    errors: Vec<Value>,
}

impl Open {
    fn new(out: &Path, shard: usize, format: ShardFormat, kind: ShardKind) -> Result<Self> {
        let name = format.shard_name(shard);
        Ok(Self {
            shard,
            writer: TokenShardWriter::create_kind(out.join(&name), format, kind)?,
            name,
            errors: Vec::new(),
        })
    }

    /// Errors list and record first, the shard's rename last: a shard file that exists is
    /// finished, with its record beside it.
    fn finish(self, out: &Path, plan: &Plan) -> Result<ShardRecord> {
        let mut lines = String::new();
        for e in &self.errors {
            lines.push_str(&e.to_string());
            lines.push('\n');
        }
        write_bytes_atomic(out.join(errors_name(self.shard)), lines.as_bytes())?;
        let range = plan.samples_of(self.shard);
        // The record's checksum is only known once the archive is closed: write it after,
        // and treat a shard without a valid record as unfinished-but-recoverable.
        let fin = self.writer.finish()?;
        let rec = ShardRecord {
            index: self.shard,
            name: self.name,
            samples: fin.samples,
            errors: self.errors.len(),
            first: range.start,
            end: range.end,
            bytes: fin.bytes,
            sha256: fin.sha256,
        };
        write_json(out.join(record_name(self.shard)), &rec)?;
        Ok(rec)
    }
}
