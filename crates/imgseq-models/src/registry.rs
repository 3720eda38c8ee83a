//! The families and the one function that opens a model with the right one.

use crate::family::{Family, OpenOptions, Probe};
use crate::Opened;
use imgseq_core::shipped::default_model;
use imgseq_core::{Error, Result};
use std::path::{Path, PathBuf};

/// Every family, asked in this order whether it reads a source; the last one (the VQ
/// families) takes whatever no other claims and says why it cannot read it.
pub static FAMILIES: &[&dyn Family] = &[
    &crate::lfq::OpenMagvit2,
    &crate::var::Var,
    &crate::clip::Clip,
    &crate::siglip::Siglip,
    &crate::dinov2::Dinov2,
    &crate::emu3::Emu3,
    &crate::maskgit::MaskGit,
    &crate::titok::Titok,
    &crate::dcae::AutoencoderDc,
    &crate::cosmos::Cosmos,
    &crate::kl::AutoencoderKl,
    &crate::vq::Vq,
];

/// The tokenizer of the model at `source` (a weights file or a model folder, a Hub model —
/// `hf:ORG/NAME[@REVISION][/PATH]`, or `ORG/NAME` where no such local path exists — or a
/// [`crate::catalogue`] name such as `llamagen-vq16`), by the
/// first of [`FAMILIES`] that claims it. A Hub model's files are fetched into the shared cache
/// first ([`crate::hub`]); its description then names it `hf:ORG/NAME@COMMIT[/PATH]`.
pub fn open(source: &Path, o: &OpenOptions) -> Result<Opened> {
    // A catalogue name whose checkpoint ships without a config is read with the family's
    // published one, unless the user names a config.
    let named = crate::hub::catalogue_entry(source);
    if let Some(e) = named.filter(|e| !e.on_hub()) {
        return Err(Error::invalid(e.elsewhere()));
    }
    if let Some(src) = crate::hub::source_of(source) {
        let (local, recorded) = crate::hub::fetch(&src?)?;
        let with_config;
        let o = match named.and_then(|e| e.config) {
            Some(c) if o.config.is_none() => {
                with_config = OpenOptions {
                    config: Some(PathBuf::from(c)),
                    ..o.clone()
                };
                &with_config
            }
            _ => o,
        };
        let mut t = open(&local, o)?;
        t.source = PathBuf::from(recorded);
        return Ok(t);
    }
    if let Err(e) = std::fs::symlink_metadata(source) {
        return Err(Error::io(source, e));
    }
    let p = Probe { source, options: o };
    let family = FAMILIES
        .iter()
        .find(|f| f.claims(&p))
        .unwrap_or(&FAMILIES[FAMILIES.len() - 1]);
    family.open(&p, o)
}

/// The folder of the shipped default tokenizer under `weights/`.
pub const DEFAULT_TOKENIZER: &str = "vqgan";

/// The shipped default tokenizer's weights, `weights/vqgan/model.safetensors` (found as every
/// shipped model is: `$IMGSEQ_WEIGHTS_DIR`, beside the executable, the source tree).
pub fn default_source() -> Result<PathBuf> {
    let w = default_model(DEFAULT_TOKENIZER)
        .ok()
        .map(|d| tidy(&d.join("model.safetensors")))
        .filter(|w| w.is_file());
    w.ok_or_else(|| {
        let looked = match std::env::var_os("IMGSEQ_WEIGHTS_DIR") {
            Some(d) if !d.is_empty() => format!(" in $IMGSEQ_WEIGHTS_DIR={}", d.to_string_lossy()),
            _ => " next to the executable or in the source tree".into(),
        };
        Error::invalid(format!(
            "no --weights given and the default VQGAN weights \
             ({DEFAULT_TOKENIZER}/model.safetensors) were not found{looked}; pass --weights \
             (safetensors or taming .ckpt) or make them with `imgseq weights convert last.ckpt \
             --config model.yaml -o weights/{DEFAULT_TOKENIZER}/model.safetensors`"
        ))
    })
}

/// [`open`] of `source`, or of the shipped default tokenizer when it is `None`.
pub fn open_default(source: Option<&Path>, o: &OpenOptions) -> Result<Opened> {
    match source {
        Some(s) => open(s, o),
        None => open(&default_source()?, o),
    }
}

/// Folds `a/b/../c` into `a/c` (for readable messages; no file system access).
fn tidy(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}
