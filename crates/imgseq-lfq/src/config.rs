//! The settings of an Open-MAGVIT2 model: from its LightningCLI yaml (`model.init_args`:
//! `ddconfig`, `n_embed`, `embed_dim`, `use_ema`, `factorized_bits`; taming's older
//! `model.params` layout is read too), or read off the weights' shapes when no yaml is given.

use imgseq_core::{Error, Result};
use serde_yaml::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// GroupNorm groups everywhere in the network (`nn.GroupNorm(32, c)`).
pub const GROUPS: usize = 32;
/// Most bits a token may have (tokens stay below 2^31).
pub const MAX_BITS: usize = 31;
/// Largest config file read.
const MAX_YAML_BYTES: u64 = 1 << 20;

/// An Open-MAGVIT2 encoder/decoder and its quantizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LfqConfig {
    /// Base channel count (`ch`, 128 in the released models).
    pub ch: usize,
    /// Channel multiplier per resolution level (`ch_mult`, [1, 1, 2, 2, 4]).
    pub ch_mult: Vec<usize>,
    /// Res blocks per level and in the middle (`num_res_blocks`, 4).
    pub num_res_blocks: usize,
    /// Latent channels = bits per token (`z_channels` = `embed_dim`, 18).
    pub z_channels: usize,
    pub in_channels: usize,
    pub out_ch: usize,
    /// Whether their inference runs the EMA copies of the weights (`use_ema`).
    pub use_ema: bool,
    /// The factorised split of the bits (`factorized_bits`, default [9, 9] for 18 bits,
    /// else the two halves).
    pub factorized_bits: [usize; 2],
    /// The image side of the yaml's test data (`data.init_args.test.params.config.size`).
    pub size: Option<u32>,
}

fn bad(path: &Path, msg: impl Into<String>) -> Error {
    Error::format(path, msg)
}

/// `v` as a non-negative integer, or an error naming `key`.
fn uint(path: &Path, v: &Value, key: &str) -> Result<usize> {
    match v.as_u64() {
        Some(n) => usize::try_from(n).map_err(|_| bad(path, format!("{key} {n} is too large"))),
        None if v.is_null() => Err(bad(path, format!("missing {key}"))),
        None => Err(bad(
            path,
            format!("{key} must be a non-negative integer, got {}", show(v)),
        )),
    }
}

fn show(v: &Value) -> String {
    serde_yaml::to_string(v)
        .map(|s| s.trim().replace('\n', " "))
        .unwrap_or_else(|_| "?".into())
}

fn uint_list(path: &Path, v: &Value, key: &str) -> Result<Vec<usize>> {
    let seq = v.as_sequence().ok_or_else(|| {
        bad(
            path,
            format!("{key} must be a list of integers, got {}", show(v)),
        )
    })?;
    seq.iter()
        .enumerate()
        .map(|(i, x)| uint(path, x, &format!("{key}[{i}]")))
        .collect()
}

/// The default split of `bits` bits: their [9, 9] for 18, else the two halves.
pub fn default_split(bits: usize) -> [usize; 2] {
    [bits / 2, bits - bits / 2]
}

impl LfqConfig {
    /// Reads their yaml config (`configs/gpu/imagenet_lfqgan_256_L.yaml` and the like).
    pub fn from_yaml(path: &Path) -> Result<Self> {
        let bytes = imgseq_core::weights::read_regular_file(path, MAX_YAML_BYTES, "config")?;
        let text = String::from_utf8(bytes).map_err(|_| bad(path, "not UTF-8 text"))?;
        Self::from_yaml_str(path, &text)
    }

