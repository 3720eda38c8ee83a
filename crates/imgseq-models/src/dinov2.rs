//! DINOv2 (`imgseq-vit`'s [`imgseq_vit::dinov2`]): a `Dinov2Model` or
//! `Dinov2WithRegistersModel` folder, told by its `config.json` (`model_type` `dinov2` or
//! `dinov2_with_registers`). It reads its processor's pictures (224², from a shorter side of
//! 256) unless `--size` says otherwise (its positions resized to the grid); its output is
//! continuous: the last hidden state (through
//! `layernorm`), class token and registers first.

use crate::family::{Family, OpenOptions, Probe};
use crate::tower::{opened, refuse_options};
use crate::Opened;
use candle_core::Device;
use imgseq_core::{Error, Result};
use imgseq_vit::dinov2;
use imgseq_vit::tower::files_of;

/// DINOv2 backbones.
pub struct Dinov2;

impl Family for Dinov2 {
    fn name(&self) -> &'static str {
        "dinov2"
    }

    fn claims(&self, p: &Probe) -> bool {
        dinov2::is_dinov2_config_file(&files_of(p.source).1)
    }

    fn open(&self, p: &Probe, o: &OpenOptions) -> Result<Opened> {
        refuse_options(p, o, "DINOv2 model")?;
        let model = dinov2::load(p.source, &Device::Cpu)?;
        let patch = model.cfg.patch_size as u32;
        let pixels = dinov2::pixels(p.source, o.size)?;
        let size = pixels.size;
        if size < patch || size > 4096 {
            return Err(Error::invalid(format!(
                "{}: --size {size}: DINOv2 reads pictures of {patch} (its patch) to 4096 pixels",
                p.source.display()
            )));
        }
        opened(p, o, model, pixels)
    }
}
