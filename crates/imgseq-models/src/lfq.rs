//! Open-MAGVIT2's lookup-free quantization tokenizer (`imgseq-lfq`): its Lightning `.ckpt`
//! (+ yaml), the EMA weights unless `raw`.

use crate::family::{Family, OpenOptions, Probe};
use crate::Opened;
use imgseq_core::{Error, Result};
use imgseq_kernels::PrecisionRequest;
use imgseq_lfq::{is_lfq_checkpoint, load_model, LfqTokenizer, WeightSet};

/// Open-MAGVIT2.
pub struct OpenMagvit2;

impl Family for OpenMagvit2 {
    fn name(&self) -> &'static str {
        imgseq_lfq::NAME
    }

    fn claims(&self, p: &Probe) -> bool {
        is_lfq_checkpoint(p.source)
    }

    fn open(&self, p: &Probe, o: &OpenOptions) -> Result<Opened> {
        let refuse = |flag: &str| {
            Err(Error::invalid(format!(
                "{flag}: {} models run in f32 only",
                imgseq_lfq::FAMILY
            )))
        };
        o.refuse_latent_options(imgseq_lfq::FAMILY)?;
        o.refuse_tower_options(imgseq_lfq::FAMILY)?;
        if o.precision == PrecisionRequest::Bf16 {
            return refuse("--precision bf16");
        }
        if o.bf16_encoder {
            return refuse("--bf16-encoder");
        }
        let w = p.source;
        let config = o
            .config
            .clone()
            .or_else(|| imgseq_lfq::load::default_config_path(w));
        let which = if o.raw {
            WeightSet::Raw
        } else {
            WeightSet::Default
        };
        let t = LfqTokenizer::new(load_model(w, config.as_deref(), which)?, o.size)?;
        let c = t.model.config();
        let note = format!(
            "{}: {} (f{}, 2^{} codes, {} weights{})",
            w.display(),
            imgseq_lfq::FAMILY,
            c.downsample_factor(),
            c.bits(),
            if t.model.ema { "EMA" } else { "raw" },
            if config.is_none() {
                "; settings read off the weights"
            } else {
                ""
            }
        );
        let mut files = vec![w.to_path_buf()];
        files.extend(config);
        let mut opened = Opened::new(Box::new(t), w, w, files);
        opened.notes.push(note);
        Ok(opened)
    }
}
