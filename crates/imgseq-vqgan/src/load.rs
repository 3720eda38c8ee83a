//! Loading a [`VqModel`] from safetensors (+ `config.json`) or a taming `.ckpt`
//! (+ `model.yaml` or `config.json`), with strict key checks; and the two other families'
//! released layouts ([`crate::family`]): LlamaGen's `vq_ds16_c2i.pt` (no config needed) or
//! `model.safetensors` + `config.json`, and diffusers' `VQModel` folders (`config.json` +
//! `diffusion_pytorch_model.safetensors`).

use crate::config::VqConfig;
use crate::family::{self, Family, LlamagenShape};
use crate::model::VqModel;
use crate::rename::{self, RenamedWeights};
use candle_core::{DType, Device};
use imgseq_core::weights::model_error;
use imgseq_core::{AuditedWeights, Error, Result};
use imgseq_torch::lightning::WeightSet;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use crate::convert::{
    convert_checkpoint, convert_outputs, fold_l2_norm, ConvertOptions, ConvertReport,
};

/// Prefix of the training-only tensors (LPIPS, discriminator) in taming checkpoints.
pub const IGNORED_PREFIXES: [&str; 1] = ["loss."];

/// What a weights file holds, told by its first bytes (then by its extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightsFormat {
    /// A `torch.save` zip (torch >= 1.6), e.g. a Lightning `last.ckpt`.
    TorchZip,
    /// A pickle without the zip: torch < 1.6's legacy format or `pickle.dump` (refused by
    /// the checkpoint reader with a message saying so).
    BarePickle,
    Safetensors,
}

/// The format of the file at `path` (which must be a regular file): zip magic → torch; a
/// pickle `PROTO` → bare pickle; an 8-byte header length followed by `{` → safetensors;
/// otherwise `.ckpt`/`.pt`/`.pth`/`.bin` → torch, anything else safetensors.
pub fn weights_format(path: &Path) -> Result<WeightsFormat> {
    use std::io::Read;
    let (f, _) = imgseq_core::weights::open_regular_file(path)?;
    let mut head = Vec::with_capacity(9);
    f.take(9)
        .read_to_end(&mut head)
        .map_err(|e| Error::io(path, e))?;
    Ok(format_of(path, &head))
}

fn format_of(path: &Path, head: &[u8]) -> WeightsFormat {
    if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
        return WeightsFormat::TorchZip;
    }
    if matches!(head, [0x80, 2..=5, ..]) {
        return WeightsFormat::BarePickle;
    }
    if head.len() == 9 && head[8] == b'{' {
        return WeightsFormat::Safetensors;
    }
    match path.extension().and_then(|e| e.to_str()) {
        Some("ckpt" | "pt" | "pth" | "bin") => WeightsFormat::TorchZip,
        _ => WeightsFormat::Safetensors,
    }
}

/// True when the file is a torch checkpoint (zip or bare pickle), see [`weights_format`].
/// A path that cannot be read is judged by its extension (its reader then says why).
pub fn is_torch_checkpoint(path: &Path) -> bool {
    match weights_format(path) {
        Ok(f) => f != WeightsFormat::Safetensors,
        Err(_) => format_of(path, &[]) == WeightsFormat::TorchZip,
    }
}

/// Reads every tensor of a safetensors file or a torch checkpoint's state dict.
pub fn load_weights(path: impl AsRef<Path>, device: &Device) -> Result<AuditedWeights> {
    let path = path.as_ref();
    if is_torch_checkpoint(path) {
        let sd = imgseq_torch::read_state_dict(path, device)?;
        let map: HashMap<String, _> = sd.into_iter().map(|(k, t)| (k, t.tensor)).collect();
        Ok(AuditedWeights::new(path, map))
    } else {
        AuditedWeights::from_safetensors(path, device)
    }
}

/// The `config.json` of a source given as a model folder or as the weights file inside one
/// (the families told by their `config.json`: Emu3, DC-AE).
pub fn config_beside(source: &Path) -> PathBuf {
    if source.is_dir() {
        source.join("config.json")
    } else {
        source.with_file_name("config.json")
    }
}

