//! Parity with transformers' `Dinov2Model` and `Dinov2WithRegistersModel`
//! (`scripts/make_dinov2_fixtures.py`: small random-weight models, layer scales random, the
//! second with 2 registers and the SwiGLU MLP) at the positions' own 40² and at 56², 32² and
//! 32×48, where the positions are resized to the input's grid as `interpolate_pos_encoding`
//! does (bicubic; antialiased for registers): the first and penultimate hidden states, the
//! last hidden state (through `layernorm`) and the pooled class token, within 1e-4 relative.

use crate::common::rel_err;
use candle_core::Device;
use imgseq_vit::dinov2;
use std::path::{Path, PathBuf};

fn fx(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/dinov2")
        .join(name)
}

fn check(model: &str, registers: usize) {
    let io =
        candle_core::safetensors::load(fx(model).join("io.safetensors"), &Device::Cpu).unwrap();
    let m = dinov2::load(&fx(model), &Device::Cpu).unwrap();
    assert_eq!(m.cfg.num_register_tokens, registers);
    for (h, w) in [(40, 40), (56, 56), (32, 32), (32, 48)] {
        let k = format!("{h}x{w}");
        let out = m.forward_all(&io[&format!("pixel_values_{k}")]).unwrap();
        assert_eq!(out.hidden_states.len(), 3);
        let tokens = 1 + registers + (h / 8) * (w / 8);
        assert_eq!(
            out.last_hidden_state.dims(),
            &[2, tokens, 32],
            "{model} {k}"
        );
        let pooled = out.pooled.as_ref().unwrap();
        let checks = [
            ("hidden_states[0]", &out.hidden_states[0], "first"),
            ("layer -2", &out.hidden_states[1], "penultimate"),
            (
                "last_hidden_state",
                &out.last_hidden_state,
                "last_hidden_state",
            ),
            ("pooled", pooled, "pooler_output"),
        ];
        for (what, got, name) in checks {
            let r = rel_err(got, &io[&format!("{name}_{k}")]);
            println!("dinov2 {model} {k}: {what} relative {r:.2e}");
            assert!(r < 1e-4, "{model} {k}: {what} relative {r}");
        }
    }
}

#[test]
fn dinov2_matches_transformers_at_its_grid_and_with_resized_positions() {
    check("plain", 0);
}

#[test]
fn dinov2_with_registers_and_swiglu_matches_transformers() {
    check("registers", 2);
}

#[test]
fn dinov2_configs_that_do_not_fit_are_refused_naming_the_field() {
    let e = dinov2::config_from_json(&serde_json::json!({"model_type": "dinov2",
        "hidden_size": 30, "num_attention_heads": 4}))
    .unwrap_err();
    assert!(e.contains("hidden_size 30"), "{e}");
    let e = dinov2::config_from_json(&serde_json::json!({"model_type": "dinov2",
        "hidden_act": "relu"}))
    .unwrap_err();
    assert!(e.contains("relu"), "{e}");
    let e = dinov2::config_from_json(&serde_json::json!({"model_type": "vit"})).unwrap_err();
    assert!(e.contains("vit"), "{e}");
    // Registers: 4 unless the config says; plain DINOv2 has none.
    let c = dinov2::config_from_json(&serde_json::json!({"model_type": "dinov2_with_registers"}))
        .unwrap();
    assert_eq!(c.num_register_tokens, 4);
    let c = dinov2::config_from_json(&serde_json::json!({"model_type": "dinov2",
        "num_register_tokens": 4}))
    .unwrap();
    assert_eq!(c.num_register_tokens, 0);
}
