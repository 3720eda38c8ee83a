//! ViT configuration with the field names of HF transformers' `ViTConfig`, so that a
//! `config.json` written by imgseq loads in `ViTForImageClassification.from_pretrained` and
//! vice versa (unknown HF fields are ignored on read).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

use imgseq_core::data::idx::FASHION_MNIST_CLASSES;
use imgseq_core::{Error, Result};

/// Hyper-parameters of a ViT (HF `ViTConfig` field names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViTConfig {
    pub image_size: usize,
    pub patch_size: usize,
    pub num_channels: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "default_true")]
    pub qkv_bias: bool,
    /// Class index (as a string, as HF writes it) → class name.
    #[serde(default)]
    pub id2label: BTreeMap<String, String>,
    #[serde(default)]
    pub label2id: BTreeMap<String, usize>,
    /// Kept for HF compatibility; imgseq never applies dropout at inference.
    #[serde(default)]
    pub hidden_dropout_prob: f64,
    #[serde(default)]
    pub attention_probs_dropout_prob: f64,
    #[serde(default = "default_init")]
    pub initializer_range: f64,
    #[serde(default = "default_model_type")]
    pub model_type: String,
    #[serde(default)]
    pub architectures: Vec<String>,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_eps() -> f64 {
    1e-12
}
fn default_true() -> bool {
    true
}
fn default_init() -> f64 {
    0.02
}
fn default_model_type() -> String {
    "vit".into()
}

/// Side in pixels of the seed model's square input ([`ViTConfig::seed`]).
pub const SEED_IMAGE_SIZE: usize = 32;

/// The one rule between an input and the patch size: an `h`×`w` input must be cut into whole
/// `patch_size`×`patch_size` patches. Returns the patch grid (rows, columns).
///
/// [`ViTConfig::check_input_size`] applies it with a config's patch size; the model's layers,
/// which keep only the patch size, call it directly.
pub fn patch_grid(h: usize, w: usize, patch_size: usize) -> Result<(usize, usize)> {
    if patch_size == 0 {
        return Err(Error::invalid("the patch size is 0"));
    }
    if h == 0 || w == 0 {
        return Err(if h == w {
            Error::setting("size", h, "must be positive")
        } else {
            Error::bad_data(format!("input {h}x{w} is empty"))
        });
    }
    if !h.is_multiple_of(patch_size) || !w.is_multiple_of(patch_size) {
        let msg = format!("is not a multiple of the patch size {patch_size}");
        return Err(if h == w {
            Error::setting("size", h, msg)
        } else {
            Error::bad_data(format!("input {h}x{w} {msg}"))
        });
    }
    Ok((h / patch_size, w / patch_size))
}

impl ViTConfig {
    /// The seed model: 32×32 input, 4×4 patches → 64 patches + CLS = 65 tokens of width 48,
    /// 4 layers, 4 heads, MLP 192 (~0.12 M parameters with a 10-class head).
    pub fn seed(num_channels: usize, labels: &[&str]) -> Self {
        let id2label = labels
            .iter()
            .enumerate()
            .map(|(i, l)| (i.to_string(), l.to_string()))
            .collect();
        let label2id = labels
            .iter()
            .enumerate()
            .map(|(i, l)| (l.to_string(), i))
            .collect();
        Self {
            image_size: SEED_IMAGE_SIZE,
            patch_size: 4,
            num_channels,
            hidden_size: 48,
            num_hidden_layers: 4,
            num_attention_heads: 4,
            intermediate_size: 192,
            hidden_act: default_act(),
            layer_norm_eps: default_eps(),
            qkv_bias: true,
            id2label,
            label2id,
            hidden_dropout_prob: 0.0,
            attention_probs_dropout_prob: 0.0,
            initializer_range: default_init(),
            model_type: default_model_type(),
            architectures: vec!["ViTForImageClassification".into()],
        }
    }

    /// The shipped default's configuration: seed shapes, 1 channel, Fashion-MNIST classes.
    pub fn fashion_mnist() -> Self {
        Self::seed(1, &FASHION_MNIST_CLASSES)
    }

    pub fn num_labels(&self) -> usize {
        self.id2label.len()
    }

    /// Checks that an `h`×`w` input is a whole number of patches of this model (see
    /// [`patch_grid`]); returns the patch grid (rows, columns).
    pub fn check_input_size(&self, h: usize, w: usize) -> Result<(usize, usize)> {
        patch_grid(h, w, self.patch_size)
    }