/// A config file parsed: JSON, or YAML for `.yaml`/`.yml`.
pub fn read_config(path: &Path) -> Result<serde_json::Value> {
    let text = crate::config::read_text(path)?;
    let yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    if yaml {
        serde_yaml::from_str(&text)
            .map_err(|e| Error::format(path, format!("not valid YAML ({e})")))
    } else {
        serde_json::from_str(&text)
            .map_err(|e| Error::format(path, format!("not valid JSON ({e})")))
    }
}

/// The config that belongs to a weights file `DIR/NAME.ext` when none is given, the first of
/// `DIR/NAME_config.json`, `DIR/config.json`, `DIR/NAME_model.yaml`, `DIR/model.yaml`.
pub fn default_config_path(weights: &Path) -> Result<PathBuf> {
    let dir = weights
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let stem = weights
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let names = [
        format!("{stem}_config.json"),
        "config.json".to_string(),
        format!("{stem}_model.yaml"),
        "model.yaml".to_string(),
    ];
    for name in &names {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(Error::invalid(format!(
        "{}: no config.json or model.yaml beside the weights; name the model's config file",
        weights.display()
    )))
}

/// The file names a diffusers or LlamaGen folder keeps its weights under, in the order
/// looked for when `--weights` names a folder.
pub const FOLDER_WEIGHTS: [&str; 2] = ["diffusion_pytorch_model.safetensors", "model.safetensors"];

/// The weights file `path` names: the file itself, or in a folder (a diffusers `vqvae/`
/// folder, a `save_pretrained` folder) the first of [`FOLDER_WEIGHTS`].
pub fn resolve_weights(path: &Path) -> Result<PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    FOLDER_WEIGHTS
        .iter()
        .map(|n| path.join(n))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Error::format(
                path,
                format!(
                    "a folder without {} (name the weights file)",
                    FOLDER_WEIGHTS.join(" or ")
                ),
            )
        })
}

/// A model's description as read: the names its weights file uses (`Family::Taming` for
/// ours and taming's, whatever the config's variant) and its config.
#[derive(Debug, Clone)]
pub struct Described {
    pub names: Family,
    pub config: VqConfig,
}

/// Reads the config that goes with weights whose tensors have `shapes`: `config` (taming
/// YAML, our JSON, LlamaGen's or diffusers' `config.json`, told apart by their fields) or,
/// without one, a LlamaGen model described by its weights alone. Anything else without a
/// config is the error of [`default_config_path`].
pub fn describe(
    weights: &Path,
    config: Option<&Path>,
    shapes: &BTreeMap<String, Vec<usize>>,
) -> Result<Described> {
    let Some(cfg_path) = config else {
        return match family::family_of_keys(shapes.keys().map(String::as_str)) {
            Some(Family::Llamagen) => {
                let cfg = family::llamagen_config(
                    &LlamagenShape::from_shapes(shapes, weights)?,
                    None,
                    weights,
                )?;
                cfg.validate(weights)?;
                Ok(Described {
                    names: Family::Llamagen,
                    config: cfg,
                })
            }
            Some(Family::Diffusers) => Err(Error::invalid(format!(
                "{}: a diffusers VQModel needs its config.json (none beside the weights); name \
                 the model's config file",
                weights.display()
            ))),
            _ => Err(no_config(weights)),
        };
    };
    if let Some(config) = crate::presets::named(cfg_path) {
        return Ok(Described {
            names: Family::Taming,
            config,
        });
    }
    if matches!(
        cfg_path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    ) {
        return Ok(Described {
            names: Family::Taming,
            config: crate::ibq::yaml_config(cfg_path)?,
        });
    }
    let bytes = imgseq_core::weights::read_regular_file(cfg_path, 16 << 20, "a config")?;
    let text = String::from_utf8(bytes).map_err(|_| Error::format(cfg_path, "not UTF-8 text"))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::format(cfg_path, format!("not valid JSON ({e})")))?;
    let names = family::family_of_config(&v);
    let config = match names {
        Family::Taming | Family::Ibq => VqConfig::from_json_str(&text, cfg_path)?,
        Family::Llamagen => family::config_from_json_value(&v, cfg_path, Some((shapes, weights)))?,
        Family::Diffusers | Family::Janus | Family::Chameleon => {
            family::config_from_json_value(&v, cfg_path, None)?
        }
    };
    Ok(Described { names, config })
}

