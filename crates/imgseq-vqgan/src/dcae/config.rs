//! [`DcaeConfig`]: an `AutoencoderDC`'s shape, under diffusers' field names and defaults (the
//! released `dc-ae-f32c32` layout), read from its `config.json`.

use imgseq_core::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

/// diffusers' class name in `config.json`.
pub const CLASS: &str = "AutoencoderDC";

/// Most levels, widths and latent channels a config may ask for.
const MAX_LEVELS: usize = 8;
const MAX_WIDTH: usize = 8192;

/// A field given as one value for every level or as a list of one per level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PerLevel {
    One(String),
    Each(Vec<String>),
}

impl PerLevel {
    /// The value of each of `levels` levels.
    fn expand(&self, levels: usize) -> Vec<String> {
        match self {
            PerLevel::One(s) => vec![s.clone(); levels],
            PerLevel::Each(v) => v.clone(),
        }
    }
}

/// diffusers' `AutoencoderDC.__init__` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DcaeConfig {
    pub in_channels: usize,
    pub latent_channels: usize,
    pub attention_head_dim: usize,
    pub encoder_block_types: PerLevel,
    pub decoder_block_types: PerLevel,
    pub encoder_block_out_channels: Vec<usize>,
    pub decoder_block_out_channels: Vec<usize>,
    pub encoder_layers_per_block: Vec<usize>,
    pub decoder_layers_per_block: Vec<usize>,
    pub encoder_qkv_multiscales: Vec<Vec<usize>>,
    pub decoder_qkv_multiscales: Vec<Vec<usize>>,
    /// `pixel_shuffle` or `interpolate` (nearest ×2 then a conv).
    pub upsample_block_type: String,
    /// `pixel_unshuffle` or `Conv` (a stride-2 conv).
    pub downsample_block_type: String,
    pub decoder_norm_types: PerLevel,
    pub decoder_act_fns: PerLevel,
    pub encoder_out_shortcut: bool,
    pub decoder_in_shortcut: bool,
    pub decoder_conv_act_fn: String,
    /// SANA's pipeline feeds its transformer `latent · scaling_factor`.
    pub scaling_factor: f64,
}

impl Default for DcaeConfig {
    fn default() -> Self {
        let w = vec![128, 256, 512, 512, 1024, 1024];
        let ms = vec![vec![], vec![], vec![], vec![5], vec![5], vec![5]];
        Self {
            in_channels: 3,
            latent_channels: 32,
            attention_head_dim: 32,
            encoder_block_types: PerLevel::One("ResBlock".into()),
            decoder_block_types: PerLevel::One("ResBlock".into()),
            encoder_block_out_channels: w.clone(),
            decoder_block_out_channels: w,
            encoder_layers_per_block: vec![2, 2, 2, 3, 3, 3],
            decoder_layers_per_block: vec![3, 3, 3, 3, 3, 3],
            encoder_qkv_multiscales: ms.clone(),
            decoder_qkv_multiscales: ms,
            upsample_block_type: "pixel_shuffle".into(),
            downsample_block_type: "pixel_unshuffle".into(),
            decoder_norm_types: PerLevel::One("rms_norm".into()),
            decoder_act_fns: PerLevel::One("silu".into()),
            encoder_out_shortcut: true,
            decoder_in_shortcut: true,
            decoder_conv_act_fn: "relu".into(),
            scaling_factor: 1.0,
        }
    }
}

/// One side's (encoder's or decoder's) levels, expanded.
#[derive(Debug, Clone, PartialEq)]
pub struct Side {
    pub widths: Vec<usize>,
    pub layers: Vec<usize>,
    pub block_types: Vec<String>,
    pub multiscales: Vec<Vec<usize>>,
    pub norms: Vec<String>,
    pub acts: Vec<String>,
}

