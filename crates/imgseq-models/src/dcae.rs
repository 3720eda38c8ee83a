//! DC-AE, diffusers' `AutoencoderDC` (`imgseq-vqgan`'s [`imgseq_vqgan::dcae`]: SANA's
//! deep-compression autoencoder), from a `save_pretrained` folder told by its `config.json`
//! (`_class_name` `AutoencoderDC`). Continuous latents, as maps or p×p patch tokens.

use crate::family::{refuse_set_flags, Family, OpenOptions, Probe};
use crate::Opened;
use candle_core::Device;
use imgseq_core::Result;
use imgseq_kernels::PrecisionRequest;
use imgseq_vqgan::dcae::{self, tokenizer::DEFAULT_SIZE, DcaeTokenizer};

/// DC-AE.
pub struct AutoencoderDc;

impl Family for AutoencoderDc {
    fn name(&self) -> &'static str {
        dcae::NAME
    }

    fn claims(&self, p: &Probe) -> bool {
        let config = p
            .options
            .config
            .clone()
            .unwrap_or_else(|| dcae::config_beside(p.source));
        dcae::is_dcae_config_file(&config)
    }

    fn open(&self, p: &Probe, o: &OpenOptions) -> Result<Opened> {
        o.refuse_tower_options(dcae::LABEL)?;
        refuse_set_flags(
            p.source,
            &format!("an {}", dcae::LABEL),
            "a deterministic f32 encoder read from its config.json, untiled",
            &[
                ("--preset", o.preset.is_some()),
                ("--sample", o.sample_seed.is_some()),
                ("--tile", o.tile.is_some()),
                ("--precision bf16", o.precision == PrecisionRequest::Bf16),
                ("--bf16-encoder", o.bf16_encoder),
                ("--raw", o.raw),
            ],
        )?;
        let l = dcae::load(p.source, o.config.as_deref(), &Device::Cpu)?;
        let t = DcaeTokenizer::new(l.model, o.size.unwrap_or(DEFAULT_SIZE), o.patch)?;
        let files = vec![l.weights.clone(), l.config];
        Ok(Opened::new(Box::new(t), p.source, &l.weights, files))
    }
}
