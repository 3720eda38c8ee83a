//! Reading a model's config file of any family: our `config.json` (the JSON form of
//! [`VqConfig`]), a LlamaGen or diffusers `config.json` (told apart by
//! [`crate::family::family_of_config`]) and taming's `model.yaml`.

use crate::config::{read_text, VqConfig};
use crate::family::{config_from_json_value, family_of_config, Family};
use imgseq_core::{Error, Result};
use std::path::Path;

/// What the `vq_config` fuzz target runs (and the corpus replay test): the bytes as our
/// JSON config and as a taming YAML, each validated. Must never panic.
#[doc(hidden)]
pub fn fuzz_config_bytes(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let p = Path::new("fuzz.cfg");
    if let Ok(c) = VqConfig::from_json_str(text, p) {
        let _ = (c.downsample_factor(), c.check_input_size(256));
    }
    if let Ok(c) = VqConfig::from_taming_yaml_str(text, p) {
        let _ = (c.downsample_factor(), c.check_input_size(256));
    }
}

impl VqConfig {
    /// Reads our `config.json` (JSON form of [`VqConfig`]).
    pub fn from_json_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        Self::from_json_str(&read_text(path)?, path)
    }

    /// [`Self::from_json_file`] on text; `path` is only used in messages.
    pub fn from_json_str(text: &str, path: &Path) -> Result<Self> {
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| Error::format(path, format!("not valid JSON ({e})")))?;
        if family_of_config(&v) != Family::Taming {
            // A LlamaGen or diffusers `config.json` (its shape defaults where only weights
            // can tell, see [`crate::family`]).
            return config_from_json_value(&v, path, None);
        }
        let cfg = Self::from_json_value(&v, path)?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// Reads either format, by extension (`.yaml`/`.yml` → taming, else our JSON), or the
    /// preset a path that does not exist names ([`crate::presets::named`]).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if let Some(c) = crate::presets::named(path) {
            return Ok(c);
        }
        match path.extension().and_then(|e| e.to_str()) {
            Some("yaml") | Some("yml") => crate::ibq::yaml_config(path),
            _ => Self::from_json_file(path),
        }
    }
}
