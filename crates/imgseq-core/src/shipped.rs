//! Where the shipped default models live (`weights/<name>`): the one lookup the CLI and the
//! service share.

use crate::{Error, Result};
use std::path::PathBuf;

/// The folder of a shipped default model, e.g. `default_model("vit-fashion-mnist")`.
///
/// Looked up only in `$IMGSEQ_WEIGHTS_DIR` when it is set (an explicit choice is never
/// silently replaced), otherwise in `weights/` next to the executable's grand-parent folders
/// (an installed copy of the repository), then in the source tree's `weights/`.
pub fn default_model(name: &str) -> Result<PathBuf> {
    let mut candidates = Vec::new();
    match std::env::var_os("IMGSEQ_WEIGHTS_DIR") {
        Some(d) if !d.is_empty() => candidates.push(PathBuf::from(d).join(name)),
        _ => {
            if let Ok(exe) = std::env::current_exe() {
                for anc in exe.ancestors().skip(1).take(4) {
                    candidates.push(anc.join("weights").join(name));
                }
            }
            candidates.push(
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../../weights")
                    .join(name),
            );
        }
    }
    for c in &candidates {
        if c.is_dir() {
            return Ok(c.clone());
        }
    }
    Err(Error::invalid(format!(
        "no --weights given and the shipped default `weights/{name}` was not found \
         (set IMGSEQ_WEIGHTS_DIR to the folder holding `{name}/`)"
    )))
}