/// The error of [`default_config_path`] for weights without a config.
fn no_config(weights: &Path) -> Error {
    match default_config_path(weights) {
        Err(e) => e,
        Ok(p) => Error::invalid(format!(
            "{}: no config given (one appeared at {} meanwhile)",
            weights.display(),
            p.display()
        )),
    }
}

/// The codebook size of the model at `weights` (a file or folder): `n_embed` of the config
/// beside it, else the length of the weights' codebook (`quantize.embedding.weight`, the
/// same name in every family), else the error of [`default_config_path`].
pub fn codebook_size(weights: &Path) -> Result<usize> {
    let file = resolve_weights(weights)?;
    if let Ok(c) = default_config_path(&file) {
        return Ok(VqConfig::from_file(&c)?.n_embed);
    }
    let s = inspect(&file)?;
    match s
        .tensors
        .iter()
        .find(|t| t.name == crate::quantize::CODEBOOK)
    {
        Some(t) if t.shape.len() == 2 => Ok(t.shape[0]),
        Some(t) => Err(Error::format(
            &file,
            format!(
                "tensor `{}` has shape {:?}; expected 2 dimensions",
                t.name, t.shape
            ),
        )),
        None => Err(no_config(&file)),
    }
}

/// The shape of every tensor.
pub(crate) fn shapes_of(
    map: &HashMap<String, candle_core::Tensor>,
) -> BTreeMap<String, Vec<usize>> {
    map.iter()
        .map(|(k, t)| (k.clone(), t.dims().to_vec()))
        .collect()
}

/// Builds the model from `weights` (a file, or a folder holding one of [`FOLDER_WEIGHTS`])
/// with `config` (or the config found beside the weights; LlamaGen weights need none).
/// Missing tensors, wrong shapes and unexpected tensors (other than `loss.*` and the
/// family's [`rename::ignored`] ones) are errors.
pub fn load_model(
    weights: impl AsRef<Path>,
    config: Option<&Path>,
    device: &Device,
) -> Result<VqModel> {
    load_model_with(weights, config, WeightSet::Default, device)
}

/// [`load_model`] running `which` copy of a Lightning checkpoint's weights (IBQ's EMA copies
/// or its raw weights; other families take [`WeightSet::Default`] only).
pub fn load_model_with(
    weights: impl AsRef<Path>,
    config: Option<&Path>,
    which: WeightSet,
    device: &Device,
) -> Result<VqModel> {
    let weights = resolve_weights(weights.as_ref())?;
    let cfg_path = match config {
        Some(c) => Some(c.to_path_buf()),
        None => default_config_path(&weights).ok(),
    };
    let map = read_tensors(&weights, device)?;
    let d = describe(&weights, cfg_path.as_deref(), &shapes_of(&map))?;
    build_named(&d, &weights, map, which, device)
}

/// Every tensor of a safetensors file or a torch checkpoint's state dict, as named there, not
/// yet audited.
pub fn read_all_tensors(
    path: &Path,
    device: &Device,
) -> Result<HashMap<String, candle_core::Tensor>> {
    if is_torch_checkpoint(path) {
        Ok(imgseq_torch::read_state_dict(path, device)?
            .into_iter()
            .map(|(k, t)| (k, t.tensor))
            .collect())
    } else {
        imgseq_core::weights::load_tensors(path, device)
    }
}

/// [`read_all_tensors`], a whole Janus model's VQ part without its prefix.
fn read_tensors(path: &Path, device: &Device) -> Result<HashMap<String, candle_core::Tensor>> {
    read_all_tensors(path, device).map(crate::janus::vq_part)
}

