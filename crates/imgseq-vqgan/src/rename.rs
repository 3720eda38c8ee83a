//! The weight maps of LlamaGen's and diffusers' VQ models onto the taming names that
//! [`crate::model`]'s `vb.pp(..)` chains spell, with the same audit as taming's loading:
//! every tensor the model asks for must exist under its family's name with the right
//! shape, and every tensor of the file must be used or be on the family's short list of
//! ignored names ([`ignored`]). Messages name the tensors as the file names them.
//!
//! | taming (ours) | LlamaGen | diffusers |
//! |---|---|---|
//! | `encoder.down.i.block.j` | `encoder.conv_blocks.i.res.j` | `encoder.down_blocks.i.resnets.j` |
//! | `encoder.down.i.attn.j` | `encoder.conv_blocks.i.attn.j` | — |
//! | `encoder.down.i.downsample.conv` | `encoder.conv_blocks.i.downsample.conv` | `encoder.down_blocks.i.downsamplers.0.conv` |
//! | `*.nin_shortcut` | `*.nin_shortcut` | `*.conv_shortcut` |
//! | `X.mid.block_1` / `attn_1` / `block_2` | `X.mid.0` / `1` / `2` | `X.mid_block.resnets.0` / `attentions.0` / `resnets.1` |
//! | `attn.{norm,q,k,v,proj_out}` (1×1 convs) | same | `group_norm`, `to_q`, `to_k`, `to_v`, `to_out.0` (Linear; older files `query`, `key`, `value`, `proj_attn`) |
//! | `X.norm_out` | `X.norm_out` | `X.conv_norm_out` |
//! | `decoder.up.i` (level i, 0 = full resolution) | `decoder.conv_blocks.(L−1−i)` | `decoder.up_blocks.(L−1−i)` (`upsamplers.0.conv`) |

use crate::config::VqConfig;
use crate::family::Family;
use crate::model::VqModel;
use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;
use imgseq_core::{Error, Result};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Tensors of a family's files that the model does not use, each with the rank it must
/// have (they are still audited: present-but-malformed is an error).
pub fn ignored(family: Family) -> &'static [(&'static str, usize)] {
    match family {
        // LlamaGen's training-time usage log (`register_buffer("codebook_used", ...)`).
        Family::Llamagen => &[("quantize.codebook_used", 1)],
        Family::Taming | Family::Diffusers | Family::Janus | Family::Ibq | Family::Chameleon => &[],
    }
}

/// How a source tensor becomes the model's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Same,
    /// An `nn.Linear` weight (o, i) where the model has a 1×1 conv (o, i, 1, 1).
    Linear,
}

/// The source name (and kind) of the model tensor `name` (a taming name).
fn source_name(
    family: Family,
    levels: usize,
    legacy_attn: &dyn Fn(&str) -> bool,
    name: &str,
) -> (String, Kind) {
    let parts: Vec<&str> = name.split('.').collect();
    match family {
        Family::Taming | Family::Ibq | Family::Chameleon => (name.to_string(), Kind::Same),
        Family::Llamagen => (llamagen_name(&parts, levels), Kind::Same),
        Family::Diffusers => diffusers_name(&parts, levels, legacy_attn),
        Family::Janus => (janus_name(&parts, levels), Kind::Same),
    }
}

/// `head` then `tail`, dot-joined.
fn dotted(head: &[&str], tail: &[&str]) -> String {
    head.iter()
        .chain(tail)
        .copied()
        .collect::<Vec<_>>()
        .join(".")
}

/// Decoder level `i` counted from the other end (taming's `up.i` is `(L−1−i)` in LlamaGen
/// and diffusers); `i` itself when it is not a level.
fn flipped(levels: usize, i: &str) -> String {
    i.parse::<usize>()
        .ok()
        .and_then(|i| levels.checked_sub(1 + i))
        .map_or_else(|| i.to_string(), |k| k.to_string())
}

