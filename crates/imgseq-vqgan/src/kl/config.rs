//! [`KlConfig`]: an `AutoencoderKL`'s shape (read from its diffusers `config.json` by the
//! same reader as diffusers' `VQModel`, [`crate::family::diffusers_config`]) and the latent
//! scaling its pipelines apply; [`KlPreset`]: the released VAEs.

use crate::config::{DdConfig, VqConfig};
use crate::family::{self, Range, Variant};
use imgseq_core::{Error, Result};
use serde_json::Value;
use std::path::Path;

/// Most latent channels a preset or config may have.
const MAX_LATENT: usize = 1024;

/// An `AutoencoderKL` as imgseq runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct KlConfig {
    /// The encoder/decoder shape (`double_z: true`, `z_channels` = `latent_channels`, no
    /// attention but the middle one).
    pub ddconfig: DdConfig,
    /// GroupNorm groups and middle attention (diffusers' `norm_num_groups`,
    /// `mid_block_add_attention`).
    pub variant: Variant,
    /// 1×1 `quant_conv` after the encoder (false for SD3 and FLUX).
    pub use_quant_conv: bool,
    /// 1×1 `post_quant_conv` before the decoder (false for SD3 and FLUX).
    pub use_post_quant_conv: bool,
    /// The pipelines' `z = (latent − shift) · scaling`.
    pub scaling_factor: f64,
    pub shift_factor: Option<f64>,
    /// Per-channel `latents_mean` / `latents_std` (some SDXL derivatives): then
    /// `z = (latent − mean) · scaling / std`.
    pub latents_mean_std: Option<(Vec<f64>, Vec<f64>)>,
    /// `sample_size`: diffusers' tile side for tiled encode/decode.
    pub sample_size: usize,
    /// The decoder's shape where its widths differ from the encoder's
    /// (`decoder_block_out_channels`, FLUX.2).
    pub decoder: Option<DdConfig>,
    /// FLUX.2 (`AutoencoderKLFlux2`): the latents its pipeline feeds the transformer are
    /// p×p-patchified and normalised by the VAE's BatchNorm running statistics.
    pub latent_bn: Option<LatentBatchNorm>,
}

/// FLUX.2's latent normalisation (`Flux2Pipeline._encode_vae_image`): the posterior's
/// latents `_patchify_latents` (channel `c·p² + dy·p + dx` of each p×p cell), then
/// `(z − bn.running_mean) / sqrt(bn.running_var + eps)`; decoding undoes both.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LatentBatchNorm {
    /// `patch_size` (square).
    pub patch: usize,
    /// `batch_norm_eps`.
    pub eps: f64,
}

/// The released VAEs (all with the SD architecture: `block_out_channels` [128, 256, 512, 512],
/// 2 layers per block, 32 groups, f8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KlPreset {
    /// Stable Diffusion 1.x / 2.x (`sd-vae-ft-mse`): 4 channels, scaling 0.18215.
    Sd,
    /// SDXL: 4 channels, scaling 0.13025.
    Sdxl,
    /// SD3: 16 channels, scaling 1.5305, shift 0.0609, no quant convs.
    Sd3,
    /// FLUX.1: 16 channels, scaling 0.3611, shift 0.1159, no quant convs.
    Flux,
}

impl KlPreset {
    /// Every preset with its name (`--preset`).
    pub const ALL: [(&'static str, KlPreset); 4] = [
        ("sd", KlPreset::Sd),
        ("sdxl", KlPreset::Sdxl),
        ("sd3", KlPreset::Sd3),
        ("flux", KlPreset::Flux),
    ];

    /// The preset called `name` (`sd1`, `sd2` are `sd`).
    pub fn from_name(name: &str) -> Result<Self> {
        let n = name.to_ascii_lowercase();
        let n = match n.as_str() {
            "sd1" | "sd2" | "sd15" | "sd21" => "sd",
            other => other,
        };
        Self::ALL
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, p)| *p)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|(k, _)| *k).collect();
                Error::setting("preset", name, format!("known: {}", names.join(", ")))
            })
    }

    pub fn config(self) -> KlConfig {
        let (latent, scaling, shift, quant, sample) = match self {
            KlPreset::Sd => (4, 0.18215, None, true, 512),
            KlPreset::Sdxl => (4, 0.13025, None, true, 1024),
            KlPreset::Sd3 => (16, 1.5305, Some(0.0609), false, 1024),
            KlPreset::Flux => (16, 0.3611, Some(0.1159), false, 1024),
        };
        KlConfig {
            ddconfig: dd(128, vec![1, 2, 4, 4], 2, latent, (3, 3)),
            variant: Variant::diffusers(32, true, Range::MinusOneOne),
            use_quant_conv: quant,
            use_post_quant_conv: quant,
            scaling_factor: scaling,
            shift_factor: shift,
            latents_mean_std: None,
            sample_size: sample,
            decoder: None,
            latent_bn: None,
        }
    }
}

