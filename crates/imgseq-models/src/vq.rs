//! The VQ families of `imgseq-vqgan` — taming, LlamaGen, diffusers `VQModel`, Janus, IBQ —
//! one network told apart by their configs and weight names ([`imgseq_vqgan::family`]); the
//! family that takes whatever no other claims.

use crate::family::{Family, OpenOptions, Probe};
use crate::Opened;
use candle_core::Device;
use imgseq_core::{Error, Result};
use imgseq_kernels::check_cache::{check_key, CheckCache};
use imgseq_kernels::precision::Bf16Model;
use imgseq_kernels::PrecisionChoice;
use imgseq_lfq::WeightSet;
use imgseq_vqgan::load::default_config_path;
use imgseq_vqgan::load::load_model_with;
use imgseq_vqgan::{VqConfig, VqModel, VqTokenizer};
use std::path::PathBuf;

/// Side of colour models' inputs when no size is given (gray models read their training
/// resolution): the released taming and LlamaGen models' 384² protocol.
pub const DEFAULT_SIZE: u32 = 384;

/// The input side for `cfg` when `size` is not given: [`DEFAULT_SIZE`] for colour models,
/// the training resolution (`ddconfig.resolution`) for gray ones.
pub fn default_size(cfg: &VqConfig, size: Option<u32>) -> u32 {
    size.unwrap_or(if cfg.ddconfig.in_channels == 1 {
        cfg.ddconfig.resolution as u32
    } else {
        DEFAULT_SIZE
    })
}

/// The VQ families.
pub struct Vq;

impl Family for Vq {
    fn name(&self) -> &'static str {
        "vq"
    }

    fn claims(&self, _: &Probe) -> bool {
        true
    }

    fn open(&self, p: &Probe, o: &OpenOptions) -> Result<Opened> {
        o.refuse_latent_options("VQ model")?;
        o.refuse_tower_options("VQ model")?;
        let loaded = load(p, o)?;
        let size = default_size(loaded.model.config(), o.size);
        let tok = VqTokenizer::new(loaded.model, size)?;
        let weight_set = loaded.weight_set;
        let mut opened = Opened::new(Box::new(tok), p.source, &loaded.weights, loaded.files);
        opened.weight_set = weight_set;
        opened.precision = Some(loaded.precision);
        opened.notes = loaded.notes;
        Ok(opened)
    }
}

/// A VQ model as loaded, with the files it came from and what the loader has to say.
pub struct LoadedVq {
    pub model: VqModel,
    /// The weights file (the folder's file for a folder source).
    pub weights: PathBuf,
    /// Weights and config files read.
    pub files: Vec<PathBuf>,
    pub precision: PrecisionChoice,
    /// `EMA weights` / `raw weights` for a Lightning checkpoint with EMA copies (IBQ).
    pub weight_set: Option<String>,
    pub notes: Vec<String>,
}

/// The VQ model at `p` with `o`'s config, precision and bf16 encoder (the model itself, for
/// the commands that run its layers one by one).
pub fn load(p: &Probe, o: &OpenOptions) -> Result<LoadedVq> {
    // A LlamaGen `.pt` needs no config (its weights describe it); a diffusers folder has
    // its config.json inside (the source may name the folder).
    let file = imgseq_vqgan::load::resolve_weights(p.source)?;
    let config = match &o.config {
        Some(c) => Some(c.clone()),
        None => default_config_path(&file).ok(),
    };
    let mut files = vec![file.clone()];
    // A preset's name (`--config ibq_16384`) is no file.
    files.extend(config.clone().filter(|c| c.is_file()));
    let which = if o.raw {
        WeightSet::Raw
    } else {
        WeightSet::Default
    };
    let mut model =
        load_model_with(&file, config.as_deref(), which, &Device::Cpu).map_err(|e| {
            match (&config, e) {
                (None, Error::Invalid(msg)) if !o.raw => {
                    Error::invalid(format!("{msg}; pass --config"))
                }
                (_, e) => e,
            }
        })?;
    let cannot = |what: &'static str| {
        let f = file.display().to_string();
        move |e: Error| Error::invalid(format!("{f}: cannot {what}: {e}"))
    };
    // `auto`'s agreement check, remembered per model files and CPU kind across runs.
    let cache = CheckCache::user();
    let key = check_key(
        "vq decode check",
        &files.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
    );
    let precision = model
        .choose_precision_remembered(o.precision, cache.as_ref().zip(key.as_deref()))
        .map_err(cannot("set precision"))?;
    let mut notes = Vec::new();
    if o.bf16_encoder {
        let (equal, of) = model
            .use_bf16_encoder()
            .map_err(cannot("run the encoder in bf16"))?;
        notes.push(format!(
            "encoder: bf16 (--bf16-encoder): {equal} of {of} tokens of the built-in check \
             picture equal the f32 encoder's ({:.1}%)",
            100.0 * equal as f64 / of.max(1) as f64
        ));
    }
    let weight_set = (model.config().variant.family == imgseq_vqgan::Family::Ibq).then(|| {
        let ema = which.ema(has_ema_copies(&file));
        format!("{} weights", if ema { "EMA" } else { "raw" })
    });
    Ok(LoadedVq {
        model,
        weights: file,
        files,
        precision,
        weight_set,
        notes,
    })
}

/// Whether a weights file holds `LitEma` copies (only its header or pickle is read).
fn has_ema_copies(file: &std::path::Path) -> bool {
    imgseq_vqgan::load::inspect(file).is_ok_and(|s| {
        s.tensors
            .iter()
            .any(|t| t.name.starts_with(imgseq_lfq::load::EMA_PREFIX))
    })
}