    /// [`Self::from_yaml`] on the file's text (`path` only names it in messages).
    pub fn from_yaml_str(path: &Path, text: &str) -> Result<Self> {
        let root: Value = serde_yaml::from_str(text).map_err(|e| {
            bad(
                path,
                format!(
                    "not valid YAML ({})",
                    e.to_string().lines().next().unwrap_or("")
                ),
            )
        })?;
        let model = &root["model"];
        if model.is_null() {
            return Err(bad(
                path,
                "no `model` section (expected their LightningCLI config)",
            ));
        }
        let (args, prefix) = if !model["init_args"].is_null() {
            (&model["init_args"], "model.init_args")
        } else if !model["params"].is_null() {
            (&model["params"], "model.params")
        } else {
            return Err(bad(path, "no model.init_args (or model.params) section"));
        };
        let class = model["class_path"].as_str().or(model["target"].as_str());
        if let Some(c) = class {
            if !c.ends_with("lfqgan.VQModel") {
                return Err(Error::unsupported(
                    path,
                    format!("model class {c} is not Open-MAGVIT2's lfqgan.VQModel"),
                ));
            }
        }
        let dd = &args["ddconfig"];
        let key = |k: &str| format!("{prefix}.ddconfig.{k}");
        if dd["double_z"].as_bool() == Some(true) {
            return Err(Error::unsupported(
                path,
                format!("{} true", key("double_z")),
            ));
        }
        let z_channels = uint(path, &dd["z_channels"], &key("z_channels"))?;
        let embed_dim = uint(path, &args["embed_dim"], &format!("{prefix}.embed_dim"))?;
        let n_embed = uint(path, &args["n_embed"], &format!("{prefix}.n_embed"))?;
        if embed_dim != z_channels {
            return Err(bad(
                path,
                format!("{prefix}.embed_dim {embed_dim} differs from z_channels {z_channels} (LFQ quantizes the latent itself)"),
            ));
        }
        if z_channels > MAX_BITS || n_embed != 1usize << z_channels {
            return Err(bad(
                path,
                format!("{prefix}.n_embed {n_embed} is not 2^embed_dim = 2^{z_channels} (LFQ has one bit per latent channel, at most {MAX_BITS})"),
            ));
        }
        let factorized_bits = match &args["factorized_bits"] {
            Value::Null => default_split(z_channels),
            v => match uint_list(path, v, &format!("{prefix}.factorized_bits"))?[..] {
                [a, b] => [a, b],
                _ => {
                    return Err(bad(
                        path,
                        format!("{prefix}.factorized_bits must have two entries"),
                    ))
                }
            },
        };
        let size = root["data"]["init_args"]["test"]["params"]["config"]["size"]
            .as_u64()
            .and_then(|s| u32::try_from(s).ok());
        let cfg = Self {
            ch: uint(path, &dd["ch"], &key("ch"))?,
            ch_mult: uint_list(path, &dd["ch_mult"], &key("ch_mult"))?,
            num_res_blocks: uint(path, &dd["num_res_blocks"], &key("num_res_blocks"))?,
            z_channels,
            in_channels: uint(path, &dd["in_channels"], &key("in_channels"))?,
            out_ch: uint(path, &dd["out_ch"], &key("out_ch"))?,
            use_ema: args["use_ema"].as_bool().unwrap_or(false),
            factorized_bits,
            size,
        };
        cfg.check(path)?;
        Ok(cfg)
    }

    /// The settings the weights' shapes imply (no yaml): `ch` from `encoder.conv_in`, the
    /// levels and their multipliers from `encoder.down.{i}.block.0.conv1`, the res blocks from
    /// level 0, the bits from `encoder.conv_out`; `use_ema` when `model_ema.*` copies exist.
    pub fn infer(path: &Path, shapes: &BTreeMap<String, Vec<usize>>) -> Result<Self> {
        let dims = |k: &str| -> Result<&Vec<usize>> {
            shapes.get(k).ok_or_else(|| {
                Error::weights(
                    path,
                    format!("missing tensor `{k}` (not an Open-MAGVIT2 checkpoint?)"),
                )
            })
        };
        let conv_in = dims("encoder.conv_in.weight")?;
        let conv_out = dims("encoder.conv_out.weight")?;
        let dec_out = dims("decoder.conv_out.weight")?;
        let (&[ch, in_channels, ..], &[z_channels, ..], &[out_ch, ..]) =
            (&conv_in[..], &conv_out[..], &dec_out[..])
        else {
            return Err(Error::weights(path, "conv weights must have 4 dimensions"));
        };
        let mut ch_mult = Vec::new();
        while let Some(s) = shapes.get(&format!(
            "encoder.down.{}.block.0.conv1.weight",
            ch_mult.len()
        )) {
            if ch == 0 || s.is_empty() || s[0] % ch != 0 || ch_mult.len() >= 16 {
                return Err(Error::weights(
                    path,
                    format!("encoder.down.{}.block.0.conv1.weight has shape {s:?}, not a multiple of ch {ch}", ch_mult.len()),
                ));
            }
            ch_mult.push(s[0] / ch);
        }
        let mut num_res_blocks = 0;
        while shapes.contains_key(&format!(
            "encoder.down.0.block.{num_res_blocks}.conv1.weight"
        )) {
            num_res_blocks += 1;
        }
        let cfg = Self {
            ch,
            ch_mult,
            num_res_blocks,
            z_channels,
            in_channels,
            out_ch,
            use_ema: shapes.keys().any(|k| k.starts_with("model_ema.encoder")),
            factorized_bits: default_split(z_channels),
            size: None,
        };
        cfg.check(path)?;
        Ok(cfg)
    }

