//! The reconstruction benchmark flags of `imgseq eval` (docs/evaluation.md): a protocol, rFID
//! from pytorch-fid's Inception weights, LPIPS from the VGG16 + linear-head files, an
//! evaluation folder that resumes and job arrays merged exactly; [`imgseq_eval::job`] does
//! the work.

use anyhow::{bail, Context, Result};
use clap::Args;
use image::RgbImage;
use imgseq_eval::inception::FidInception;
use imgseq_eval::job::{self, Networks, Options, Outcome, PairDistance};
use imgseq_eval::protocol::{self, Protocol};
use imgseq_eval::state::{Report, Settings};
use imgseq_models::Opened;
use imgseq_train::vqgan::lpips::Lpips;
use std::path::{Path, PathBuf};

#[derive(Args, Default)]
pub struct BenchArgs {
    /// How originals become the evaluated pictures: native (the tokenizer's own crop and
    /// size), llamagen (ADM centre crop to 256, as LlamaGen's and most published tables), or
    /// taming (taming-transformers' shorter side to 256, centre crop).
    #[arg(long, default_value = "native", value_parser = protocol::NAMES)]
    pub protocol: String,
    /// pytorch-fid's Inception weights (pt_inception-2015-12-05-6726825d.pth): rFID of the
    /// reconstructions against the originals at the protocol's crop.
    #[arg(long, value_name = "PTH")]
    pub fid_weights: Option<PathBuf>,
    /// LPIPS (VGG): a folder with the VGG16 weights (vgg16-397923af.pth or vgg16.safetensors)
    /// and the linear heads (vgg.pth or vgg.safetensors), or one file holding both.
    #[arg(long, value_name = "PATH")]
    pub lpips: Option<PathBuf>,
    /// Evaluation folder: per-image scores, statistics and report.json; an interrupted run
    /// in it resumes.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Samples per chunk (the unit of resuming and of the job array's split).
    #[arg(long, default_value_t = 1000)]
    pub chunk_size: usize,
    /// Job arrays: the number of processes that share the work.
    #[arg(long, default_value_t = 1)]
    pub num_shards: usize,
    /// Job arrays: this process's index, 0 ≤ I < --num-shards (e.g. $SLURM_ARRAY_TASK_ID).
    #[arg(long, default_value_t = 0)]
    pub shard_index: usize,
    /// Merge the finished jobs of the evaluation folder DIR into its report.json and print
    /// it (no evaluation: give no data); names the jobs not finished.
    #[arg(long, value_name = "DIR")]
    pub merge: Option<PathBuf>,
}

impl BenchArgs {
    /// Whether any benchmark flag is given (an IDX image file is then scored as a set of
    /// pictures, without its labels).
    pub fn any(&self) -> bool {
        self.protocol != "native"
            || self.fid_weights.is_some()
            || self.lpips.is_some()
            || self.output.is_some()
            || self.num_shards > 1
    }
}

/// LPIPS from the training reader, on pictures scaled to [−1, 1].
struct LpipsDistance(Lpips);

impl PairDistance for LpipsDistance {
    fn distances(&self, a: &[RgbImage], b: &[RgbImage]) -> imgseq_core::Result<Vec<f64>> {
        let scale = |imgs: &[RgbImage]| -> imgseq_core::Result<candle_core::Tensor> {
            Ok(imgseq_eval::pictures_01(imgs)?.affine(2.0, -1.0)?)
        };
        let d = self.0.forward(&scale(a)?, &scale(b)?)?;
        Ok(d.to_vec1::<f32>()?.into_iter().map(f64::from).collect())
    }
}

/// The VGG16 and head files of `--lpips`.
fn lpips_files(p: &Path) -> Result<(PathBuf, PathBuf)> {
    if p.is_file() {
        return Ok((p.to_path_buf(), p.to_path_buf()));
    }
    let pick = |names: &[&str]| names.iter().map(|n| p.join(n)).find(|f| f.is_file());
    let vgg = pick(&["vgg16-397923af.pth", "vgg16.pth", "vgg16.safetensors"]);
    let heads = pick(&["vgg.pth", "vgg.safetensors"]);
    match (vgg, heads) {
        (Some(v), Some(h)) => Ok((v, h)),
        _ => bail!(
            "--lpips {}: needs vgg16-397923af.pth (or vgg16.pth, vgg16.safetensors) and vgg.pth \
             (or vgg.safetensors) in the folder",
            p.display()
        ),
    }
}

