//! Where the shipped default weights live: [`imgseq_core::shipped`], with `anyhow` errors.

use anyhow::Result;
use std::path::PathBuf;

/// The folder of a shipped default model ([`imgseq_core::shipped::default_model`]).
pub fn default_model(name: &str) -> Result<PathBuf> {
    Ok(imgseq_core::shipped::default_model(name)?)
}