    /// Checks the settings this implementation runs (`path` names the config or weights).
    pub fn check(&self, path: &Path) -> Result<()> {
        let fail = |msg: String| Err(bad(path, msg));
        if self.ch_mult.is_empty() || self.ch_mult.len() > 8 {
            return fail(format!(
                "ch_mult {:?} must have 1 to 8 levels",
                self.ch_mult
            ));
        }
        if self.num_res_blocks == 0 || self.num_res_blocks > 32 {
            return fail(format!(
                "num_res_blocks {} must be 1 to 32",
                self.num_res_blocks
            ));
        }
        for &m in &self.ch_mult {
            let c = self.ch.saturating_mul(m);
            if c == 0 || !c.is_multiple_of(GROUPS) || c > 8192 {
                return fail(format!(
                    "ch {} × ch_mult {:?} must give channel counts that are positive multiples of {GROUPS} (GroupNorm) up to 8192",
                    self.ch, self.ch_mult
                ));
            }
        }
        if self.z_channels == 0 || self.z_channels > MAX_BITS {
            return fail(format!(
                "z_channels {} must be 1 to {MAX_BITS} (one bit each)",
                self.z_channels
            ));
        }
        let [a, b] = self.factorized_bits;
        if a == 0 || b == 0 || a + b != self.z_channels {
            return fail(format!(
                "factorized_bits [{a}, {b}] must be two positive counts adding up to z_channels {}",
                self.z_channels
            ));
        }
        if self.in_channels != 3 || self.out_ch != 3 {
            return Err(Error::unsupported(
                path,
                format!(
                    "in_channels {} / out_ch {}: only RGB models (3 / 3) are supported",
                    self.in_channels, self.out_ch
                ),
            ));
        }
        Ok(())
    }

    /// Bits per token (= latent channels).
    /// The settings as recorded in a token shard set's manifest.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "ch": self.ch,
            "ch_mult": self.ch_mult,
            "num_res_blocks": self.num_res_blocks,
            "z_channels": self.z_channels,
            "in_channels": self.in_channels,
            "out_ch": self.out_ch,
            "use_ema": self.use_ema,
            "factorized_bits": self.factorized_bits,
        })
    }

    pub fn bits(&self) -> usize {
        self.z_channels
    }

    /// Codebook size, 2^bits.
    pub fn codebook_size(&self) -> usize {
        1 << self.z_channels
    }

    /// Pixels per token along a side: 2^(levels − 1) (16 for the released models).
    pub fn downsample_factor(&self) -> usize {
        1 << (self.ch_mult.len() - 1)
    }

    /// The side their test data uses, else 256.
    pub fn default_size(&self) -> u32 {
        self.size.unwrap_or(256)
    }

    /// Fails unless `size` is a multiple of the downsampling factor with a token grid of at
    /// least 2×2 (the decoder's adaptive norm takes a variance over the grid).
    pub fn check_input_size(&self, size: usize) -> Result<()> {
        let f = self.downsample_factor();
        if size == 0 || !size.is_multiple_of(f) || size / f < 2 {
            return Err(Error::setting(
                "size",
                size,
                format!("must be a multiple of {f} (the downsampling factor) giving a token grid of at least 2x2"),
            ));
        }
        Ok(())
    }

    /// About how many bytes one forward pass over `n` images of `h`×`w` pixels needs: a few
    /// live activations of the widest full-resolution level.
    pub fn forward_bytes(&self, n: usize, h: usize, w: usize) -> u128 {
        let widest = self.ch * self.ch_mult.iter().copied().max().unwrap_or(1);
        8 * 4 * n as u128 * h as u128 * w as u128 * widest as u128
    }

    /// Fails before any work when [`Self::forward_bytes`] is over the memory budget.
    pub fn check_memory(&self, n: usize, h: usize, w: usize) -> Result<()> {
        imgseq_core::budget::check_memory(self.forward_bytes(n, h, w)).map_err(|why| {
            Error::resource_limit(format!("a batch of {n} images of {h}x{w} pixels {why}"))
        })
    }
}

