//! `imgseq vae ...`: image ↔ continuous latents of a diffusers `AutoencoderKL` (SD, SDXL,
//! SD3, FLUX VAEs; FLUX.2's `AutoencoderKLFlux2`; DC-AE's `AutoencoderDC`), as latent maps or as patch sequences.
//! Flags and printing only: the model is opened by the loader ([`imgseq_models::open`]) and used through the `Tokenizer`
//! contract; the latent patch order is [`imgseq_core::latent_patch`]'s.

use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use clap::{Args, Subcommand};
use imgseq_core::fsutil::Outputs;
use imgseq_core::image_io;
use imgseq_core::latent_patch;
use imgseq_core::npy;
use imgseq_core::tokenizer::{Encoded, LatentSpec, Latents, Tokenizer};
use imgseq_models::{OpenOptions, Opened};
use imgseq_shards::job::Through;
use imgseq_shards::TokenizerInfo;
use std::path::{Path, PathBuf};

/// Input side when --size is not given (DiT's 256²).
const DEFAULT_SIZE: u32 = 256;

#[derive(Subcommand)]
pub enum VaeCmd {
    /// Images → latents.npy: (C, h, w) float32 for one image, (n, C, h, w) for several; with
    /// --patch p, the sequences (h/p·w/p, p²·C) / (n, ...). Scaled and shifted as the
    /// diffusion pipelines feed them to their transformer.
    Encode {
        /// Input images (png, jpg, webp, bmp).
        #[arg(required = true)]
        images: Vec<PathBuf>,
        #[command(flatten)]
        model: VaeModelArgs,
        #[command(flatten)]
        opts: LatentOpts,
        /// Images per forward pass.
        #[arg(long, default_value_t = 1)]
        batch_size: usize,
        /// Output file (.npy).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// latents.npy (as `vae encode` writes it) → image(s); several are written as
    /// OUT_000.png, OUT_001.png, ...
    Decode {
        latents: PathBuf,
        #[command(flatten)]
        model: VaeModelArgs,
        /// The file holds patch sequences of p×p patches (square latent grids).
        #[arg(long)]
        patch: Option<usize>,
        /// Tiled decode with tiles of this side in pixels (bounded memory).
        #[arg(long)]
        tile: Option<usize>,
        /// Output image (png, jpg, jpeg, webp or bmp, by extension).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// Image → latents → image: writes DIR/latents.npy, DIR/recon.png, DIR/side_by_side.png
    /// and prints the latent shape, PSNR and SSIM.
    Roundtrip {
        image: PathBuf,
        #[command(flatten)]
        model: VaeModelArgs,
        #[command(flatten)]
        opts: LatentOpts,
        /// Output folder (created if missing).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// Whole datasets → latent shards (the job of `vq tokenize`: resumable, job arrays,
    /// WebDataset tars or Parquet): per image a float16 array, the scaled latent (C, h, w) or
    /// with --patch p its (h/p·w/p, p²·C) patch tokens (docs/vae-latents.md).
    Tokenize {
        /// Image folders, .txt lists, WebDataset .tar, Parquet or IDX files.
        #[arg(required = true)]
        sources: Vec<PathBuf>,
        #[command(flatten)]
        model: VaeModelArgs,
        #[command(flatten)]
        opts: LatentOpts,
        #[command(flatten)]
        job: crate::tokenize_cmd::JobArgs,
    },
    /// A latent shard folder's per-channel mean, std, min and max (is the scaling right?).
    Stats {
        /// A `vae tokenize` output folder (with manifest.json).
        dir: PathBuf,
        /// Read shards whose size or SHA-256 differs from the manifest's.
        #[arg(long)]
        no_verify: bool,
    },
}

/// Which model.
#[derive(Args, Clone)]
pub struct VaeModelArgs {
    /// A diffusers `vae/` folder (config.json + diffusion_pytorch_model.safetensors) or a
    /// single .safetensors / .ckpt (diffusers or LDM names; a whole SD checkpoint's VAE).
    #[arg(long)]
    pub weights: PathBuf,
    /// The diffusers config.json (default: beside the weights).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// A released VAE's config: sd (1.x/2.x), sdxl, sd3, flux (for single files).
    #[arg(long)]
    pub preset: Option<String>,
}

/// How latents are made.
#[derive(Args, Clone)]
pub struct LatentOpts {
    /// Input side in pixels, a multiple of the downsampling factor.
    #[arg(long, default_value_t = DEFAULT_SIZE)]
    pub size: u32,
    /// Allow enlarging images whose shorter side is smaller than --size.
    #[arg(long)]
    pub upscale: bool,
    /// Draw from the posterior (mean + std·ε) instead of taking its mean.
    #[arg(long)]
    pub sample: bool,
    /// Seed of --sample's draw.
    #[arg(long, default_value_t = 0, requires = "sample")]
    pub seed: u64,
    /// Cut the latents into p×p patches: (h/p·w/p) tokens of p²·C values (FLUX's order).
    #[arg(long)]
    pub patch: Option<usize>,
    /// Tiled encode/decode with tiles of this side in pixels (bounded memory; diffusers'
    /// overlap-and-blend scheme).
    #[arg(long)]
    pub tile: Option<usize>,
}

impl VaeModelArgs {
    fn given(&self) -> Vec<PathBuf> {
        std::iter::once(self.weights.clone())
            .chain(self.config.clone())
            .collect()
    }

    /// The VAE through the loader, making latents as `o` says (without `o`: latent maps at the
    /// default size, for decoding), tiled with `tile`; its files become `outs`' inputs.
    fn open(
        &self,
        o: Option<&LatentOpts>,
        tile: Option<usize>,
        outs: &mut Outputs,
    ) -> Result<Opened> {
        let options = OpenOptions {
            config: self.config.clone(),
            preset: self.preset.clone(),
            size: o.map(|o| o.size),
            patch: o.and_then(|o| o.patch),
            sample_seed: o.filter(|o| o.sample).map(|o| o.seed),
            tile,
            ..OpenOptions::default()
        };
        let t = imgseq_models::open(&self.weights, &options)?;
        if t.describe().latent.is_none() {
            bail!(
                "{}: a {}, not a VAE making continuous latents (use `imgseq encode` or `vq`)",
                self.weights.display(),
                t.label()
            );
        }
        for f in &t.files {
            outs.add_input(f);
        }
        Ok(t)
    }
}

/// What `t`'s latents are (it is a VAE: [`VaeModelArgs::open`] checked).
fn latent_spec(t: &Opened) -> LatentSpec {
    t.describe().latent.expect("a VAE describes its latents")
}

/// One line on the model: its latents and scaling.
fn summary(t: &Opened) -> String {
    latent_spec(t).summary(t.input().size)
}

pub fn run(cmd: VaeCmd) -> Result<()> {
    match cmd {
        VaeCmd::Encode {
            images,
            model,
            opts,
            batch_size,
            output,
        } => encode(&images, &model, &opts, batch_size, &output),
        VaeCmd::Decode {
            latents,
            model,
            patch,
            tile,
            output,
        } => decode(&latents, &model, patch, tile, &output),
        VaeCmd::Roundtrip {
            image,
            model,
            opts,
            output,
        } => roundtrip(&image, &model, &opts, &output),
        VaeCmd::Tokenize {
            sources,
            model,
            opts,
            job,
        } => tokenize(&sources, &model, &opts, &job),
        VaeCmd::Stats { dir, no_verify } => stats(&dir, !no_verify),
    }
}

/// `vae stats`: per-channel statistics of a latent shard set.
fn stats(dir: &Path, verify: bool) -> Result<()> {
    let (m, st) = imgseq_shards::job::latent_stats::latent_stats(dir, verify)?;
    let l = m.tokenizer.latent.as_ref().expect("a latent set");
    println!(
        "samples: {} in {} shards; float16 {:?} each{}",
        st.samples,
        m.shards.len(),
        l.shape,
        l.patch
            .map_or(String::new(), |p| format!(" ({p}x{p} patch tokens)"))
    );
    println!(
        "scaling_factor {}, shift_factor {} (a well-scaled latent has std near 1)",
        l.scaling_factor, l.shift_factor
    );
    for (c, [mean, std, lo, hi]) in st.channels.iter().enumerate() {
        println!("  channel {c}: mean {mean:+.4}, std {std:.4}, min {lo:+.3}, max {hi:+.3}");
    }
    Ok(())
}

/// `vae tokenize`: the dataset job with the model's latents as payloads.
fn tokenize(
    sources: &[PathBuf],
    m: &VaeModelArgs,
    o: &LatentOpts,
    job: &crate::tokenize_cmd::JobArgs,
) -> Result<()> {
    let t = m.open(Some(o), o.tile, &mut Outputs::default())?;
    let opts = job.options(o.upscale, job.pad(sources))?;
    t.check_batch(opts.batch)?;
    let mut d = t.describe();
    d.weights = Some(imgseq_core::tokenizer::WeightsRef {
        source: m.weights.display().to_string(),
        sha256: t.weights_sha256()?,
    });
    let info = TokenizerInfo::from_description(&d, o.upscale, opts.pad)?;
    let r = imgseq_shards::job::run(&Through(&t), &info, sources, &job.output, &opts)?;
    let shape = &info.latent.as_ref().expect("a VAE's").shape;
    crate::tokenize_cmd::report(
        &r,
        &format!("{} {shape:?} each ({})", opts.dtype.name(), summary(&t)),
    )
}

/// Scaled latents of prepared pictures (maps, or patch sequences), in batches.
fn encode_pictures(t: &Opened, imgs: &[image::RgbImage], batch: usize) -> Result<Encoded> {
    let bar = imgseq_core::progress::items(imgs.len(), "encode");
    let mut all: Option<Encoded> = None;
    for chunk in imgs.chunks(batch.max(1)) {
        let e = t.encode_pictures(chunk)?;
        match &mut all {
            Some(a) => a.extend(e)?,
            None => all = Some(e),
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    all.context("no image")
}

/// (n, ...) latents as written: the maps (n, C, h, w), or the (n, N, p²·C) sequences.
fn latents_out(e: Encoded) -> (Vec<usize>, Vec<f32>) {
    let mut shape = e.item_shape();
    shape.insert(0, e.len());
    (shape, e.into_values().unwrap_or_default())
}

fn encode(
    images: &[PathBuf],
    m: &VaeModelArgs,
    o: &LatentOpts,
    batch: usize,
    out: &Path,
) -> Result<()> {
    let mut outs = Outputs::new(images.iter().chain(&m.given()));
    outs.check(out)?;
    let t = m.open(Some(o), o.tile, &mut outs)?;
    t.input().check_headers(images, o.upscale)?;
    let imgs = t.load(images, o.upscale)?;
    let (mut shape, data) = latents_out(encode_pictures(&t, &imgs, batch)?);
    if images.len() == 1 {
        shape.remove(0);
    }
    outs.write(out, |p| npy::write_npy_f32(p, &shape, &data))?;
    outs.finish();
    eprintln!(
        "wrote {} {shape:?} float32 ({})",
        out.display(),
        summary(&t)
    );
    Ok(())
}

/// A latents file as (n, C, h, w): latent maps, or square patch sequences with `patch`, of a
/// `c`-channel latent.
fn read_latents(path: &Path, c: usize, patch: Option<usize>) -> Result<Tensor> {
    let (mut shape, data) = npy::read_npy_f32(path)?;
    let seq = patch.is_some();
    let want = if seq { 3 } else { 4 };
    if shape.len() == want - 1 {
        shape.insert(0, 1);
    }
    if shape.len() != want {
        bail!(
            "{}: shape {shape:?}; expected {} (from `vae encode`{})",
            path.display(),
            if seq {
                "(n, tokens, p²·C) or (tokens, p²·C)"
            } else {
                "(n, C, h, w) or (C, h, w)"
            },
            if seq { " --patch" } else { "" }
        );
    }
    match patch {
        None => {
            if shape[1] != c {
                bail!(
                    "{}: {} channels; the model has {c}",
                    path.display(),
                    shape[1]
                );
            }
            Ok(Tensor::from_vec(data, shape, &Device::Cpu)?)
        }
        Some(p) => {
            let (n, tokens, dim) = (shape[0], shape[1], shape[2]);
            let side = (tokens as f64).sqrt().round() as usize;
            if p == 0 || side * side != tokens || dim != c * p * p {
                bail!(
                    "{}: {tokens} tokens of {dim} values are not a square grid of {p}x{p} patches of \
                     a {c}-channel latent",
                    path.display()
                );
            }
            let t = Tensor::from_vec(data, (n, tokens, dim), &Device::Cpu)?;
            Ok(latent_patch::unpatchify(&t, c, side * p, side * p, p)?)
        }
    }
}

fn decode(
    latents: &Path,
    m: &VaeModelArgs,
    p: Option<usize>,
    tile: Option<usize>,
    out: &Path,
) -> Result<()> {
    let mut outs = Outputs::new(std::iter::once(latents.to_path_buf()).chain(m.given()));
    image_io::output_format(out)?;
    let t = m.open(None, tile, &mut outs)?;
    let l = latent_spec(&t);
    let z = read_latents(latents, l.channels, p)?;
    let (n, c, h, w) = z.dims4()?;
    let f = t.input().size as usize / l.grid[0].max(1);
    let work = imgseq_core::tokenizer::Work::Decode { n: 1, h, w };
    imgseq_core::budget::check_memory(t.work_bytes(work)).map_err(|why| {
        anyhow::anyhow!(
            "{}: decoding a {h}x{w} latent ({}x{} pixels) {why}; use --tile",
            latents.display(),
            h * f,
            w * f
        )
    })?;
    let files = crate::tokenizer_cmd::numbered(out, n);
    for f in &files {
        outs.check(f)?;
    }
    let bar = imgseq_core::progress::items(n, "decode");
    let mut imgs = Vec::with_capacity(n);
    for i in 0..n {
        let one = Encoded::Latents(Latents {
            n: 1,
            shape: vec![c, h, w],
            data: z.get(i)?.flatten_all()?.to_vec1()?,
        });
        let img = t
            .decode_encoded(&one)
            .with_context(|| format!("{}: cannot decode", latents.display()))?;
        imgs.extend(img);
        bar.inc(1);
    }
    bar.finish_and_clear();
    for (f, img) in files.iter().zip(&imgs) {
        outs.write(f, |p| image_io::save_image(p, img))?;
    }
    outs.finish();
    for f in &files {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

/// The files `vae roundtrip` writes into its output folder.
const ROUNDTRIP_FILES: [&str; 3] = ["latents.npy", "recon.png", "side_by_side.png"];

fn roundtrip(image: &Path, m: &VaeModelArgs, o: &LatentOpts, out: &Path) -> Result<()> {
    let mut outs = Outputs::new(std::iter::once(image.to_path_buf()).chain(m.given()));
    // Fail fast: the folder must be a folder (or absent), its files replaceable.
    outs.check_folder(out, &ROUNDTRIP_FILES, "vae roundtrip")?;
    let t = m.open(Some(o), o.tile, &mut outs)?;
    let img = t.input().load(image, o.upscale)?;
    let z = encode_pictures(&t, std::slice::from_ref(&img), 1)?;
    let recon = t.decode_encoded(&z)?.remove(0);
    let (shape, data) = latents_out(z);
    let (psnr, ssim) = imgseq_core::eval::score(&img, &recon)?;
    let pair = image_io::side_by_side(&[img, recon.clone()], 4);
    outs.create_dir_all(out)?;
    let [lat, rec, sbs] = ROUNDTRIP_FILES.map(|f| out.join(f));
    outs.write(&lat, |p| npy::write_npy_f32(p, &shape[1..], &data))?;
    outs.write(&rec, |p| image_io::save_image(p, &recon))?;
    outs.write(&sbs, |p| image_io::save_image(p, &pair))?;
    outs.finish();
    println!("model: {} ({})", m.weights.display(), summary(&t));
    let what = match (o.sample, t.describe().draw) {
        (true, _) => format!("a draw (seed {})", o.seed),
        (false, Some(_)) => "the posterior mean".into(),
        (false, None) => "the encoder's output".into(),
    };
    println!("latents: {:?} float32, {what}", &shape[1..]);
    println!("PSNR: {psnr:.2} dB");
    println!("SSIM: {ssim:.4}");
    println!(
        "wrote {}/{{latents.npy, recon.png, side_by_side.png}}",
        out.display()
    );
    Ok(())
}
