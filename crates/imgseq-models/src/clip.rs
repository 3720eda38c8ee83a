//! CLIP's vision tower (`imgseq-vit`'s [`imgseq_vit::clip`]): a `CLIPVisionModel` folder or a
//! full CLIP checkpoint, told by its `config.json` (`model_type` `clip_vision_model` or `clip`).
//! Its output is continuous: the last hidden state, class token first.

use crate::family::{Family, OpenOptions, Probe};
use crate::Opened;
use candle_core::Device;
use imgseq_core::{Error, Result};
use imgseq_kernels::PrecisionRequest;
use imgseq_vit::clip::{self, ClipTower};
use std::path::{Path, PathBuf};

/// CLIP vision towers.
pub struct Clip;

/// The `config.json` of a source: inside a folder, beside a file.
fn config_of(source: &Path) -> PathBuf {
    if source.is_dir() {
        source.join("config.json")
    } else {
        source.with_file_name("config.json")
    }
}

impl Family for Clip {
    fn name(&self) -> &'static str {
        "clip"
    }

    fn claims(&self, p: &Probe) -> bool {
        clip::is_clip_config_file(&config_of(p.source))
    }

    fn open(&self, p: &Probe, o: &OpenOptions) -> Result<Opened> {
        o.refuse_latent_options("CLIP vision tower")?;
        if o.precision == PrecisionRequest::Bf16 || o.bf16_encoder || o.raw || o.config.is_some() {
            return Err(Error::invalid(format!(
                "{}: a CLIP vision tower runs its f32 weights with its own config.json (no \
                 --precision bf16, --bf16-encoder, --raw or --config)",
                p.source.display()
            )));
        }
        let model = clip::load(p.source, &Device::Cpu)?;
        let side = model.cfg.image_size as u32;
        if let Some(s) = o.size.filter(|&s| s != side) {
            return Err(Error::invalid(format!(
                "{}: the tower reads {side}×{side} pictures (its image_size); --size {s} \
                 would need interpolated positions, which imgseq does not do for CLIP yet",
                p.source.display()
            )));
        }
        let weights = if p.source.is_dir() {
            p.source.join("model.safetensors")
        } else {
            p.source.to_path_buf()
        };
        let t = ClipTower {
            model,
            layer: o.layer.unwrap_or(-1),
            patches_only: o.patches_only,
        };
        t.check_layer()?;
        let files = vec![weights.clone(), config_of(p.source)];
        Ok(Opened::new(Box::new(t), p.source, &weights, files))
    }
}
