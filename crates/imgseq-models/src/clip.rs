//! CLIP's vision tower (`imgseq-vit`'s [`imgseq_vit::clip`]): a `CLIPVisionModel` folder or a
//! full CLIP checkpoint, told by its `config.json` (`model_type` `clip_vision_model` or `clip`).
//! Its output is continuous: the last hidden state, class token first.

use crate::family::{Family, OpenOptions, Probe};
use crate::tower::{opened, refuse_options, refuse_other_size};
use crate::Opened;
use candle_core::Device;
use imgseq_core::Result;
use imgseq_vit::clip;
use imgseq_vit::tower::files_of;

/// CLIP vision towers.
pub struct Clip;

const LABEL: &str = "CLIP vision tower";

impl Family for Clip {
    fn name(&self) -> &'static str {
        "clip"
    }

    fn claims(&self, p: &Probe) -> bool {
        clip::is_clip_config_file(&files_of(p.source).1)
    }

    fn open(&self, p: &Probe, o: &OpenOptions) -> Result<Opened> {
        refuse_options(p, o, LABEL)?;
        let model = clip::load(p.source, &Device::Cpu)?;
        let pixels = clip::pixels(&model.cfg, p.source)?;
        refuse_other_size(p, o, pixels.size, LABEL)?;
        opened(p, o, model, pixels)
    }
}
