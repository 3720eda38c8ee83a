//! The flat parameter arrays: one fixed order of the HF parameters ([`ParamLayout`]), and
//! where each layer finds its weights in it.

use candle_core::{Device, Tensor};
use imgseq_core::optim::ParamSpec;
use imgseq_core::{Error, Result};
use std::collections::HashMap;

use crate::config::ViTConfig;

/// Whether AdamW's weight decay applies to a parameter: matrices (and the patch conv), not
/// biases, norms, the CLS token or the position embeddings. Both engines use this rule.
pub fn decays(name: &str, rank: usize) -> bool {
    rank >= 2 && !name.contains("embeddings.cls_token") && !name.contains("position_embeddings")
}

/// A linear layer's place in the flat arrays: y (rows, out) = x (rows, inp) · Wᵀ + b, W stored
/// (out, inp) row-major at `w`, b at `b` (after W) when the layer has one.
#[derive(Debug, Clone, Copy)]
pub(super) struct Linear {
    pub w: usize,
    pub b: Option<usize>,
    pub inp: usize,
    pub out: usize,
}

/// A LayerNorm's weight and bias offsets (bias after weight, both of the hidden width).
#[derive(Debug, Clone, Copy)]
pub(super) struct Norm {
    pub w: usize,
    pub b: usize,
}

/// One encoder layer's parameters.
#[derive(Debug, Clone, Copy)]
pub(super) struct LayerParams {
    pub ln1: Norm,
    /// query, key, value weights back to back: (3·hidden, hidden); their biases back to back
    /// (3·hidden), when `qkv_bias`.
    pub qkv: Linear,
    pub o: Linear,
    pub ln2: Norm,
    pub fc1: Linear,
    pub fc2: Linear,
}

/// The order of the parameters in the flat arrays, with their HF names.
#[derive(Debug, Clone)]
pub struct ParamLayout {
    pub specs: Vec<ParamSpec>,
    len: usize,
    pub(super) cls: usize,
    pub(super) pos: usize,
    /// The patch conv as a linear layer of the flattened (c, p, p) patch.
    pub(super) patch: Linear,
    pub(super) layers: Vec<LayerParams>,
    pub(super) lnf: Norm,
    pub(super) head: Linear,
}

impl AsRef<[ParamSpec]> for ParamLayout {
    fn as_ref(&self) -> &[ParamSpec] {
        &self.specs
    }
}

/// Appends parameters to a layout under construction.
struct Builder {
    specs: Vec<ParamSpec>,
    len: usize,
}

impl Builder {
    fn add(&mut self, name: String, shape: Vec<usize>) -> usize {
        let offset = self.len;
        self.len += shape.iter().product::<usize>();
        let decay = decays(&name, shape.len());
        self.specs.push(ParamSpec {
            name,
            shape,
            offset,
            decay,
        });
        offset
    }

    /// `<name>.weight` (out, inp) and `<name>.bias` (out).
    fn linear(&mut self, name: &str, inp: usize, out: usize) -> Linear {
        let w = self.add(format!("{name}.weight"), vec![out, inp]);
        let b = Some(self.add(format!("{name}.bias"), vec![out]));
        Linear { w, b, inp, out }
    }

    fn norm(&mut self, name: &str, d: usize) -> Norm {
        let w = self.add(format!("{name}.weight"), vec![d]);
        let b = self.add(format!("{name}.bias"), vec![d]);
        Norm { w, b }
    }

