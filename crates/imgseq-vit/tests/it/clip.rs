//! Parity with transformers' `CLIPVisionModel` (`scripts/make_clip_fixtures.py`: a small
//! random-weight tower, quick-GELU as OpenAI's) from a `save_pretrained` folder and from a full
//! CLIP checkpoint's `vision_model.` tensors: the last hidden state, LLaVA's layer −2 and the
//! pooled output, within 1e-4 relative.

use candle_core::{Device, Tensor};
use imgseq_vit::clip;
use std::path::{Path, PathBuf};

fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/clip")
        .join(name)
}

fn rel(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    let d = (a - b).unwrap().abs().unwrap().max_all().unwrap();
    let m = b.abs().unwrap().max_all().unwrap();
    d.to_scalar::<f32>().unwrap() / m.to_scalar::<f32>().unwrap()
}

#[test]
fn clip_tower_matches_transformers_from_its_folder_and_a_full_checkpoint() {
    let io = candle_core::safetensors::load(fx("io.safetensors"), &Device::Cpu).unwrap();
    for src in ["vision", "full/model.safetensors"] {
        let m = clip::load(&fx(src), &Device::Cpu).unwrap();
        assert_eq!((m.cfg.hidden_size, m.cfg.grid()), (32, 4), "{src}");
        let out = m.forward_all(&io["pixel_values"]).unwrap();
        assert_eq!(out.hidden_states.len(), 3);
        let last = out.hidden_states.last().unwrap();
        let checks = [
            ("last_hidden_state", rel(last, &io["last_hidden_state"])),
            ("layer -2", rel(&out.hidden_states[1], &io["penultimate"])),
            ("pooled", rel(&out.pooled, &io["pooler_output"])),
        ];
        for (what, r) in checks {
            assert!(r < 1e-4, "{src}: {what} relative {r}");
        }
    }
}

#[test]
fn clip_configs_that_do_not_fit_are_refused_naming_the_field() {
    let bad = serde_json::json!({"model_type": "clip_vision_model", "hidden_size": 30,
        "num_attention_heads": 4});
    let e = clip::config_from_json(&bad).unwrap_err();
    assert!(e.contains("hidden_size 30"), "{e}");
    let e = clip::config_from_json(&serde_json::json!({"model_type": "clip_vision_model",
        "hidden_act": "relu"}))
    .unwrap_err();
    assert!(e.contains("relu"), "{e}");
    let e = clip::config_from_json(&serde_json::json!({"model_type": "vit"})).unwrap_err();
    assert!(e.contains("vit"), "{e}");
}
