//! What the vision-tower families ([`crate::clip`], [`crate::siglip`], [`crate::dinov2`])
//! share when they open a model: the options a tower refuses, its precision and the
//! [`Opened`] of a tower.
//!
//! `--precision` for a tower: `f32`; `bf16` (every linear layer and the patch projection on
//! bf16 weights packed once, f32 sums; the f32 weights let go); `auto` (the default) keeps
//! f32, on every CPU: a tower's output is the features users store, which bf16 changes
//! ([`Tower::choose_precision`]).

use crate::family::{OpenOptions, Probe};
use crate::Opened;
use imgseq_core::{Error, Result};
use imgseq_vit::tower::{files_of, Tower, VisionModel};

/// Refuses what a tower (named `label`) does not do: the continuous-latent options, a bf16
/// encoder apart from its precision, EMA weights and a config other than its own
/// `config.json` (one line).
pub(crate) fn refuse_options(p: &Probe, o: &OpenOptions, label: &str) -> Result<()> {
    o.refuse_latent_options(label)?;
    if o.bf16_encoder || o.raw || o.config.is_some() {
        return Err(Error::invalid(format!(
            "{}: a {label} runs with its own config.json, in the arithmetic --precision says \
             (no --bf16-encoder, --raw or --config)",
            p.source.display()
        )));
    }
    Ok(())
}

/// Refuses an input side other than `side`, the only one the tower (named `label`) reads.
pub(crate) fn refuse_other_size(p: &Probe, o: &OpenOptions, side: u32, label: &str) -> Result<()> {
    match o.size.filter(|&s| s != side) {
        Some(s) => Err(Error::invalid(format!(
            "{}: the {label} reads {side}×{side} pictures (its image_size); --size {s} would \
             need interpolated positions, which imgseq does for DINOv2 only",
            p.source.display()
        ))),
        None => Ok(()),
    }
}

/// The tower of the model at `p` with the options' layer choice (a layer it lacks refused),
/// in the precision `--precision` resolves to.
pub(crate) fn opened<M: VisionModel + 'static>(
    p: &Probe,
    o: &OpenOptions,
    model: M,
    pixels: imgseq_vit::tower::Pixels,
) -> Result<Opened> {
    let mut t = Tower {
        model,
        layer: o.layer,
        patches_only: o.patches_only,
        pooled: o.pooled,
        pixels,
    };
    t.check_layer()?;
    let precision = t.choose_precision(o.precision).map_err(|e| {
        Error::invalid(format!("{}: cannot set precision: {e}", p.source.display()))
    })?;
    let (weights, config) = files_of(p.source);
    let mut files = vec![weights.clone(), config];
    let processor = imgseq_vit::processor::processor_file(p.source);
    if processor.is_file() {
        files.push(processor);
    }
    let mut opened = Opened::new(Box::new(t), p.source, &weights, files);
    opened.precision = Some(precision);
    Ok(opened)
}
