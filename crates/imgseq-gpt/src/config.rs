//! `config.json`: Hugging Face `GPT2Config` fields (upstream names), plus imgseq's own fields
//! with an `imgseq_` prefix (HF keeps unknown keys as attributes, so the folder still loads in
//! `GPT2LMHeadModel.from_pretrained`).
//!
//! Vocabulary layout of an imgseq model: codebook entries `0..n_codes`, class tokens
//! `n_codes + c` for `c` in `0..n_classes`, then the unconditional token
//! `n_codes + n_classes`; `vocab_size = n_codes + n_classes + 1`,
//! `n_positions = 1 + h·w`.

use imgseq_core::fsutil::{read_json, write_json};
use imgseq_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The format tag of imgseq's extra fields.
pub const FORMAT: &str = "imgseq-gpt/1";

fn gelu() -> String {
    "gelu".into()
}
fn eps() -> f64 {
    1e-5
}
fn init_range() -> f64 {
    0.02
}
fn yes() -> bool {
    true
}
fn model_type() -> String {
    "gpt2".into()
}
fn architectures() -> Vec<String> {
    vec!["GPT2LMHeadModel".into()]
}

/// HF `GPT2Config` (the fields the model uses, and those `from_pretrained` needs to build the
/// same model) plus the `imgseq_*` description of the token sequences.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GptConfig {
    #[serde(default = "model_type")]
    pub model_type: String,
    #[serde(default = "architectures")]
    pub architectures: Vec<String>,
    pub vocab_size: usize,
    pub n_positions: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    /// MLP width; `null` means 4·n_embd (as HF).
    #[serde(default)]
    pub n_inner: Option<usize>,
    /// `gelu` (exact erf; ours), `gelu_new` / `gelu_pytorch_tanh` (tanh form; GPT-2's), `relu`.
    #[serde(default = "gelu")]
    pub activation_function: String,
    #[serde(default = "eps")]
    pub layer_norm_epsilon: f64,
    #[serde(default)]
    pub resid_pdrop: f64,
    #[serde(default)]
    pub embd_pdrop: f64,
    #[serde(default)]
    pub attn_pdrop: f64,
    #[serde(default = "init_range")]
    pub initializer_range: f64,
    #[serde(default = "yes")]
    pub scale_attn_weights: bool,
    #[serde(default)]
    pub scale_attn_by_inverse_layer_idx: bool,
    #[serde(default)]
    pub reorder_and_upcast_attn: bool,
    #[serde(default = "yes")]
    pub tie_word_embeddings: bool,
    /// HF's generation ids; an imgseq model has no text specials, so they are the
    /// unconditional token (a valid id, unlike GPT-2's default 50256).
    #[serde(default)]
    pub bos_token_id: Option<usize>,
    #[serde(default)]
    pub eos_token_id: Option<usize>,
    #[serde(default = "yes")]
    pub use_cache: bool,

    /// `imgseq-gpt/1` on models imgseq made; absent on plain HF GPT-2 configs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imgseq_format: Option<String>,
    /// Codebook size of the VQ the tokens come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imgseq_n_codes: Option<usize>,
    /// Class names; class `c` is token `n_codes + c`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imgseq_class_names: Option<Vec<String>>,
    /// Token grid (h, w) of one image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imgseq_grid: Option<[usize; 2]>,
    /// The VQ run (folder or weights file) the tokens were made with, as recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imgseq_vq: Option<String>,
}

/// What an imgseq model's sequences are: the part of the config sampling and training need.
#[derive(Debug, Clone, PartialEq)]
pub struct SeqLayout {
    pub n_codes: usize,
    pub class_names: Vec<String>,
    pub h: usize,
    pub w: usize,
}

