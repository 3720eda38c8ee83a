//! `imgseq vq encode | decode | roundtrip` on an Open-MAGVIT2 (LFQ) checkpoint: `vq_cmd`
//! hands over when `--weights` is one ([`is_lfq`]). Flags and printing only: the work is
//! `imgseq_lfq`'s, through the tokenizer interface.

use anyhow::{Context, Result};
use imgseq_core::fsutil::Outputs;
use imgseq_core::tokenizer::Tokenizer;
use imgseq_core::tokens::TokenGrid;
use imgseq_core::{image_io, metrics, progress};
use imgseq_lfq::{load_model, LfqTokenizer, WeightSet};
use std::path::{Path, PathBuf};

use crate::vq_model_args::{ModelArgs, Preprocess};

/// Whether `--weights` names an Open-MAGVIT2 checkpoint.
pub fn is_lfq(m: &ModelArgs) -> bool {
    m.weights
        .as_deref()
        .is_some_and(imgseq_lfq::is_lfq_checkpoint)
}

/// The tokenizer of `m` (EMA weights unless `--raw`) at `size`, adding its files to `outs`.
pub fn load(m: &ModelArgs, size: Option<u32>, outs: &mut Outputs) -> Result<LfqTokenizer> {
    let w = m.weights.as_deref().context("--weights is required")?;
    if matches!(
        m.precision.precision,
        imgseq_kernels::PrecisionRequest::Bf16
    ) {
        anyhow::bail!(
            "--precision bf16: {} models run in f32 only",
            imgseq_lfq::FAMILY
        );
    }
    if m.bf16_encoder {
        anyhow::bail!(
            "--bf16-encoder: {} models run in f32 only",
            imgseq_lfq::FAMILY
        );
    }
    let config = m
        .config
        .clone()
        .or_else(|| imgseq_lfq::load::default_config_path(w));
    outs.add_input(w);
    if let Some(c) = &config {
        outs.add_input(c);
    }
    let which = if m.raw {
        WeightSet::Raw
    } else {
        WeightSet::Default
    };
    let t = LfqTokenizer::new(load_model(w, config.as_deref(), which)?, size)?;
    let c = t.model.config();
    eprintln!(
        "{}: {} (f{}, 2^{} codes, {} weights{})",
        w.display(),
        imgseq_lfq::FAMILY,
        c.downsample_factor(),
        c.bits(),
        if t.model.ema { "EMA" } else { "raw" },
        if config.is_none() {
            "; settings read off the weights"
        } else {
            ""
        }
    );
    Ok(t)
}

/// `vq eval` with an Open-MAGVIT2 checkpoint: `paths` encoded, decoded and scored,
/// `batch` images at a time (the decoder's memory checked first).
pub fn evaluate(
    paths: &[PathBuf],
    m: &ModelArgs,
    pre: &Preprocess,
    batch: usize,
) -> Result<imgseq_vqgan::eval::EvalReport> {
    let t = load(m, pre.size, &mut Outputs::default())?;
    let s = t.size as usize;
    t.model
        .config()
        .check_memory(batch.clamp(1, paths.len().max(1)), s, s)?;
    Ok(imgseq_vqgan::eval::evaluate_tokenizer(
        &t,
        paths,
        pre.upscale,
        batch,
        true,
    )?)
}

pub fn encode(
    images: &[PathBuf],
    m: &ModelArgs,
    pre: &Preprocess,
    batch: usize,
    out: &Path,
) -> Result<()> {
    let mut outs = Outputs::new(images.iter().chain(&m.given()));
    outs.check(out)?;
    let t = load(m, pre.size, &mut outs)?;
    let spec = t.input();
    spec.check_headers(images, pre.upscale)?;
    let pb = progress::items(images.len(), "encoding");
    let mut all = TokenGrid {
        n: 0,
        h: 0,
        w: 0,
        batched: images.len() != 1,
        data: Vec::new(),
    };
    for chunk in images.chunks(batch.max(1)) {
        let g = t
            .encode_pictures(&spec.load_all(chunk, pre.upscale)?)?
            .into_tokens()?;
        (all.n, all.h, all.w) = (all.n + g.n, g.h, g.w);
        all.data.extend(g.data);
        pb.inc(chunk.len() as u64);
    }
    pb.finish_and_clear();
    outs.write(out, |p| all.write(p))?;
    outs.finish();
    eprintln!(
        "wrote {} {:?} ({} tokens per image)",
        out.display(),
        all.shape(),
        all.h * all.w
    );
    Ok(())
}

pub fn decode(
    tokens: &Path,
    files: &[PathBuf],
    m: &ModelArgs,
    batch: usize,
    mut outs: Outputs,
) -> Result<()> {
    let grid = TokenGrid::read(tokens)?;
    let t = load(m, None, &mut outs)?;
    grid.check_codebook(tokens, t.model.config().codebook_size())?;
    let imgs = t
        .decode_batched(&grid, batch, true)
        .with_context(|| format!("{}: cannot decode", tokens.display()))?;
    for (p, img) in files.iter().zip(&imgs) {
        outs.write(p, |p| image_io::save_image(p, img))?;
    }
    outs.finish();
    for p in files {
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

/// `vq roundtrip` of one image; `files` are the output folder's tokens, reconstruction and
/// side-by-side paths (checked by the caller).
pub fn roundtrip(
    image: &Path,
    m: &ModelArgs,
    pre: &Preprocess,
    out: &Path,
    files: [PathBuf; 3],
    mut outs: Outputs,
) -> Result<()> {
    let t = load(m, pre.size, &mut outs)?;
    let img = t.input().load(image, pre.upscale)?;
    let mut tokens = t
        .encode_pictures(std::slice::from_ref(&img))?
        .into_tokens()?;
    tokens.batched = false;
    let recon = t.decode(&tokens)?.remove(0);
    let (psnr, ssim) = imgseq_vqgan::eval::score(&img, &recon)?;
    let n_codes = t.model.config().codebook_size();
    let (used, perplexity) = metrics::codebook_usage(&tokens.data, n_codes)?;
    let pair = image_io::side_by_side(&[img, recon.clone()], 4);
    outs.create_dir_all(out)?;
    let [tok, rec, sbs] = files;
    outs.write(&tok, |p| tokens.write(p))?;
    outs.write(&rec, |p| image_io::save_image(p, &recon))?;
    outs.write(&sbs, |p| image_io::save_image(p, &pair))?;
    outs.finish();
    let (h, w) = (tokens.h, tokens.w);
    println!(
        "tokens: {} ({h}x{w} grid, raster order; bit i of a token = sign of latent channel i)",
        h * w
    );
    println!("PSNR: {psnr:.2} dB");
    println!("SSIM: {ssim:.4}");
    println!("codebook entries used: {used} of {n_codes} (perplexity {perplexity:.1})");
    println!(
        "wrote {}/{{tokens.npy, recon.png, side_by_side.png}}",
        out.display()
    );
    Ok(())
}
