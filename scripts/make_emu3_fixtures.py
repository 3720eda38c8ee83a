#!/usr/bin/env python3
"""Builds the Emu3 parity fixtures in tests/fixtures/emu3/ with transformers' own `Emu3VQVAE`
(needs PyTorch, transformers, safetensors).

transformers' `Emu3VQVAE` is the image tokenizer of `Emu3ForConditionalGeneration` (Emu3,
BAAI/Emu3-VisionTokenizer): a 2-D encoder (taming's blocks, multi-head linear attention),
causal Conv3d temporal down-sampling and BatchNorm3d temporal ResNet blocks, a Conv3d
`quant_conv`, a nearest-entry codebook, and a MoVQ decoder whose norms are conditioned on the
quantized latents (`Emu3VQVAESpatialNorm`). A single image is repeated to
`temporal_downsample_factor` frames before the encoder; decoding keeps frame 0.

The model is built small (`base_channels` 32, `channel_multiplier` [1, 1], one res block,
attention at level 1 with `hidden_size` 32 and 2 heads, `embed_dim` = `latent_channels` 4, 64
codes, `temporal_downsample_factor` 4 as released; the released: 256, [1, 2, 2, 4], 2, level 3,
1024 and 1 head, 4, 32,768 codes) with random weights (BatchNorm running statistics too), the
codebook drawn from the encoder's latents; seeds are retried until no latent has a near-tie
between its two nearest codes (relative gap under 1e-4). The decoder's `conv_out` is scaled so
that the decode spans about [-1, 1]. Weights are rounded to float16 and stored so (the
reference outputs are computed in float32 from the rounded values), to keep the files small.

Outputs (tests/fixtures/emu3/):
  vq/                 `Emu3VQVAE.save_pretrained`: config.json (`model_type` `emu3_vqgan`)
                      + model.safetensors
  full/               the same tensors as a full model's file holds them (`model.vqmodel.` +
                      name, with one language-model tensor beside them) and an `Emu3Config`
                      config.json (`model_type` `emu3`, the VQ under `vq_config`)
  io.safetensors      x (2,3,32,32) in [-1, 1]; h (2,4,16,16) = quant_conv(encoder(x)) of the
                      image repeated to 4 frames (one latent frame); tokens (2,16,16) int64 =
                      `encode(x, image_sizes).image_tokens`; decoded (2,3,32,32) =
                      `decode(tokens)`
  margin.txt          smallest relative gap between the nearest and second-nearest code
  orig/               the same small architecture with one attention head built by BAAI's
                      original code (`Emu3VisionVQModel`, `emu3/tokenizer/` of
                      github.com/baaivision/Emu3, the layout of BAAI/Emu3-VisionTokenizer on the
                      Hub): its config.json (`model_type` `Emu3VisionVQ`) + model.safetensors
                      (its own weight names), and io.safetensors with x, h, tokens =
                      `encode(x)` and decoded = `decode(tokens)` of that model
Run: EMU3_REPO=/path/to/baaivision/Emu3 /tmp/hfvenv/bin/python scripts/make_emu3_fixtures.py
(written with transformers 5.25.0 and baaivision/Emu3 at f6ea9aa)
"""

import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import Emu3Config, Emu3VQVAE, Emu3VQVAEConfig

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "emu3")
E = 4  # embed_dim = latent_channels
N = 64  # codes


def config():
    return Emu3VQVAEConfig(codebook_size=N, embed_dim=E, latent_channels=E, base_channels=32,
                           channel_multiplier=[1, 1], num_res_blocks=1, attn_resolutions=[1],
                           hidden_size=32, num_attention_heads=2, temporal_downsample_factor=4)


def latents(m, x):
    """quant_conv(encoder(x)) of the image repeated to the temporal factor: (b, E, h, w)."""
    t = m.config.temporal_downsample_factor
    v = x.unsqueeze(1).repeat(1, t, 1, 1, 1)
    h = m.encoder(v).permute(0, 2, 1, 3, 4)
    h = m.quant_conv(h).permute(0, 2, 1, 3, 4)  # (b, 1, E, h, w)
    return h[:, 0]


def original():
    """BAAI's own `Emu3VisionVQModel` and its config class (from a checkout of baaivision/Emu3)."""
    repo = os.environ.get("EMU3_REPO")
    if not repo:
        raise SystemExit("set EMU3_REPO to a checkout of github.com/baaivision/Emu3")
    sys.path.insert(0, repo)
    from emu3.tokenizer.configuration_emu3visionvq import Emu3VisionVQConfig
    from emu3.tokenizer.modeling_emu3visionvq import Emu3VisionVQModel

    cfg = Emu3VisionVQConfig(codebook_size=N, embed_dim=E, z_channels=E, ch=32, ch_mult=[1, 1],
                             num_res_blocks=1, attn_resolutions=[1], temporal_downsample_factor=4)
    return cfg, Emu3VisionVQModel(cfg).eval()


