//! Whole datasets → token shards (`imgseq vq tokenize`): the sources' sample index
//! ([`imgseq_shards::source`]) split into shards ([`imgseq_shards::Plan`]), images decoded and
//! resized on a separate thread while the model encodes the previous batch, batches formed
//! across files and shards, every shard written whole and renamed into place
//! ([`imgseq_shards::wds`]). A killed run started again with the same command skips the shards
//! that exist and redoes the one it was writing: the result is identical to an uninterrupted
//! run. A sample that cannot be read, decoded or is too small is skipped and listed in its
//! shard's `errors.jsonl`; nothing short of an unwritable output stops the run.

use crate::model::VqModel;
use image::RgbImage;
use imgseq_core::fsutil::{read_json, write_bytes_atomic, write_json};
use imgseq_core::image_io;
use imgseq_core::input::InputSpec;
use imgseq_core::{Error, Result};
use imgseq_shards::manifest::{
    errors_name, job_manifest_name, record_name, Job, Manifest, ShardRecord, TokenizerInfo, FORMAT,
    MANIFEST,
};
use imgseq_shards::source::{self, SampleRef, SourceOptions};
use imgseq_shards::wds;
use imgseq_shards::{Plan, ShardFormat, TokenShardWriter};
use rayon::prelude::*;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;
use std::time::Instant;

/// How to tokenize.
#[derive(Debug, Clone)]
pub struct Options {
    /// Input side: shorter side resized to `size`, centre crop.
    pub size: u32,
    pub upscale: bool,
    /// Images no larger than `size` are centred on a zero `size`×`size` canvas instead
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
fn run_settings(tok: &TokenizerInfo, inputs: &[String], n: usize, o: &Options) -> Value {
    let mut v = json!({"format": FORMAT, "tokenizer": tok, "inputs": inputs, "input_samples": n,
           "shard_size": o.shard_size});
    if o.pad {
        v["pad"] = json!(true);
    }
    if o.format != ShardFormat::Wds {
        v["shard_format"] = json!(o.format.name());
    }
    v
}

/// One decoded sample on its way to the model, or the reason it was skipped.
struct Item {
    shard: usize,
    sample: SampleRef,
    image: std::result::Result<(RgbImage, Value), String>,
}

/// Reads, decodes and crops a sample; the JSON record that goes beside its tokens.
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
        let mut rec = Map::new();
        rec.insert("key".into(), json!(s.key));
        rec.insert("source".into(), json!(s.source));
        rec.insert("original_size".into(), json!([w, h]));
        rec.insert("canvas_offset".into(), json!([ox, oy]));
        rec.insert("size".into(), json!(size));
        rec.extend(sample.meta);
        return Ok((canvas, Value::Object(rec)));
    }
    image_io::check_min_size(name, w, h, size, upscale).map_err(|e| e.to_string())?;
    // The model family's resize and crop (LlamaGen: ADM's centre crop).
    let crop = spec.square(&img).map_err(|e| e.to_string())?;
    // The centre square kept, in the original's pixels.
    let side = w.min(h) as f64;
    let (x0, y0) = ((w as f64 - side) / 2.0, (h as f64 - side) / 2.0);
    let mut rec = Map::new();
    rec.insert("key".into(), json!(s.key));
    rec.insert("source".into(), json!(s.source));
    rec.insert("original_size".into(), json!([w, h]));
    rec.insert("crop".into(), json!([x0, y0, x0 + side, y0 + side]));
    rec.insert("size".into(), json!(size));
    rec.extend(sample.meta);
    Ok((crop, Value::Object(rec)))
}

