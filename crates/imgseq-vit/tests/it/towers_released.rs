//! Released sizes without their weights: SigLIP so400m-patch14-384 and DINOv2-L/14 are built
//! from their configs on a weight source that records what the model asks for (zeros, no
//! memory), and every tensor name and shape is compared with transformers' own model built on
//! the meta device (`scripts/make_{siglip,dinov2}_fixtures.py`, `released/shapes.json`); the
//! tower's output shape is transformers' (729 × 1152 and 257 × 1024 at 224²). A forward pass
//! at these sizes (`--ignored`, a minute or more on a few cores) checks the shapes by running.

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;
use imgseq_core::tokenizer::Tokenizer;
use imgseq_vit::tower::{Tower, VisionModel};
use imgseq_vit::{dinov2, siglip};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

type Asked = Arc<Mutex<BTreeMap<String, Vec<usize>>>>;

/// Answers every tensor with zeros of the asked shape (a broadcast scalar) and records it.
struct Recorder(Asked);

impl SimpleBackend for Recorder {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        self.0
            .lock()
            .unwrap()
            .insert(name.to_string(), s.dims().to_vec());
        Tensor::zeros((), dtype, dev)?.broadcast_as(s)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        candle_core::bail!("{name}: no shape asked")
    }

    fn contains_tensor(&self, _: &str) -> bool {
        true
    }
}

fn fx(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(path)
}

fn recorder() -> (Asked, VarBuilder<'static>) {
    let asked = Asked::default();
    let vb = VarBuilder::from_backend(Box::new(Recorder(asked.clone())), DType::F32, Device::Cpu);
    (asked, vb)
}

/// transformers' tensors (less `ignored`) and shapes against the ones the model asked for.
fn same_tensors(asked: &Asked, shapes: &serde_json::Value, ignored: &[&str]) {
    let want: BTreeMap<String, Vec<usize>> = shapes["tensors"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| !ignored.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), serde_json::from_value(v.clone()).unwrap()))
        .collect();
    let got = asked.lock().unwrap().clone();
    let missing: Vec<_> = want.keys().filter(|k| !got.contains_key(*k)).collect();
    let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{missing:?} {extra:?}"
    );
    for (k, v) in &want {
        assert_eq!(&got[k], v, "{k}");
    }
}

fn shapes_of(dir: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(fx(dir).join("shapes.json")).unwrap()).unwrap()
}

fn config_of(dir: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(fx(dir).join("config.json")).unwrap()).unwrap()
}

/// The tower's (tokens, D) against transformers' `last_hidden_state` (1, tokens, D).
fn same_output<M: VisionModel>(t: &Tower<M>, shapes: &serde_json::Value) {
    let want: Vec<usize> = serde_json::from_value(shapes["last_hidden_state"].clone()).unwrap();
    assert_eq!(t.describe().output.shape, want[1..]);
    let n = shapes["hidden_states"].as_u64().unwrap() as usize;
    assert_eq!(t.model.num_hidden_layers() + 1, n);
}

fn so400m() -> (Asked, Tower<siglip::SiglipVisionModel>) {
    let cfg = siglip::config_from_json(&config_of("siglip/released")).unwrap();
    assert_eq!(
        (cfg.hidden_size, cfg.num_hidden_layers, cfg.grid()),
        (1152, 27, 27)
    );
    let (asked, vb) = recorder();
    let model = siglip::SiglipVisionModel::new(&cfg, vb).unwrap();
    let t = Tower {
        pixels: siglip::pixels(&cfg, &fx("siglip/released")).unwrap(),
        model,
        layer: None,
        patches_only: false,
        pooled: false,
    };
    (asked, t)
}

fn dinov2_large() -> (Asked, Tower<dinov2::Dinov2Model>) {
    let cfg = dinov2::config_from_json(&config_of("dinov2/released")).unwrap();
    assert_eq!(
        (cfg.hidden_size, cfg.num_hidden_layers, cfg.grid()),
        (1024, 24, 37)
    );
    let (asked, vb) = recorder();
    let t = Tower {
        model: dinov2::Dinov2Model::new(&cfg, vb).unwrap(),
        layer: None,
        patches_only: false,
        pooled: false,
        pixels: dinov2::pixels(&fx("dinov2/released"), None).unwrap(),
    };
    (asked, t)
}

#[test]
fn siglip_so400m_384_has_transformers_tensors_and_729_tokens() {
    let (asked, t) = so400m();
    let shapes = shapes_of("siglip/released");
    same_tensors(&asked, &shapes, &[]);
    same_output(&t, &shapes);
    assert_eq!(t.describe().output.shape, vec![729, 1152]);
}

#[test]
fn dinov2_large_14_has_transformers_tensors_and_257_tokens_at_224() {
    let (asked, t) = dinov2_large();
    let shapes = shapes_of("dinov2/released");
    same_tensors(&asked, &shapes, &["embeddings.mask_token"]);
    same_output(&t, &shapes);
    assert_eq!(t.describe().output.shape, vec![257, 1024]);
    let patches = Tower {
        patches_only: true,
        ..t
    };
    assert_eq!(patches.describe().output.shape, vec![256, 1024]);
}

/// One picture through each released-size tower (zero weights): the hidden states and
/// pooled outputs have transformers' shapes.
#[test]
#[ignore = "released-size forward passes: a minute or more on a few cores"]
fn released_size_towers_run_to_transformers_shapes() {
    let (_, s) = so400m();
    let x = Tensor::zeros((1, 3, 384, 384), DType::F32, &Device::Cpu).unwrap();
    let out = s.model.forward_all(&x).unwrap();
    assert_eq!(out.last_hidden_state.dims(), &[1, 729, 1152]);
    assert_eq!(out.hidden_states.len(), 28);
    assert_eq!(out.pooled.unwrap().dims(), &[1, 1152]);
    let (_, d) = dinov2_large();
    let x = Tensor::zeros((1, 3, 224, 224), DType::F32, &Device::Cpu).unwrap();
    let out = d.model.forward_all(&x).unwrap();
    assert_eq!(out.last_hidden_state.dims(), &[1, 257, 1024]);
    assert_eq!(out.hidden_states.len(), 25);
    assert_eq!(out.pooled.unwrap().dims(), &[1, 1024]);
}
