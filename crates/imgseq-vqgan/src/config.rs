//! VQGAN hyper-parameters, with taming-transformers' key names.
//!
//! taming keeps them in a `model.yaml` such as `configs/imagenet_vqgan.yaml`:
//!
//! ```yaml
//! model:
//!   params:
//!     embed_dim: 256
//!     n_embed: 1024
//!     ddconfig: { double_z: False, z_channels: 256, resolution: 256, in_channels: 3,
//!                 out_ch: 3, ch: 128, ch_mult: [1,1,2,2,4], num_res_blocks: 2,
//!                 attn_resolutions: [16], dropout: 0.0 }
//!     lossconfig: ...   # training only, ignored here
//! ```
//!
//! Our own `config.json` (written beside converted safetensors) is the JSON form of
//! [`VqConfig`]: `{"embed_dim": .., "n_embed": .., "ddconfig": {..}}`.

pub use crate::config_file::fuzz_config_bytes;
use crate::variant::{Variant, MAX_GROUPS};
use imgseq_core::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Encoder/decoder shape (`ddconfig` in taming).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DdConfig {
    /// Base channel count; level i has `ch * ch_mult[i]` channels.
    pub ch: usize,
    pub ch_mult: Vec<usize>,
    pub num_res_blocks: usize,
    /// Resolutions (counted from `resolution`, halving per level) that get attention blocks.
    pub attn_resolutions: Vec<usize>,
    pub z_channels: usize,
    /// Encoder outputs `2 * z_channels` when true (KL autoencoders); false for VQGAN.
    pub double_z: bool,
    /// Nominal training resolution. Only used to place attention, not to check input sizes.
    pub resolution: usize,
    pub in_channels: usize,
    pub out_ch: usize,
    /// Training-time dropout in ResnetBlocks; inference ignores it.
    pub dropout: f64,
}

/// Full VQGAN config: `ddconfig` plus the quantizer (`embed_dim`, `n_embed`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VqConfig {
    pub ddconfig: DdConfig,
    /// Codebook vector size.
    pub embed_dim: usize,
    /// Number of codebook entries.
    pub n_embed: usize,
    /// Commitment weight of the quantizer loss (taming: 0.25).
    #[serde(default = "default_beta")]
    pub beta: f64,
    /// taming's `legacy=True` loss (β on the codebook term); the released checkpoints use it.
    #[serde(default = "default_legacy")]
    pub legacy: bool,
    /// How the model differs from taming's (LlamaGen, diffusers; see [`crate::family`]).
    /// Absent in taming's and imgseq's own configs, and not written for them.
    #[serde(default, skip_serializing_if = "Variant::is_taming")]
    pub variant: Variant,
}

/// Most levels (`ch_mult` entries) a model may have: a downsampling factor of 2^15.
pub const MAX_LEVELS: usize = 16;
/// Most channels of any level (`ch × ch_mult[i]`).
pub const MAX_CHANNELS: usize = 1 << 16;
/// Most weights a model may have: 2^30, 4 GiB as f32 (taming's f16 model has 7·10⁷).
pub const MAX_WEIGHTS: u128 = 1 << 30;
/// Upper bounds of the single fields, far above any real model, so that sizes computed from
/// them cannot overflow.
pub const LIMITS: [(&str, usize); 7] = [
    ("ddconfig.ch", MAX_CHANNELS),
    ("ddconfig.z_channels", MAX_CHANNELS),
    ("ddconfig.in_channels", 1024),
    ("ddconfig.out_ch", 1024),
    ("ddconfig.num_res_blocks", 64),
    ("embed_dim", MAX_CHANNELS),
    ("n_embed", 1 << 24),
];
/// Largest config file read.
const MAX_CONFIG_BYTES: u64 = 16 << 20;

pub(crate) fn read_text(path: &Path) -> Result<String> {
    let bytes = imgseq_core::weights::read_regular_file(path, MAX_CONFIG_BYTES, "a config")?;
    String::from_utf8(bytes).map_err(|_| Error::format(path, "not UTF-8 text"))
}

fn default_beta() -> f64 {
    0.25
}
fn default_legacy() -> bool {
    true
}

