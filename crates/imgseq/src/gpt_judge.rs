//! `imgseq gpt judge`: the token model's four figures, measured with our own ViT (issue #13).
//!
//! 1. Reconstruction faithfulness: the judge's accuracy on the VQ reconstructions of the test
//!    images beside its accuracy on the originals.
//! 2. Class faithfulness: the judge's accuracy against the requested class on generated
//!    images, per class.
//! 3. Sample quality: Fréchet distance between the judge's CLS features of generated images and
//!    of the test images, beside train-vs-test (the floor) and reconstructions-vs-test.
//! 4. Bits per token of the GPT on the test set's tokens (when `--tokens` is given).
//!
//! Every image is judged on the ViT's own canvas (Fashion-MNIST: 28×28 centred on 32×32), which
//! is also the VQ's input, so reconstructions and samples go to the judge as they come out.
//! The measuring is the library's ([`imgseq_vit::judge`], shared with `vq eval --judge`); the
//! VQ is any discrete tokenizer the loader opens.

use anyhow::{bail, Result};
use clap::Args;
use imgseq_core::data::Split;
use imgseq_core::tokenizer::{decode_batches, Tokenizer};
use imgseq_gpt::config::SeqLayout;
use imgseq_gpt::sample::{generate, Request, SampleOptions};
use imgseq_gpt::Gpt2LMHeadModel;
use imgseq_vit::data::{DataSource, ImageSet};
use imgseq_vit::judge::Judge;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Options of `gpt judge` (the models come from the `gpt` command's common flags).
#[derive(Args, Debug, Clone)]
pub struct JudgeArgs {
    /// Also judge the images with this ViT classifier folder (e.g. weights/vit-fashion-mnist).
    #[arg(long)]
    pub judge: Option<PathBuf>,
    /// Folder with the Fashion-MNIST IDX files (default: the Debian package's folder).
    #[arg(long)]
    pub fashion_mnist: Option<PathBuf>,
    /// Images generated per class (the class-faithfulness and Fréchet-distance sample).
    #[arg(long, default_value_t = 1000)]
    pub per_class: usize,
    /// Training images in the train-vs-test Fréchet distance (the floor).
    #[arg(long, default_value_t = 10_000)]
    pub train_images: usize,
    /// Test images judged (all 10,000 by default).
    #[arg(long)]
    pub test_images: Option<usize>,
    /// Write the figures (bits per token, and the judge's when --judge is given) here as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

fn pct(x: f64) -> String {
    format!("{:.2}%", 100.0 * x)
}

/// Checks that the judge, the VQ and the GPT fit together: channels, image side, classes.
fn check_fit(judge: &Judge, vq: &impl Tokenizer, layout: &SeqLayout) -> Result<()> {
    let (s, c) = judge.canvas();
    let vq_c = vq.input().channels;
    if vq_c != c {
        bail!("the judge takes {c}-channel images but the VQ model makes {vq_c}-channel ones");
    }
    let f = imgseq_core::tokenizer::downsample_factor(vq);
    if (layout.h * f, layout.w * f) != (s, s) {
        bail!(
            "the GPT's {}×{} token grid decodes to {}×{} images, the judge takes {s}×{s}",
            layout.h,
            layout.w,
            layout.h * f,
            layout.w * f
        );
    }
    if judge.clf.cfg.num_labels() != layout.n_classes() {
        bail!(
            "the judge has {} classes, the GPT {}",
            judge.clf.cfg.num_labels(),
            layout.n_classes()
        );
    }
    Ok(())
}

/// The VQ reconstructions of `test`'s pictures (encoded and decoded 250 at a time).
fn reconstructions(vq: &impl Tokenizer, test: &ImageSet) -> Result<Vec<image::RgbImage>> {
    let pics = Judge::pictures(test);
    let pb = imgseq_core::progress::bar(test.n as u64, 0, "recon");
    let mut recon = Vec::with_capacity(test.n);
    for chunk in pics.chunks(250) {
        let tokens = vq.encode_pictures(chunk)?.into_tokens()?;
        recon.extend(decode_batches(vq, &tokens, chunk.len(), |_| ())?);
        pb.inc(chunk.len() as u64);
    }
    pb.finish_and_clear();
    Ok(recon)
}

/// `per_class` generated images of every class, class-major, labelled with the requested
/// class; and the seconds generation took.
fn samples(
    gpt: &Gpt2LMHeadModel,
    layout: &SeqLayout,
    vq: &impl Tokenizer,
    judge: &Judge,
    per_class: usize,
    opts: &SampleOptions,
    like: &ImageSet,
) -> Result<(ImageSet, f64)> {
    let requests: Vec<Request> = (0..layout.n_classes())
        .flat_map(|cl| {
            (0..per_class).map(move |_| Request {
                class: Some(cl),
                prefix: vec![],
            })
        })
        .collect();
    let t_gen = Instant::now();
    let tokens = generate(gpt, layout, &requests, opts, true)?;
    let gen_secs = t_gen.elapsed().as_secs_f64();
    let grid = layout.grid(&tokens);
    let pics = decode_batches(vq, &grid, 250, |_| ())?;
    let labels: Vec<u16> = requests
        .iter()
        .map(|r| r.class.unwrap_or(0) as u16)
        .collect();
    let set = judge.set_of(&pics, labels, like.class_names.clone())?;
    Ok((set, gen_secs))
}

/// The measured figures.
struct Figures {
    test_n: usize,
    train_n: usize,
    acc_test: f64,
    acc_recon: f64,
    acc_gen: f64,
    acc_gen_per_class: Vec<f64>,
    gen_n: usize,
    gen_secs: f64,
    dim: usize,
    fd_gen: f64,
    fd_recon: f64,
    fd_floor: f64,
}

/// Runs the whole measurement with the classifier `judge_dir` and prints a report; returns
/// the figures as JSON (the caller writes `--json`, through its outputs).
pub fn judge(
    judge_dir: &Path,
    args: &JudgeArgs,
    gpt: &Gpt2LMHeadModel,
    layout: &SeqLayout,
    vq: &impl Tokenizer,
    opts: &SampleOptions,
    bits_per_token: Option<f64>,
) -> Result<serde_json::Value> {
    let t0 = Instant::now();
    let judge = Judge::load(judge_dir)?;
    check_fit(&judge, vq, layout)?;
    let source = DataSource::FashionMnist(args.fashion_mnist.clone());

    // Originals and the floor.
    let test = judge
        .clf
        .load_split(&source, Split::Test, args.test_images)?;
    let train = judge
        .clf
        .load_split(&source, Split::Train, Some(args.train_images))?;
    eprintln!("judging {} test and {} training images", test.n, train.n);
    let on_test = judge.score(&test)?;
    let fd_floor = judge.frechet(&judge.score(&train)?, &on_test)?;

    let (recon, _) = judge.reconstructions(&test, &on_test, &reconstructions(vq, &test)?)?;

    let (gen_set, gen_secs) = samples(gpt, layout, vq, &judge, args.per_class, opts, &test)?;
    let on_gen = judge.score(&gen_set)?;
    let fd_gen = judge.frechet(&on_gen, &on_test)?;

    let f = Figures {
        test_n: test.n,
        train_n: train.n,
        acc_test: recon.original_accuracy,
        acc_recon: recon.reconstruction_accuracy,
        acc_gen: on_gen.report.accuracy,
        acc_gen_per_class: on_gen.report.per_class,
        gen_n: gen_set.n,
        gen_secs,
        dim: judge.clf.cfg.hidden_size,
        fd_gen,
        fd_recon: recon.fd_reconstructions,
        fd_floor,
    };
    report(judge_dir, args, layout, &f, bits_per_token);
    println!("({:.0} s in all)", t0.elapsed().as_secs_f64());
    let json = json!({
        "judge": judge_dir,
        "test_images": f.test_n,
        "accuracy_originals": f.acc_test,
        "accuracy_reconstructions": f.acc_recon,
        "samples_per_class": args.per_class,
        "class_accuracy": f.acc_gen,
        "class_accuracy_per_class": f.acc_gen_per_class,
        "class_names": layout.class_names,
        "fd_samples_test": f.fd_gen,
        "fd_reconstructions_test": f.fd_recon,
        "fd_train_test": f.fd_floor,
        "train_images": f.train_n,
        "bits_per_token": bits_per_token,
        "generate_seconds": f.gen_secs,
        "sampling": {
            "temperature": opts.temperature,
            "top_k": opts.top_k,
            "top_p": opts.top_p,
            "guidance": opts.guidance,
            "seed": opts.seed,
        },
    });
    Ok(json)
}

/// Prints the four figures.
fn report(
    judge_dir: &Path,
    args: &JudgeArgs,
    layout: &SeqLayout,
    f: &Figures,
    bits_per_token: Option<f64>,
) {
    println!(
        "judge: {} ({} classes)",
        judge_dir.display(),
        layout.n_classes()
    );
    println!(
        "1. reconstruction: judge accuracy {} on the {} test originals, {} on their VQ reconstructions (gap {:+.2} points)",
        pct(f.acc_test),
        f.test_n,
        pct(f.acc_recon),
        100.0 * (f.acc_recon - f.acc_test)
    );
    println!(
        "2. class faithfulness: {} of {} generated images judged the requested class ({} per class; {:.1} s to generate, {:.1} ms/image)",
        pct(f.acc_gen),
        f.gen_n,
        args.per_class,
        f.gen_secs,
        1000.0 * f.gen_secs / f.gen_n.max(1) as f64
    );
    for (i, a) in f.acc_gen_per_class.iter().enumerate() {
        let name = layout.class_names.get(i).map(String::as_str).unwrap_or("?");
        println!("     {i:>2} {name:<12} {}", pct(*a));
    }
    let (dim, fd_gen, fd_recon, fd_floor) = (f.dim, f.fd_gen, f.fd_recon, f.fd_floor);
    println!(
        "3. Fréchet distance to the test set (judge CLS features, {dim}-d): samples {fd_gen:.3}, VQ reconstructions {fd_recon:.3}, training images {fd_floor:.3} (floor)"
    );
    match bits_per_token {
        Some(b) => println!("4. bits per token on the test tokens: {b:.4}"),
        None => println!("4. bits per token: not measured (give --tokens)"),
    }
}