impl DcaeConfig {
    /// Reads a diffusers `config.json` of an `AutoencoderDC`, checking what imgseq runs.
    pub fn from_json(v: &Value, path: &Path) -> Result<Self> {
        if v.get("_class_name").and_then(Value::as_str) != Some(CLASS) {
            return Err(Error::format(
                path,
                format!("`_class_name` is not {CLASS:?}; not a DC-AE config"),
            ));
        }
        let mut fields = v.clone();
        if let Some(m) = fields.as_object_mut() {
            m.retain(|k, _| !k.starts_with('_'));
        }
        let cfg: Self = serde_json::from_value(fields)
            .map_err(|e| Error::format(path, format!("not a DC-AE config ({e})")))?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// Levels and the spatial compression, 2^(levels − 1).
    pub fn levels(&self) -> usize {
        self.encoder_block_out_channels.len()
    }

    pub fn downsample_factor(&self) -> usize {
        1 << (self.levels() - 1)
    }

    /// The encoder's levels (its norms are RMSNorm and its activations SiLU, as diffusers
    /// builds them).
    pub fn encoder(&self) -> Side {
        let n = self.levels();
        Side {
            widths: self.encoder_block_out_channels.clone(),
            layers: self.encoder_layers_per_block.clone(),
            block_types: self.encoder_block_types.expand(n),
            multiscales: self.encoder_qkv_multiscales.clone(),
            norms: vec!["rms_norm".into(); n],
            acts: vec!["silu".into(); n],
        }
    }

    pub fn decoder(&self) -> Side {
        let n = self.decoder_block_out_channels.len();
        Side {
            widths: self.decoder_block_out_channels.clone(),
            layers: self.decoder_layers_per_block.clone(),
            block_types: self.decoder_block_types.expand(n),
            multiscales: self.decoder_qkv_multiscales.clone(),
            norms: self.decoder_norm_types.expand(n),
            acts: self.decoder_act_fns.expand(n),
        }
    }

    /// The checks that keep every block buildable; errors name the field.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let bad = |m: String| Err(Error::format(path, m));
        let n = self.levels();
        if n == 0 || n > MAX_LEVELS {
            return bad(format!(
                "`encoder_block_out_channels` has {n} levels; 1 to {MAX_LEVELS}"
            ));
        }
        let (l, hd) = (self.latent_channels, self.attention_head_dim);
        if l == 0 || l > MAX_WIDTH || hd == 0 || self.in_channels == 0 || self.in_channels > 4 {
            return bad(format!(
                "`latent_channels` {l}, `attention_head_dim` {hd} and `in_channels` {} must be \
                 positive (at most {MAX_WIDTH}, 4)",
                self.in_channels
            ));
        }
        if !self.scaling_factor.is_finite() || self.scaling_factor == 0.0 {
            return bad(format!(
                "`scaling_factor` is {}; must be finite and non-zero",
                self.scaling_factor
            ));
        }
        for (name, side) in [("encoder", self.encoder()), ("decoder", self.decoder())] {
            self.check_side(name, &side, path)?;
        }
        let known = |v: &str, ok: &[&str], field: &str| -> Result<()> {
            match ok.contains(&v) {
                true => Ok(()),
                false => Err(Error::format(
                    path,
                    format!("`{field}` is {v:?}; imgseq runs {}", ok.join(", ")),
                )),
            }
        };
        known(
            &self.upsample_block_type,
            &["pixel_shuffle", "interpolate"],
            "upsample_block_type",
        )?;
        known(
            &self.downsample_block_type,
            &["pixel_unshuffle", "Conv"],
            "downsample_block_type",
        )?;
        known(
            &self.decoder_conv_act_fn,
            ACTIVATIONS,
            "decoder_conv_act_fn",
        )
    }

    fn check_side(&self, name: &str, s: &Side, path: &Path) -> Result<()> {
        let bad = |m: String| Err(Error::format(path, m));
        let n = self.levels();
        let lens = [
            s.widths.len(),
            s.layers.len(),
            s.block_types.len(),
            s.multiscales.len(),
            s.norms.len(),
            s.acts.len(),
        ];
        if lens.iter().any(|&k| k != n) {
            return bad(format!(
                "the {name}'s per-level fields have {lens:?} entries; {n} levels each"
            ));
        }
        if s.layers[1..].contains(&0) || s.layers.iter().any(|&k| k > 64) {
            return bad(format!(
                "`{name}_layers_per_block` is {:?}; only the first level may have no layers \
                 (at most 64 a level)",
                s.layers
            ));
        }
        if n == 1 && s.layers[0] == 0 {
            return bad(format!(
                "`{name}_layers_per_block` is [0]: no layers at all"
            ));
        }
        for (i, &w) in s.widths.iter().enumerate() {
            if w == 0 || w > MAX_WIDTH || w % 4 != 0 {
                return bad(format!(
                    "`{name}_block_out_channels[{i}]` is {w}; a multiple of 4 up to {MAX_WIDTH}"
                ));
            }
            let t = s.block_types[i].as_str();
            if !["ResBlock", "EfficientViTBlock"].contains(&t) {
                return bad(format!(
                    "`{name}_block_types[{i}]` is {t:?}; imgseq runs ResBlock and \
                     EfficientViTBlock"
                ));
            }
            if t == "EfficientViTBlock" && w % self.attention_head_dim != 0 {
                return bad(format!(
                    "`{name}_block_out_channels[{i}]` {w} is not a multiple of \
                     `attention_head_dim` {}",
                    self.attention_head_dim
                ));
            }
            if s.multiscales[i]
                .iter()
                .any(|&k| k == 0 || k % 2 == 0 || k > 15)
            {
                return bad(format!(
                    "`{name}_qkv_multiscales[{i}]` is {:?}; odd kernel sizes up to 15",
                    s.multiscales[i]
                ));
            }
            if !["rms_norm", "batch_norm"].contains(&s.norms[i].as_str()) {
                return bad(format!(
                    "`{name}_norm_types[{i}]` is {:?}; imgseq runs rms_norm and batch_norm",
                    s.norms[i]
                ));
            }
            if !ACTIVATIONS.contains(&s.acts[i].as_str()) {
                return bad(format!(
                    "`{name}_act_fns[{i}]` is {:?}; imgseq runs {}",
                    s.acts[i],
                    ACTIVATIONS.join(", ")
                ));
            }
        }
        for i in 0..n - 1 {
            let (a, b) = (s.widths[i], s.widths[i + 1]);
            if s.layers[i] > 0 && (a * 4) % b != 0 {
                return bad(format!(
                    "`{name}_block_out_channels` goes {a} -> {b}: the shortcut needs 4·{a} to \
                     be a multiple of {b}"
                ));
            }
        }
        let last = s.widths[n - 1];
        if !last.is_multiple_of(self.latent_channels) {
            return bad(format!(
                "`{name}_block_out_channels` ends with {last}, not a multiple of \
                 `latent_channels` {}",
                self.latent_channels
            ));
        }
        Ok(())
    }
}

/// The activations diffusers' `get_activation` gives that DC-AE configs use.
pub const ACTIVATIONS: &[&str] = &["silu", "relu", "relu6"];
