#!/usr/bin/env python3
"""Does the shipped VQGAN load and run in taming-transformers' own code, unchanged?

    pip install torch safetensors pillow numpy && pip install --no-deps taming-transformers
    python3 scripts/check_vqgan_taming.py [--weights weights/vqgan] [--imgseq target/release/imgseq]

Builds taming's real modules (`taming.modules.diffusionmodules.model.Encoder` / `Decoder`,
`taming.modules.vqvae.quantize.VectorQuantizer`, 1×1 `quant_conv` / `post_quant_conv` under
VQModel's attribute names) from the folder's `model.yaml` (taming's own config layout),
loads `model.safetensors` with `load_state_dict(strict=True)` (every key, every shape), and
tokenizes `assets/coffee.png` and the photos of `data/photos/test.txt`, centre-cropped to
384×384 here so both sides read the same pixels. Compares with `imgseq vq encode` (f32) and
prints token agreement and both reconstructions' PSNR. Exits 1 when fewer than 99.5% of
tokens agree. (VQModel itself is not imported: it needs pytorch-lightning, and only wraps
these modules: encode = quantize(quant_conv(encoder(x))), decode = decoder(post_quant_conv(q)).)
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import yaml
from PIL import Image
from safetensors.torch import load_file
from taming.modules.diffusionmodules.model import Decoder, Encoder
from taming.modules.vqvae.quantize import VectorQuantizer
from vq_bicubic_baseline import load_square  # shorter side to SIZE (bicubic), centre crop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class TamingVQ(torch.nn.Module):
    """taming.models.vqgan.VQModel's modules and names, without Lightning."""

    def __init__(self, params):
        super().__init__()
        dd = params["ddconfig"]
        self.encoder = Encoder(**dd)
        self.decoder = Decoder(**dd)
        self.quantize = VectorQuantizer(params["n_embed"], params["embed_dim"], beta=0.25)
        self.quant_conv = torch.nn.Conv2d(dd["z_channels"], params["embed_dim"], 1)
        self.post_quant_conv = torch.nn.Conv2d(params["embed_dim"], dd["z_channels"], 1)

    def encode(self, x):
        return self.quantize(self.quant_conv(self.encoder(x)))

    def decode(self, q):
        return self.decoder(self.post_quant_conv(q))


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 10 * np.log10(255.0**2 / mse)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", default=os.path.join(ROOT, "weights", "vqgan"))
    ap.add_argument("--imgseq", default=os.path.join(ROOT, "target", "release", "imgseq"))
    ap.add_argument("--size", type=int, default=384)
    a = ap.parse_args()
    torch.set_grad_enabled(False)
    with open(os.path.join(a.weights, "model.yaml")) as fh:
        params = yaml.safe_load(fh)["model"]["params"]
    model = TamingVQ(params).eval()
    sd = load_file(os.path.join(a.weights, "model.safetensors"))
    model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
    print(f"taming's modules loaded {len(sd)} tensors with strict=True "
          f"({sum(v.numel() for v in sd.values()):,} parameters)")
    with open(os.path.join(ROOT, "data", "photos", "test.txt")) as fh:
        photos = [l.strip() for l in fh if l.strip() and not l.startswith("#")]
    images = [os.path.join(ROOT, "assets", "coffee.png")] + photos
    same = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in images:
            if not os.path.exists(path):
                print(f"skip (not installed): {path}")
                continue
            im = load_square(path, a.size)
            png = os.path.join(tmp, "x.png")
            im.save(png)
            x = torch.from_numpy(np.asarray(im, dtype=np.float32) / 127.5 - 1).permute(2, 0, 1)[None]
            zq, _, (_, _, idx) = model.encode(x)
            ours = os.path.join(tmp, "t.npy")
            cmd = [a.imgseq, "vq", "encode", png, "-o", ours, "--precision", "f32",
                   "--weights", os.path.join(a.weights, "model.safetensors")]
            subprocess.run(cmd, check=True, capture_output=True)
            t_ours = np.load(ours).reshape(-1)
            t_taming = idx.reshape(-1).numpy()
            n = int((t_ours == t_taming).sum())
            same, total = same + n, total + t_ours.size
            rec = model.decode(zq).clamp(-1, 1)
            rec = ((rec[0].permute(1, 2, 0).numpy() + 1) * 127.5).round().astype(np.uint8)
            print(f"{os.path.basename(path):40s} tokens equal {n}/{t_ours.size}  "
                  f"taming's reconstruction {psnr(np.asarray(im), rec):.2f} dB")
    share = same / max(total, 1)
    print(f"all: {same}/{total} tokens equal ({100 * share:.3f}%)")
    sys.exit(0 if share >= 0.995 else 1)


if __name__ == "__main__":
    main()
