//! TiTok's 1-D tokenizer (`imgseq-vqgan`'s [`imgseq_vqgan::titok`]): a `TiTok.save_pretrained`
//! folder or a state dict file, told by its config (`config.json` beside it, or the JSON/YAML
//! `--config` named) having `model.vq_model.vit_enc_model_size`.

use crate::family::{Family, OpenOptions, Probe};
use crate::Opened;
use candle_core::Device;
use imgseq_core::{Error, Result};
use imgseq_kernels::PrecisionRequest;
use imgseq_vqgan::titok::{self, TitokTokenizer};

/// TiTok.
pub struct Titok;

impl Family for Titok {
    fn name(&self) -> &'static str {
        titok::NAME
    }

    fn claims(&self, p: &Probe) -> bool {
        let config = p
            .options
            .config
            .clone()
            .unwrap_or_else(|| titok::config_beside(p.source));
        titok::is_titok_config_file(&config)
    }

    fn open(&self, p: &Probe, o: &OpenOptions) -> Result<Opened> {
        o.refuse_latent_options(titok::LABEL)?;
        o.refuse_tower_options(titok::LABEL)?;
        if o.precision == PrecisionRequest::Bf16 || o.bf16_encoder || o.raw {
            return Err(Error::invalid(format!(
                "{}: a {} runs its f32 weights (no --precision bf16, --bf16-encoder or --raw)",
                p.source.display(),
                titok::LABEL
            )));
        }
        let l = titok::load(p.source, o.config.as_deref(), &Device::Cpu)?;
        let t = TitokTokenizer::new(l.model, o.size)?;
        let files = vec![l.weights.clone(), l.config];
        Ok(Opened::new(Box::new(t), p.source, &l.weights, files))
    }
}
