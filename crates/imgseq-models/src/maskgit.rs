//! MaskGIT's VQGAN as bytedance/1d-tokenizer ships it (`imgseq-vqgan`'s
//! [`imgseq_vqgan::maskgit`]): its plain state dict (`maskgit-vqgan-imagenet-f16-256.bin`), told
//! by its decoder's `upsample_conv` and the absence of taming's `quant_conv`.

use crate::family::{Family, OpenOptions, Probe};
use crate::Opened;
use candle_core::Device;
use imgseq_core::{Error, Result};
use imgseq_kernels::PrecisionRequest;
use imgseq_vqgan::maskgit::{self, MaskGitTokenizer};

/// MaskGIT-VQGAN.
pub struct MaskGit;

impl Family for MaskGit {
    fn name(&self) -> &'static str {
        maskgit::NAME
    }

    fn claims(&self, p: &Probe) -> bool {
        maskgit::is_maskgit_file(p.source)
    }

    fn open(&self, p: &Probe, o: &OpenOptions) -> Result<Opened> {
        o.refuse_latent_options(maskgit::LABEL)?;
        o.refuse_tower_options(maskgit::LABEL)?;
        if o.precision == PrecisionRequest::Bf16 || o.bf16_encoder || o.raw || o.config.is_some() {
            return Err(Error::invalid(format!(
                "{}: a {} runs its f32 weights as the file describes them (no --precision \
                 bf16, --bf16-encoder, --raw or --config)",
                p.source.display(),
                maskgit::LABEL
            )));
        }
        let w = p.source;
        let t = MaskGitTokenizer::new(maskgit::load(w, &Device::Cpu)?, o.size)?;
        Ok(Opened::new(Box::new(t), w, w, vec![w.to_path_buf()]))
    }
}