fn dd(
    ch: usize,
    ch_mult: Vec<usize>,
    blocks: usize,
    latent: usize,
    io: (usize, usize),
) -> DdConfig {
    DdConfig {
        ch,
        ch_mult,
        num_res_blocks: blocks,
        attn_resolutions: vec![],
        z_channels: latent,
        double_z: true,
        resolution: 256,
        in_channels: io.0,
        out_ch: io.1,
        dropout: 0.0,
    }
}

/// The decoder's shape where `decoder_block_out_channels` differs from the encoder's widths
/// (`net`: the config as the VQ reader takes it).
fn decoder_of(v: &Value, net: &Value, path: &Path) -> Result<Option<DdConfig>> {
    let widths: Option<Vec<usize>> = opt(v, "decoder_block_out_channels", None, path)?;
    match widths {
        Some(w) if w != vq_widths(v, path)? => {
            let mut d = net.clone();
            d["block_out_channels"] = Value::from(w);
            let mut dd = family::diffusers_config(&d, path, Range::MinusOneOne)?.ddconfig;
            dd.double_z = false;
            Ok(Some(dd))
        }
        _ => Ok(None),
    }
}

/// FLUX.2's `patch_size` (square) and `batch_norm_eps`.
fn latent_batch_norm(v: &Value, path: &Path) -> Result<LatentBatchNorm> {
    let p: Vec<usize> = opt(v, "patch_size", vec![2, 2], path)?;
    if p.len() != 2 || p[0] != p[1] || p[0] == 0 || p[0] > 16 {
        return Err(Error::format(
            path,
            format!("`patch_size` is {p:?}; imgseq reads square patches of 1 to 16"),
        ));
    }
    let eps: f64 = opt(v, "batch_norm_eps", 1e-4, path)?;
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::format(
            path,
            format!("`batch_norm_eps` is {eps}; must be finite and ≥ 0"),
        ));
    }
    Ok(LatentBatchNorm { patch: p[0], eps })
}

/// `block_out_channels` as given (diffusers' default `[64]`).
fn vq_widths(v: &Value, path: &Path) -> Result<Vec<usize>> {
    opt(v, "block_out_channels", vec![64], path)
}

/// `name`'s value, or `default` when absent or null.
fn opt<T: serde::de::DeserializeOwned>(
    v: &Value,
    name: &str,
    default: T,
    path: &Path,
) -> Result<T> {
    match v.get(name) {
        Some(x) if !x.is_null() => T::deserialize(x.clone()).map_err(|e| {
            Error::format(path, format!("field `{name}` has a wrong value {x} ({e})"))
        }),
        _ => Ok(default),
    }
}

impl KlConfig {
    /// The latent channels (`latent_channels`).
    pub fn latent_channels(&self) -> usize {
        self.ddconfig.z_channels
    }

    /// The side of the latent patches the pipeline reads (FLUX.2: 2; else 1).
    pub fn latent_patch(&self) -> usize {
        self.latent_bn.map_or(1, |b| b.patch)
    }

    /// Channels of one latent cell as the tokenizer gives it (FLUX.2: latent · p²).
    pub fn output_channels(&self) -> usize {
        self.latent_channels() * self.latent_patch() * self.latent_patch()
    }

    /// Pixels per latent cell side as the tokenizer gives it (FLUX.2: 2^(levels − 1) · p).
    pub fn output_factor(&self) -> usize {
        self.downsample_factor() * self.latent_patch()
    }

    /// The decoder's shape ([`Self::decoder`], else the encoder's).
    pub fn decoder_config(&self) -> &DdConfig {
        self.decoder.as_ref().unwrap_or(&self.ddconfig)
    }

    /// Spatial downsampling factor, 2^(levels − 1).
    pub fn downsample_factor(&self) -> usize {
        self.probe().downsample_factor()
    }

    /// A VQ config of the same network, for the checks shared with the VQ families.
    fn probe(&self) -> VqConfig {
        let mut ddconfig = self.ddconfig.clone();
        ddconfig.double_z = false;
        VqConfig {
            ddconfig,
            embed_dim: self.latent_channels(),
            n_embed: 1,
            beta: 0.25,
            legacy: true,
            variant: self.variant.clone(),
        }
    }

    /// The one input-size rule of the conv network ([`VqConfig::check_side`]).
    pub fn check_side(&self, setting: &'static str, size: usize) -> Result<()> {
        self.probe().check_side(setting, size)
    }