/// LlamaGen's name of a taming tensor name split at its dots.
fn llamagen_name(parts: &[&str], levels: usize) -> String {
    match parts {
        ["encoder", "down", i, "block", j, tail @ ..] => {
            dotted(&["encoder", "conv_blocks", i, "res", j], tail)
        }
        ["encoder", "down", i, tail @ ..] => dotted(&["encoder", "conv_blocks", i], tail),
        ["decoder", "up", i, "block", j, tail @ ..] => dotted(
            &["decoder", "conv_blocks", &flipped(levels, i), "res", j],
            tail,
        ),
        ["decoder", "up", i, tail @ ..] => {
            dotted(&["decoder", "conv_blocks", &flipped(levels, i)], tail)
        }
        [x, "mid", m, tail @ ..] => {
            let k = match *m {
                "block_1" => "0",
                "attn_1" => "1",
                "block_2" => "2",
                other => other,
            };
            dotted(&[x, "mid", k], tail)
        }
        _ => parts.join("."),
    }
}

/// Janus's name (transformers' `JanusVQVAE`) of a taming tensor name split at its dots: the
/// decoder's levels flipped, the rest taming's.
fn janus_name(parts: &[&str], levels: usize) -> String {
    match parts {
        ["decoder", "up", i, tail @ ..] => dotted(&["decoder", "up", &flipped(levels, i)], tail),
        _ => parts.join("."),
    }
}

/// A ResnetBlock's tensor names in diffusers' (`nin_shortcut` is `conv_shortcut`).
fn resnet_tail<'a>(tail: &[&'a str]) -> Vec<&'a str> {
    tail.iter()
        .map(|&s| {
            if s == "nin_shortcut" {
                "conv_shortcut"
            } else {
                s
            }
        })
        .collect()
}

/// diffusers' name (and kind) of a taming tensor name split at its dots.
fn diffusers_name(
    parts: &[&str],
    levels: usize,
    legacy_attn: &dyn Fn(&str) -> bool,
) -> (String, Kind) {
    let name = match parts {
        ["encoder", "down", i, "block", j, tail @ ..] => dotted(
            &["encoder", "down_blocks", i, "resnets", j],
            &resnet_tail(tail),
        ),
        ["encoder", "down", i, "downsample", tail @ ..] => {
            dotted(&["encoder", "down_blocks", i, "downsamplers", "0"], tail)
        }
        ["decoder", "up", i, "block", j, tail @ ..] => dotted(
            &["decoder", "up_blocks", &flipped(levels, i), "resnets", j],
            &resnet_tail(tail),
        ),
        ["decoder", "up", i, "upsample", tail @ ..] => dotted(
            &[
                "decoder",
                "up_blocks",
                &flipped(levels, i),
                "upsamplers",
                "0",
            ],
            tail,
        ),
        [x, "mid", "block_1", tail @ ..] => {
            dotted(&[x, "mid_block", "resnets", "0"], &resnet_tail(tail))
        }
        [x, "mid", "block_2", tail @ ..] => {
            dotted(&[x, "mid_block", "resnets", "1"], &resnet_tail(tail))
        }
        [x, "mid", "attn_1", layer, tail @ ..] => {
            return diffusers_attn_name(x, layer, tail, legacy_attn)
        }
        [x, "norm_out", tail @ ..] => dotted(&[x, "conv_norm_out"], tail),
        _ => parts.join("."),
    };
    (name, Kind::Same)
}

/// diffusers' name of a middle attention layer (`to_q`..., or `query`... in files of the
/// older layout) and its kind: `nn.Linear` weights but for the norm.
fn diffusers_attn_name(
    x: &str,
    layer: &str,
    tail: &[&str],
    legacy_attn: &dyn Fn(&str) -> bool,
) -> (String, Kind) {
    let block = format!("{x}.mid_block.attentions.0");
    let legacy = legacy_attn(&block);
    let l = match (layer, legacy) {
        ("norm", _) => "group_norm",
        ("q", false) => "to_q",
        ("k", false) => "to_k",
        ("v", false) => "to_v",
        ("proj_out", false) => "to_out.0",
        ("q", true) => "query",
        ("k", true) => "key",
        ("v", true) => "value",
        ("proj_out", true) => "proj_attn",
        (other, _) => other,
    };
    let kind = if layer != "norm" {
        Kind::Linear
    } else {
        Kind::Same
    };
    (dotted(&[&block, l], tail), kind)
}

