//! VAR's multi-scale VQVAE (`imgseq-vqgan`'s [`imgseq_vqgan::var`]): its plain state dict
//! (`vae_ch160v4096z32.pth`), told by its φ convs (`quantize.quant_resi.*`).

use crate::family::{Family, OpenOptions, Probe};
use crate::Opened;
use candle_core::Device;
use imgseq_core::{Error, Result};
use imgseq_kernels::PrecisionRequest;
use imgseq_vqgan::var::{self, VarTokenizer};

/// VAR.
pub struct Var;

impl Family for Var {
    fn name(&self) -> &'static str {
        var::NAME
    }

    fn claims(&self, p: &Probe) -> bool {
        var::is_var_file(p.source)
    }

    fn open(&self, p: &Probe, o: &OpenOptions) -> Result<Opened> {
        o.refuse_latent_options(var::LABEL)?;
        o.refuse_tower_options(var::LABEL)?;
        if o.precision == PrecisionRequest::Bf16 || o.bf16_encoder || o.raw || o.config.is_some() {
            return Err(Error::invalid(format!(
                "{}: a {} runs its f32 weights as the file describes them (no --precision \
                 bf16, --bf16-encoder, --raw or --config)",
                p.source.display(),
                var::LABEL
            )));
        }
        let w = p.source;
        let t = VarTokenizer::new(var::load(w, &Device::Cpu)?, o.size)?;
        Ok(Opened::new(Box::new(t), w, w, vec![w.to_path_buf()]))
    }
}