impl VqConfig {
    /// taming's `vqgan_imagenet_f16_1024` (`configs/imagenet_vqgan.yaml`): 16× downsampling,
    /// 1024 codes of size 256, so a 384² image becomes 24×24 = 576 tokens.
    pub fn vqgan_imagenet_f16_1024() -> Self {
        Self {
            ddconfig: DdConfig {
                ch: 128,
                ch_mult: vec![1, 1, 2, 2, 4],
                num_res_blocks: 2,
                attn_resolutions: vec![16],
                z_channels: 256,
                double_z: false,
                resolution: 256,
                in_channels: 3,
                out_ch: 3,
                dropout: 0.0,
            },
            embed_dim: 256,
            n_embed: 1024,
            beta: 0.25,
            legacy: true,
            variant: Variant::default(),
        }
    }

    /// Spatial downsampling factor: 2^(levels − 1) (saturating at `usize::MAX` for a config
    /// that [`Self::validate`] would refuse for its number of levels).
    pub fn downsample_factor(&self) -> usize {
        let shift = self.ddconfig.ch_mult.len().saturating_sub(1);
        u32::try_from(shift)
            .ok()
            .and_then(|s| 1usize.checked_shl(s))
            .unwrap_or(usize::MAX)
    }

    /// The number of weights the model has (an upper bound: attention counted at every
    /// level), with saturating arithmetic so that any config can be asked.
    pub fn weight_count(&self) -> u128 {
        let d = &self.ddconfig;
        let u = |x: usize| x as u128;
        let mul = |a: u128, b: u128| a.saturating_mul(b);
        let conv = |a: u128, b: u128| mul(mul(a, b), 9);
        // ResnetBlock a→b (two 3×3 convs and a 1×1 shortcut) plus an attention block of b.
        let block = |a: u128, b: u128| {
            conv(a, b)
                .saturating_add(conv(b, b))
                .saturating_add(mul(a, b))
                .saturating_add(mul(mul(b, b), 4))
        };
        let r = u(d.num_res_blocks);
        let mut n = conv(u(d.in_channels), u(d.ch)).saturating_add(conv(u(d.ch), u(d.out_ch)));
        let mut prev = u(d.ch);
        for &m in &d.ch_mult {
            let c = mul(u(d.ch), u(m));
            // Encoder: r blocks; decoder: r + 1 blocks; one resampling conv each.
            let level = block(prev, c)
                .saturating_add(mul(mul(r, 2), block(c, c)))
                .saturating_add(mul(conv(c, c), 2));
            n = n.saturating_add(level);
            prev = c;
        }
        let z = u(d.z_channels);
        let e = u(self.embed_dim);
        n.saturating_add(mul(block(prev, prev), 4)) // two mid blocks each side
            .saturating_add(mul(conv(prev, z), 2)) // encoder conv_out, decoder conv_in
            .saturating_add(mul(mul(z, e), 2)) // quant_conv, post_quant_conv
            .saturating_add(mul(u(self.n_embed), e)) // codebook
    }

    /// The one rule for input sizes: an image side must be a positive multiple of the
    /// downsampling factor (every level halves it exactly).
    pub fn check_input_size(&self, size: usize) -> Result<()> {
        self.check_side("size", size)
    }

    /// [`Self::check_input_size`] for a setting of another name (a training crop, say).
    pub fn check_side(&self, setting: &'static str, size: usize) -> Result<()> {
        let f = self.downsample_factor();
        if size == 0 || !size.is_multiple_of(f) {
            return Err(Error::setting(
                setting,
                size,
                format!("must be a positive multiple of {f}, the model's downsampling factor"),
            ));
        }
        Ok(())
    }

