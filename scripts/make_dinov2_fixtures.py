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
  processor.safetensors  the image processor's parity (hf_tower_fixtures.processor_io) on
                 the pictures in tests/fixtures/processor/: plain/ and registers/ have a
                 preprocessor_config.json in the released models' proportion (shortest edge
                 46, centre crop 40, bicubic, ImageNet's mean and std: 256 and 224 scaled to
                 the 40² positions); each model's last_hidden_state on each picture's
                 pixel_values
  released/      DINOv2-L/14's config (hidden 1024, 24 layers, 16 heads, positions for 518²) and
                 shapes.json: every tensor's shape and the outputs' shapes at 224² (257 tokens),
                 from a model built on the meta device (no weights)
Run: /tmp/hfvenv/bin/python scripts/make_dinov2_fixtures.py   (written with transformers 5.25.0)
"""

import os

import torch
from safetensors.torch import save_file
from transformers import (BitImageProcessorPil, Dinov2Config, Dinov2Model,
                          Dinov2WithRegistersConfig, Dinov2WithRegistersModel)
from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from hf_tower_fixtures import processor_io, randomise, released, save

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "dinov2")
SIZES = [(40, 40), (56, 56), (32, 32), (32, 48)]


def build(name, model):
    randomise(model, ones=("weight", "lambda1"), scaled=("norm", "lambda"))
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
    return model


def main():
    torch.manual_seed(0)
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, image_size=40,
                 patch_size=8)
    plain = build("plain", Dinov2Model(Dinov2Config(**small)))
    registers = build("registers", Dinov2WithRegistersModel(Dinov2WithRegistersConfig(
        num_register_tokens=2, use_swiglu_ffn=True, **small)))
    released(Dinov2Model, Dinov2Config(hidden_size=1024, num_hidden_layers=24,
                                       num_attention_heads=16, image_size=518, patch_size=14),
             os.path.join(OUT, "released"), 224)
    print("wrote", OUT)

    proc = BitImageProcessorPil(size={"shortest_edge": 46}, crop_size={"height": 40, "width": 40},
                                image_mean=IMAGENET_DEFAULT_MEAN, image_std=IMAGENET_DEFAULT_STD)
    tensors = {}
    for name, model in [("plain", plain), ("registers", registers)]:
        def forward(pv, model=model):
            return {"last_hidden_state": model(pixel_values=pv).last_hidden_state}
        tensors.update(processor_io(proc, forward, name, os.path.join(OUT, name)))
    save(tensors, os.path.join(OUT, "processor.safetensors"))


if __name__ == "__main__":
    main()
