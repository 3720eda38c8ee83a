//! `--precision f32|bf16|auto` (and `--verbose`), shared by the vq and vit commands that run a
//! model.

use clap::Args;
use imgseq_kernels::{PrecisionChoice, PrecisionRequest};

/// The arithmetic of the model's conv and linear layers.
#[derive(Args, Clone, Copy, Debug)]
pub struct PrecisionArg {
    /// Arithmetic of the model's layers: f32; bf16 (bf16 weights and activations, f32 sums:
    /// Intel AMX tiles for convs where the CPU has them, else AVX512-BF16's vdpbf16ps, else a
    /// slow emulation; the ViT's linear layers, the VQGAN's decoder — its encoder stays f32, so
    /// tokens are f32's); auto: bf16 where the CPU runs it faster than f32 (AMD Zen 4 yes;
    /// Intel with AMX for the VQGAN's convs; Intel's vdpbf16ps no: half f32's multiply-adds
    /// per cycle) and the model's check on built-in pictures agrees
    /// with f32, else f32 (the same choice on every run; on large models f32 Winograd can still
    /// be the faster: see README). Norms, softmax, attention and the codebook search stay f32.
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
