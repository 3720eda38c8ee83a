//! SigLIP's vision tower (`imgseq-vit`'s [`imgseq_vit::siglip`]): a `SiglipVisionModel` folder
//! or a full SigLIP checkpoint, told by its `config.json` (`model_type` `siglip_vision_model`
//! or `siglip`). Its output is continuous: the last hidden state (through `post_layernorm`),
//! every token a patch.

use crate::family::{Family, OpenOptions, Probe};
use crate::tower::{opened, refuse_options, refuse_other_size};
use crate::Opened;
use candle_core::Device;
use imgseq_core::Result;
use imgseq_vit::siglip;
use imgseq_vit::tower::files_of;

/// SigLIP vision towers.
pub struct Siglip;

const LABEL: &str = "SigLIP vision tower";

impl Family for Siglip {
    fn name(&self) -> &'static str {
        "siglip"
    }

    fn claims(&self, p: &Probe) -> bool {
        siglip::is_siglip_config_file(&files_of(p.source).1)
    }

    fn open(&self, p: &Probe, o: &OpenOptions) -> Result<Opened> {
        refuse_options(p, o, LABEL)?;
        let model = siglip::load(p.source, &Device::Cpu)?;
        let pixels = siglip::pixels(&model.cfg, p.source)?;
        refuse_other_size(p, o, pixels.size, LABEL)?;
        opened(p, o, model, pixels)
    }
}
