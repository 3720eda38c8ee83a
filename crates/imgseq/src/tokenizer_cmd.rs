//! `imgseq encode | decode | roundtrip` (and their `vq` aliases) with any tokenizer the loader
//! opens: flags in, one `imgseq_models::open`, the `Tokenizer` contract, files and lines out.
//! Nothing here names a family.

use anyhow::{Context, Result};
use clap::Args;
use image::RgbImage;
use imgseq_core::fsutil::Outputs;
use imgseq_core::tokenizer::{check_batch_size, decode_batches, Encoded, Tokenizer};
use imgseq_core::tokens::TokenGrid;
use imgseq_core::{image_io, metrics, npy, progress};
use imgseq_models::Opened;
use std::path::{Path, PathBuf};

use crate::vq_model_args::{save_picture, ModelArgs, Preprocess};

/// `encode`'s flags.
#[derive(Args)]
pub struct EncodeArgs {
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
    /// Output file (.npy): tokens, or float32 latents of a continuous tokenizer.
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
}

/// `decode`'s flags.
#[derive(Args)]
pub struct DecodeArgs {
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
}

/// `roundtrip`'s flags.
#[derive(Args)]
pub struct RoundtripArgs {
    image: PathBuf,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    pre: Preprocess,
    /// Output folder (created if missing).
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
}

/// `inspect`'s flags.
#[derive(Args)]
pub struct InspectArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    pre: Preprocess,
}

/// Whether the tokenizer's pictures are gray (saved as 8-bit gray images).
fn gray(t: &Opened) -> bool {
    t.input().channels == 1
}

/// Images → `out`: integer tokens (h, w) for one image, (n, h, w) for several, or float32
/// latents / embeddings of the tokenizer's output shape (with n first for several images).
pub fn encode(a: &EncodeArgs) -> Result<()> {
    let (images, m, pre, batch, out) = (&a.images, &a.model, &a.pre, a.batch_size, &a.output);
    check_batch_size(batch)?;
    let mut outs = Outputs::new(images.iter().chain(&m.given()));
    outs.check(out)?;
    let t = m.open(pre.size, &mut outs)?;
    let spec = t.input();
    // Fail fast, before any compute: every file must be a readable image of sufficient size
    // (headers only), and a batch must fit memory.
    spec.check_headers(images, pre.upscale)?;
    t.check_batch(batch.min(images.len()).max(1))?;
    let pb = progress::items(images.len(), "encoding");
    let mut parts = Vec::new();
    for chunk in images.chunks(batch) {
        parts.push(t.encode_pictures(&spec.load_all(chunk, pre.upscale)?)?);
        pb.inc(chunk.len() as u64);
    }
    pb.finish_and_clear();
    let one = images.len() == 1;
    let (shape, per_image) = match join(parts)? {
        Encoded::Tokens(mut g) => {
            g.batched = !one;
            outs.write(out, |p| g.write(p))?;
            (g.shape(), format!("{} tokens per image", g.h * g.w))
        }
        e => {
            let mut shape = e.item_shape();
            if !one {
                shape.insert(0, e.len());
            }
            let data = e.into_values().unwrap_or_default();
            outs.write(out, |p| npy::write_npy_f32(p, &shape, &data))?;
            (shape, "float32".into())
        }
    };
    outs.finish();
    eprintln!("wrote {} {shape:?} ({per_image})", out.display());
    Ok(())
}

/// The batches' outputs as one.
fn join(parts: Vec<Encoded>) -> Result<Encoded> {
    let mut it = parts.into_iter();
    let mut all = it.next().context("no image")?;
    for p in it {
        all.extend(p)?;
    }
    Ok(all)
}

/// Token grids → pictures, `batch` images at a time, with a progress bar.
pub fn decode_batched(t: &dyn Tokenizer, g: &TokenGrid, batch: usize) -> Result<Vec<RgbImage>> {
    let pb = progress::items(g.n, "decoding");
    let imgs = decode_batches(t, g, batch, |k| pb.inc(k as u64))?;
    pb.finish_and_clear();
    Ok(imgs)
}

/// The output files of `n` decoded images: `out` itself for one, OUT_000.ext, OUT_001.ext, ...
/// for several.
pub fn numbered(out: &Path, n: usize) -> Vec<PathBuf> {
    if n == 1 {
        return vec![out.to_path_buf()];
    }
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = out
        .extension()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    (0..n)
        .map(|i| out.with_file_name(format!("{stem}_{i:03}.{ext}")))
        .collect()
}

