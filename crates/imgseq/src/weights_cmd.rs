//! `imgseq weights ...` (owned by the VQGAN work): inspect and convert weight files.

use anyhow::Result;
use clap::Subcommand;
use imgseq_core::fsutil::Outputs;
use imgseq_models::files;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum WeightsCmd {
    /// List the tensors of a safetensors file or a PyTorch / Lightning `.ckpt` / `.pt`
    /// (names, dtypes, shapes, count, total parameters) and the tokenizer family their names
    /// belong to (taming VQGAN, LlamaGen VQ, diffusers VQModel, Janus VQ, AutoencoderKL,
    /// Open-MAGVIT2 LFQ; IBQ when its yaml is beside it as `NAME_model.yaml` or `model.yaml`).
    /// Checkpoints are read without executing any code.
    Inspect {
        /// A `.safetensors`, `.ckpt` or `.pt` file, or a diffusers model folder.
        file: PathBuf,
    },
    /// Convert a taming-transformers `.ckpt`, a LlamaGen VQ `.pt` / `model.safetensors`, a
    /// diffusers `VQModel` folder, a Janus VQ folder or an IBQ `.ckpt` (its EMA weights) to safetensors in imgseq's layout (model tensors only;
    /// `loss.*` and LlamaGen's `quantize.codebook_used` dropped) and write `config.json`
    /// (with the family's options) beside the output.
    Convert {
        /// The checkpoint (e.g. `last.ckpt`, `vq_ds16_c2i.pt`) or diffusers `vqvae/` folder.
        input: PathBuf,
        /// The model's model.yaml or config.json (default: the one beside the input).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Output `.safetensors` path; `config.json` goes into the same folder.
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        /// Store an l2 codebook normalised and drop `l2_norm` (same tokens; docs/vq-tokens.md).
        #[arg(long)]
        fold_l2_norm: bool,
        /// Also write taming's `model.yaml` beside the output.
        #[arg(long)]
        taming_yaml: bool,
    },
}

pub fn run(cmd: WeightsCmd) -> Result<()> {
    match cmd {
        WeightsCmd::Inspect { file } => inspect(file),
        WeightsCmd::Convert {
            input,
            config,
            output,
            fold_l2_norm,
            taming_yaml,
        } => {
            // Both outputs (the weights and config.json beside them) go through the one
            // output check: never an input, never a device, FIFO, link or folder.
            let mut outs = Outputs::new(files::convert_inputs(&input, config.as_deref()));
            let (cfg_out, yaml_out) = files::convert_outputs(&output);
            outs.check(&output)?;
            outs.check(&cfg_out)?;
            if taming_yaml {
                outs.check(&yaml_out)?;
            }
            // The converter writes both files (each atomically); should it fail after the
            // first, the guard removes what this command created.
            outs.make_parent(&output)?;
            let yaml = taming_yaml.then_some(&yaml_out);
            for p in [Some(&output), Some(&cfg_out), yaml].into_iter().flatten() {
                if std::fs::symlink_metadata(p).is_err() {
                    outs.record(p);
                }
            }
            let opts = files::ConvertOptions {
                fold_l2_norm,
                taming_yaml,
            };
            let (r, family) = files::convert(&input, config.as_deref(), &output, opts)?;
            outs.finish();
            println!(
                "wrote {} ({}: {} tensors, {} parameters; dropped {} training-only tensors{}) and {}",
                output.display(),
                family,
                r.written,
                r.params,
                r.dropped,
                if r.folded_l2_norm {
                    "; codebook l2-normalised, plain search"
                } else {
                    ""
                },
                r.config_path.display()
            );
            if let Some(y) = &r.yaml_path {
                println!("wrote {} (taming's config layout)", y.display());
            }
            Ok(())
        }
    }
}

fn inspect(file: PathBuf) -> Result<()> {
    use std::fmt::Write as _;
    let (s, family) = files::inspect(&file)?;
    let mut o = String::new();
    writeln!(o, "{}: {}", file.display(), s.format)?;
    if let Some(f) = family {
        writeln!(o, "  family: {f}")?;
    }
    for (k, v) in &s.scalars {
        writeln!(o, "  {k}: {v}")?;
    }
    if !s.top_level_keys.is_empty() {
        writeln!(o, "  top-level keys: {}", s.top_level_keys.join(", "))?;
    }
    let width = s.tensors.iter().map(|t| t.name.len()).max().unwrap_or(0);
    for t in &s.tensors {
        writeln!(o, "{:<width$}  {:<8}  {:?}", t.name, t.dtype, t.shape)?;
    }
    let total: usize = s.tensors.iter().map(|t| t.numel()).sum();
    let model: usize = s
        .tensors
        .iter()
        .filter(|t| !t.name.starts_with("loss."))
        .map(|t| t.numel())
        .sum();
    writeln!(
        o,
        "{} tensors, {total} parameters ({model} outside loss.*)",
        s.tensors.len()
    )?;
    // A closed pipe (`| head`) is not an error.
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(o.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}
