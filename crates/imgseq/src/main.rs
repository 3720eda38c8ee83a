//! `imgseq`: turn images into transformer-ready sequences and back.
//!
//! `imgseq encode | decode | roundtrip | tokenize | detokenize | eval | inspect`
//!                      any tokenizer family (`--model PATH`; the shipped VQGAN by default)
//! `imgseq vit ...`     continuous tokens (ViT): embed, train, eval, classify, plot-positions
//! `imgseq vq ...`      discrete tokens (VQGAN): encode, decode, roundtrip, edit, train, eval
//! `imgseq vae ...`     continuous latents (AutoencoderKL): encode, decode, roundtrip
//! `imgseq weights ...` inspect and convert weight files
//! `imgseq gpt ...`     a GPT over VQ tokens: train, sample, complete, eval
//! `imgseq export ...`  tokens in other projects' layouts (LlamaGen's code files)
//! `imgseq serve`       the models over HTTP, with a web viewer

#[cfg(test)]
mod documented_commands;
mod eval_bench_cmd;
mod export_cmd;
mod gpt_cmd;
mod gpt_judge;
mod paths;
mod precision_arg;
mod serve_cmd;
mod tokenize_cmd;
mod tokenizer_cmd;
mod vae_cmd;
mod vit_cmd;
mod vit_data_arg;
mod vit_teacher_cmd;
mod vq_cmd;
mod vq_eval_cmd;
mod vq_model_args;
mod vq_train_cmd;
mod weights_cmd;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "imgseq",
    version,
    about = "Turn images into transformer-ready sequences and back"
)]
struct Cli {
    /// Number of CPU threads (default: all cores).
    #[arg(long, global = true)]
    threads: Option<usize>,
    /// Turn pictures upright by their EXIF orientation tag when decoding them (Pillow's
    /// `ImageOps.exif_transpose`); off by default, as Pillow and the reference pipelines read
    /// them.
    #[arg(long, global = true)]
    exif_transpose: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Images → tokens.npy (any tokenizer: `--model PATH`; the shipped VQGAN by default).
    Encode(tokenizer_cmd::EncodeArgs),
    /// tokens.npy → image(s).
    Decode(tokenizer_cmd::DecodeArgs),
    /// Image → tokens → image, with PSNR, SSIM and codebook usage.
    Roundtrip(tokenizer_cmd::RoundtripArgs),
    /// Whole datasets → token shards (resumable, job arrays; docs/tokenize-a-dataset.md).
    Tokenize(Box<tokenize_cmd::TokenizeArgs>),
    /// Token shards → images (KEY.png per sample).
    Detokenize(tokenize_cmd::DetokenizeArgs),
    /// How lossy a tokenizer is: PSNR, SSIM, codebook usage and, under a named protocol,
    /// rFID and LPIPS; resumable, job arrays (docs/evaluation.md).
    Eval(Box<vq_eval_cmd::EvalArgs>),
    /// What a tokenizer is: its description (family, config, weights hash, preprocessing,
    /// output, precision) as JSON.
    Inspect(tokenizer_cmd::InspectArgs),
    /// Released tokenizers by short name (`--model NAME`): Hub source, family, tokens,
    /// licence, published figures.
    Models {
        /// Print the catalogue as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Continuous tokens: Vision Transformer (CLS + 64 patch tokens + positions).
    #[command(subcommand)]
    Vit(vit_cmd::VitCmd),
    /// Discrete tokens: VQGAN (image -> 24x24 codebook indices -> image).
    #[command(subcommand)]
    Vq(vq_cmd::VqCmd),
    /// Continuous latents: diffusers AutoencoderKL (SD, SDXL, SD3, FLUX VAEs), AutoencoderKLFlux2 (FLUX.2) and AutoencoderDC (DC-AE, SANA's), as patch sequences.
    #[command(subcommand)]
    Vae(vae_cmd::VaeCmd),
    /// Inspect and convert weight files (safetensors, taming .ckpt).
    #[command(subcommand)]
    Weights(weights_cmd::WeightsCmd),
    /// A GPT over VQ token sequences (class token first): train, sample, complete, eval.
    #[command(subcommand)]
    Gpt(gpt_cmd::GptCmd),
    /// Tokens in the layouts other projects' training code reads (LlamaGen's code files)
    #[command(subcommand)]
    Export(export_cmd::ExportCmd),
    /// Serve the models over HTTP (JSON API under /v1/, web viewer at /).
    Serve(Box<serve_cmd::ServeArgs>),
}

/// `imgseq inspect | head`: output into a closed pipe ends the program quietly, as it does for
/// other Unix tools, instead of a panic in `println!` (Rust ignores SIGPIPE by default). Not for
/// the server, whose clients may hang up mid-answer.
fn quiet_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: restores one signal's default disposition, before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    imgseq_kernels::tune_allocator();
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(n) = cli.threads {
        if let Err(e) = check_threads(n) {
            eprintln!("error: {}", one_line(&e));
            return ExitCode::FAILURE;
        }
    }
    imgseq_core::pillow::set_exif_transpose(cli.exif_transpose);
    if !matches!(cli.cmd, Cmd::Serve(_)) {
        quiet_on_closed_pipe();
    }
    // Both rayon (our kernels) and candle's gemm read it; set once, before any thread starts.
    imgseq_kernels::settle_thread_count(cli.threads);
    let res = match cli.cmd {
        Cmd::Encode(a) => tokenizer_cmd::encode(&a),
        Cmd::Decode(a) => tokenizer_cmd::decode(&a),
        Cmd::Roundtrip(a) => tokenizer_cmd::roundtrip(&a),
        Cmd::Tokenize(a) => tokenize_cmd::tokenize(&a),
        Cmd::Detokenize(a) => tokenize_cmd::detokenize(&a),
        Cmd::Eval(a) => vq_eval_cmd::eval(&a),
        Cmd::Inspect(a) => tokenizer_cmd::inspect(&a),
        Cmd::Models { json } => tokenizer_cmd::models(json),
        Cmd::Vit(c) => vit_cmd::run(c),
        Cmd::Vq(c) => vq_cmd::run(c, matches.subcommand_matches("vq").expect("parsed `vq`")),
        Cmd::Vae(c) => vae_cmd::run(c),
        Cmd::Weights(c) => weights_cmd::run(c),
        Cmd::Gpt(c) => gpt_cmd::run(c),
        Cmd::Export(c) => export_cmd::run(c),
        Cmd::Serve(a) => serve_cmd::run(*a),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes joined by ": " on one line. A library setting (say `crop`) is
/// named by its flag (`--crop`): flags are named after the settings they set.
fn one_line(e: &anyhow::Error) -> String {
    let parts: Vec<String> = e
        .chain()
        .map(|cause| match cause.downcast_ref::<imgseq_core::Error>() {
            Some(imgseq_core::Error::Setting { name, value, msg }) => {
                format!("--{} {value} {msg}", name.replace('_', "-"))
            }
            _ => cause.to_string(),
        })
        .collect();
    parts.join(": ").replace('\n', " ")
}

/// `--threads` must be between 1 and 4 per core (at most 1024): more only costs memory and
/// start-up time (100,000 threads never finished starting).
fn check_threads(n: usize) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let max = (4 * cores).min(1024);
    if n == 0 || n > max {
        anyhow::bail!("--threads {n} must be between 1 and {max} (4 per core, {cores} cores)");
    }
    Ok(())
}