    /// Checks the numbers that the model construction relies on, and that the model is
    /// small enough to build: every field within [`LIMITS`] (so no size computed from them
    /// overflows) and at most [`MAX_WEIGHTS`] weights in all. Messages name the field.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let d = &self.ddconfig;
        let bad = |m: String| Err(Error::format(path, m));
        if d.ch_mult.is_empty() {
            return bad("`ddconfig.ch_mult` is empty".into());
        }
        if d.ch_mult.len() > MAX_LEVELS {
            return bad(format!(
                "`ddconfig.ch_mult` has {} levels; at most {MAX_LEVELS} (a downsampling factor \
                 of {})",
                d.ch_mult.len(),
                1usize << (MAX_LEVELS - 1)
            ));
        }
        let fields = [
            ("ddconfig.ch", d.ch),
            ("ddconfig.z_channels", d.z_channels),
            ("ddconfig.in_channels", d.in_channels),
            ("ddconfig.out_ch", d.out_ch),
            ("ddconfig.num_res_blocks", d.num_res_blocks),
            ("embed_dim", self.embed_dim),
            ("n_embed", self.n_embed),
        ];
        for (name, v) in fields {
            let max = LIMITS
                .iter()
                .find(|l| l.0 == name)
                .map_or(usize::MAX, |l| l.1);
            if v > max {
                return bad(format!("`{name}` is {v}; at most {max}"));
            }
        }
        let groups = self.variant.norm_groups;
        if groups == 0 || groups > MAX_GROUPS {
            return bad(format!(
                "`variant.norm_groups` is {groups}; must be 1 to {MAX_GROUPS}"
            ));
        }
        for (i, m) in d.ch_mult.iter().enumerate() {
            let c = d.ch.checked_mul(*m).filter(|&c| c <= MAX_CHANNELS);
            let Some(c) = c else {
                return bad(format!(
                    "`ddconfig.ch` × `ddconfig.ch_mult[{i}]` ({} × {m}) is more than \
                     {MAX_CHANNELS} channels",
                    d.ch
                ));
            };
            if c == 0 || !c.is_multiple_of(groups) {
                return bad(format!(
                    "level {i} has {c} channels; GroupNorm({groups}) needs a positive multiple \
                     of {groups}"
                ));
            }
        }
        if d.z_channels == 0 || self.embed_dim == 0 || self.n_embed == 0 || d.in_channels == 0 {
            return bad(
                "`z_channels`, `embed_dim`, `n_embed` and `in_channels` must be > 0".into(),
            );
        }
        if d.double_z {
            return bad("`ddconfig.double_z: true` is a KL autoencoder, not a VQGAN".into());
        }
        if !(0.0..1.0).contains(&d.dropout) {
            return bad(format!(
                "`ddconfig.dropout` is {}; must be in [0, 1)",
                d.dropout
            ));
        }
        if !self.beta.is_finite() || self.beta < 0.0 {
            return bad(format!(
                "`beta` is {}; must be a finite number >= 0",
                self.beta
            ));
        }
        let n = self.weight_count();
        if n > MAX_WEIGHTS {
            return bad(format!(
                "the model would have about {n} weights ({} GiB as f32), more than imgseq builds \
                 ({} GiB); lower `ch`, `ch_mult`, `num_res_blocks`, `z_channels`, `embed_dim` \
                 or `n_embed`",
                n.saturating_mul(4) >> 30,
                (MAX_WEIGHTS * 4) >> 30
            ));
        }
        Ok(())
    }

    pub(crate) fn from_json_value(v: &serde_json::Value, path: &Path) -> Result<Self> {
        // Field-by-field so that a missing field gives a one-line error naming it.
        let dd = field(v, "ddconfig", "", path)?;
        let mut cfg = Self {
            ddconfig: parse_dd(dd, "ddconfig.", path)?,
            embed_dim: from_field(v, "embed_dim", "", path)?,
            n_embed: from_field(v, "n_embed", "", path)?,
            beta: 0.25,
            legacy: true,
            variant: Variant::default(),
        };
        if let Some(x) = v.get("variant") {
            cfg.variant = Variant::from_json(x, path)?;
        }
        if let Some(b) = v.get("beta") {
            cfg.beta = convert(b, "beta", path)?;
        }
        if let Some(l) = v.get("legacy") {
            cfg.legacy = convert(l, "legacy", path)?;
        }
        Ok(cfg)
    }

    /// Parses taming's `model.yaml` (`model.params.{ddconfig, embed_dim, n_embed}`;
    /// `lossconfig` and everything else is ignored).
    pub fn from_taming_yaml_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        Self::from_taming_yaml_str(&read_text(path)?, path)
    }

    /// [`Self::from_taming_yaml_file`] on text; `path` is only used in messages.
    pub fn from_taming_yaml_str(text: &str, path: &Path) -> Result<Self> {
        let y: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| {
            Error::format(
                path,
                format!("not valid YAML ({})", e.to_string().replace('\n', " ")),
            )
        })?;
        // YAML → JSON value so one set of field readers serves both formats.
        let v: serde_json::Value = serde_json::to_value(&y)
            .map_err(|e| Error::unsupported(path, format!("unsupported YAML content ({e})")))?;
        let model = field(&v, "model", "", path)?;
        let params = field(model, "params", "model.", path)?;
        let cfg = Self {
            ddconfig: parse_dd(
                field(params, "ddconfig", "model.params.", path)?,
                "model.params.ddconfig.",
                path,
            )?,
            embed_dim: from_field(params, "embed_dim", "model.params.", path)?,
            n_embed: from_field(params, "n_embed", "model.params.", path)?,
            beta: 0.25,
            legacy: true,
            variant: Variant::default(),
        };
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// Pretty JSON, the content of `config.json`.
    pub fn to_json_string(&self) -> String {
        serde_json::to_string_pretty(self).expect("config serialises")
    }

    /// taming's `model.yaml` for this model, or why taming's code cannot build it (an
    /// l2-normalised search, `num_res_blocks` 0 — taming sizes its levels from the
    /// ResnetBlocks —, or another family's variant). `lossconfig` is `torch.nn.Identity`, so
    /// `VQModel(**params)` builds without taming's LPIPS/discriminator (which would download
    /// VGG weights) and `load_state_dict(strict=True)` has exactly the model's keys.
    pub fn to_taming_yaml_string(&self) -> std::result::Result<String, &'static str> {
        let d = &self.ddconfig;
        if self.variant.l2_norm {
            return Err("its codes are l2-normalised (fold them first)");
        }
        if d.num_res_blocks == 0 {
            return Err("it has no ResnetBlocks (`num_res_blocks` 0)");
        }
        if !self.variant.is_taming() {
            return Err("it is another family's model");
        }
        let list = |v: &[usize]| {
            let items: Vec<String> = v.iter().map(ToString::to_string).collect();
            format!("[{}]", items.join(", "))
        };
        Ok(format!(
            "# taming-transformers config (configs/*.yaml layout), written by imgseq\n\
             model:\n  target: taming.models.vqgan.VQModel\n  params:\n    \
             embed_dim: {}\n    n_embed: {}\n    ddconfig:\n      \
             double_z: {}\n      z_channels: {}\n      resolution: {}\n      \
             in_channels: {}\n      out_ch: {}\n      ch: {}\n      ch_mult: {}\n      \
             num_res_blocks: {}\n      attn_resolutions: {}\n      dropout: {:?}\n    \
             lossconfig:\n      target: torch.nn.Identity  # inference only\n",
            self.embed_dim,
            self.n_embed,
            if d.double_z { "True" } else { "False" },
            d.z_channels,
            d.resolution,
            d.in_channels,
            d.out_ch,
            d.ch,
            list(&d.ch_mult),
            d.num_res_blocks,
            list(&d.attn_resolutions),
            d.dropout,
        ))
    }
}