impl SeqLayout {
    pub fn n_classes(&self) -> usize {
        self.class_names.len()
    }
    /// Token of class `c`.
    pub fn class_token(&self, c: usize) -> u32 {
        (self.n_codes + c) as u32
    }
    /// The unconditional token.
    pub fn uncond_token(&self) -> u32 {
        (self.n_codes + self.class_names.len()) as u32
    }
    pub fn vocab_size(&self) -> usize {
        self.n_codes + self.class_names.len() + 1
    }
    /// Sampled sequences (each `h·w` codes) as one batched token grid, what a VQ decodes.
    pub fn grid(&self, seqs: &[Vec<u32>]) -> imgseq_core::tokens::TokenGrid {
        imgseq_core::tokens::TokenGrid {
            n: seqs.len(),
            h: self.h,
            w: self.w,
            batched: true,
            data: seqs.iter().flatten().map(|&t| t as i64).collect(),
        }
    }
    /// Image tokens per sequence.
    pub fn n_tokens(&self) -> usize {
        self.h * self.w
    }
    /// The class index of `spec`: a class name, or a number below the class count.
    pub fn class_index(&self, spec: &str) -> Result<usize> {
        if let Some(i) = self.class_names.iter().position(|n| n == spec) {
            return Ok(i);
        }
        if let Ok(i) = spec.parse::<usize>() {
            if i < self.n_classes() {
                return Ok(i);
            }
            return Err(Error::setting(
                "class",
                spec,
                format!(
                    "is out of range: the model has {} classes",
                    self.n_classes()
                ),
            ));
        }
        Err(Error::setting(
            "class",
            spec,
            format!(
                "is not a class of the model (classes: {})",
                self.class_names.join(", ")
            ),
        ))
    }
}

impl GptConfig {
    /// A new imgseq model's config: GPT-2 layout, exact GELU, no dropout.
    pub fn new_imgseq(
        layout: &SeqLayout,
        n_embd: usize,
        n_layer: usize,
        n_head: usize,
        vq: Option<String>,
    ) -> Self {
        let uncond = layout.uncond_token() as usize;
        Self {
            model_type: model_type(),
            architectures: architectures(),
            vocab_size: layout.vocab_size(),
            n_positions: 1 + layout.n_tokens(),
            n_embd,
            n_layer,
            n_head,
            n_inner: None,
            activation_function: gelu(),
            layer_norm_epsilon: eps(),
            resid_pdrop: 0.0,
            embd_pdrop: 0.0,
            attn_pdrop: 0.0,
            initializer_range: init_range(),
            scale_attn_weights: true,
            scale_attn_by_inverse_layer_idx: false,
            reorder_and_upcast_attn: false,
            tie_word_embeddings: true,
            bos_token_id: Some(uncond),
            eos_token_id: Some(uncond),
            use_cache: true,
            imgseq_format: Some(FORMAT.into()),
            imgseq_n_codes: Some(layout.n_codes),
            imgseq_class_names: Some(layout.class_names.clone()),
            imgseq_grid: Some([layout.h, layout.w]),
            imgseq_vq: vq,
        }
    }

    pub fn n_inner(&self) -> usize {
        self.n_inner.unwrap_or(self.n_embd.saturating_mul(4))
    }

    /// Parameters of the model: token and position embeddings, the blocks, the final norm
    /// (the head shares the token embedding).
    pub fn param_count(&self) -> u128 {
        let (e, i) = (self.n_embd as u128, self.n_inner() as u128);
        let (v, p, l) = (
            self.vocab_size as u128,
            self.n_positions as u128,
            self.n_layer as u128,
        );
        let block = 4 * e * e + 4 * e + 2 * e * i + i + e + 4 * e;
        v * e + p * e + l * block + 2 * e
    }

    /// Refuses a model whose `copies` f32 copies of the weights (1 to sample, 4 to train:
    /// weights, gradients, two moments) would not fit the memory budget.
    pub fn check_memory(&self, copies: u128) -> Result<()> {
        imgseq_core::budget::check_memory(self.param_count() * 4 * copies).map_err(|e| {
            Error::resource_limit(format!(
                "a GPT of {} parameters (n_embd {}, n_layer {}, n_inner {}) {e}",
                self.param_count(),
                self.n_embd,
                self.n_layer,
                self.n_inner()
            ))
        })
    }

