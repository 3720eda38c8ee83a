#!/usr/bin/env python3
"""Builds the diffusers VQModel parity fixtures in tests/fixtures/diffusers/ (needs PyTorch,
numpy, safetensors and diffusers from PyPI: `pip install diffusers`).

The models are diffusers' own `VQModel` (`models/autoencoders/vq_model.py`, `vae.py`), built
with random weights and written with `save_pretrained`, so the files are exactly diffusers'
layout (`config.json` + `diffusion_pytorch_model.safetensors`):

  vq/                    norm_num_groups 4, block_out_channels (8, 16), layers_per_block 1,
                         latent_channels 4, vq_embed_dim 3 (≠ latent), 64 codes, middle
                         attention; inputs in [-1, 1]
  vq/legacy.safetensors  the same weights with the attention under the names of older files
                         (`query`, `key`, `value`, `proj_attn`)
  amused/vqvae/          aMUSEd-like: no middle attention, `lookup_from_codebook`, 3 levels,
                         24 codes;
                         `amused/model_index.json` names an AmusedPipeline, whose image
                         processor does not normalise: inputs and outputs in [0, 1]
  io.safetensors         per model: x (2,3,16,16) in its own range, latents (after
                         quant_conv), indices (2,h,w) int64 by `quantize` (torch.cdist),
                         recon (decoded from the indices), and the margin between the
                         nearest and second-nearest code of every latent

The codebook is drawn from the encoder's own latents so that the indices vary, and seeds are
retried until no latent has a near-tie. All float32.
Run: /tmp/torchenv/bin/python scripts/make_diffusers_fixtures.py
"""

import json
import os
import shutil

import torch
from diffusers import VQModel
from safetensors.torch import load_file, save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "diffusers")
SIZE = 16

CONFIGS = {
    "vq": dict(
        block_out_channels=(8, 16),
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        layers_per_block=1,
        latent_channels=4,
        vq_embed_dim=3,
        num_vq_embeddings=64,
        norm_num_groups=4,
        sample_size=SIZE,
    ),
    "amused": dict(
        block_out_channels=(8, 8, 16),
        down_block_types=("DownEncoderBlock2D",) * 3,
        up_block_types=("UpDecoderBlock2D",) * 3,
        layers_per_block=1,
        latent_channels=4,
        num_vq_embeddings=24,
        norm_num_groups=4,
        mid_block_add_attention=False,
        lookup_from_codebook=True,
        force_upcast=True,
        sample_size=SIZE,
    ),
}


def inputs(zero_one):
    torch.manual_seed(1234)
    yy, xx = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="ij")
    a = torch.stack([torch.sin(xx / 3.0) * torch.cos(yy / 4.0), torch.cos((xx + yy) / 5.0), (xx - yy) / SIZE])
    b = torch.stack([torch.cos(xx / 2.0), torch.sin(yy / 3.0) * 0.8, ((xx - 8) ** 2 + (yy - 8) ** 2 < 20).float() - 0.5])
    x = torch.stack([a, b]).clamp(-1, 1).float()
    return (x + 1) / 2 if zero_one else x


def build(name, cfg, x):
    for seed in range(200):
        torch.manual_seed(seed)
        m = VQModel(**cfg).eval()
        with torch.no_grad():
            for pname, p in m.named_parameters():
                if "norm" in pname:
                    p.copy_(1.0 + 0.2 * torch.randn_like(p) if pname.endswith("weight") else 0.1 * torch.randn_like(p))
            h = m.encode(x).latents
            flat = h.permute(0, 2, 3, 1).reshape(-1, h.shape[1])
            e = m.quantize.embedding.weight
            pick = flat[torch.randperm(flat.shape[0])[: e.shape[0]]]
            e.copy_(pick + 0.1 * pick.std() * torch.randn_like(pick))
            h = m.encode(x).latents
            _, _, (_, _, idx) = m.quantize(h)
            flat = h.permute(0, 2, 3, 1).reshape(-1, h.shape[1])
            d = torch.cdist(flat, e)
            top2 = torch.topk(d, 2, dim=1, largest=False).values
            margin = (top2[:, 1] - top2[:, 0]).min().item()
            used = len(torch.unique(idx))
        if margin > 1e-3 and used >= 10:
            print(f"{name}: seed {seed}, margin {margin:.2e}, {used} codes used")
            return m, h, idx, margin
    raise SystemExit(f"{name}: no seed without near-ties")


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    io = {}
    for name, cfg in CONFIGS.items():
        zero_one = name == "amused"
        x = inputs(zero_one)
        m, h, idx, margin = build(name, cfg, x)
        folder = os.path.join(OUT, "amused", "vqvae") if zero_one else os.path.join(OUT, name)
        m.save_pretrained(folder)
        b, _, hh, ww = h.shape
        idx = idx.reshape(b, hh, ww)
        with torch.no_grad():
            if cfg.get("lookup_from_codebook"):
                # The aMUSEd way: decode straight from the indices.
                shape = (b, hh, ww, m.quantize.vq_embed_dim)
                recon = m.decode(idx.reshape(-1), force_not_quantize=True, shape=shape).sample
            else:
                recon = m.decode(h).sample
        io[f"{name}.x"] = x.contiguous()
        io[f"{name}.latents"] = h.contiguous()
        io[f"{name}.indices"] = idx.long().contiguous()
        io[f"{name}.recon"] = recon.contiguous()
        io[f"{name}.margin"] = torch.tensor([margin], dtype=torch.float32)
    with open(os.path.join(OUT, "amused", "model_index.json"), "w") as f:
        json.dump({"_class_name": "AmusedPipeline", "_diffusers_version": "0.25.0",
                   "vqvae": ["diffusers", "VQModel"]}, f, indent=2)
        f.write("\n")
    # Older files name the attention's Linear layers query/key/value/proj_attn.
    sd = load_file(os.path.join(OUT, "vq", "diffusion_pytorch_model.safetensors"))
    old = {}
    for k, v in sd.items():
        for new, legacy in [("to_q", "query"), ("to_k", "key"), ("to_v", "value"), ("to_out.0", "proj_attn")]:
            k = k.replace(f"attentions.0.{new}.", f"attentions.0.{legacy}.")
        old[k] = v
    assert any(".query." in k for k in old)
    save_file(old, os.path.join(OUT, "vq", "legacy.safetensors"))
    # diffusers itself loads the legacy names into the same model.
    m = VQModel.from_pretrained(os.path.join(OUT, "vq"))
    sd2 = m.state_dict()
    m._fix_state_dict_keys_on_load(old)
    assert sorted(old) == sorted(sd2) and all(torch.equal(old[k], sd2[k]) for k in old)
    save_file(io, os.path.join(OUT, "io.safetensors"))
    total = 0
    for root, _, files in os.walk(OUT):
        for fn in sorted(files):
            p = os.path.join(root, fn)
            total += os.path.getsize(p)
            print(f"{os.path.relpath(p, OUT)}: {os.path.getsize(p)} bytes")
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()