/// Runs the benchmark of `t` on `data` and prints the report (as JSON with `json`).
pub fn run(
    a: &BenchArgs,
    t: &Opened,
    data: &Path,
    limit: usize,
    batch: usize,
    upscale: bool,
    json: bool,
) -> Result<()> {
    let protocol = Protocol::parse(&a.protocol)?;
    let mut samples = imgseq_shards::source::index(&[data.to_path_buf()])?;
    samples.truncate(limit);
    let fid = match &a.fid_weights {
        Some(p) => Some(FidInception::load(p).with_context(|| "--fid-weights")?),
        None => None,
    };
    let lpips = match &a.lpips {
        Some(p) => {
            let (vgg, heads) = lpips_files(p)?;
            Some(LpipsDistance(Lpips::load(&vgg, &heads)?))
        }
        None => None,
    };
    let name = |p: &Option<PathBuf>| {
        p.as_ref().map(|p| {
            p.file_name()
                .unwrap_or(p.as_os_str())
                .to_string_lossy()
                .into_owned()
        })
    };
    let settings = Settings {
        protocol: protocol.info(&imgseq_core::tokenizer::Tokenizer::input(t)),
        model: serde_json::to_value(t.describe_with_weights()?)?,
        samples: samples.len(),
        chunk: a.chunk_size,
        num_jobs: a.num_shards,
        fid: name(&a.fid_weights),
        lpips: name(&a.lpips),
        upscale,
    };
    let nets = Networks {
        fid: fid.as_ref().map(|f| f as &dyn job::FeatureNet),
        lpips: lpips.as_ref().map(|l| l as &dyn PairDistance),
    };
    let o = Options {
        protocol,
        upscale,
        batch,
        chunk: a.chunk_size,
        num_jobs: a.num_shards,
        job_index: a.shard_index,
        progress: true,
        max_chunks: None,
    };
    match job::run(t, &samples, &settings, nets, a.output.as_deref(), &o)? {
        Outcome::Done(r) => {
            let precision = t.precision.as_ref().map(|c| c.to_string());
            print(&r, precision, a.output.as_deref(), json)
        }
        Outcome::Partial {
            chunks_done,
            chunks,
            waiting_for,
        } => {
            println!(
                "job {} of {}: {chunks_done} of its {chunks} chunks done; the report is written \
                 when jobs {waiting_for:?} finish",
                a.shard_index, a.num_shards
            );
            Ok(())
        }
    }
}

/// `imgseq eval --merge DIR`: the finished jobs of an evaluation folder merged into its
/// report.
pub fn merge(dir: &Path, json: bool) -> Result<()> {
    let r = imgseq_eval::state::merge(dir)?;
    print(&r, None, Some(dir), json)
}

/// Tokens per picture of a discrete tokenizer (the product of its output shape), from its
/// description.
fn tokens_per_image(model: &serde_json::Value) -> Option<u64> {
    let out = &model["output"];
    (out["kind"] == "codes").then(|| {
        out["shape"]
            .as_array()
            .map_or(0, |s| s.iter().filter_map(|v| v.as_u64()).product())
    })
}

/// Prints a report (as JSON with `json`); `precision`: how the precision was chosen, where
/// the tokenizer was opened in this process.
fn print(r: &Report, precision: Option<String>, out: Option<&Path>, json: bool) -> Result<()> {
    let precision_name = r.model["precision"].as_str().unwrap_or("f32");
    if json {
        let mut v = serde_json::to_value(r)?;
        if let Some(m) = v.as_object_mut() {
            if out.is_some() {
                // Per-image scores are in the folder's scores files.
                m.remove("per_image");
            }
            m.insert("precision".into(), precision_name.into());
            m.insert("tokens_per_image".into(), tokens_per_image(&r.model).into());
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let source = r.model["weights"]["source"].as_str().unwrap_or("?");
    println!("model: {source}");
    println!(
        "precision: {}",
        precision.as_deref().unwrap_or(precision_name)
    );
    let p = &r.protocol;
    println!(
        "protocol: {} ({}x{}): {}",
        p.name, p.size, p.size, p.preprocessing
    );
    if r.per_image.len() <= 100 {
        for i in &r.per_image {
            match &i.error {
                Some(e) => println!("  {}: skipped ({e})", i.source),
                None => println!(
                    "  {}: PSNR {:.2} dB, SSIM {:.4}, sharpness {}{}",
                    i.source,
                    i.psnr.unwrap_or(f64::NAN),
                    i.ssim.unwrap_or(f64::NAN),
                    i.sharpness.map_or("-".into(), |s| format!("{s:.3}")),
                    i.lpips.map_or(String::new(), |l| format!(", LPIPS {l:.4}"))
                ),
            }
        }
    } else {
        for s in &r.skipped_samples {
            println!("  skipped {s}");
        }
    }
    println!(
        "images: {} at {}x{} ({} skipped of {})",
        r.images, p.size, p.size, r.skipped, r.samples
    );
    println!("PSNR: {:.2} dB (mean)", r.psnr);
    println!("SSIM: {:.4} (mean)", r.ssim);
    if r.sharpness.is_finite() {
        println!(
            "sharpness: {:.3} (mean; rebuilt/original mean luma gradient, 1.0 = as sharp)",
            r.sharpness
        );
    }
    if let Some(l) = r.lpips {
        println!("LPIPS: {l:.4} (mean)");
    }
    if let Some(f) = r.rfid {
        println!(
            "rFID: {f:.3} ({} reconstructions against their originals)",
            r.images
        );
    }
    if let (Some(u), Some(n), Some(pp)) = (r.codes_used, r.n_embed, r.perplexity) {
        let per =
            tokens_per_image(&r.model).map_or(String::new(), |k| format!(", {k} tokens per image"));
        println!(
            "codebook usage: {u} of {n} codes ({:.1}%), perplexity {pp:.1}{per}",
            100.0 * u as f64 / n as f64
        );
    }
    if let Some(dir) = out {
        println!("wrote {}", dir.join(imgseq_eval::state::REPORT).display());
    }
    Ok(())
}
