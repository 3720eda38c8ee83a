//! `imgseq weights ...` (owned by the VQGAN work): inspect and convert weight files.

use anyhow::Result;
use clap::Subcommand;
use imgseq_core::fsutil::Outputs;
use imgseq_vqgan::load;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum WeightsCmd {
    /// List the tensors of a safetensors file or a PyTorch / Lightning `.ckpt` (names, dtypes,
    /// shapes, count, total parameters). Checkpoints are read without executing any code.
    Inspect {
        /// A `.safetensors` or `.ckpt` file.
        file: PathBuf,
    },
    /// Convert a taming-transformers `.ckpt` to safetensors (model tensors only, `loss.*`
    /// dropped) and write `config.json` beside the output.
    Convert {
        /// The taming checkpoint (e.g. `last.ckpt`).
        input: PathBuf,
        /// taming's `model.yaml` or our `config.json` (default: one of them beside the input).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Output `.safetensors` path; `config.json` goes into the same folder.
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
}

pub fn run(cmd: WeightsCmd) -> Result<()> {
    match cmd {
        WeightsCmd::Inspect { file } => inspect(file),
        WeightsCmd::Convert {
            input,
            config,
            output,
        } => {
            // Both outputs (the weights and config.json beside them) go through the one
            // output check: never an input, never a device, FIFO, link or folder.
            let mut outs = Outputs::new([Some(&input), config.as_ref()].into_iter().flatten());
            if config.is_none() {
                if let Ok(c) = load::default_config_path(&input) {
                    outs.add_input(c);
                }
            }
            let cfg_out = output
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."))
                .join("config.json");
            outs.check(&output)?;
            outs.check(&cfg_out)?;
            // The converter writes both files (each atomically); should it fail after the
            // first, the guard removes what this command created.
            for p in [&output, &cfg_out] {
                if std::fs::symlink_metadata(p).is_err() {
                    outs.record(p);
                }
            }
            let r = load::convert_checkpoint(&input, config.as_deref(), &output)?;
            outs.finish();
            println!(
                "wrote {} ({} tensors, {} parameters; dropped {} training-only tensors) and {}",
                output.display(),
                r.written,
                r.params,
                r.dropped,
                r.config_path.display()
            );
            Ok(())
        }
    }
}

fn inspect(file: PathBuf) -> Result<()> {
    use std::fmt::Write as _;
    let s = load::inspect(&file)?;
    let mut o = String::new();
    writeln!(o, "{}: {}", file.display(), s.format)?;
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