pub(crate) fn parse_dd(v: &serde_json::Value, prefix: &str, path: &Path) -> Result<DdConfig> {
    Ok(DdConfig {
        ch: from_field(v, "ch", prefix, path)?,
        ch_mult: from_field(v, "ch_mult", prefix, path)?,
        num_res_blocks: from_field(v, "num_res_blocks", prefix, path)?,
        attn_resolutions: from_field(v, "attn_resolutions", prefix, path)?,
        z_channels: from_field(v, "z_channels", prefix, path)?,
        double_z: from_field(v, "double_z", prefix, path)?,
        resolution: from_field(v, "resolution", prefix, path)?,
        in_channels: from_field(v, "in_channels", prefix, path)?,
        out_ch: from_field(v, "out_ch", prefix, path)?,
        dropout: from_field(v, "dropout", prefix, path)?,
    })
}

pub(crate) fn field<'a>(
    v: &'a serde_json::Value,
    name: &str,
    prefix: &str,
    path: &Path,
) -> Result<&'a serde_json::Value> {
    match v.get(name) {
        Some(x) if !x.is_null() => Ok(x),
        _ => Err(Error::format(
            path,
            format!("missing field `{prefix}{name}`"),
        )),
    }
}

pub(crate) fn from_field<T: serde::de::DeserializeOwned>(
    v: &serde_json::Value,
    name: &str,
    prefix: &str,
    path: &Path,
) -> Result<T> {
    convert(
        field(v, name, prefix, path)?,
        &format!("{prefix}{name}"),
        path,
    )
}