/// A token file → pictures (every token checked against the codebook first).
pub fn decode(a: &DecodeArgs) -> Result<()> {
    let (tokens, m, batch, out) = (&a.tokens, &a.model, a.batch_size, &a.output);
    check_batch_size(batch)?;
    let mut outs = Outputs::new(std::iter::once(tokens.to_path_buf()).chain(m.given()));
    image_io::output_format(out)?;
    let g = TokenGrid::read(tokens)?;
    let files = numbered(out, g.n);
    for p in &files {
        outs.check(p)?;
    }
    let t = m.open(None, &mut outs)?;
    let n_codes = t.codebook_size().with_context(|| {
        format!(
            "{}: a {} has no codebook to decode tokens of",
            tokens.display(),
            t.label()
        )
    })?;
    g.check_codebook(tokens, n_codes)?;
    let imgs = decode_batched(&t, &g, batch)
        .with_context(|| format!("{}: cannot decode", tokens.display()))?;
    // Write only after every image decoded; on failure the guard removes what was written.
    for (p, img) in files.iter().zip(&imgs) {
        outs.write(p, |p| save_picture(p, img, gray(&t)))?;
    }
    outs.finish();
    for p in &files {
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

/// The files `roundtrip` writes into its output folder.
pub const ROUNDTRIP_FILES: [&str; 3] = ["tokens.npy", "recon.png", "side_by_side.png"];

/// Image → tokens → image: the tokens, the reconstruction and the pair side by side in `out`;
/// PSNR, SSIM and codebook usage printed.
pub fn roundtrip(a: &RoundtripArgs) -> Result<()> {
    let (image, m, pre, out) = (&a.image, &a.model, &a.pre, &a.output);
    let mut outs = Outputs::new(std::iter::once(image.to_path_buf()).chain(m.given()));
    // Fail fast: the folder must be a folder (or absent), its files replaceable.
    outs.check_folder(out, &ROUNDTRIP_FILES, "vq roundtrip")?;
    let t = m.open(pre.size, &mut outs)?;
    let n_codes = t.codebook_size().with_context(|| {
        format!(
            "a {} gives continuous values: `imgseq vae roundtrip` writes them",
            t.label()
        )
    })?;
    // The family's crop and the model's channels (a gray model reads the luma).
    let img = t.input().load(image, pre.upscale)?;
    t.check_batch(1)?;
    let mut tokens = t
        .encode_pictures(std::slice::from_ref(&img))?
        .into_tokens()?;
    tokens.batched = false;
    let recon = t.decode(&tokens)?.remove(0);
    let (psnr, ssim) = metrics::score_pictures(&img, &recon)?;
    let (used, perplexity) = metrics::codebook_usage(&tokens.data, n_codes)?;
    let pair = image_io::side_by_side(&[img, recon.clone()], 4);
    outs.create_dir_all(out)?;
    let [tok, rec, sbs] = ROUNDTRIP_FILES.map(|f| out.join(f));
    outs.write(&tok, |p| tokens.write(p))?;
    outs.write(&rec, |p| save_picture(p, &recon, gray(&t)))?;
    outs.write(&sbs, |p| save_picture(p, &pair, gray(&t)))?;
    outs.finish();
    let (h, w) = (tokens.h, tokens.w);
    // A 2-D grid's downsampling factor (`f16`); a 1-D sequence (TiTok) or scale list (VAR)
    // has none to speak of.
    let factor = match (h, t.describe().output.scales.is_some()) {
        (1, _) | (_, true) => String::new(),
        _ => format!("f{}, ", imgseq_core::tokenizer::downsample_factor(&t)),
    };
    println!("model: {} ({factor}{n_codes} codes)", t.source.display());
    if let Some(c) = &t.precision {
        println!("precision: {c}");
    }
    match t.describe().output.scales {
        Some(s) => println!("tokens: {} (scales {s:?}, smallest first)", h * w),
        None if h == 1 => println!("tokens: {w} (one sequence)"),
        None => println!("tokens: {} ({h}x{w} grid, raster order)", h * w),
    }
    println!("PSNR: {psnr:.2} dB");
    println!("SSIM: {ssim:.4}");
    println!("codebook entries used: {used} of {n_codes} (perplexity {perplexity:.1})");
    println!(
        "wrote {}/{{tokens.npy, recon.png, side_by_side.png}}",
        out.display()
    );
    Ok(())
}

/// The tokenizer's description (what manifests, `/v1/models` and Python print) as JSON on
/// stdout, a summary on stderr.
pub fn inspect(a: &InspectArgs) -> Result<()> {
    let t = a.model.open(a.pre.size, &mut Outputs::default())?;
    let d = t.describe_with_weights()?;
    eprintln!(
        "{}: {} ({} of shape {:?}{}), input {}x{} {}",
        t.source.display(),
        d.label,
        d.output.kind.name(),
        d.output.shape,
        d.output
            .codebook_size
            .map_or(String::new(), |n| format!(", {n} codes")),
        d.input.size,
        d.input.size,
        d.input.crop.name()
    );
    println!("{}", serde_json::to_string_pretty(&d)?);
    Ok(())
}

/// `imgseq models`: the catalogue of released tokenizers.
pub fn models(json: bool) -> Result<()> {
    let cat = imgseq_models::catalogue::CATALOGUE;
    if json {
        println!("{}", serde_json::to_string_pretty(cat)?);
        return Ok(());
    }
    println!("{:<18} {:<15} tokens", "name", "family");
    for e in cat {
        println!("{:<18} {:<15} {}", e.name, e.family, e.tokens);
        let gated = if e.gated {
            "; gated: accept the licence on the Hub, set HF_TOKEN"
        } else {
            ""
        };
        let source = if e.on_hub() {
            e.source.to_string()
        } else {
            format!("not on the Hub: {}", e.source)
        };
        let config = e.config.map_or(String::new(), |c| format!("; config: {c}"));
        println!("{:<18} {source}  ({}{gated}{config})", "", e.licence);
        if let (Some(p), Some(f)) = (e.published, e.figures_from) {
            println!("{:<18} published: {p} ({f})", "");
        }
    }
    println!(
        "\nUse a name as --model (e.g. `imgseq roundtrip PHOTO --model llamagen-vq16 -o out`); \
         files go to the Hugging Face cache ($HF_HUB_CACHE), shared with Python's \
         huggingface_hub."
    );
    Ok(())
}
