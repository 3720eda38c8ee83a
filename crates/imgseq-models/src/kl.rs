//! diffusers' `AutoencoderKL` (`imgseq-vqgan`'s [`imgseq_vqgan::kl`]): the SD, SDXL, SD3 and
//! FLUX VAEs, and FLUX.2's `AutoencoderKLFlux2` (its config names the class), from a `vae/`
//! folder or a single file under diffusers' or LDM's names. Its
//! output is continuous: the posterior mean's scaled latents, one token per latent cell.

use crate::family::{Family, OpenOptions, Probe};
use crate::Opened;
use candle_core::Device;
use imgseq_core::{Error, Result};
use imgseq_kernels::PrecisionRequest;
use imgseq_vqgan::kl::{is_kl_file, load_kl, Draw, KlPreset, KlTokenizer};
use imgseq_vqgan::load::resolve_weights;

/// Input side when none is given (the SD VAEs' 256² evaluation protocol).
pub const DEFAULT_SIZE: u32 = 256;

/// The KL VAEs.
pub struct AutoencoderKl;

impl Family for AutoencoderKl {
    fn name(&self) -> &'static str {
        "autoencoder_kl"
    }

    /// Files whose tensors are an AutoencoderKL's, or any source opened with a preset.
    fn claims(&self, p: &Probe) -> bool {
        p.options.preset.is_some()
            || resolve_weights(p.source).is_ok_and(|f| matches!(is_kl_file(&f), Ok(Some(_))))
    }

    fn open(&self, p: &Probe, o: &OpenOptions) -> Result<Opened> {
        o.refuse_tower_options("VAE")?;
        if o.precision == PrecisionRequest::Bf16 || o.bf16_encoder || o.raw {
            return Err(Error::invalid(format!(
                "{}: an AutoencoderKL runs its f32 weights only (no --precision bf16, \
                 --bf16-encoder or --raw)",
                p.source.display()
            )));
        }
        let file = resolve_weights(p.source)?;
        let preset = o.preset.as_deref().map(KlPreset::from_name).transpose()?;
        let model = load_kl(p.source, o.config.as_deref(), preset, &Device::Cpu)?;
        let mut t = KlTokenizer::new(model, o.size.unwrap_or(DEFAULT_SIZE), o.patch)?;
        t.draw = o.sample_seed.map_or(Draw::Mean, Draw::Sample);
        t.tile = o.tile;
        t.preset = o.preset.clone();
        let mut files = vec![file.clone()];
        files.extend(o.config.clone());
        Ok(Opened::new(Box::new(t), p.source, &file, files))
    }
}