fn convert<T: serde::de::DeserializeOwned>(
    v: &serde_json::Value,
    name: &str,
    path: &Path,
) -> Result<T> {
    // YAML writes `dropout: 0` as an integer; accept it for float fields.
    T::deserialize(v.clone())
        .map_err(|e| Error::format(path, format!("field `{name}` has a wrong value {v} ({e})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAMING_YAML: &str = r#"
model:
  base_learning_rate: 4.5e-06
  target: taming.models.vqgan.VQModel
  params:
    embed_dim: 256
    n_embed: 1024
    ddconfig:
      double_z: False
      z_channels: 256
      resolution: 256
      in_channels: 3
      out_ch: 3
      ch: 128
      ch_mult: [ 1,1,2,2,4]
      num_res_blocks: 2
      attn_resolutions: [16]
      dropout: 0.0
    lossconfig:
      target: taming.modules.losses.vqperceptual.VQLPIPSWithDiscriminator
      params:
        disc_conditional: False
        disc_in_channels: 3
        disc_start: 0
        disc_weight: 0.75
        disc_num_layers: 2
        codebook_weight: 1.0
"#;

    #[test]
    fn taming_yaml_written_reads_back_as_the_same_config() {
        let p = Path::new("model.yaml");
        let mut photo = crate::presets::preset("photo").unwrap();
        photo.variant.l2_norm = false; // what `weights convert --fold-l2-norm` leaves
        for c in [photo, VqConfig::vqgan_imagenet_f16_1024()] {
            let y = c.to_taming_yaml_string().unwrap();
            assert_eq!(VqConfig::from_taming_yaml_str(&y, p).unwrap(), c, "{y}");
            assert!(y.contains("torch.nn.Identity"), "{y}");
        }
        // Not expressible in taming's code: l2-normalised search, no ResnetBlocks.
        assert!(crate::presets::preset("photo")
            .unwrap()
            .to_taming_yaml_string()
            .is_err());
        assert!(crate::presets::preset("small")
            .unwrap()
            .to_taming_yaml_string()
            .is_err());
    }

    #[test]
    fn taming_yaml_gives_the_preset() {
        let c = VqConfig::from_taming_yaml_str(TAMING_YAML, Path::new("model.yaml")).unwrap();
        assert_eq!(c, VqConfig::vqgan_imagenet_f16_1024());
        assert_eq!(c.downsample_factor(), 16);
    }

    #[test]
    fn missing_field_names_file_and_field() {
        let y = TAMING_YAML.replace("      z_channels: 256\n", "");
        let e = VqConfig::from_taming_yaml_str(&y, Path::new("m.yaml"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "m.yaml: missing field `model.params.ddconfig.z_channels`"
        );
        let y = TAMING_YAML.replace("    n_embed: 1024\n", "");
        let e = VqConfig::from_taming_yaml_str(&y, Path::new("m.yaml"))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "m.yaml: missing field `model.params.n_embed`");
    }

    #[test]
    fn json_roundtrip() {
        let c = VqConfig::vqgan_imagenet_f16_1024();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        std::fs::write(&p, c.to_json_string()).unwrap();
        assert_eq!(VqConfig::from_json_file(&p).unwrap(), c);
        // A taming config is written exactly as before the families came: no `variant`.
        assert!(!c.to_json_string().contains("variant"));
        let mut l = c.clone();
        l.variant = crate::variant::Variant::llamagen(true);
        std::fs::write(&p, l.to_json_string()).unwrap();
        assert_eq!(VqConfig::from_json_file(&p).unwrap(), l);
        std::fs::write(&p, r#"{"embed_dim": 4, "n_embed": 8}"#).unwrap();
        let e = VqConfig::from_json_file(&p).unwrap_err().to_string();
        assert!(e.ends_with("missing field `ddconfig`"), "{e}");
    }

    #[test]
    fn yaml_that_json_cannot_hold_is_unsupported() {
        // A sequence as a mapping key: valid YAML, no JSON form.
        let e = VqConfig::from_taming_yaml_str("? [1, 2]\n: 3\n", Path::new("m.yaml")).unwrap_err();
        assert_eq!(e.kind(), imgseq_core::error::ErrorKind::Unsupported);
        assert!(
            e.to_string()
                .starts_with("m.yaml: unsupported YAML content ("),
            "{e}"
        );
    }
}
