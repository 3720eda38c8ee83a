#!/usr/bin/env python3
"""Builds the Cosmos tokenizer parity fixtures in tests/fixtures/cosmos/ with NVIDIA's own
network code (github.com/NVIDIA/Cosmos-Tokenizer, `cosmos_tokenizer/networks`), exported as the
release exports it: `torch.jit.trace` of `encoder_jit()` and `decoder_jit()` (the network does not
script: its Patcher keeps a `range` attribute and its FSQ uses einops), saved by `torch.jit.save`.

Needs PyTorch, einops, numpy, loguru, safetensors, and a checkout of Cosmos-Tokenizer
($COSMOS_REPO, or the first argument): its `cosmos_tokenizer/` package is imported as it is
(its `modules/__init__` imports the video layers too; they import nothing more).

The two image tokenizers are built small, with the released structure (Haar wavelet patching
with patch size 4, taming-style encoder and decoder with a middle attention block, 1×1
quant_conv / post_quant_conv):
  DI: channels 32, channels_mult [1, 1], one res block, attention at the level after the
      downsample (attn_resolutions [8] at resolution 64), spatial compression 8, z_channels 16,
      FSQ with the released levels [8, 8, 8, 5, 5, 5] (embedding_dim 6, 64,000 codes);
  CI: the same encoder and decoder, 16 latent channels (z_channels 16, AE formulation).
  (Released: channels 128, channels_mult [2, 4, 4], two res blocks, attn_resolutions [32] at
  resolution 1024 — no attention outside the middle — and z_channels 256 (DI) / 16 (CI).)
FSQ's unused `implicit_codebook` buffer (64,000 × 6 values the released archives carry) is left
out of the fixtures to keep them small. Weights are random (the decoder's conv_out scaled so that decodes span about [-1, 1]) and
rounded to bfloat16; the archives are saved in bfloat16 as the released ones are, and the
reference outputs are computed in float32 from the same (rounded) values. DI seeds are retried
until no FSQ value lies within 1e-3 of a rounding boundary.

Outputs (tests/fixtures/cosmos/):
  di/encoder.jit, di/decoder.jit   the DI tokenizer (bfloat16 storages)
  ci/encoder.jit, ci/decoder.jit   the CI tokenizer (bfloat16 storages)
  io.safetensors   x (2,3,64,64) in [-1, 1] (= pixels/127.5 - 1 of pictures/*.png);
                   di_tokens (2,8,8) int64 = encoder.jit(x)[0]; di_codes (2,6,8,8) its codes;
                   di_decoded (2,3,64,64) = decoder.jit(di_tokens); ci_latents (2,16,8,8) =
                   encoder.jit(x)[0]; ci_decoded (2,3,64,64) = decoder.jit(ci_latents)
  pictures/a.png, pictures/b.png   the two 64×64 input pictures
  reader/tiny_{f32,f16,bf16}.jit   a traced module tree (Sequential of a Patcher, a Conv2d and
                   a ModuleList holding a GroupNorm) in three storage types, and
                   reader/tiny.safetensors: its tensors by the names the reader must give
                   (`state_dict()` names, plus the non-persistent buffers the archive holds)
  margin.txt       the smallest distance of an FSQ value to a rounding boundary
Run: COSMOS_REPO=/path/to/Cosmos-Tokenizer /tmp/hfvenv/bin/python scripts/make_cosmos_fixtures.py
(written with torch 2.15 and Cosmos-Tokenizer at 3584ae7)
"""

import os
import sys
from collections import OrderedDict

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "cosmos")
REPO = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("COSMOS_REPO")
if not REPO:
    sys.exit("pass the Cosmos-Tokenizer checkout as the argument or $COSMOS_REPO")
sys.path.insert(0, REPO)

from cosmos_tokenizer.modules.patching import Patcher  # noqa: E402
from cosmos_tokenizer.networks import TokenizerModels  # noqa: E402

SMALL = dict(attn_resolutions=[8], channels=32, channels_mult=[1, 1], dropout=0.0, in_channels=3,
             spatial_compression=8, num_res_blocks=1, out_channels=3, resolution=64,
             patch_size=4, patch_method="haar", z_factor=1)
DI = dict(SMALL, z_channels=16, quantizer="FSQ", embedding_dim=6, levels=[8, 8, 8, 5, 5, 5],
          name="DI")
CI = dict(SMALL, z_channels=16, latent_channels=16, formulation="AE", name="CI")