    /// Patches per side at the configured image size.
    pub fn grid(&self) -> usize {
        self.image_size / self.patch_size
    }

    /// Tokens per image at the configured size: patches + CLS.
    pub fn num_tokens(&self) -> usize {
        self.grid() * self.grid() + 1
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Class name of label `i` (or the index as text when the config has no names).
    pub fn label(&self, i: usize) -> String {
        self.id2label
            .get(&i.to_string())
            .cloned()
            .unwrap_or_else(|| i.to_string())
    }

    /// An estimate (an upper bound in practice) of the peak memory in bytes of running
    /// `batch` inputs of `h`×`w` pixels through the patch embedding (and, with `encoder`,
    /// the transformer): the largest activation (input pixels, tokens × hidden, tokens × MLP
    /// width) times 6, plus with `encoder` the attention scores, tokens² per head and image.
    pub fn forward_bytes(&self, batch: usize, h: usize, w: usize, encoder: bool) -> u128 {
        let p = self.patch_size.max(1) as u128;
        let (b, h, w) = (batch as u128, h as u128, w as u128);
        let n = (h / p) * (w / p) + 1;
        let width = if encoder {
            self.hidden_size.max(self.intermediate_size) as u128
        } else {
            self.hidden_size as u128
        };
        let act = (self.num_channels as u128 * h * w).max(n.saturating_mul(width));
        let mut floats = b.saturating_mul(act).saturating_mul(6);
        if encoder {
            let scores = b
                .saturating_mul(self.num_attention_heads as u128)
                .saturating_mul(n.saturating_mul(n));
            floats = floats.saturating_add(scores);
        }
        floats.saturating_mul(4)
    }

    /// Refuses, before anything is allocated, inputs whose forward
    /// ([`forward_bytes`](Self::forward_bytes)) would need more memory than
    /// [`imgseq_core::budget::memory_limit`]. With `size_setting` the error names the
    /// setting `size` (the side of a square input chosen by the caller), else the input size.
    pub fn check_memory(
        &self,
        batch: usize,
        h: usize,
        w: usize,
        encoder: bool,
        size_setting: bool,
    ) -> Result<()> {
        use imgseq_core::budget::check_memory;
        let Err(msg) = check_memory(self.forward_bytes(batch, h, w, encoder)) else {
            return Ok(());
        };
        if batch > 1 && check_memory(self.forward_bytes(1, h, w, encoder)).is_ok() {
            return Err(Error::resource_limit(format!(
                "{batch} inputs of {h}x{w} pixels at once {msg}"
            )));
        }
        Err(if h == w && size_setting {
            Error::setting("size", h, msg)
        } else {
            Error::resource_limit(format!("an input of {h}x{w} pixels {msg}"))
        })
    }

    /// Checks the fields' values and the relations between them that the model relies on.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::invalid(format!("invalid ViT config: {m}")));
        if let Err(e) = self.check_input_size(self.image_size, self.image_size) {
            return bad(format!("image_size and patch_size: {e}"));
        }
        for (name, v) in [
            ("num_channels", self.num_channels),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("intermediate_size", self.intermediate_size),
        ] {
            if v == 0 {
                return bad(format!("{name} must be positive"));
            }
        }
        if !(self.layer_norm_eps > 0.0 && self.layer_norm_eps.is_finite()) {
            return bad(format!(
                "layer_norm_eps {} must be a positive number",
                self.layer_norm_eps
            ));
        }
        if !(self.initializer_range >= 0.0 && self.initializer_range.is_finite()) {
            return bad(format!(
                "initializer_range {} must be ≥ 0",
                self.initializer_range
            ));
        }
        for (name, v) in [
            ("hidden_dropout_prob", self.hidden_dropout_prob),
            (
                "attention_probs_dropout_prob",
                self.attention_probs_dropout_prob,
            ),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(format!("{name} {v} must be in [0, 1]"));
            }
        }
        // The model, weights and one image at the configured size must fit the memory limit.
        if let Err(msg) = imgseq_core::budget::check_memory(self.forward_bytes(
            1,
            self.image_size,
            self.image_size,
            true,
        )) {
            return bad(format!("image_size {} {msg}", self.image_size));
        }
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return bad(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if self.hidden_act != "gelu" {
            return bad(format!(
                "hidden_act `{}` is not supported (only \"gelu\", exact erf)",
                self.hidden_act
            ));
        }
        if self.num_labels() == 0 {
            return bad("id2label is empty (the classifier needs at least one label)".into());
        }
        for i in 0..self.num_labels() {
            if !self.id2label.contains_key(&i.to_string()) {
                return bad(format!("id2label has no entry for label {i}"));
            }
        }
        Ok(())
    }

