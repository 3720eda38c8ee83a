#!/usr/bin/env python3
"""Builds the Chameleon / Anole parity fixtures in tests/fixtures/chameleon/ with transformers'
own `ChameleonVQVAE` (needs PyTorch, transformers, safetensors).

transformers' `ChameleonVQVAE` is the image tokenizer of `ChameleonForConditionalGeneration`
(Chameleon, Anole): taming's encoder, `quant_conv`, a nearest-entry codebook and
`post_quant_conv` — and no decoder (transformers only encodes images for the language model).
The model is built at a small size (`base_channels` 32, `channel_multiplier` [1, 2], one res
block, attention at 16, `latent_channels` / `embed_dim` 16, 64 codes; the released: 128,
[1, 1, 2, 2, 4], 2, none, 256, 8,192) with random weights, the codebook drawn from the
encoder's latents; seeds are retried until no latent has a near-tie between its two nearest
codes (relative gap under 1e-4).

Outputs (tests/fixtures/chameleon/):
  vq/                 `ChameleonVQVAE.save_pretrained`: config.json (`model_type`
                      `chameleon_vqgan`) + model.safetensors
  full/               the same tensors as a full model's file holds them
                      (`model.vqmodel.` + name, with one language-model tensor beside them) and
                      a `ChameleonConfig` config.json (`model_type` `chameleon`, the VQ under
                      `vq_config`)
  io.safetensors      x (2,3,32,32) in [-1, 1]; h (2,16,16,16) = quant_conv(encoder(x));
                      tokens (2,256) int64 = `encode(x).image_tokens` viewed per picture
  margin.txt          smallest relative gap between the nearest and second-nearest code
Run: /tmp/hfvenv/bin/python scripts/make_chameleon_fixtures.py
(written with transformers 5.25.0)
"""

import json
import os

import torch
from safetensors.torch import save_file
from transformers import ChameleonConfig, ChameleonVQVAE, ChameleonVQVAEConfig

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "chameleon")


def build(seed, x):
    torch.manual_seed(seed)
    cfg = ChameleonVQVAEConfig(embed_dim=16, num_embeddings=64, latent_channels=16,
                               resolution=32, base_channels=32, channel_multiplier=[1, 2],
                               num_res_blocks=1, attn_resolutions=[16])
    m = ChameleonVQVAE(cfg).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn_like(p))
            elif p.dim() > 1:
                torch.nn.init.normal_(p, std=(2.0 / p[0].numel()) ** 0.5)
        h = m.quant_conv(m.encoder(x))
        pool = h.permute(0, 2, 3, 1).reshape(-1, 16)
        pick = torch.randperm(pool.shape[0])[:64]
        m.quantize.embedding.weight.copy_(pool[pick] * (0.7 + 0.6 * torch.rand(64, 1)))
        for t in m.state_dict().values():
            if t.is_floating_point():
                t.copy_(t.half().float())
    return cfg, m


def margin(m, x):
    with torch.no_grad():
        z = m.quant_conv(m.encoder(x)).double().permute(0, 2, 3, 1).reshape(-1, 16)
        e = m.quantize.embedding.weight.double()
        d = z.square().sum(1, keepdim=True) + e.square().sum(1) - 2 * z @ e.T
        two = d.topk(2, dim=1, largest=False).values
        return ((two[:, 1] - two[:, 0]) / two[:, 1].abs().clamp_min(1e-12)).min().item()


def main():
    g = torch.Generator().manual_seed(3)
    x = torch.rand(2, 3, 32, 32, generator=g) * 2 - 1
    for seed in range(200):
        cfg, m = build(seed, x)
        gap = margin(m, x)
        if gap > 1e-4:
            break
    else:
        raise SystemExit("no seed without near-ties")
    print(f"seed {seed}, margin {gap:.3g}")
    with torch.no_grad():
        out = m.encode(x)
        h = m.quant_conv(m.encoder(x))
    tokens = out.image_tokens.view(2, -1)
    os.makedirs(OUT, exist_ok=True)
    m.save_pretrained(os.path.join(OUT, "vq"))
    full = os.path.join(OUT, "full")
    os.makedirs(full, exist_ok=True)
    sd = {f"model.vqmodel.{k}": v.contiguous() for k, v in m.state_dict().items()}
    sd["model.embed_tokens.weight"] = torch.zeros(4, 8)
    save_file(sd, os.path.join(full, "model.safetensors"), metadata={"format": "pt"})
    full_cfg = ChameleonConfig(vq_config=cfg.to_dict(), hidden_size=8, num_hidden_layers=1,
                               num_attention_heads=1, num_key_value_heads=1, intermediate_size=8,
                               vocab_size=4)
    with open(os.path.join(full, "config.json"), "w") as fh:
        json.dump(full_cfg.to_dict(), fh, indent=2, default=str)
    save_file({"x": x.contiguous(), "h": h.contiguous(), "tokens": tokens.contiguous()},
              os.path.join(OUT, "io.safetensors"))
    with open(os.path.join(OUT, "margin.txt"), "w") as fh:
        fh.write(f"{gap:.6g}\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