def randomise(model, seed):
    """Random weights rounded to bfloat16 (norm affines near 1/0), conv_out scaled."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                v = 1 + 0.1 * torch.randn(p.shape, generator=g)
            elif name.endswith("bias"):
                v = 0.05 * torch.randn(p.shape, generator=g)
            else:
                fan_in = p[0].numel()
                v = torch.randn(p.shape, generator=g) / fan_in ** 0.5
            if name.startswith("decoder.conv_out"):
                v = v * 0.5
            p.copy_(v.to(torch.bfloat16).float())
        # The buffers too (the Haar wavelets): the archives hold their bfloat16 values.
        for b in model.buffers():
            if b.is_floating_point():
                b.copy_(b.to(torch.bfloat16).float())


def pictures():
    """Two smooth 64×64 pictures with some texture, as uint8 HWC."""
    yy, xx = np.mgrid[0:64, 0:64].astype(np.float64) / 63
    a = np.stack([xx, yy, 0.5 + 0.5 * np.sin(6 * xx * yy)], -1)
    b = np.stack([0.5 + 0.4 * np.cos(5 * xx), 1 - yy, (xx + yy) / 2], -1)
    b += (0.08 * np.sin(40 * xx) * np.cos(33 * yy))[..., None]
    return [np.clip(p * 255 + 0.5, 0, 255).astype(np.uint8) for p in (a, b)]


def to_input(pics):
    x = np.stack(pics).transpose(0, 3, 1, 2).astype(np.float64) / 255.0
    return torch.from_numpy(2.0 * x - 1.0).float()


def fsq_margin(model, x):
    q = model.quantizer
    z = model.quant_conv(model.encoder(x)).permute(0, 2, 3, 1)
    b = q.bound(z)
    return float((b - b.floor() - 0.5).abs().min())


def trace(module, example):
    module = module.eval()
    with torch.no_grad():
        return torch.jit.trace(module, example, check_trace=False)


def save_bf16(traced_fn, path):
    """`torch.jit.save` of the module after `.to(bfloat16)`, as the release stores it."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.jit.save(traced_fn, path)


def build_di(x):
    for seed in range(100):
        m = TokenizerModels.DI.value(**DI).eval()
        m.to(dtype=torch.float32)  # the quantizer's output dtype (bfloat16 by default)
        # FSQ's `implicit_codebook` buffer (64,000 × 6, unused by forward and by
        # `indices_to_codes`) is dropped to keep the files small; released archives hold it.
        del m.quantizer._buffers["implicit_codebook"]
        randomise(m, seed)
        with torch.no_grad():
            margin = fsq_margin(m, x)
        if margin > 1e-3:
            return m, margin
    sys.exit("no seed without an FSQ near-tie")


def main():
    os.makedirs(os.path.join(OUT, "pictures"), exist_ok=True)
    pics = pictures()
    for name, p in zip("ab", pics):
        Image.fromarray(p).save(os.path.join(OUT, "pictures", f"{name}.png"))
    x = to_input(pics)
    io = {"x": x}

    di, margin = build_di(x)
    with torch.no_grad():
        enc = trace(di.encoder_jit(), x)
        idx, codes, _ = enc(x)
        dec = trace(di.decoder_jit(), idx)
        io["di_tokens"] = idx.long()
        io["di_codes"] = codes.float()
        io["di_decoded"] = dec(idx).float()
        # The bfloat16 archives: the same values, stored as released.
        di.to(dtype=torch.bfloat16)
        save_bf16(trace(di.encoder_jit(), x.bfloat16()), os.path.join(OUT, "di", "encoder.jit"))
        save_bf16(trace(di.decoder_jit(), idx), os.path.join(OUT, "di", "decoder.jit"))

    ci = TokenizerModels.CI.value(**CI).eval()
    randomise(ci, 1000)
    with torch.no_grad():
        enc = trace(ci.encoder_jit(), x)
        lat = enc(x)[0]
        dec = trace(ci.decoder_jit(), lat)
        io["ci_latents"] = lat.float()
        io["ci_decoded"] = dec(lat).float()
        ci.to(dtype=torch.bfloat16)
        save_bf16(trace(ci.encoder_jit(), x.bfloat16()), os.path.join(OUT, "ci", "encoder.jit"))
        save_bf16(trace(ci.decoder_jit(), lat.bfloat16()),
                  os.path.join(OUT, "ci", "decoder.jit"))

    save_file({k: v.contiguous() for k, v in io.items()}, os.path.join(OUT, "io.safetensors"))
    with open(os.path.join(OUT, "margin.txt"), "w") as f:
        f.write(f"{margin:.6f}\n")

    # The reader's fixture: a small module tree in three storage types.
    torch.manual_seed(7)
    inner = torch.nn.ModuleList([torch.nn.GroupNorm(2, 4)])
    tiny = torch.nn.Sequential(OrderedDict([
        ("patcher", Patcher(2, "haar")),
        ("conv", torch.nn.Conv2d(12, 4, 3, padding=1)),
        ("blocks", inner),
    ]))

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = tiny

        def forward(self, x):
            return self.net.blocks[0](self.net.conv(self.net.patcher(x)))

    t = Tiny().eval()
    with torch.no_grad():
        for p in t.parameters():
            p.copy_(torch.randn(p.shape).to(torch.bfloat16).float())
    expected = dict(t.state_dict())
    for name, b in t.named_buffers():
        expected[name] = b
    os.makedirs(os.path.join(OUT, "reader"), exist_ok=True)
    save_file({k: v.contiguous() for k, v in expected.items()},
              os.path.join(OUT, "reader", "tiny.safetensors"))
    for tag, dt in [("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)]:
        t.to(dtype=dt)
        with torch.no_grad():
            traced = torch.jit.trace(t, torch.randn(1, 3, 8, 8, dtype=dt), check_trace=False)
        torch.jit.save(traced, os.path.join(OUT, "reader", f"tiny_{tag}.jit"))
    print("margin", margin)


if __name__ == "__main__":
    main()