    /// Reads a diffusers `AutoencoderKL` `config.json`.
    pub fn from_diffusers_json(v: &Value, path: &Path) -> Result<Self> {
        if !v.is_object() {
            return Err(Error::format(path, "not a JSON object"));
        }
        let class = v.get("_class_name");
        let flux2 = class.and_then(Value::as_str) == Some("AutoencoderKLFlux2");
        if let Some(c) = class.filter(|_| !flux2) {
            if c.as_str() != Some("AutoencoderKL") {
                return Err(Error::format(
                    path,
                    format!(
                        "`_class_name` is {c}; this reader takes diffusers `AutoencoderKL` and \
                         `AutoencoderKLFlux2` configs"
                    ),
                ));
            }
        }
        // The network fields are VQModel's; only the latent default differs (4, not 3).
        let mut net = v.clone();
        let m = net.as_object_mut().expect("checked object");
        m.remove("_class_name");
        for k in [
            "decoder_block_out_channels",
            "batch_norm_eps",
            "batch_norm_momentum",
            "patch_size",
        ] {
            m.remove(k);
        }
        if m.get("latent_channels").is_none_or(Value::is_null) {
            m.insert("latent_channels".into(), Value::from(4));
        }
        let vq = family::diffusers_config(&net, path, Range::MinusOneOne)?;
        let mut ddconfig = vq.ddconfig;
        ddconfig.double_z = true;
        let mean: Option<Vec<f64>> = opt(v, "latents_mean", None, path)?;
        let std: Option<Vec<f64>> = opt(v, "latents_std", None, path)?;
        let latents_mean_std = match (mean, std) {
            (Some(m), Some(s)) => Some((m, s)),
            (None, None) => None,
            _ => {
                return Err(Error::format(
                    path,
                    "`latents_mean` and `latents_std` must be given together",
                ))
            }
        };
        let quant: bool = opt(v, "use_quant_conv", true, path)?;
        let decoder = decoder_of(v, &net, path)?;
        let latent_bn = if flux2 {
            Some(latent_batch_norm(v, path)?)
        } else {
            None
        };
        // FLUX.2's pipeline applies no scaling factor: its BatchNorm statistics do the work.
        let (scaling, shift) = match flux2 {
            true => (1.0, None),
            false => (
                opt(v, "scaling_factor", 0.18215, path)?,
                opt(v, "shift_factor", None, path)?,
            ),
        };
        let cfg = Self {
            ddconfig,
            variant: vq.variant,
            use_quant_conv: quant,
            use_post_quant_conv: opt(v, "use_post_quant_conv", true, path)?,
            scaling_factor: scaling,
            shift_factor: shift,
            latents_mean_std,
            sample_size: opt(v, "sample_size", 32, path)?,
            decoder,
            latent_bn,
        };
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// Reads a `config.json` file ([`Self::from_diffusers_json`]).
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = crate::config::read_text(path)?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| Error::format(path, format!("not valid JSON ({e})")))?;
        Self::from_diffusers_json(&v, path)
    }

    /// The checks of the VQ families' configs plus the scaling's.
    pub fn validate(&self, path: &Path) -> Result<()> {
        self.probe().validate(path)?;
        let bad = |m: String| Err(Error::format(path, m));
        let l = self.latent_channels();
        if l > MAX_LATENT {
            return bad(format!("`latent_channels` is {l}; at most {MAX_LATENT}"));
        }
        let s = self.scaling_factor;
        if !s.is_finite() || s == 0.0 {
            return bad(format!(
                "`scaling_factor` is {s}; must be a finite non-zero number"
            ));
        }
        if let Some(f) = self.shift_factor.filter(|f| !f.is_finite()) {
            return bad(format!("`shift_factor` is {f}; must be finite"));
        }
        if let Some((m, sd)) = &self.latents_mean_std {
            if m.len() != l || sd.len() != l {
                return bad(format!(
                    "`latents_mean` / `latents_std` have {} / {} values for {l} latent channels",
                    m.len(),
                    sd.len()
                ));
            }
            if m.iter().any(|x| !x.is_finite()) || sd.iter().any(|x| !x.is_finite() || *x <= 0.0) {
                return bad("`latents_mean` must be finite and `latents_std` positive".into());
            }
        }
        if self.sample_size == 0 || self.sample_size > 1 << 16 {
            return bad(format!(
                "`sample_size` is {}; must be 1 to 65536",
                self.sample_size
            ));
        }
        Ok(())
    }

    /// Per channel: `(shift_c, scale_c)` with `z_c = (latent_c − shift_c) · scale_c`, as the
    /// pipelines scale (SD/SDXL: shift 0; SD3/FLUX: the shift factor; `latents_mean/std`:
    /// per channel).
    pub fn channel_scaling(&self) -> Vec<(f64, f64)> {
        let l = self.latent_channels();
        let s = self.scaling_factor;
        match &self.latents_mean_std {
            Some((m, sd)) => m.iter().zip(sd).map(|(m, d)| (*m, s / d)).collect(),
            None => vec![(self.shift_factor.unwrap_or(0.0), s); l],
        }
    }

    /// The weights, upper bound, as [`VqConfig::weight_count`] counts them.
    pub fn weight_count(&self) -> u128 {
        self.probe().weight_count()
    }

    /// The config as recorded in a latent shard set's manifest.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "ddconfig": self.ddconfig,
            "variant": self.variant,
            "use_quant_conv": self.use_quant_conv,
            "use_post_quant_conv": self.use_post_quant_conv,
            "scaling_factor": self.scaling_factor,
            "shift_factor": self.shift_factor,
            "latents_mean_std": self.latents_mean_std,
            "sample_size": self.sample_size,
            "decoder": self.decoder,
            "latent_bn": self.latent_bn,
        })
    }

    /// A short description for reports: `f8, 4 latent channels, scaling 0.18215`.
    pub fn describe(&self) -> String {
        let shift = match self.shift_factor {
            Some(s) => format!(", shift {s}"),
            None => String::new(),
        };
        if let Some(b) = self.latent_bn {
            return format!(
                "f{}, {} latent channels ({} x {p}x{p} patches) normalised by the BatchNorm \
                 statistics",
                self.output_factor(),
                self.output_channels(),
                self.latent_channels(),
                p = b.patch
            );
        }
        format!(
            "f{}, {} latent channels, scaling {}{shift}{}",
            self.downsample_factor(),
            self.latent_channels(),
            self.scaling_factor,
            if self.use_quant_conv {
                ""
            } else {
                ", no quant convs"
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_have_the_published_scaling() {
        let sd = KlPreset::from_name("SD1").unwrap().config();
        assert_eq!((sd.latent_channels(), sd.scaling_factor), (4, 0.18215));
        assert_eq!(sd.downsample_factor(), 8);
        let flux = KlPreset::Flux.config();
        assert_eq!(flux.channel_scaling()[15], (0.1159, 0.3611));
        assert!(!flux.use_quant_conv && !flux.use_post_quant_conv);
        let sd3 = KlPreset::Sd3.config();
        assert_eq!(
            (sd3.latent_channels(), sd3.shift_factor),
            (16, Some(0.0609))
        );
        assert_eq!(KlPreset::Sdxl.config().scaling_factor, 0.13025);
        let e = KlPreset::from_name("sd4").unwrap_err().to_string();
        assert!(e.contains("sd, sdxl, sd3, flux"), "{e}");
        for (_, p) in KlPreset::ALL {
            p.config().validate(Path::new("preset")).unwrap();
        }
    }

    #[test]
    fn diffusers_config_errors_name_the_field() {
        let p = Path::new("vae/config.json");
        let ok = serde_json::json!({"_class_name": "AutoencoderKL", "block_out_channels": [32, 64],
            "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"],
            "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"], "norm_num_groups": 8,
            "shift_factor": 0.1, "use_quant_conv": false});
        let c = KlConfig::from_diffusers_json(&ok, p).unwrap();
        assert_eq!(
            (c.latent_channels(), c.ddconfig.ch_mult.clone()),
            (4, vec![1, 2])
        );
        assert!(!c.use_quant_conv && c.use_post_quant_conv && c.ddconfig.double_z);
        for (k, bad, want) in [
            ("_class_name", serde_json::json!("VQModel"), "_class_name"),
            ("scaling_factor", serde_json::json!(0.0), "scaling_factor"),
            (
                "latent_channels",
                serde_json::json!("four"),
                "latent_channels",
            ),
            ("norm_num_groups", serde_json::json!(5), "GroupNorm(5)"),
            ("latents_mean", serde_json::json!([0.0]), "latents_std"),
            ("act_fn", serde_json::json!("gelu"), "act_fn"),
        ] {
            let mut v = ok.clone();
            v[k] = bad;
            let e = KlConfig::from_diffusers_json(&v, p)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("vae/config.json: ") && e.contains(want),
                "{k}: {e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn latents_mean_std_scale_per_channel() {
        let mut c = KlPreset::Sdxl.config();
        c.latents_mean_std = Some((vec![0.1, 0.2, 0.3, 0.4], vec![2.0, 4.0, 1.0, 0.5]));
        c.validate(Path::new("x")).unwrap();
        let s = c.channel_scaling();
        assert_eq!(s[1], (0.2, 0.13025 / 4.0));
        assert_eq!(s[3], (0.4, 0.13025 / 0.5));
    }
}
