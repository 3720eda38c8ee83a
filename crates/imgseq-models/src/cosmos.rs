//! NVIDIA's Cosmos image tokenizers (`imgseq-vqgan`'s [`imgseq_vqgan::cosmos`]): a released
//! folder (`nvidia/Cosmos-Tokenizer-DI16x16` and the like) with `encoder.jit` and
//! `decoder.jit`, or one of those files; told by the archives' names, read weights-only (the
//! TorchScript code is never run). DI gives FSQ tokens, CI continuous latents.

use crate::family::{refuse_set_flags, Family, OpenOptions, Probe};
use crate::Opened;
use candle_core::Device;
use imgseq_core::Result;
use imgseq_kernels::PrecisionRequest;
use imgseq_vqgan::cosmos::{self, tokenizer::DEFAULT_SIZE, CosmosTokenizer};

/// The Cosmos image tokenizers.
pub struct Cosmos;

impl Family for Cosmos {
    fn name(&self) -> &'static str {
        cosmos::NAME
    }

    fn claims(&self, p: &Probe) -> bool {
        cosmos::is_cosmos_source(p.source)
    }

    fn open(&self, p: &Probe, o: &OpenOptions) -> Result<Opened> {
        o.refuse_tower_options(cosmos::LABEL)?;
        refuse_set_flags(
            p.source,
            &format!("a {}", cosmos::LABEL),
            "f32 arithmetic on the archives' weights, its settings read off them, a deterministic \
             encoder, untiled",
            &[
                ("--config", o.config.is_some()),
                ("--preset", o.preset.is_some()),
                ("--sample", o.sample_seed.is_some()),
                ("--tile", o.tile.is_some()),
                ("--precision bf16", o.precision == PrecisionRequest::Bf16),
                ("--bf16-encoder", o.bf16_encoder),
                ("--raw", o.raw),
            ],
        )?;
        let l = cosmos::load(p.source, &Device::Cpu)?;
        let t = CosmosTokenizer::new(l.model, o.size.unwrap_or(DEFAULT_SIZE), o.patch)?;
        let files = vec![l.encoder.clone(), l.decoder];
        Ok(Opened::new(Box::new(t), p.source, &l.encoder, files))
    }
}