    fn layer(&mut self, cfg: &ViTConfig, i: usize) -> LayerParams {
        let (d, m) = (cfg.hidden_size, cfg.intermediate_size);
        let l = format!("vit.encoder.layer.{i}");
        let a = format!("{l}.attention.attention");
        let ln1 = self.norm(&format!("{l}.layernorm_before"), d);
        let w = self.add(format!("{a}.query.weight"), vec![d, d]);
        self.add(format!("{a}.key.weight"), vec![d, d]);
        self.add(format!("{a}.value.weight"), vec![d, d]);
        let b = cfg.qkv_bias.then(|| {
            let q = self.add(format!("{a}.query.bias"), vec![d]);
            self.add(format!("{a}.key.bias"), vec![d]);
            self.add(format!("{a}.value.bias"), vec![d]);
            q
        });
        let qkv = Linear {
            w,
            b,
            inp: d,
            out: 3 * d,
        };
        LayerParams {
            ln1,
            qkv,
            o: self.linear(&format!("{l}.attention.output.dense"), d, d),
            ln2: self.norm(&format!("{l}.layernorm_after"), d),
            fc1: self.linear(&format!("{l}.intermediate.dense"), d, m),
            fc2: self.linear(&format!("{l}.output.dense"), m, d),
        }
    }
}

impl ParamLayout {
    pub fn new(cfg: &ViTConfig) -> Self {
        let (d, c, p) = (cfg.hidden_size, cfg.num_channels, cfg.patch_size);
        let mut bld = Builder {
            specs: Vec::new(),
            len: 0,
        };
        let e = "vit.embeddings";
        let cls = bld.add(format!("{e}.cls_token"), vec![1, 1, d]);
        let pos = bld.add(
            format!("{e}.position_embeddings"),
            vec![1, cfg.num_tokens(), d],
        );
        let pe = format!("{e}.patch_embeddings.projection");
        let patch = Linear {
            w: bld.add(format!("{pe}.weight"), vec![d, c, p, p]),
            b: Some(bld.add(format!("{pe}.bias"), vec![d])),
            inp: c * p * p,
            out: d,
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| bld.layer(cfg, i))
            .collect();
        let lnf = bld.norm("vit.layernorm", d);
        let head = bld.linear("classifier", d, cfg.num_labels());
        Self {
            specs: bld.specs,
            len: bld.len,
            cls,
            pos,
            patch,
            layers,
            lnf,
            head,
        }
    }
    /// Number of f32 values in a flat parameter (or gradient) array.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, name: &str) -> Option<&ParamSpec> {
        self.specs.iter().find(|s| s.name == name)
    }

    /// The flat array `flat` as named tensors with the HF shapes.
    pub fn to_tensors(&self, flat: &[f32]) -> Result<HashMap<String, Tensor>> {
        self.check_len(flat)?;
        self.specs
            .iter()
            .map(|s| {
                let t = Tensor::from_slice(&flat[s.range()], s.shape.as_slice(), &Device::Cpu)?;
                Ok((s.name.clone(), t))
            })
            .collect()
    }

    /// A flat array from named tensors whose names are `prefix` + the HF names (tensors with
    /// other names are ignored). A missing or misshapen tensor is a one-line error naming it.
    pub fn from_tensors(
        &self,
        tensors: &HashMap<String, Tensor>,
        prefix: &str,
    ) -> Result<Vec<f32>> {
        let mut flat = vec![0f32; self.len];
        for s in &self.specs {
            let key = format!("{prefix}{}", s.name);
            let t = tensors
                .get(&key)
                .ok_or_else(|| Error::bad_data(format!("missing tensor `{key}`")))?;
            if t.dims() != s.shape.as_slice() {
                return Err(Error::bad_data(format!(
                    "tensor `{key}` has shape {:?}, expected {:?}",
                    t.dims(),
                    s.shape
                )));
            }
            let v = t
                .flatten_all()?
                .to_dtype(candle_core::DType::F32)?
                .to_vec1::<f32>()?;
            flat[s.range()].copy_from_slice(&v);
        }
        Ok(flat)
    }

    pub(super) fn check_len(&self, flat: &[f32]) -> Result<()> {
        if flat.len() != self.len {
            return Err(Error::bad_data(format!(
                "a parameter array of {} values for a model of {}",
                flat.len(),
                self.len
            )));
        }
        Ok(())
    }
}