/// Tokenizes `sources` into `out` with `model` (described by `tok`).
pub fn tokenize(
    model: &VqModel,
    tok: &TokenizerInfo,
    sources: &[PathBuf],
    out: &Path,
    o: &Options,
) -> Result<Report> {
    model.config().check_input_size(o.size as usize)?;
    if o.batch == 0 {
        return Err(Error::setting("batch_size", 0, "must be positive"));
    }
    let index = source::index_with(sources, &o.sources)?;
    if index.is_empty() {
        return Err(Error::invalid("the sources hold no images"));
    }
    let plan = Plan::new(index.len(), o.shard_size, o.num_jobs, o.job_index)?;
    let inputs: Vec<String> = sources.iter().map(|p| p.display().to_string()).collect();
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let settings = run_settings(tok, &inputs, index.len(), o);
    let run_file = out.join("run.json");
    if run_file.exists() {
        let had: Value = read_json(&run_file, "run.json")?;
        if had != settings {
            return Err(Error::format(
                &run_file,
                "this folder holds tokens of other sources, tokenizer, shard size or format; \
                 tokenize into a new folder",
            ));
        }
    } else {
        write_json(&run_file, &settings)?;
    }

    remove_stale_temporaries(out, &plan, o)?;
    // Shards finished by an earlier run are kept as they are.
    let mut records: Vec<ShardRecord> = Vec::new();
    let mut todo: Vec<usize> = Vec::new();
    for s in plan.my_shards() {
        match finished_record(out, &plan, s, o.format)? {
            Some(r) => records.push(r),
            None => todo.push(s),
        }
    }
    let skipped = records.len();
    let todo_samples: usize = todo.iter().map(|&s| plan.samples_of(s).len()).sum();
    let pb = if o.progress {
        imgseq_core::progress::bar(todo_samples as u64, 0, "tokenize")
    } else {
        indicatif::ProgressBar::hidden()
    };
    if skipped > 0 {
        eprintln!(
            "{}: {skipped} shard(s) already finished, {} to write",
            out.display(),
            todo.len()
        );
    }

    // Producer: decode on its own thread while the model works on the previous batch.
    let (tx, rx) = sync_channel::<Item>(2 * o.batch);
    let work: Vec<(usize, SampleRef)> = todo
        .iter()
        .flat_map(|&s| plan.samples_of(s).map(move |i| (s, i)))
        .map(|(s, i)| (s, index[i].clone()))
        .collect();
    let spec = model.config().input_spec(o.size);
    let (upscale, pad) = (o.upscale, o.pad);
    let chunk = o.batch;
    let producer = std::thread::spawn(move || {
        // A batch's worth of files at a time, decoded in parallel (the rayon pool is shared
        // with the model, so both cores stay busy), sent on in order.
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

    let t0 = Instant::now();
    let mut encoded = 0usize;
    let mut current: Option<Open> = None;
    let mut pending: Vec<Item> = Vec::new();
    let mut n_images = 0usize;
    let mut done = false;
    let n_codes = model.config().n_embed;
    while !done {
        match rx.recv() {
            Ok(item) => {
                n_images += usize::from(item.image.is_ok());
                pending.push(item);
                if n_images < o.batch {
                    continue;
                }
            }
            Err(_) => done = true,
        }
        // Encode the batch, then hand every item, in order, to its shard.
        let imgs: Vec<RgbImage> = pending
            .iter()
            .filter_map(|it| it.image.as_ref().ok().map(|(img, _)| img.clone()))
            .collect();
        let tokens = if imgs.is_empty() {
            Vec::new()
        } else {
            let q = model.encode(&spec.to_tensor(&imgs)?)?;
            let (_, h, w) = q.indices.dims3()?;
            let flat = q.indices.flatten_all()?.to_vec1::<u32>()?;
            flat.chunks(h * w)
                .map(|c| (h, w, c.iter().map(|&t| t as i64).collect::<Vec<_>>()))
                .collect()
        };
        encoded += imgs.len();
        let mut tokens = tokens.into_iter();
        for item in pending.drain(..) {
            if current.as_ref().is_none_or(|c| c.shard != item.shard) {
                if let Some(c) = current.take() {
                    records.push(c.finish(out, &plan)?);
                }
                current = Some(Open::new(out, item.shard, o.format, n_codes)?);
            }
            let c = current.as_mut().expect("opened above");
            match item.image {
                Ok((_, rec)) => {
                    let (h, w, t) = tokens.next().expect("one token grid per image");
                    let mut rec = rec;
                    rec["grid"] = json!([h, w]);
                    c.writer.append(&item.sample.key, h, w, &t, &rec)?;
                }
                Err(reason) => c.errors.push(json!({
                    "key": item.sample.key, "source": item.sample.source, "reason": reason
                })),
            }
            pb.inc(1);
            if !o.progress {
                // Plain log lines without a terminal: every 10% of the work.
                let k = pb.position() as usize;
                if todo_samples >= 10 && k.is_multiple_of(todo_samples / 10) {
                    eprintln!(
                        "tokenize: {k}/{todo_samples} samples, {:.1} images/s",
                        encoded as f64 / t0.elapsed().as_secs_f64().max(1e-9)
                    );
                }
            }
        }
        n_images = 0;
    }
    if let Some(c) = current.take() {
        records.push(c.finish(out, &plan)?);
    }
    producer
        .join()
        .map_err(|_| Error::invalid("the image decoding thread panicked"))?;
    pb.finish_and_clear();

    let mut m = Manifest {
        format: FORMAT.into(),
        tokenizer: tok.clone(),
        inputs,
        input_samples: index.len(),
        shard_size: o.shard_size,
        num_shards: plan.num_shards(),
        job: (o.num_jobs > 1).then_some(Job {
            index: o.job_index,
            count: o.num_jobs,
        }),
        shards: records,
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

/// A shard being written.
struct Open {
    shard: usize,
    name: String,
    writer: TokenShardWriter,
    errors: Vec<Value>,
}

impl Open {
    fn new(out: &Path, shard: usize, format: ShardFormat, n_codes: usize) -> Result<Self> {
        let name = format.shard_name(shard);
        Ok(Self {
            shard,
            writer: TokenShardWriter::create(out.join(&name), format, n_codes)?,
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

/// The record of shard `s` if its file exists (finished): from its `.json`, or rebuilt from
/// the file when the record is missing (a kill between the two renames).
fn finished_record(
    out: &Path,
    plan: &Plan,
    s: usize,
    format: ShardFormat,
) -> Result<Option<ShardRecord>> {
    let path = out.join(format.shard_name(s));
    if !path.is_file() {
        return Ok(None);
    }
    let range = plan.samples_of(s);
    let rec_path = out.join(record_name(s));
    if rec_path.is_file() {
        let r: ShardRecord = read_json(&rec_path, "shard record")?;
        let len = std::fs::metadata(&path)
            .map_err(|e| Error::io(&path, e))?
            .len();
        if r.index == s && r.first == range.start && r.end == range.end && r.bytes == len {
            return Ok(Some(r));
        }
    }
    let samples = wds::read_shard(&path)?.len();
    let errors_path = out.join(errors_name(s));
    let errors = std::fs::read_to_string(&errors_path)
        .map(|t| t.lines().filter(|l| !l.trim().is_empty()).count())
        .unwrap_or(0);
    let rec = ShardRecord {
        index: s,
        name: format.shard_name(s),
        samples,
        errors,
        first: range.start,
        end: range.end,
        bytes: std::fs::metadata(&path)
            .map_err(|e| Error::io(&path, e))?
            .len(),
        sha256: wds::sha256_file(&path)?,
    };
    write_json(&rec_path, &rec)?;
    Ok(Some(rec))
}

/// Removes what a killed run of this job left half-written (`.shard-000012.tar.tmp-PID`,
/// `.errors.jsonl.tmp-PID`, ...): only files of this job's shards and of its manifest and
/// errors list, which no other job of the array writes.
fn remove_stale_temporaries(out: &Path, plan: &Plan, o: &Options) -> Result<()> {
    let mine: std::collections::HashSet<String> = plan
        .my_shards()
        .map(|s| format!(".shard-{s:06}."))
        .collect();
    let (manifest, errors) = job_files(o.num_jobs, o.job_index);
    let summaries = [format!(".{manifest}.tmp-"), format!(".{errors}.tmp-")];
    for e in std::fs::read_dir(out).map_err(|e| Error::io(out, e))? {
        let name = e.map_err(|e| Error::io(out, e))?.file_name();
        let name = name.to_string_lossy();
        let of_my_shard = name.contains(".tmp-") && name.len() > 14 && mine.contains(&name[..14]);
        if of_my_shard || summaries.iter().any(|p| name.starts_with(p.as_str())) {
            let p = out.join(&*name);
            std::fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
        }
    }
    Ok(())
}

/// `errors.jsonl` (at `path`): the skipped samples of every shard of the manifest, in shard
/// order.
fn write_errors_list(path: &Path, out: &Path, m: &Manifest) -> Result<()> {
    let mut all = String::new();
    for s in &m.shards {
        if s.errors > 0 {
            let p = out.join(errors_name(s.index));
            all.push_str(&std::fs::read_to_string(&p).map_err(|e| Error::io(&p, e))?);
        }
    }
    write_bytes_atomic(path, all.as_bytes())
}

/// The files a job writes last, once its shards are done: its manifest and its errors list
/// (`manifest.json` + `errors.jsonl` for a single process, `manifest-0002-of-0008.json` +
/// `errors-0002-of-0008.jsonl` for job 2 of an array of 8).
fn job_files(num_jobs: usize, job_index: usize) -> (String, String) {
    if num_jobs > 1 {
        (
            job_manifest_name(job_index, num_jobs),
            format!("errors-{job_index:04}-of-{num_jobs:04}.jsonl"),
        )
    } else {
        (MANIFEST.into(), "errors.jsonl".into())
    }
}
