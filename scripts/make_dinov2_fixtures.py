#!/usr/bin/env python3
"""Builds the DINOv2 parity fixtures in tests/fixtures/dinov2/ with transformers' own `Dinov2Model`
and `Dinov2WithRegistersModel` (needs PyTorch, transformers, safetensors).

Two small models (hidden 32, 2 layers, 4 heads, positions for 40² pictures in 8² patches: a
5 × 5 grid) with random weights, layer scales included:
  plain/         `Dinov2Model.save_pretrained` (config.json `dinov2`, GELU MLP; the released
                 names: `embeddings.*` with the mask token, `encoder.layer.N.attention.attention.
                 query`, `…attention.output.dense`, `…layer_scale1.lambda1`, `…mlp.fc1`, `layernorm`)
  registers/     `Dinov2WithRegistersModel.save_pretrained` (config.json `dinov2_with_registers`,
                 2 register tokens, the SwiGLU MLP: `mlp.weights_in`, `mlp.weights_out`)
  each io.safetensors, for pictures of 40×40 (the positions as they are), 56×56 (positions
  resized up to 7 × 7), 32×32 (down to 4 × 4) and 32×48 (4 × 6), already normalised:
                 pixel_values_HxW (2,3,H,W), last_hidden_state_HxW (through the final
                 layernorm), pooler_output_HxW (its class token), penultimate_HxW =
                 hidden_states[-2], first_HxW = hidden_states[0]
  released/      DINOv2-L/14's config (hidden 1024, 24 layers, 16 heads, positions for 518²) and
                 shapes.json: every tensor's shape and the outputs' shapes at 224² (257 tokens),
                 from a model built on the meta device (no weights)
Run: /tmp/hfvenv/bin/python scripts/make_dinov2_fixtures.py   (written with transformers 5.25.0)
"""

import json
import os

import torch
from transformers.core_model_loading import revert_weight_conversion
from safetensors.torch import save_file
from transformers import (Dinov2Config, Dinov2Model, Dinov2WithRegistersConfig,
                          Dinov2WithRegistersModel)

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "dinov2")
SIZES = [(40, 40), (56, 56), (32, 32), (32, 48)]


def randomise(m):
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name or "lambda" in name:
                one = 1.0 if name.endswith(("weight", "lambda1")) else 0.0
                p.copy_(one + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))


def build(name, model):
    randomise(model)
    model.eval()
    io = {}
    for h, w in SIZES:
        x = torch.randn(2, 3, h, w)
        with torch.no_grad():
            out = model(pixel_values=x, output_hidden_states=True)
        assert len(out.hidden_states) == model.config.num_hidden_layers + 1
        with torch.no_grad():
            emb = model.embeddings(x)
        assert torch.equal(emb, out.hidden_states[0]), "hidden_states[0] is the embeddings"
        k = f"{h}x{w}"
        io[f"pixel_values_{k}"] = x.contiguous()
        io[f"last_hidden_state_{k}"] = out.last_hidden_state.contiguous()
        io[f"pooler_output_{k}"] = out.pooler_output.contiguous()
        io[f"penultimate_{k}"] = out.hidden_states[-2].contiguous()
        io[f"first_{k}"] = out.hidden_states[0].contiguous()
    d = os.path.join(OUT, name)
    model.save_pretrained(d)
    save_file(io, os.path.join(d, "io.safetensors"))


def released():
    cfg = Dinov2Config(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                       image_size=518, patch_size=14)
    with torch.device("meta"):
        m = Dinov2Model(cfg).eval()
        out = m(pixel_values=torch.empty(1, 3, 224, 224), output_hidden_states=True)
    d = os.path.join(OUT, "released")
    os.makedirs(d, exist_ok=True)
    cfg.to_json_file(os.path.join(d, "config.json"))
    shapes = {
        # the names save_pretrained writes (the released layout)
        "tensors": {k: list(v.shape)
                    for k, v in revert_weight_conversion(m, m.state_dict()).items()},
        "last_hidden_state": list(out.last_hidden_state.shape),
        "pooler_output": list(out.pooler_output.shape),
        "hidden_states": len(out.hidden_states),
    }
    with open(os.path.join(d, "shapes.json"), "w") as fh:
        json.dump(shapes, fh, indent=1, sort_keys=True)


def main():
    torch.manual_seed(0)
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, image_size=40,
                 patch_size=8)
    build("plain", Dinov2Model(Dinov2Config(**small)))
    build("registers", Dinov2WithRegistersModel(Dinov2WithRegistersConfig(
        num_register_tokens=2, use_swiglu_ffn=True, **small)))
    released()
    print("wrote", OUT)


if __name__ == "__main__":
    main()