def tokens_of(m, x):
    if isinstance(m, Emu3VQVAE):
        return torch.stack(m.encode(x, image_sizes=sizes(x)).image_tokens)
    return m.encode(x)


def build(seed, x, make):
    torch.manual_seed(seed)
    cfg, m = make()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn_like(p))
            elif p.dim() > 1:
                torch.nn.init.normal_(p, std=(2.0 / p[0].numel()) ** 0.5)
        for name, b in m.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn_like(b))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand_like(b))
        h = latents(m, x)
        pool = h.permute(0, 2, 3, 1).reshape(-1, E)
        pick = torch.randperm(pool.shape[0])[:N]
        m.quantize.embedding.weight.copy_(pool[pick] * (0.7 + 0.6 * torch.rand(N, 1)))
        y = m.decode(tokens_of(m, x))
        s = 0.5 / y.std()
        m.decoder.conv_out.weight.mul_(s)
        m.decoder.conv_out.bias.mul_(s)
        for t in m.state_dict().values():
            if t.is_floating_point():
                t.copy_(t.half().float())
    return cfg, m


def sizes(x):
    return torch.tensor([list(x.shape[-2:])] * x.shape[0])


def margin(m, x):
    with torch.no_grad():
        z = latents(m, x).double().permute(0, 2, 3, 1).reshape(-1, E)
        e = m.quantize.embedding.weight.double()
        d = z.square().sum(1, keepdim=True) + e.square().sum(1) - 2 * z @ e.T
        two = d.topk(2, dim=1, largest=False).values
        return ((two[:, 1] - two[:, 0]) / two[:, 1].abs().clamp_min(1e-12)).min().item()


def no_near_ties(x, make):
    for seed in range(200):
        cfg, m = build(seed, x, make)
        gap = margin(m, x)
        if gap > 1e-4:
            print(f"seed {seed}, margin {gap:.3g}")
            return cfg, m, gap
    raise SystemExit("no seed without near-ties")


def outputs(m, x):
    with torch.no_grad():
        tokens = tokens_of(m, x)
        return {"x": x.contiguous(), "h": latents(m, x).contiguous(),
                "tokens": tokens.contiguous(), "decoded": m.decode(tokens).contiguous()}


def main():
    g = torch.Generator().manual_seed(3)
    x = torch.rand(2, 3, 32, 32, generator=g) * 2 - 1
    cfg, m, gap = no_near_ties(x, lambda: (config(), Emu3VQVAE(config()).eval()))
    io = outputs(m, x)
    tokens, decoded = io["tokens"], io["decoded"]
    print("tokens", tuple(tokens.shape), "distinct", tokens.unique().numel(),
          "decoded range", decoded.min().item(), decoded.max().item())
    os.makedirs(OUT, exist_ok=True)
    m.to(torch.float16).save_pretrained(os.path.join(OUT, "vq"))
    full = os.path.join(OUT, "full")
    os.makedirs(full, exist_ok=True)
    sd = {f"model.vqmodel.{k}": v.contiguous() for k, v in m.state_dict().items()}  # float16
    sd["model.text_model.embed_tokens.weight"] = torch.zeros(4, 8)
    save_file(sd, os.path.join(full, "model.safetensors"), metadata={"format": "pt"})
    full_cfg = Emu3Config(vq_config=cfg.to_dict(),
                          text_config=dict(hidden_size=8, num_hidden_layers=1,
                                           num_attention_heads=1, num_key_value_heads=1,
                                           intermediate_size=8, vocab_size=4))
    with open(os.path.join(full, "config.json"), "w") as fh:
        json.dump(full_cfg.to_dict(), fh, indent=2, default=str)
    save_file(io, os.path.join(OUT, "io.safetensors"))
    with open(os.path.join(OUT, "margin.txt"), "w") as fh:
        fh.write(f"{gap:.6g}\n")

    ocfg, om, ogap = no_near_ties(x, original)
    oio = outputs(om, x)
    orig = os.path.join(OUT, "orig")
    os.makedirs(orig, exist_ok=True)
    sd = {k: (v.half() if v.is_floating_point() else v).contiguous()
          for k, v in om.state_dict().items()}
    save_file(sd, os.path.join(orig, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(orig, "config.json"), "w") as fh:
        json.dump(ocfg.to_dict(), fh, indent=2, default=str)
    save_file(oio, os.path.join(orig, "io.safetensors"))
    with open(os.path.join(orig, "margin.txt"), "w") as fh:
        fh.write(f"{ogap:.6g}\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
