//! `imgseq vq ...`: image ↔ discrete tokens. `encode`, `decode` and `roundtrip` run any
//! tokenizer the loader opens ([`crate::tokenizer_cmd`]); `train` and `edit` are the VQGAN's.

use anyhow::{bail, Result};
use clap::{ArgMatches, Subcommand};
use imgseq_core::fsutil::Outputs;
use imgseq_core::tokens::TokenGrid;
use std::path::{Path, PathBuf};

use crate::tokenizer_cmd;

#[derive(Subcommand)]
pub enum VqCmd {
    /// Images → tokens.npy: (h, w) int64 for one image, (n, h, w) for several (any tokenizer
    /// family; `imgseq encode`).
    Encode(tokenizer_cmd::EncodeArgs),
    /// tokens.npy → image(s); several images are written as OUT_000.png, OUT_001.png, ...
    /// (`imgseq decode`).
    Decode(tokenizer_cmd::DecodeArgs),
    /// Image → tokens → image: writes DIR/tokens.npy, DIR/recon.png, DIR/side_by_side.png and
    /// prints token count, grid, PSNR, SSIM and how many codebook entries were used
    /// (`imgseq roundtrip`).
    Roundtrip(tokenizer_cmd::RoundtripArgs),
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
        VqCmd::Encode(a) => tokenizer_cmd::encode(&a),
        VqCmd::Decode(a) => tokenizer_cmd::decode(&a),
        VqCmd::Roundtrip(a) => tokenizer_cmd::roundtrip(&a),
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
    let n_embed = imgseq_models::files::codebook_size(weights, config)?;
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