    /// Reads and validates a `config.json`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let cfg: Self = serde_json::from_str(&text)
            .map_err(|e| Error::format(path, format!("not a valid ViT config.json ({e})")))?;
        cfg.validate()
            .map_err(|e| Error::format(path, e.to_string()))?;
        Ok(cfg)
    }

    /// Writes the config as pretty JSON (atomically).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let mut v = serde_json::to_value(self).expect("config serialises");
        // HF reads num_labels from id2label; writing it too keeps old readers happy.
        v["num_labels"] = self.num_labels().into();
        let text = serde_json::to_string_pretty(&v).expect("json");
        imgseq_core::fsutil::write_bytes_atomic(path, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_config_gives_65_tokens_of_48() {
        let c = ViTConfig::fashion_mnist();
        assert_eq!(c.num_tokens(), 65);
        assert_eq!(c.hidden_size, 48);
        assert_eq!(c.head_dim(), 12);
        c.validate().unwrap();
    }

    #[test]
    fn hf_config_json_with_extra_fields_loads() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        std::fs::write(
            &p,
            r#"{"image_size":32,"patch_size":4,"num_channels":3,"hidden_size":48,"num_hidden_layers":2,
            "num_attention_heads":4,"intermediate_size":96,"hidden_act":"gelu","layer_norm_eps":1e-12,
            "qkv_bias":true,"id2label":{"0":"a","1":"b"},"encoder_stride":16,"transformers_version":"5"}"#,
        )
        .unwrap();
        let c = ViTConfig::load(&p).unwrap();
        assert_eq!(c.num_labels(), 2);
        assert_eq!(c.label(1), "b");
    }

    #[test]
    fn config_with_bad_patch_size_is_rejected_with_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        let mut c = ViTConfig::fashion_mnist();
        c.patch_size = 5;
        c.save(&p).unwrap();
        let e = ViTConfig::load(&p).unwrap_err().to_string();
        assert!(e.contains("config.json") && e.contains("patch_size"), "{e}");
    }

    #[test]
    fn input_size_rule_names_sizes_without_flags() {
        let c = ViTConfig::fashion_mnist();
        assert_eq!(c.check_input_size(48, 32).unwrap(), (12, 8));
        let e = c.check_input_size(30, 30).unwrap_err().to_string();
        assert_eq!(e, "size 30 is not a multiple of the patch size 4");
        let e = c.check_input_size(32, 30).unwrap_err().to_string();
        assert_eq!(e, "input 32x30 is not a multiple of the patch size 4");
        assert!(patch_grid(32, 32, 0).is_err());
        let e = c.check_input_size(0, 0).unwrap_err().to_string();
        assert_eq!(e, "size 0 must be positive");
    }

    #[test]
    fn memory_estimate_refuses_huge_inputs_and_bad_fields() {
        let c = ViTConfig::fashion_mnist();
        assert!(c.forward_bytes(500, 32, 32, true) < 1 << 30);
        c.check_memory(500, 32, 32, true, false).unwrap();
        // (1, 1, 2000, 2000): 250,001 tokens, 4 heads → ~1 TB of attention scores.
        let e = c.check_memory(1, 2000, 2000, true, false).unwrap_err();
        let e = e.to_string();
        assert!(
            e.starts_with("an input of 2000x2000 pixels needs about"),
            "{e}"
        );
        let e = c.check_memory(1, 16000, 16000, false, true).unwrap_err();
        let e = e.to_string();
        assert!(
            e.starts_with("size 16000 needs") && e.contains("IMGSEQ_MAX_MEMORY_GB"),
            "{e}"
        );
        let mut bad = c.clone();
        bad.layer_norm_eps = -1.0;
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("layer_norm_eps -1"), "{e}");
        let mut bad = c;
        bad.num_hidden_layers = 0;
        assert!(bad.validate().is_err());
    }
}