/// Builds the model `d` describes from tensors named as `d.names` names them, audited.
pub fn build_named(
    d: &Described,
    path: &Path,
    map: HashMap<String, candle_core::Tensor>,
    which: WeightSet,
    device: &Device,
) -> Result<VqModel> {
    let map = crate::ibq::model_weights(&d.config, path, map, which)?;
    match d.names {
        Family::Taming | Family::Ibq | Family::Chameleon => {
            build(&d.config, &AuditedWeights::new(path, map), device)
        }
        f => {
            let levels = d.config.ddconfig.ch_mult.len();
            rename::build_renamed(
                &d.config,
                &RenamedWeights::new(path, map, f, levels),
                device,
            )
        }
    }
}

/// Builds the model from already loaded weights and checks that all were used.
pub fn build(cfg: &VqConfig, w: &AuditedWeights, device: &Device) -> Result<VqModel> {
    let vb = w.var_builder(DType::F32, device);
    let model = VqModel::new(cfg, vb).map_err(|e| model_error(w.path(), e))?;
    w.finish(&IGNORED_PREFIXES)?;
    Ok(model)
}

/// One tensor of a weights file, as listed by `imgseq weights inspect`.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// PyTorch-style dtype name (`float32`, `float16`, `bfloat16`, `int64`, ...).
    pub dtype: String,
    pub shape: Vec<usize>,
}

impl TensorInfo {
    /// The element count (saturating; [`inspect`] refuses files where it, or the total over
    /// all tensors, does not fit in a `usize`).
    pub fn numel(&self) -> usize {
        self.shape.iter().fold(1usize, |a, &d| a.saturating_mul(d))
    }
}

/// A summary of a weights file: its tensors (sorted by name) and, for checkpoints, the
/// top-level scalars (`epoch`, `global_step`, ...) and keys.
#[derive(Debug, Clone, Default)]
pub struct WeightsSummary {
    pub format: &'static str,
    /// The family the tensor names belong to (`None` when they match none).
    pub family: Option<Family>,
    pub tensors: Vec<TensorInfo>,
    pub scalars: Vec<(String, String)>,
    pub top_level_keys: Vec<String>,
}

fn candle_dtype_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::F64 => "float64",
        DType::I64 => "int64",
        DType::I32 => "int32",
        DType::I16 => "int16",
        DType::U32 => "uint32",
        DType::U8 => "uint8",
        _ => "other",
    }
}

/// [`candle_dtype_name`]'s name of a safetensors header's dtype (`F32` → `float32`).
fn safetensors_dtype_name(d: &str) -> &'static str {
    match d {
        "F32" => "float32",
        "F16" => "float16",
        "BF16" => "bfloat16",
        "F64" => "float64",
        "I64" => "int64",
        "I32" => "int32",
        "I16" => "int16",
        "U32" => "uint32",
        "U8" => "uint8",
        _ => "other",
    }
}

/// Lists the tensors of a safetensors file or torch checkpoint without building a model
/// (no tensor data is read: safetensors' header, the checkpoint's pickle); the family from a config beside it, else the names.
pub fn inspect(path: impl AsRef<Path>) -> Result<WeightsSummary> {
    let path = path.as_ref();
    let path = &resolve_weights(path)?;
    let mut s = if is_torch_checkpoint(path) {
        let c = imgseq_torch::Checkpoint::open(path)?;
        WeightsSummary {
            format: match c.is_torchscript() {
                true => "TorchScript archive (zip; weights only, its code not read)",
                false => "PyTorch checkpoint (zip)",
            },
            family: None,
            tensors: c
                .tensor_infos()?
                .into_iter()
                .map(|(name, dt, shape)| TensorInfo {
                    name,
                    dtype: dt.torch_name().into(),
                    shape,
                })
                .collect(),
            scalars: c.scalars(),
            top_level_keys: c.top_level_keys(),
        }
    } else {
        // The header only: inspecting a 200 MB file reads kilobytes.
        let tensors = imgseq_core::safetensors_header::read_header(path)?
            .into_iter()
            .map(|e| TensorInfo {
                dtype: safetensors_dtype_name(&e.dtype).into(),
                name: e.name,
                shape: e.shape,
            })
            .collect();
        WeightsSummary {
            format: "safetensors",
            tensors,
            ..Default::default()
        }
    };
    s.tensors.sort_by(|a, b| a.name.cmp(&b.name));
    check_counts(path, &s.tensors)?;
    s.family = family::family_of_keys(s.tensors.iter().map(|t| t.name.as_str()));
    if let Some(c) = default_config_path(path)
        .ok()
        .and_then(|c| VqConfig::from_file(c).ok())
    {
        s.family = Some(c.variant.family);
    }
    Ok(s)
}