    /// Reads and validates a `config.json`; a bad value is an error naming the file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let cfg: Self = read_json(path, "GPT-2 config")?;
        cfg.validate()
            .map_err(|e| Error::format(path, e.to_string()))?;
        Ok(cfg)
    }

    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        write_json(path, self)
    }

    /// Checks the sizes and the options this implementation supports.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("vocab_size", self.vocab_size),
            ("n_positions", self.n_positions),
            ("n_embd", self.n_embd),
            ("n_layer", self.n_layer),
            ("n_head", self.n_head),
            ("n_inner", self.n_inner()),
        ] {
            if v == 0 {
                return Err(Error::setting(name, v, "must be positive"));
            }
            if v > 1 << 24 {
                return Err(Error::setting(name, v, "is implausibly large"));
            }
        }
        self.check_memory(1)?;
        if !self.n_embd.is_multiple_of(self.n_head) {
            return Err(Error::setting(
                "n_head",
                self.n_head,
                format!("must divide n_embd {}", self.n_embd),
            ));
        }
        if !matches!(
            self.activation_function.as_str(),
            "gelu" | "gelu_new" | "gelu_pytorch_tanh" | "relu"
        ) {
            return Err(Error::setting(
                "activation_function",
                &self.activation_function,
                "is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu)",
            ));
        }
        if !(self.layer_norm_epsilon > 0.0 && self.layer_norm_epsilon.is_finite()) {
            return Err(Error::setting(
                "layer_norm_epsilon",
                self.layer_norm_epsilon,
                "must be a positive number",
            ));
        }
        if self.scale_attn_by_inverse_layer_idx || self.reorder_and_upcast_attn {
            return Err(Error::invalid(
                "scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn are not supported",
            ));
        }
        if let Some([h, w]) = self.imgseq_grid {
            if h == 0 || w == 0 || h.checked_mul(w).is_none_or(|n| n >= self.n_positions) {
                return Err(Error::invalid(format!(
                    "imgseq_grid {h}x{w} is empty or does not fit n_positions {}",
                    self.n_positions
                )));
            }
        }
        if let Some(n) = self
            .imgseq_n_codes
            .filter(|&n| n == 0 || n >= self.vocab_size)
        {
            return Err(Error::invalid(format!(
                "imgseq_n_codes {n} is not between 1 and vocab_size {}",
                self.vocab_size
            )));
        }
        if let Some(l) = self.layout_opt() {
            if l.vocab_size() != self.vocab_size {
                return Err(Error::invalid(format!(
                    "vocab_size {} is not imgseq_n_codes {} + {} classes + 1",
                    self.vocab_size,
                    l.n_codes,
                    l.n_classes()
                )));
            }
            if 1 + l.n_tokens() > self.n_positions {
                return Err(Error::invalid(format!(
                    "n_positions {} is too small for 1 + {}x{} tokens",
                    self.n_positions, l.h, l.w
                )));
            }
        }
        Ok(())
    }

    /// Bytes as a `config.json`: parsed, validated, its layout built and measured (the fuzz
    /// target `gpt_config`'s body, shared with the corpus replay test).
    #[doc(hidden)]
    pub fn fuzz_bytes(data: &[u8]) {
        let Ok(cfg) = serde_json::from_slice::<GptConfig>(data) else {
            return;
        };
        if cfg.validate().is_ok() {
            let _ = cfg.check_memory(4);
            if let Ok(l) = cfg.layout() {
                let _ = (l.n_tokens(), l.vocab_size(), l.class_index("0"));
            }
        }
    }

    fn layout_opt(&self) -> Option<SeqLayout> {
        let n_codes = self.imgseq_n_codes?;
        let [h, w] = self.imgseq_grid?;
        Some(SeqLayout {
            n_codes,
            class_names: self.imgseq_class_names.clone().unwrap_or_default(),
            h,
            w,
        })
    }

    /// The token sequence layout; an error for a config without the `imgseq_*` fields (a
    /// plain GPT-2 model cannot be sampled as images).
    pub fn layout(&self) -> Result<SeqLayout> {
        self.layout_opt().ok_or_else(|| {
            Error::invalid(
                "the config has no imgseq_n_codes / imgseq_grid: not an imgseq image model",
            )
        })
    }
}
