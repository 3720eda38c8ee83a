//! The evaluation job with a stand-in tokenizer (2×2-pixel blocks averaged to gray: a lossy
//! code) and a
//! stand-in feature network (a few picture statistics): a job array's merged report equals the
//! single process's (rFID to the last bit), an interrupted run resumes to the same figures, a corrupt
//! file is listed and skipped.

use candle_core::Tensor;
use image::{Rgb, RgbImage};
use imgseq_core::image_io::PixelRange;
use imgseq_core::input::{Crop, InputSpec};
use imgseq_core::tokenizer::{Description, Encoded, OutputKind, OutputSpec, Tokenizer};
use imgseq_core::tokens::TokenGrid;
use imgseq_core::Result;
use imgseq_eval::job::{self, FeatureNet, Networks, Options, Outcome, PairDistance};
use imgseq_eval::protocol::Protocol;
use imgseq_eval::state::{self, Report, Settings};
use imgseq_shards::SampleRef;
use std::path::Path;

const SIDE: u32 = 16;
/// Blocks a side.
const G: u32 = SIDE / 2;

/// Codes: the mean gray of each 2×2 block (64 tokens of 256 codes); decodes to gray blocks.
struct Blocks;

impl Tokenizer for Blocks {
    fn label(&self) -> String {
        "blocks".into()
    }
    fn describe(&self) -> Description {
        let out = OutputSpec {
            kind: OutputKind::Codes,
            shape: vec![G as usize, G as usize],
            codebook_size: Some(256),
            scales: None,
        };
        Description::basic("blocks", "blocks", self.input(), out)
    }
    fn input(&self) -> InputSpec {
        InputSpec {
            size: SIDE,
            crop: Crop::ShorterSide,
            channels: 3,
            range: PixelRange::ZeroOne,
        }
    }
    fn codebook_size(&self) -> Option<usize> {
        Some(256)
    }
    fn encode(&self, _: &Tensor) -> Result<Encoded> {
        unreachable!("encode_pictures is overridden")
    }
    fn encode_pictures(&self, imgs: &[RgbImage]) -> Result<Encoded> {
        let mut data = Vec::new();
        for img in imgs {
            for by in 0..G {
                for bx in 0..G {
                    let mut s = 0u32;
                    for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                        let p = img.get_pixel(bx * 2 + dx, by * 2 + dy).0;
                        s += p.iter().map(|&c| c as u32).sum::<u32>();
                    }
                    data.push((s / 12) as i64);
                }
            }
        }
        Ok(Encoded::Tokens(TokenGrid {
            n: imgs.len(),
            h: G as usize,
            w: G as usize,
            batched: true,
            data,
        }))
    }
    fn decode(&self, t: &TokenGrid) -> Result<Vec<RgbImage>> {
        Ok((0..t.n)
            .map(|i| {
                let codes = t.image(i);
                RgbImage::from_fn(SIDE, SIDE, |x, y| {
                    let v = codes[(y / 2 * G + x / 2) as usize] as u8;
                    Rgb([v, v, v])
                })
            })
            .collect())
    }
}

/// Features: mean red, mean squared green, the gray standard deviation, two pixels (full
/// rank for gray reconstructions too).
struct Stats;

impl FeatureNet for Stats {
    fn dim(&self) -> usize {
        5
    }
    fn features(&self, imgs: &[RgbImage]) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        for img in imgs {
            let n = (img.width() * img.height()) as f32;
            let unit = |v: u8| v as f32 / 255.0;
            let r = img.pixels().map(|p| unit(p.0[0])).sum::<f32>() / n;
            let g2 = img.pixels().map(|p| unit(p.0[1]).powi(2)).sum::<f32>() / n;
            let g: Vec<f32> = img
                .pixels()
                .map(|p| p.0.iter().map(|&c| c as f32).sum::<f32>() / 765.0)
                .collect();
            let gm = g.iter().sum::<f32>() / n;
            let sd = (g.iter().map(|v| (v - gm).powi(2)).sum::<f32>() / n).sqrt();
            let (a, b) = (
                unit(img.get_pixel(0, 0).0[0]),
                unit(img.get_pixel(5, 7).0[2]),
            );
            out.extend([r, g2, sd, a, b]);
        }
        Ok(out)
    }
}