/// Every tensor's element count, and their total, fit in a `usize` (sizes come from the
/// file and may be anything).
fn check_counts(path: &Path, tensors: &[TensorInfo]) -> Result<()> {
    let mut total = 0usize;
    for t in tensors {
        let n = t
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| {
                Error::format(
                    path,
                    format!("tensor `{}` of shape {:?} is too large", t.name, t.shape),
                )
            })?;
        total = total.checked_add(n).ok_or_else(|| {
            Error::format(path, "the tensors hold more elements than can be counted")
        })?;
    }
    Ok(())
}

/// The safetensors part of [`inspect`], on the bytes of the file.
fn summarize_safetensors(path: &Path, bytes: &[u8]) -> Result<WeightsSummary> {
    let st = candle_core::safetensors::SliceSafetensors::new(bytes)
        .map_err(|e| Error::format(path, format!("not a valid safetensors file ({e})")))?;
    let tensors = st
        .tensors()
        .into_iter()
        .map(|(name, v)| {
            let dtype = DType::try_from(v.dtype())
                .map(candle_dtype_name)
                .unwrap_or("other");
            TensorInfo {
                name,
                dtype: dtype.into(),
                shape: v.shape().to_vec(),
            }
        })
        .collect();
    Ok(WeightsSummary {
        format: "safetensors",
        tensors,
        ..Default::default()
    })
}

/// The family a safetensors or torch file's tensor names say.
pub fn family_of_file(path: &Path) -> Result<Option<Family>> {
    Ok(inspect(path)?.family)
}

/// The model the `safetensors_audited` fuzz target loads into: one level of 32 channels.
#[doc(hidden)]
pub fn fuzz_tiny_config() -> VqConfig {
    let mut c = VqConfig::vqgan_imagenet_f16_1024();
    c.ddconfig.ch = 32;
    c.ddconfig.ch_mult = vec![1];
    c.ddconfig.num_res_blocks = 1;
    c.ddconfig.attn_resolutions = vec![];
    c.ddconfig.z_channels = 4;
    c.embed_dim = 4;
    c.n_embed = 8;
    c
}

/// [`fuzz_safetensors_bytes`] into the model of [`fuzz_tiny_config`].
#[doc(hidden)]
pub fn fuzz_safetensors_tiny(data: &[u8]) {
    thread_local! {
        static CFG: VqConfig = fuzz_tiny_config();
    }
    CFG.with(|c| fuzz_safetensors_bytes(data, c));
}

/// What the `safetensors_audited` fuzz target runs (and the corpus replay test): the bytes'
/// header read as `weights inspect` does, summarised, then loaded with the audit into the model of `cfg`
/// (a tiny one). Must never panic.
#[doc(hidden)]
pub fn fuzz_safetensors_bytes(data: &[u8], cfg: &VqConfig) {
    let path = Path::new("fuzz.safetensors");
    imgseq_core::safetensors_header::fuzz_header_bytes(data);
    if let Ok(s) = summarize_safetensors(path, data) {
        let _ = check_counts(path, &s.tensors);
    }
    let Ok(map) = imgseq_core::weights::parse_safetensors(path, data, &Device::Cpu) else {
        return;
    };
    let _ = build(cfg, &AuditedWeights::new(path, map), &Device::Cpu);
}
