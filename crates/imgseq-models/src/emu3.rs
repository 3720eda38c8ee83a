//! Emu3's VQVAE (`imgseq-vqgan`'s [`imgseq_vqgan::emu3`]): an `Emu3VQVAE.save_pretrained`
//! folder or a full Emu3 model's file, told by its `config.json` (`model_type` `emu3_vqgan` or
//! `emu3`).

use crate::family::{Family, OpenOptions, Probe};
use crate::Opened;
use candle_core::Device;
use imgseq_core::{Error, Result};
use imgseq_kernels::PrecisionRequest;
use imgseq_vqgan::emu3::{self, tokenizer::DEFAULT_SIZE, Emu3Tokenizer};

/// Emu3.
pub struct Emu3;

impl Family for Emu3 {
    fn name(&self) -> &'static str {
        emu3::NAME
    }

    fn claims(&self, p: &Probe) -> bool {
        let config = p
            .options
            .config
            .clone()
            .unwrap_or_else(|| emu3::config_beside(p.source));
        emu3::is_emu3_config_file(&config)
    }

    fn open(&self, p: &Probe, o: &OpenOptions) -> Result<Opened> {
        o.refuse_latent_options(emu3::LABEL)?;
        o.refuse_tower_options(emu3::LABEL)?;
        if o.precision == PrecisionRequest::Bf16 || o.bf16_encoder || o.raw {
            return Err(Error::invalid(format!(
                "{}: an {} runs its f32 weights (no --precision bf16, --bf16-encoder or --raw)",
                p.source.display(),
                emu3::LABEL
            )));
        }
        let l = emu3::load(p.source, o.config.as_deref(), &Device::Cpu)?;
        let t = Emu3Tokenizer::new(l.model, o.size.unwrap_or(DEFAULT_SIZE))?;
        let files = vec![l.weights.clone(), l.config];
        Ok(Opened::new(Box::new(t), p.source, &l.weights, files))
    }
}