/// Mean absolute difference in [0, 1].
struct L1;

impl PairDistance for L1 {
    fn distances(&self, a: &[RgbImage], b: &[RgbImage]) -> Result<Vec<f64>> {
        Ok(a.iter()
            .zip(b)
            .map(|(x, y)| {
                let s: f64 = x
                    .as_raw()
                    .iter()
                    .zip(y.as_raw())
                    .map(|(&p, &q)| (p as f64 - q as f64).abs())
                    .sum();
                s / 255.0 / x.as_raw().len() as f64
            })
            .collect())
    }
}

/// 23 pictures of 20×17 (noise over gradients) and one corrupt file.
fn dataset(dir: &Path) -> Vec<SampleRef> {
    let mut seed = 9u64;
    let mut rnd = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 56) as u8
    };
    for i in 0..23u32 {
        let img = RgbImage::from_fn(20, 17, |x, y| {
            Rgb([
                (x * 10 + i * 7) as u8 ^ (rnd() >> 2),
                (y * 12) as u8 ^ (rnd() >> 3),
                (i * 11) as u8 ^ rnd(),
            ])
        });
        img.save(dir.join(format!("img{i:02}.png"))).unwrap();
    }
    std::fs::write(dir.join("img07b.png"), b"\x89PNG\r\n\x1a\nnot really").unwrap();
    imgseq_shards::source::index(&[dir.to_path_buf()]).unwrap()
}

fn settings(samples: usize, chunk: usize, num_jobs: usize) -> Settings {
    Settings {
        protocol: Protocol::Native.info(&Blocks.input()),
        model: serde_json::json!({"family": "blocks"}),
        samples,
        chunk,
        num_jobs,
        fid: Some("stats".into()),
        lpips: Some("l1".into()),
        upscale: false,
    }
}

fn nets() -> Networks<'static> {
    Networks {
        fid: Some(&Stats),
        lpips: Some(&L1),
    }
}

fn options(chunk: usize, num_jobs: usize, job_index: usize) -> Options {
    Options {
        batch: 3,
        chunk,
        num_jobs,
        job_index,
        ..Options::default()
    }
}

fn done(o: Outcome) -> Report {
    match o {
        Outcome::Done(r) => *r,
        Outcome::Partial { .. } => panic!("not done: {o:?}"),
    }
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-300)
}

/// The same samples with the same scores (to the last bits a JSON round trip may change:
/// serde_json's float parsing is not always correctly rounded).
fn assert_same_lines(a: &[state::ImageLine], b: &[state::ImageLine]) {
    assert_eq!(a.len(), b.len());
    let close = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => rel(x, y) <= 1e-14,
        (x, y) => x == y,
    };
    for (x, y) in a.iter().zip(b) {
        assert_eq!(
            (x.index, x.chunk, &x.key, &x.error),
            (y.index, y.chunk, &y.key, &y.error)
        );
        assert!(
            close(x.psnr, y.psnr) && close(x.ssim, y.ssim),
            "{x:?} vs {y:?}"
        );
        assert!(
            close(x.sharpness, y.sharpness) && close(x.lpips, y.lpips),
            "{x:?} vs {y:?}"
        );
    }
}