struct Inner {
    path: PathBuf,
    tensors: HashMap<String, Tensor>,
    family: Family,
    levels: usize,
    used: Mutex<BTreeSet<String>>,
}

/// A family's tensors seen under taming names, with the audit (see the module docs).
#[derive(Clone)]
pub struct RenamedWeights {
    inner: Arc<Inner>,
}

impl RenamedWeights {
    /// `tensors` as read from `path` (only used in messages), named as `family` names them,
    /// for a model of `levels` resolution levels.
    pub fn new(
        path: impl AsRef<Path>,
        tensors: HashMap<String, Tensor>,
        family: Family,
        levels: usize,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                path: path.as_ref().to_path_buf(),
                tensors,
                family,
                levels,
                used: Mutex::new(BTreeSet::new()),
            }),
        }
    }

    fn source(&self, name: &str) -> (String, Kind) {
        let t = &self.inner.tensors;
        let legacy = |block: &str| t.contains_key(&format!("{block}.query.weight"));
        source_name(self.inner.family, self.inner.levels, &legacy, name)
    }

    /// The model tensor `name` (a taming name) of shape `want`: the source tensor, checked.
    fn fetch(&self, name: &str, want: &Shape) -> Result<Tensor> {
        let (src, kind) = self.source(name);
        let path = &self.inner.path;
        let Some(t) = self.inner.tensors.get(&src) else {
            return Err(Error::weights(path, format!("missing tensor `{src}`")));
        };
        self.inner
            .used
            .lock()
            .expect("poisoned")
            .insert(src.clone());
        let want_src: Vec<usize> = match (kind, want.dims()) {
            (Kind::Linear, [o, i, 1, 1]) => vec![*o, *i],
            (_, d) => d.to_vec(),
        };
        if t.dims() != want_src.as_slice() {
            return Err(Error::weights(
                path,
                format!(
                    "tensor `{src}` has shape {:?}, the model expects {want_src:?}",
                    t.dims()
                ),
            ));
        }
        Ok(t.reshape(want.clone())?)
    }

    /// Fails unless every tensor was used or is one of the family's [`ignored`] ones (which
    /// must have their rank).
    pub fn finish(&self) -> Result<()> {
        let used = self.inner.used.lock().expect("poisoned");
        let path = &self.inner.path;
        let skip = ignored(self.inner.family);
        let mut unused: Vec<&String> = Vec::new();
        for (k, t) in &self.inner.tensors {
            if used.contains(k) {
                continue;
            }
            match skip.iter().find(|(n, _)| n == k) {
                Some((_, rank)) if t.rank() == *rank => {}
                Some((_, rank)) => {
                    return Err(Error::weights(
                        path,
                        format!(
                            "tensor `{k}` has shape {:?}; expected {rank} dimension(s)",
                            t.dims()
                        ),
                    ))
                }
                None => unused.push(k),
            }
        }
        if unused.is_empty() {
            return Ok(());
        }
        let model = format!("the {} model", self.inner.family.label());
        Err(imgseq_core::weights::unexpected_tensors(
            path, unused, &model,
        ))
    }

    /// The tensors under our (taming) names, for `weights convert`: every model tensor once
    /// the model was built (the ignored ones dropped).
    /// Each entry: our name, the file's name, the tensor.
    pub fn renamed(&self, names: &[String]) -> Result<Vec<(String, String, Tensor)>> {
        names
            .iter()
            .map(|n| {
                let (src, kind) = self.source(n);
                let t = self.inner.tensors.get(&src).ok_or_else(|| {
                    Error::weights(&self.inner.path, format!("missing tensor `{src}`"))
                })?;
                let t = match kind {
                    Kind::Linear if t.rank() == 2 => t.unsqueeze(2)?.unsqueeze(3)?,
                    _ => t.clone(),
                };
                Ok((n.clone(), src, t))
            })
            .collect()
    }
}

