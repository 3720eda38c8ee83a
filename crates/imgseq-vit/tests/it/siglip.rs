//! Parity with transformers' `SiglipVisionModel` (`scripts/make_siglip_fixtures.py`: a small
//! random-weight tower whose 36² pictures leave 4 pixels past the last 8² patch, as so400m's
//! 384/14 does) from a `save_pretrained` folder and from a full `SiglipModel` checkpoint's
//! `vision_model.` tensors: the first and penultimate hidden states, the last hidden state
//! (through `post_layernorm`) and the attention-pooled output, within 1e-4 relative.

use crate::common::rel_err;
use candle_core::Device;
use imgseq_vit::siglip;
use std::path::{Path, PathBuf};

fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/siglip")
        .join(name)
}

#[test]
fn siglip_tower_matches_transformers_from_its_folder_and_a_full_checkpoint() {
    let io = candle_core::safetensors::load(fx("io.safetensors"), &Device::Cpu).unwrap();
    for src in ["vision", "full/model.safetensors"] {
        let m = siglip::load(&fx(src), &Device::Cpu).unwrap();
        assert_eq!((m.cfg.hidden_size, m.cfg.grid()), (32, 4), "{src}");
        let out = m.forward_all(&io["pixel_values"]).unwrap();
        assert_eq!(out.hidden_states.len(), 3);
        let pooled = out.pooled.as_ref().expect("the head's output");
        let checks = [
            (
                "hidden_states[0]",
                rel_err(&out.hidden_states[0], &io["first"]),
            ),
            (
                "layer -2",
                rel_err(&out.hidden_states[1], &io["penultimate"]),
            ),
            (
                "last_hidden_state",
                rel_err(&out.last_hidden_state, &io["last_hidden_state"]),
            ),
            ("pooled", rel_err(pooled, &io["pooler_output"])),
        ];
        for (what, r) in checks {
            println!("siglip {src}: {what} relative {r:.2e}");
            assert!(r < 1e-4, "{src}: {what} relative {r}");
        }
    }
}

#[test]
fn siglip_configs_that_do_not_fit_are_refused_naming_the_field() {
    let bad = serde_json::json!({"model_type": "siglip_vision_model", "hidden_size": 30,
        "num_attention_heads": 4});
    let e = siglip::config_from_json(&bad).unwrap_err();
    assert!(e.contains("hidden_size 30"), "{e}");
    let e = siglip::config_from_json(&serde_json::json!({"model_type": "siglip_vision_model",
        "hidden_act": "relu"}))
    .unwrap_err();
    assert!(e.contains("relu"), "{e}");
    let e = siglip::config_from_json(&serde_json::json!({"model_type": "siglip"})).unwrap_err();
    assert!(e.contains("vision_config"), "{e}");
    let e = siglip::config_from_json(&serde_json::json!({"model_type": "clip"})).unwrap_err();
    assert!(e.contains("clip"), "{e}");
}

/// A checkpoint that lacks the head, or holds a tensor the tower does not use, is refused
/// naming the file.
#[test]
fn a_siglip_checkpoint_missing_or_adding_tensors_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut map =
        candle_core::safetensors::load(fx("vision/model.safetensors"), &Device::Cpu).unwrap();
    std::fs::copy(fx("vision/config.json"), dir.path().join("config.json")).unwrap();
    let probe = map.remove("head.probe").unwrap();
    candle_core::safetensors::save(&map, dir.path().join("model.safetensors")).unwrap();
    let e = siglip::load(dir.path(), &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("head.probe") && e.contains("model.safetensors"),
        "{e}"
    );
    map.insert("head.probe".into(), probe);
    map.insert("extra.weight".into(), map["post_layernorm.bias"].clone());
    candle_core::safetensors::save(&map, dir.path().join("model.safetensors")).unwrap();
    let e = siglip::load(dir.path(), &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("extra.weight"), "{e}");
}
