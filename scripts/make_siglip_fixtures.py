#!/usr/bin/env python3
"""Builds the SigLIP vision tower parity fixtures in tests/fixtures/siglip/ with transformers' own
`SiglipVisionModel` and `SiglipModel` (needs PyTorch, transformers, safetensors).

A small tower (hidden 32, MLP 64, 2 layers, 4 heads, 36² pictures in 8² patches: the conv keeps
4 × 4 = 16 patch tokens and drops the last 4 pixels, as so400m's 384/14 does; gelu_pytorch_tanh,
the attention-pooling head) with random weights:
  vision/        `SiglipVisionModel.save_pretrained` (config.json `siglip_vision_model` +
                 model.safetensors: `embeddings.*`, `encoder.layers.N.*`, `post_layernorm`,
                 `head.*`)
  full/          a full `SiglipModel.save_pretrained` with that vision tower (`vision_model.` +
                 name) beside a tiny random text tower, `logit_scale` and `logit_bias`; config
                 `siglip` with the tower under `vision_config`
  io.safetensors pixel_values (2,3,36,36) (already normalised), last_hidden_state (2,16,32)
                 (through post_layernorm), pooler_output (2,32) (the head), penultimate
                 (2,16,32) = hidden_states[-2], first (2,16,32) = hidden_states[0]
  processor.safetensors  the image processor's parity (hf_tower_fixtures.processor_io) on
                 the pictures in tests/fixtures/processor/: vision/ and full/ have the
                 released models' preprocessor_config.json (36x36, bicubic, no crop); the
                 tower's last_hidden_state on each picture's pixel_values
  released/      so400m-patch14-384's config (hidden 1152, MLP 4304, 27 layers, 16 heads) and
                 shapes.json: every tensor's shape and the outputs' shapes, from a model built
                 on the meta device (no weights)
Run: /tmp/hfvenv/bin/python scripts/make_siglip_fixtures.py   (written with transformers 5.25.0)
"""

import os

import torch
from safetensors.torch import save_file
from transformers import (SiglipConfig, SiglipImageProcessorPil, SiglipModel,
                          SiglipVisionConfig, SiglipVisionModel)

from hf_tower_fixtures import processor_io, randomise, released, save

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "siglip")


def main():
    torch.manual_seed(0)
    cfg = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, image_size=36, patch_size=8)
    m = SiglipVisionModel(cfg).eval()
    randomise(m)
    x = torch.randn(2, 3, 36, 36)
    with torch.no_grad():
        out = m(pixel_values=x, output_hidden_states=True)
    assert len(out.hidden_states) == 3
    with torch.no_grad():
        emb = m.vision_model.embeddings(x) if hasattr(m, "vision_model") else m.embeddings(x)
    assert torch.equal(emb, out.hidden_states[0]), "hidden_states[0] is the embeddings"
    m.save_pretrained(os.path.join(OUT, "vision"))

    text = dict(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                num_attention_heads=2, max_position_embeddings=8, bos_token_id=1,
                eos_token_id=2, pad_token_id=0)
    full = SiglipModel(SiglipConfig(text_config=text, vision_config=cfg.to_dict())).eval()
    randomise(full)
    full.vision_model.load_state_dict(m.state_dict())
    full.save_pretrained(os.path.join(OUT, "full"))

    save_file({
        "pixel_values": x.contiguous(),
        "last_hidden_state": out.last_hidden_state.contiguous(),
        "pooler_output": out.pooler_output.contiguous(),
        "penultimate": out.hidden_states[-2].contiguous(),
        "first": out.hidden_states[0].contiguous(),
    }, os.path.join(OUT, "io.safetensors"))
    released(SiglipVisionModel,
             SiglipVisionConfig(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27,
                                num_attention_heads=16, image_size=384, patch_size=14),
             os.path.join(OUT, "released"), 384)
    print("wrote", OUT, len(out.hidden_states), "hidden states")

    def forward(pv):
        return {"last_hidden_state": m(pixel_values=pv).last_hidden_state}

    proc = SiglipImageProcessorPil(size={"height": 36, "width": 36})
    tensors = processor_io(proc, forward, "vision", os.path.join(OUT, "vision"))
    tensors.update(processor_io(proc, forward, "full", os.path.join(OUT, "full")))
    save(tensors, os.path.join(OUT, "processor.safetensors"))


if __name__ == "__main__":
    main()