impl SimpleBackend for RenamedWeights {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _h: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let t = self
            .fetch(name, &s)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        t.to_dtype(dtype)?.to_device(dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let (src, _) = self.source(name);
        let t = self.inner.tensors.get(&src).ok_or_else(|| {
            candle_core::Error::Msg(format!(
                "{}: missing tensor `{src}`",
                self.inner.path.display()
            ))
        })?;
        self.inner.used.lock().expect("poisoned").insert(src);
        t.to_dtype(dtype)?.to_device(dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.inner.tensors.contains_key(&self.source(name).0)
    }
}

/// Records the names a model build asks for (to write converted weights in our names).
#[derive(Clone, Default)]
struct NameLog(Arc<Mutex<Vec<String>>>);

impl SimpleBackend for NameLog {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _h: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        self.0.lock().expect("poisoned").push(name.to_string());
        // A one-element placeholder broadcast to the shape: no memory for the real size.
        Tensor::zeros(1, dtype, dev)?.broadcast_as(s)
    }

    fn get_unchecked(
        &self,
        name: &str,
        _dtype: DType,
        _dev: &Device,
    ) -> candle_core::Result<Tensor> {
        candle_core::bail!("unexpected unchecked get of `{name}`")
    }

    fn contains_tensor(&self, _name: &str) -> bool {
        true
    }
}

/// The (taming) names of every tensor the model of `cfg` has, in build order.
pub fn model_tensor_names(cfg: &VqConfig) -> Result<Vec<String>> {
    let log = NameLog::default();
    let vb = VarBuilder::from_backend(Box::new(log.clone()), DType::F32, Device::Cpu);
    VqModel::new(cfg, vb)?;
    let names = log.0.lock().expect("poisoned").clone();
    Ok(names)
}

