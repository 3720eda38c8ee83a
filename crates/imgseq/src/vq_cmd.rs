//! `imgseq vq ...`: image ↔ VQGAN tokens. Flags and printing only: the work is
//! `imgseq_vqgan`'s (`inference`, `eval`, `tokens`, `train`).

use anyhow::{bail, Context, Result};
use clap::{ArgMatches, Subcommand};
use imgseq_core::fsutil::Outputs;
use imgseq_core::image_io;
use imgseq_vqgan::{data, eval, inference, TokenGrid, VqConfig};
use std::path::{Path, PathBuf};

use crate::vq_model_args::{load_choosing, load_with, save_picture, ModelArgs, Preprocess};

#[derive(Subcommand)]
pub enum VqCmd {
    /// Images → tokens.npy: (h, w) int64 for one image, (n, h, w) for several.
    Encode {
        /// Input images (png, jpg, webp, bmp).
        #[arg(required = true)]
        images: Vec<PathBuf>,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        pre: Preprocess,
        /// Images per forward pass.
        #[arg(long, default_value_t = 2)]
        batch_size: usize,
        /// Output token file (.npy).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// tokens.npy → image(s); several images are written as OUT_000.png, OUT_001.png, ...
    Decode {
        /// Token file: int array of shape (h, w) or (n, h, w).
        tokens: PathBuf,
        #[command(flatten)]
        model: ModelArgs,
        /// Images per forward pass.
        #[arg(long, default_value_t = 2)]
        batch_size: usize,
        /// Output image (png, jpg, jpeg, webp or bmp, by extension).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// Image → tokens → image: writes DIR/tokens.npy, DIR/recon.png, DIR/side_by_side.png and
    /// prints token count, grid, PSNR, SSIM and how many codebook entries were used.
    Roundtrip {
        image: PathBuf,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        pre: Preprocess,
        /// Output folder (created if missing).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// Swap token cells: `--swap R1,C1:R2,C2` (0-based row,column), repeatable, applied in
    /// order to every image of the file. Negative tokens are refused; with --weights or
    /// --config every token must also be in the model's codebook.
    Edit {
        tokens: PathBuf,
        /// A swap `R1,C1:R2,C2`.
        #[arg(long = "swap", required = true)]
        swaps: Vec<String>,
        /// Check the tokens against this model's codebook (its config beside it).
        #[arg(long)]
        weights: Option<PathBuf>,
        /// Check the tokens against the codebook size of this model config.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Output token file (.npy).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// Train a VQGAN on an image folder (random crops): L1 + L2 + image-gradient L1 +
    /// codebook/commitment loss (β = 0.25), k-means codebook init, dead-code restarts;
    /// optionally taming's PatchGAN loss (--disc-weight) and LPIPS (--lpips-vgg/--lpips-heads,
    /// from your files). Checkpoints (model.safetensors, config.json,
    /// training.json, optimizer.safetensors, state.json) go to --out; --resume continues.
    Train(Box<crate::vq_train_cmd::TrainArgs>),
    /// Whole datasets → WebDataset token shards (resumable; job arrays with --num-shards/
    /// --shard-index); skipped images are listed in errors.jsonl.
    Tokenize(Box<crate::tokenize_cmd::TokenizeArgs>),
    /// Check and join the manifests of a job array's jobs into OUT/manifest.json.
    MergeManifests {
        /// The shared output folder of the jobs.
        dir: PathBuf,
    },
    /// Token shards → images (KEY.png per sample).
    Detokenize(crate::tokenize_cmd::DetokenizeArgs),
    /// Codebook usage, perplexity and a code-frequency plot of a token shard folder.
    Stats(crate::tokenize_cmd::StatsArgs),
    /// Mean PSNR, SSIM and codebook usage (% of codes used across the set) of a model's
    /// reconstructions of every image in a folder, a .txt list of image paths or an IDX file;
    /// with --judge, a classifier's accuracy on the originals and on the reconstructions.
    Eval(Box<crate::vq_eval_cmd::EvalArgs>),
}

/// Runs a `vq` command; `m` are the `vq` subcommand's matches (for what was given on the
/// command line).
pub fn run(cmd: VqCmd, m: &ArgMatches) -> Result<()> {
    match cmd {
        VqCmd::Encode {
            images,
            model,
            pre,
            batch_size,
            output,
        } => encode(&images, &model, &pre, batch_size, &output),
        VqCmd::Decode {
            tokens,
            model,
            batch_size,
            output,
        } => decode(&tokens, &model, batch_size, &output),
        VqCmd::Roundtrip {
            image,
            model,
            pre,
            output,
        } => roundtrip(&image, &model, &pre, &output),
        VqCmd::Edit {
            tokens,
            swaps,
            weights,
            config,
            output,
        } => edit(
            &tokens,
            &swaps,
            weights.as_deref(),
            config.as_deref(),
            &output,
        ),
        VqCmd::Train(a) => {
            let tm = m
                .subcommand_matches("train")
                .expect("clap parsed `vq train`");
            crate::vq_train_cmd::train(&a, tm)
        }
        VqCmd::Tokenize(a) => crate::tokenize_cmd::tokenize(&a),
        VqCmd::MergeManifests { dir } => crate::tokenize_cmd::merge(&dir),
        VqCmd::Detokenize(a) => crate::tokenize_cmd::detokenize(&a),
        VqCmd::Stats(a) => crate::tokenize_cmd::stats(&a),
        VqCmd::Eval(a) => crate::vq_eval_cmd::eval(&a),
    }
}

fn encode(
    images: &[PathBuf],
    m: &ModelArgs,
    pre: &Preprocess,
    batch: usize,
    out: &Path,
) -> Result<()> {
    if crate::lfq_cmd::is_lfq(m) {
        return crate::lfq_cmd::encode(images, m, pre, batch, out);
    }
    let mut outs = Outputs::new(images.iter().chain(&m.given()));
    outs.check(out)?;
    let (model, _) = load_with(m, &mut outs)?;
    let size = pre.size_for(model.config());
    // Fail fast, before any compute: every file must be a readable image of sufficient size
    // (headers only).
    data::check_headers(images, size, pre.upscale)?;
    let tokens = inference::encode_files(&model, images, size, pre.upscale, batch, true)?;
    outs.write(out, |p| tokens.write(p))?;
    outs.finish();
    eprintln!(
        "wrote {} {:?} ({} tokens per image)",
        out.display(),
        tokens.shape(),
        tokens.h * tokens.w
    );
    Ok(())
}

fn decode(tokens: &Path, m: &ModelArgs, batch: usize, out: &Path) -> Result<()> {
    let mut outs = Outputs::new(std::iter::once(tokens.to_path_buf()).chain(m.given()));
    image_io::output_format(out)?;
    let t = TokenGrid::read(tokens)?;
    let files: Vec<PathBuf> = if t.n == 1 {
        vec![out.to_path_buf()]
    } else {
        let stem = out
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let ext = out
            .extension()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        (0..t.n)
            .map(|i| out.with_file_name(format!("{stem}_{i:03}.{ext}")))
            .collect()
    };
    for p in &files {
        outs.check(p)?;
    }
    if crate::lfq_cmd::is_lfq(m) {
        return crate::lfq_cmd::decode(tokens, &files, m, batch, outs);
    }
    let (model, _) = load_with(m, &mut outs)?;
    t.check_codebook(tokens, model.config().n_embed)?;
    let imgs = inference::decode_tokens(&model, &t, batch, true)
        .with_context(|| format!("{}: cannot decode", tokens.display()))?;
    // Write only after every image decoded; on failure the guard removes what was written.
    let gray = model.config().ddconfig.out_ch == 1;
    for (p, img) in files.iter().zip(&imgs) {
        outs.write(p, |p| save_picture(p, img, gray))?;
    }
    outs.finish();
    for p in &files {
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

/// The files `vq roundtrip` writes into its output folder.
const ROUNDTRIP_FILES: [&str; 3] = ["tokens.npy", "recon.png", "side_by_side.png"];

fn roundtrip(image: &Path, m: &ModelArgs, pre: &Preprocess, out: &Path) -> Result<()> {
    let mut outs = Outputs::new(std::iter::once(image.to_path_buf()).chain(m.given()));
    // Fail fast: the folder must be a folder (or absent), its files replaceable.
    outs.check_folder(out, &ROUNDTRIP_FILES, "vq roundtrip")?;
    if crate::lfq_cmd::is_lfq(m) {
        let files = ROUNDTRIP_FILES.map(|f| out.join(f));
        return crate::lfq_cmd::roundtrip(image, m, pre, out, files, outs);
    }
    let (model, weights, precision) = load_choosing(m, &mut outs)?;
    // The family's crop and the model's channels (a gray model reads the luma).
    let spec = model.config().input_spec(pre.size_for(model.config()));
    let img = spec.load(image, pre.upscale)?;
    let r = eval::roundtrip(&model, &img)?;
    let pair = image_io::side_by_side(&[img, r.reconstruction.clone()], 4);
    outs.create_dir_all(out)?;
    let [tok, rec, sbs] = ROUNDTRIP_FILES.map(|f| out.join(f));
    let gray_out = model.config().ddconfig.out_ch == 1;
    outs.write(&tok, |p| r.tokens.write(p))?;
    outs.write(&rec, |p| save_picture(p, &r.reconstruction, gray_out))?;
    outs.write(&sbs, |p| {
        save_picture(p, &pair, spec.channels == 1 && gray_out)
    })?;
    outs.finish();
    let c = model.config();
    let (h, w) = (r.tokens.h, r.tokens.w);
    println!(
        "model: {} (f{}, {} codes)",
        weights.display(),
        c.downsample_factor(),
        c.n_embed
    );
    println!("precision: {precision}");
    println!("tokens: {} ({h}x{w} grid, raster order)", h * w);
    println!("PSNR: {:.2} dB", r.psnr);
    println!("SSIM: {:.4}", r.ssim);
    println!(
        "codebook entries used: {} of {} (perplexity {:.1})",
        r.codes_used, c.n_embed, r.perplexity
    );
    println!(
        "wrote {}/{{tokens.npy, recon.png, side_by_side.png}}",
        out.display()
    );
    Ok(())
}

/// `R,C:R,C` → ((r1, c1), (r2, c2)).
fn parse_swap(s: &str) -> Result<((usize, usize), (usize, usize))> {
    let cell = |p: &str| -> Option<(usize, usize)> {
        let (r, c) = p.trim().split_once(',')?;
        Some((r.trim().parse().ok()?, c.trim().parse().ok()?))
    };
    let err = || {
        anyhow::anyhow!("--swap {s:?}: expected R1,C1:R2,C2 with 0-based row and column numbers")
    };
    let (a, b) = s.split_once(':').ok_or_else(err)?;
    Ok((cell(a).ok_or_else(err)?, cell(b).ok_or_else(err)?))
}

fn edit(
    tokens: &Path,
    swaps: &[String],
    weights: Option<&Path>,
    config: Option<&Path>,
    out: &Path,
) -> Result<()> {
    let mut outs = Outputs::new([Some(tokens), weights, config].into_iter().flatten());
    outs.check(out)?;
    let mut t = TokenGrid::read(tokens)?;
    t.check_non_negative(tokens)?;
    let n_embed = match (config, weights) {
        (Some(c), _) => Some(VqConfig::from_file(c)?.n_embed),
        (None, Some(w)) if imgseq_lfq::is_lfq_checkpoint(w) => {
            Some(imgseq_lfq::load::codebook_size(w)?)
        }
        // The config beside the weights, else the codebook's size in the weights (a LlamaGen
        // `.pt` has no config).
        (None, Some(w)) => Some(
            imgseq_vqgan::load::codebook_size(w)
                .map_err(|e| anyhow::anyhow!("{e}; pass --config"))?,
        ),
        (None, None) => None,
    };
    if let Some(n) = n_embed {
        t.check_codebook(tokens, n)?;
    }
    let mut parsed = Vec::with_capacity(swaps.len());
    for s in swaps {
        let (a, b) = parse_swap(s)?;
        for (r, c) in [a, b] {
            if !t.contains(r, c) {
                bail!(
                    "--swap {s}: cell ({r}, {c}) is outside the {}x{} token grid of {}",
                    t.h,
                    t.w,
                    tokens.display()
                );
            }
        }
        parsed.push((a, b));
    }
    let plane = t.h * t.w;
    for img in 0..t.n {
        for &((r1, c1), (r2, c2)) in &parsed {
            t.data
                .swap(img * plane + r1 * t.w + c1, img * plane + r2 * t.w + c2);
        }
    }
    outs.write(out, |p| t.write(p))?;
    outs.finish();
    eprintln!(
        "wrote {} ({} swap(s) applied to {} image(s))",
        out.display(),
        parsed.len(),
        t.n
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_parsing() {
        assert_eq!(parse_swap("1,2:3,4").unwrap(), ((1, 2), (3, 4)));
        assert_eq!(parse_swap(" 0, 0 : 23,23").unwrap(), ((0, 0), (23, 23)));
        for bad in ["1,2", "1:2", "a,b:c,d", "-1,0:0,0", "1,2:3"] {
            assert!(parse_swap(bad).is_err(), "{bad}");
        }
    }
}
