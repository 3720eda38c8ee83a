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

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use clap::Args;
use imgseq_core::data::Split;
use imgseq_core::frechet::{frechet_distance, GaussianStats};
use imgseq_core::image_io::PixelRange;
use imgseq_gpt::config::SeqLayout;
use imgseq_gpt::sample::{generate, Request, SampleOptions};
use imgseq_gpt::Gpt2LMHeadModel;
use imgseq_vit::data::{DataSource, ImageSet};
use imgseq_vit::inference::Classifier;
use imgseq_vqgan::{Bottleneck, VqModel};
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

/// u8 images `(n, c, s, s)` → the VQ's input in [−1, 1].
fn to_vq_input(set: &ImageSet, idx: &[usize]) -> Result<Tensor> {
    let per = set.channels * set.height * set.width;
    let mut v = Vec::with_capacity(idx.len() * per);
    for &i in idx {
        v.extend(
            set.image(i)
                .iter()
                .map(|&b| PixelRange::MinusOneOne.to_f32(b)),
        );
    }
    Ok(Tensor::from_vec(
        v,
        (idx.len(), set.channels, set.height, set.width),
        &Device::Cpu,
    )?)
}

/// VQ output `(b, c, s, s)` in [−1, 1] → u8, appended to `out`.
fn from_vq_output(y: &Tensor, out: &mut Vec<u8>) -> Result<()> {
    let v = y.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    out.extend(v.into_iter().map(|x| PixelRange::MinusOneOne.to_u8(x)));
    Ok(())
}

fn stats(features: &[f32], dim: usize) -> Result<GaussianStats> {
    Ok(GaussianStats::from_features(features, dim)?)
}

fn pct(x: f64) -> String {
    format!("{:.2}%", 100.0 * x)
}

/// Checks that the judge, the VQ and the GPT fit together: channels, image side, classes.
fn check_fit(clf: &Classifier, vq: &VqModel, layout: &SeqLayout) -> Result<()> {
    let (c, s) = (clf.cfg.num_channels, clf.cfg.image_size);
    let vq_c = vq.config().ddconfig.in_channels;
    if vq_c != c {
        bail!("the judge takes {c}-channel images but the VQ model makes {vq_c}-channel ones");
    }
    let f = vq.config().downsample_factor();
    if (layout.h * f, layout.w * f) != (s, s) {
        bail!(
            "the GPT's {}×{} token grid decodes to {}×{} images, the judge takes {s}×{s}",
            layout.h,
            layout.w,
            layout.h * f,
            layout.w * f
        );
    }
    if clf.cfg.num_labels() != layout.n_classes() {
        bail!(
            "the judge has {} classes, the GPT {}",
            clf.cfg.num_labels(),
            layout.n_classes()
        );
    }
    Ok(())
}

/// The VQ reconstructions of `test`, as a set with its labels.
fn reconstructions(vq: &VqModel, test: &ImageSet) -> Result<ImageSet> {
    let mut recon = Vec::with_capacity(test.images.len());
    let idx: Vec<usize> = (0..test.n).collect();
    let pb = imgseq_core::progress::bar(test.n as u64, 0, "recon");
    for chunk in idx.chunks(250) {
        let x = to_vq_input(test, chunk)?; // (b, c, s, s)
        let y = vq.forward(&x, Bottleneck::Quantize)?.reconstruction; // (b, c, s, s)
        from_vq_output(&y, &mut recon)?;
        pb.inc(chunk.len() as u64);
    }
    pb.finish_and_clear();
    let shape = (test.channels, test.height, test.width);
    Ok(ImageSet::new(
        recon,
        test.labels.clone(),
        shape,
        test.class_names.clone(),
    )?)
}

/// `per_class` generated images of every class, class-major, labelled with the requested
/// class; and the seconds generation took.
fn samples(
    gpt: &Gpt2LMHeadModel,
    layout: &SeqLayout,
    vq: &VqModel,
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
    let shape = (like.channels, like.height, like.width);
    let mut gen = Vec::with_capacity(requests.len() * shape.0 * shape.1 * shape.2);
    let (gh, gw) = (layout.h, layout.w);
    for chunk in tokens.chunks(250) {
        let flat: Vec<u32> = chunk.iter().flatten().copied().collect();
        let ids = Tensor::from_vec(flat, (chunk.len(), gh, gw), &Device::Cpu)?;
        from_vq_output(&vq.decode_indices(&ids)?, &mut gen)?;
    }
    let labels: Vec<u16> = requests
        .iter()
        .map(|r| r.class.unwrap_or(0) as u16)
        .collect();
    let set = ImageSet::new(gen, labels, shape, like.class_names.clone())?;
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
    vq: &VqModel,
    opts: &SampleOptions,
    bits_per_token: Option<f64>,
) -> Result<serde_json::Value> {
    let t0 = Instant::now();
    let clf = Classifier::load(judge_dir)
        .with_context(|| format!("loading the judge {}", judge_dir.display()))?;
    check_fit(&clf, vq, layout)?;
    let dim = clf.cfg.hidden_size;
    let source = DataSource::FashionMnist(args.fashion_mnist.clone());

    // Originals and the floor.
    let test = clf.load_split(&source, Split::Test, args.test_images)?;
    let train = clf.load_split(&source, Split::Train, Some(args.train_images))?;
    eprintln!("judging {} test and {} training images", test.n, train.n);
    let (acc_test, f_test) = clf.judge(&test, true)?;
    let (_, f_train) = clf.judge(&train, true)?;
    let s_test = stats(&f_test, dim)?;
    let fd_floor = frechet_distance(&stats(&f_train, dim)?, &s_test)?;

    let recon_set = reconstructions(vq, &test)?;
    let (acc_recon, f_recon) = clf.judge(&recon_set, true)?;
    let fd_recon = frechet_distance(&stats(&f_recon, dim)?, &s_test)?;

    let (gen_set, gen_secs) = samples(gpt, layout, vq, args.per_class, opts, &test)?;
    let (acc_gen, f_gen) = clf.judge(&gen_set, true)?;
    let fd_gen = frechet_distance(&stats(&f_gen, dim)?, &s_test)?;

    let f = Figures {
        test_n: test.n,
        train_n: train.n,
        acc_test: acc_test.accuracy,
        acc_recon: acc_recon.accuracy,
        acc_gen: acc_gen.accuracy,
        acc_gen_per_class: acc_gen.per_class,
        gen_n: gen_set.n,
        gen_secs,
        dim,
        fd_gen,
        fd_recon,
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