/// Builds the model of `cfg` (whose variant names the family) from tensors named as that
/// family names them, with the audit.
pub fn build_renamed(cfg: &VqConfig, w: &RenamedWeights, device: &Device) -> Result<VqModel> {
    let vb = VarBuilder::from_backend(Box::new(w.clone()), DType::F32, device.clone());
    let model =
        VqModel::new(cfg, vb).map_err(|e| imgseq_core::weights::model_error(&w.inner.path, e))?;
    w.finish()?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(f: Family, n: &str, legacy: bool) -> String {
        source_name(f, 5, &|_| legacy, n).0
    }

    #[test]
    fn llamagen_names() {
        let l = Family::Llamagen;
        assert_eq!(
            name(l, "encoder.down.2.block.1.norm1.weight", false),
            "encoder.conv_blocks.2.res.1.norm1.weight"
        );
        assert_eq!(
            name(l, "encoder.down.4.attn.0.q.bias", false),
            "encoder.conv_blocks.4.attn.0.q.bias"
        );
        assert_eq!(
            name(l, "encoder.down.0.downsample.conv.weight", false),
            "encoder.conv_blocks.0.downsample.conv.weight"
        );
        assert_eq!(
            name(l, "decoder.up.4.block.2.nin_shortcut.weight", false),
            "decoder.conv_blocks.0.res.2.nin_shortcut.weight"
        );
        assert_eq!(
            name(l, "decoder.up.1.upsample.conv.bias", false),
            "decoder.conv_blocks.3.upsample.conv.bias"
        );
        assert_eq!(
            name(l, "decoder.mid.attn_1.proj_out.weight", false),
            "decoder.mid.1.proj_out.weight"
        );
        assert_eq!(
            name(l, "encoder.mid.block_2.conv2.weight", false),
            "encoder.mid.2.conv2.weight"
        );
        assert_eq!(
            name(l, "quantize.embedding.weight", false),
            "quantize.embedding.weight"
        );
    }

    #[test]
    fn diffusers_attention_weights_are_linear_and_the_rest_same() {
        let kind = |n: &str| source_name(Family::Diffusers, 5, &|_| false, n).1;
        assert_eq!(kind("decoder.mid.attn_1.q.weight"), Kind::Linear);
        assert_eq!(kind("encoder.mid.attn_1.proj_out.bias"), Kind::Linear);
        assert_eq!(kind("decoder.mid.attn_1.norm.weight"), Kind::Same);
        assert_eq!(kind("encoder.mid.block_1.conv1.weight"), Kind::Same);
        let l = source_name(
            Family::Llamagen,
            5,
            &|_| true,
            "decoder.mid.attn_1.q.weight",
        );
        assert_eq!(l.1, Kind::Same);
        assert_eq!(
            source_name(
                Family::Diffusers,
                5,
                &|_| false,
                "encoder.mid.block_1.nin_shortcut.bias"
            )
            .0,
            "encoder.mid_block.resnets.0.conv_shortcut.bias"
        );
    }

    #[test]
    fn janus_decoder_levels_are_flipped_and_the_rest_keeps_taming_names() {
        let n = |s: &str| name(Family::Janus, s, false);
        assert_eq!(
            n("decoder.up.4.attn.1.q.weight"),
            "decoder.up.0.attn.1.q.weight"
        );
        assert_eq!(
            n("decoder.up.0.block.2.conv1.bias"),
            "decoder.up.4.block.2.conv1.bias"
        );
        assert_eq!(
            n("decoder.up.3.upsample.conv.weight"),
            "decoder.up.1.upsample.conv.weight"
        );
        assert_eq!(
            n("encoder.down.4.attn.0.k.bias"),
            "encoder.down.4.attn.0.k.bias"
        );
        assert_eq!(
            n("decoder.mid.attn_1.norm.weight"),
            "decoder.mid.attn_1.norm.weight"
        );
        assert_eq!(n("quantize.embedding.weight"), "quantize.embedding.weight");
    }

    #[test]
    fn diffusers_names() {
        let d = Family::Diffusers;
        assert_eq!(
            name(d, "encoder.down.1.block.0.nin_shortcut.weight", false),
            "encoder.down_blocks.1.resnets.0.conv_shortcut.weight"
        );
        assert_eq!(
            name(d, "encoder.down.3.downsample.conv.weight", false),
            "encoder.down_blocks.3.downsamplers.0.conv.weight"
        );
        assert_eq!(
            name(d, "decoder.up.0.block.2.conv1.bias", false),
            "decoder.up_blocks.4.resnets.2.conv1.bias"
        );
        assert_eq!(
            name(d, "decoder.up.4.upsample.conv.weight", false),
            "decoder.up_blocks.0.upsamplers.0.conv.weight"
        );
        assert_eq!(
            name(d, "encoder.mid.block_2.norm1.weight", false),
            "encoder.mid_block.resnets.1.norm1.weight"
        );
        assert_eq!(
            name(d, "decoder.mid.attn_1.norm.bias", false),
            "decoder.mid_block.attentions.0.group_norm.bias"
        );
        assert_eq!(
            name(d, "decoder.mid.attn_1.proj_out.weight", false),
            "decoder.mid_block.attentions.0.to_out.0.weight"
        );
        assert_eq!(
            name(d, "decoder.mid.attn_1.proj_out.weight", true),
            "decoder.mid_block.attentions.0.proj_attn.weight"
        );
        assert_eq!(
            name(d, "encoder.mid.attn_1.k.bias", true),
            "encoder.mid_block.attentions.0.key.bias"
        );
        assert_eq!(
            name(d, "encoder.norm_out.weight", false),
            "encoder.conv_norm_out.weight"
        );
        assert_eq!(
            name(d, "post_quant_conv.weight", false),
            "post_quant_conv.weight"
        );
    }
}
