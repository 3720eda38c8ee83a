//! `--precision f32|bf16|auto` (and `--verbose`), shared by the vq and vit commands that run a
//! model.

use clap::Args;
use imgseq_kernels::{PrecisionChoice, PrecisionRequest};

/// The arithmetic of the model's conv and linear layers.
#[derive(Args, Clone, Copy, Debug)]
pub struct PrecisionArg {
    /// Arithmetic of the conv and linear layers (docs/performance.md, "Precision: f32, bf16, auto", has auto's rule).
    #[arg(long, default_value_t = PrecisionRequest::Auto, value_name = "f32|bf16|auto")]
    pub precision: PrecisionRequest,
    /// Say on stderr which precision runs and why.
    #[arg(long)]
    pub verbose: bool,
}

impl PrecisionArg {
    /// Says (with --verbose) which precision runs and why.
    pub fn report(&self, choice: &PrecisionChoice) {
        if self.verbose {
            eprintln!("precision: {choice}");
        }
    }
}