/// What the `family_config` fuzz target runs in this crate (and the corpus replay test): the
/// bytes as an Open-MAGVIT2 yaml, read and checked as the loader does, then the sizes derived
/// from a valid one. Must never panic.
#[doc(hidden)]
pub fn fuzz_config_bytes(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = LfqConfig::from_yaml_str(Path::new("fuzz/config.yaml"), text) {
        let size = c.default_size() as usize;
        let _ = (
            c.codebook_size(),
            c.check_input_size(size),
            c.check_memory(1, size, size),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed `fuzz/corpus/family_config` inputs, replayed through the yaml reader.
    #[test]
    fn family_config_corpus_replays_through_the_lfq_reader_without_panic() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/family_config");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            fuzz_config_bytes(&std::fs::read(e.unwrap().path()).unwrap());
            n += 1;
        }
        assert!(n > 0, "{}: empty corpus", dir.display());
    }

    const YAML: &str = "model:
  class_path: open_magvit2.taming.models.lfqgan.VQModel
  init_args:
    ddconfig: {double_z: false, z_channels: 18, resolution: 128, in_channels: 3, out_ch: 3, ch: 128, ch_mult: [1,1,2,2,4], num_res_blocks: 4}
    n_embed: 262144
    embed_dim: 18
    use_ema: True
data:
  init_args:
    test: {params: {config: {size: 256}}}
";

    fn parse(text: &str) -> Result<LfqConfig> {
        LfqConfig::from_yaml_str(Path::new("c.yaml"), text)
    }

    #[test]
    fn released_yaml_reads_as_published() {
        let c = parse(YAML).unwrap();
        assert_eq!((c.ch, c.num_res_blocks, c.z_channels), (128, 4, 18));
        assert_eq!(c.ch_mult, vec![1, 1, 2, 2, 4]);
        assert!(c.use_ema);
        assert_eq!(c.factorized_bits, [9, 9]);
        assert_eq!(
            (c.codebook_size(), c.downsample_factor(), c.default_size()),
            (1 << 18, 16, 256)
        );
    }

    #[test]
    fn bad_yaml_gives_one_line_errors_naming_the_key() {
        let cases = [
            (
                YAML.replace("n_embed: 262144", "n_embed: 16384"),
                "n_embed 16384 is not 2^embed_dim",
            ),
            (
                YAML.replace("embed_dim: 18", "embed_dim: 8"),
                "embed_dim 8 differs",
            ),
            (YAML.replace("ch: 128,", "ch: 100,"), "multiples of 32"),
            (
                YAML.replace("ch: 128,", "ch: -1,"),
                "ddconfig.ch must be a non-negative integer",
            ),
            (
                YAML.replace("ch_mult: [1,1,2,2,4]", "ch_mult: 4"),
                "ch_mult must be a list",
            ),
            (
                YAML.replace(" num_res_blocks: 4", " x: 4"),
                "missing model.init_args.ddconfig.num_res_blocks",
            ),
            (
                YAML.replace("lfqgan.VQModel", "ibqgan.IBQ"),
                "is not Open-MAGVIT2's",
            ),
            (YAML.replace("model:", "modell:"), "no `model` section"),
            ("model: [1, 2".to_string(), "not valid YAML"),
        ];
        for (text, want) in cases {
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains('\n'), "{want}: {e}");
            assert!(e.starts_with("c.yaml: "), "{e}");
        }
    }

    #[test]
    fn input_size_must_fit_the_grid() {
        let c = parse(YAML).unwrap();
        assert!(c.check_input_size(256).is_ok());
        for s in [0, 16, 250] {
            assert!(c.check_input_size(s).is_err(), "{s}");
        }
    }
}