#[test]
fn job_array_merge_equals_one_process_and_skips_the_corrupt_file() {
    let data = tempfile::tempdir().unwrap();
    let samples = dataset(data.path());
    let n = samples.len();
    let single = done(
        job::run(
            &Blocks,
            &samples,
            &settings(n, 5, 1),
            nets(),
            None,
            &options(5, 1, 0),
        )
        .unwrap(),
    );
    assert_eq!((single.samples, single.images, single.skipped), (24, 23, 1));
    assert!(
        single.skipped_samples[0].contains("img07b.png"),
        "{:?}",
        single.skipped_samples
    );
    let rfid = single.rfid.unwrap();
    assert!(rfid > 1e-4, "the stand-in code is lossy: rFID {rfid}");

    let out = tempfile::tempdir().unwrap();
    let s3 = settings(n, 5, 3);
    for j in 0..3 {
        let o = job::run(
            &Blocks,
            &samples,
            &s3,
            nets(),
            Some(out.path()),
            &options(5, 3, j),
        )
        .unwrap();
        assert_eq!(matches!(o, Outcome::Done(_)), j == 2, "job {j}: {o:?}");
    }
    let merged = state::merge(out.path()).unwrap();
    let m = merged.rfid.unwrap();
    eprintln!(
        "rFID one process {rfid}, merged job array {m} ({:.1e} relative)",
        rel(m, rfid)
    );
    assert_eq!(
        m, rfid,
        "the merged statistics are the single process's, bit for bit"
    );
    assert!(rel(merged.psnr, single.psnr) <= 1e-12);
    assert!(rel(merged.ssim, single.ssim) <= 1e-12);
    assert!(rel(merged.lpips.unwrap(), single.lpips.unwrap()) <= 1e-12);
    assert_eq!(merged.codes_used, single.codes_used);
    assert_eq!((merged.images, merged.skipped, merged.jobs), (23, 1, 3));
    assert_same_lines(&merged.per_image, &single.per_image);
    assert!(out.path().join("report.json").exists());
}

#[test]
fn an_interrupted_run_resumes_to_the_same_figures() {
    let data = tempfile::tempdir().unwrap();
    let samples = dataset(data.path());
    let s = settings(samples.len(), 4, 1);
    let whole = done(job::run(&Blocks, &samples, &s, nets(), None, &options(4, 1, 0)).unwrap());

    let out = tempfile::tempdir().unwrap();
    let mut o = options(4, 1, 0);
    o.max_chunks = Some(2);
    let first = job::run(&Blocks, &samples, &s, nets(), Some(out.path()), &o).unwrap();
    assert!(
        matches!(
            first,
            Outcome::Partial {
                chunks_done: 2,
                chunks: 6,
                ..
            }
        ),
        "{first:?}"
    );
    // A run stopped after appending a chunk's lines, before saving its statistics.
    let (scores, _) = state::job_files(out.path(), 1, 0);
    let stray = r#"{"index":9,"chunk":2,"key":"x","source":"x","psnr":1.0}"#;
    let mut text = std::fs::read_to_string(&scores).unwrap();
    text.push_str(stray);
    text.push('\n');
    std::fs::write(&scores, text).unwrap();

    let resumed = done(
        job::run(
            &Blocks,
            &samples,
            &s,
            nets(),
            Some(out.path()),
            &options(4, 1, 0),
        )
        .unwrap(),
    );
    assert_eq!(resumed.rfid.unwrap(), whole.rfid.unwrap());
    assert_same_lines(&resumed.per_image, &whole.per_image);
    assert!(rel(resumed.psnr, whole.psnr) <= 1e-12);

    // Other settings in the same folder are refused.
    let other = settings(samples.len(), 8, 1);
    let err = job::run(
        &Blocks,
        &samples,
        &other,
        nets(),
        Some(out.path()),
        &options(8, 1, 0),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("other settings (chunk size)"), "{err}");
}

#[test]
fn merging_an_unfinished_array_names_the_missing_jobs() {
    let data = tempfile::tempdir().unwrap();
    let samples = dataset(data.path());
    let out = tempfile::tempdir().unwrap();
    let s = settings(samples.len(), 5, 2);
    let o = job::run(
        &Blocks,
        &samples,
        &s,
        nets(),
        Some(out.path()),
        &options(5, 2, 1),
    )
    .unwrap();
    assert!(
        matches!(&o, Outcome::Partial { waiting_for, .. } if waiting_for == &[0]),
        "{o:?}"
    );
    let err = state::merge(out.path()).unwrap_err().to_string();
    assert!(err.contains("jobs [0] of 2"), "{err}");
}
