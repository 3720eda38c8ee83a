#!/usr/bin/env python3
"""Builds the CLIP vision tower parity fixtures in tests/fixtures/clip/ with transformers' own
`CLIPVisionModel` (needs PyTorch, transformers, safetensors).

A small tower (hidden 32, MLP 64, 2 layers, 4 heads, 32² pictures in 8² patches: 16 patch tokens
and the class token; quick-GELU as OpenAI's CLIP) with random weights:
  vision/        `CLIPVisionModel.save_pretrained` (config.json `clip_vision_model` +
                 model.safetensors: `embeddings.*`, `pre_layrnorm`, `encoder.layers.N.*`,
                 `post_layernorm`)
  full/          the same tower as a full CLIP checkpoint names it (`vision_model.` + name, with
                 a text tower's tensor and `logit_scale` beside it) and a `clip` config.json
                 (the tower under `vision_config`)
  io.safetensors pixel_values (2,3,32,32) (already normalised), last_hidden_state (2,17,32),
                 pooler_output (2,32), penultimate (2,17,32) = hidden_states[-2] (LLaVA's layer)
  processor.safetensors  the image processor's parity (hf_tower_fixtures.processor_io) on
                 the pictures in tests/fixtures/processor/: vision/ has the released
                 models' preprocessor_config.json (shortest edge = crop = 32, bicubic), full/
                 another (shortest edge 40, crop 32, bilinear); the tower's last_hidden_state
                 on each picture's pixel_values
Run: /tmp/hfvenv/bin/python scripts/make_clip_fixtures.py   (written with transformers 5.25.0)
"""

import json
import os

import torch
from safetensors.torch import save_file
from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPVisionConfig, CLIPVisionModel

from hf_tower_fixtures import alpha_note, processor_io, randomise, save

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "clip")


def main():
    torch.manual_seed(0)
    cfg = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, image_size=32, patch_size=8,
                           hidden_act="quick_gelu")
    m = CLIPVisionModel(cfg).eval()
    randomise(m)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        out = m(pixel_values=x, output_hidden_states=True)
    m.save_pretrained(os.path.join(OUT, "vision"))
    full = os.path.join(OUT, "full")
    os.makedirs(full, exist_ok=True)
    sd = {f"vision_model.{k}": v.contiguous() for k, v in m.state_dict().items()}
    sd["text_model.embeddings.token_embedding.weight"] = torch.zeros(4, 8)
    sd["logit_scale"] = torch.tensor(2.6592)
    save_file(sd, os.path.join(full, "model.safetensors"), metadata={"format": "pt"})
    full_cfg = CLIPConfig(vision_config=cfg.to_dict())
    with open(os.path.join(full, "config.json"), "w") as fh:
        json.dump(full_cfg.to_dict(), fh, indent=2, default=str)
    save_file({
        "pixel_values": x.contiguous(),
        "last_hidden_state": out.last_hidden_state.contiguous(),
        "pooler_output": out.pooler_output.contiguous(),
        "penultimate": out.hidden_states[-2].contiguous(),
    }, os.path.join(OUT, "io.safetensors"))
    print("wrote", OUT, len(out.hidden_states), "hidden states")

    def forward(pv):
        return {"last_hidden_state": m(pixel_values=pv).last_hidden_state}

    crop = {"height": 32, "width": 32}
    released_proc = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size=crop)
    tensors = processor_io(released_proc, forward, "vision", os.path.join(OUT, "vision"))
    tensors.update(processor_io(
        CLIPImageProcessorPil(size={"shortest_edge": 40}, crop_size=crop, resample=2),
        forward, "full", full))
    save(tensors, os.path.join(OUT, "processor.safetensors"))
    alpha_note(released_proc)


if __name__ == "__main__":
    main()
