#!/usr/bin/env python3
"""Builds the FID parity fixtures in tests/fixtures/fid/ with pytorch-fid's own network and
formula (needs PyTorch, torchvision, pytorch-fid, numpy, scipy, Pillow).

The network: `pytorch_fid.inception.InceptionV3([3])` (the FID Inception: FIDInceptionA/C/E_1/
E_2, `use_fid_inception=True`, its bilinear resize to 299 and 2x-1 input scaling), built with
random weights instead of the released `pt_inception-2015-12-05-6726825d.pth`. The full network
has ~24M parameters (~95 MB), too big to commit, so its weights follow a formula that the Rust
test reproduces bit for bit (`weight_formula` below; `imgseq_eval::inception::formula_weights`):
every tensor of the state dict, named as the released file names it, gets

    u[i] = (splitmix64(fnv1a64(name) + i) >> 40) / 2^24           (exact in f32)
    w[i] = float32(lo + (hi - lo) * u[i])                            (computed in f64)

with (lo, hi) by the tensor's kind: conv weights +-sqrt(6 / fan_in) (He uniform), BN weight
[0.8, 1.2], BN bias and running mean [-0.1, 0.1], BN running var [0.8, 1.2], fc [-0.01, 0.01].
The state dict goes into pytorch-fid's `fid_inception_v3()` through the loading call it makes
for the released file, so the network is pytorch-fid's own module with its own forward.

Written:
  images/0.png ... 2.png    small RGB pictures of different sizes (the network resizes them)
  features.npy              (3, 2048) float32: `InceptionV3([3])(x)[0]` pool3 features of the
                            pictures as pytorch-fid's `ToTensor` gives them ([0, 1] floats)
  frechet_a.npy (40, 24), frechet_b.npy (56, 24), frechet_c.npy (12, 24)  float32 feature sets
  frechet.json              pytorch-fid's `calculate_frechet_distance` of (a, b) and (a, c)
                            (c: fewer vectors than dimensions, a singular covariance), from the
                            float64 mean and `np.cov(rowvar=False)` as `calculate_activation_statistics` does
  formula.json              the formula's constants and the state dict's names and shapes (the
                            released file's layout)
With --pth PATH the state dict is also saved there in the released layout (~95 MB, not
committed): `IMGSEQ_FID_PTH=PATH cargo test -p imgseq-eval --test it -- --ignored` reads it
as a user's weights file and checks the same features.

Run: /tmp/hfvenv/bin/python scripts/make_fid_fixtures.py [--pth /tmp/pt_inception_random.pth]
(written with torch 2.15, torchvision 0.29.2, pytorch-fid 0.3.0)
"""

import argparse
import json
import math
import os

import numpy as np
import torch
from PIL import Image

import pytorch_fid.inception as pfi
from pytorch_fid.fid_score import calculate_frechet_distance

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "fid")
M64 = (1 << 64) - 1


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def splitmix64(x):
    x = x + np.uint64(0x9E3779B97F4A7C15)
    z = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def bounds(name, shape):
    if name.endswith("conv.weight"):
        fan_in = int(np.prod(shape[1:]))
        b = math.sqrt(6.0 / fan_in)
        return -b, b
    if name.endswith("bn.weight") or name.endswith("bn.running_var"):
        return 0.8, 1.2
    if name.endswith("bn.bias") or name.endswith("bn.running_mean"):
        return -0.1, 0.1
    return -0.01, 0.01


def weight_formula(name, shape):
    n = int(np.prod(shape))
    with np.errstate(over="ignore"):
        idx = np.uint64(fnv1a64(name)) + np.arange(n, dtype=np.uint64)
        u = (splitmix64(idx) >> np.uint64(40)).astype(np.float64) / float(1 << 24)
    lo, hi = bounds(name, shape)
    return (lo + (hi - lo) * u).astype(np.float32).reshape(shape)


def random_state_dict():
    # The released file's names and shapes: torchvision's Inception3 with the FID blocks,
    # 1008 classes, no aux head (what fid_inception_v3 builds before loading the file).
    probe = pfi._inception_v3(
        num_classes=1008, aux_logits=False, weights=None)
    probe.Mixed_5b = pfi.FIDInceptionA(192, pool_features=32)
    probe.Mixed_5c = pfi.FIDInceptionA(256, pool_features=64)
    probe.Mixed_5d = pfi.FIDInceptionA(288, pool_features=64)
    probe.Mixed_6b = pfi.FIDInceptionC(768, channels_7x7=128)
    probe.Mixed_6c = pfi.FIDInceptionC(768, channels_7x7=160)
    probe.Mixed_6d = pfi.FIDInceptionC(768, channels_7x7=160)
    probe.Mixed_6e = pfi.FIDInceptionC(768, channels_7x7=192)
    probe.Mixed_7b = pfi.FIDInceptionE_1(1280)
    probe.Mixed_7c = pfi.FIDInceptionE_2(2048)
    sd = {}
    for k, v in probe.state_dict().items():
        if k.endswith("num_batches_tracked"):
            continue  # the released file has none
        sd[k] = torch.from_numpy(weight_formula(k, tuple(v.shape)))
    return sd


def pictures():
    rng = np.random.default_rng(7)
    out = []
    for i, (h, w) in enumerate([(40, 48), (64, 64), (56, 36)]):
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([(x * (3 + i)) % 256, (y * (5 + i)) % 256, ((x + y) * 7) % 256], -1)
        noise = rng.integers(0, 64, size=(h, w, 3))
        out.append(((base + noise) % 256).astype(np.uint8))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pth", help="also save the random state dict here (released layout)")
    args = ap.parse_args()
    os.makedirs(os.path.join(OUT, "images"), exist_ok=True)
    sd = random_state_dict()
    # pytorch-fid loads the released file through this call; give it the formula's weights.
    pfi.load_state_dict_from_url = lambda *a, **k: sd
    model = pfi.InceptionV3([3]).eval()
    feats = []
    for i, px in enumerate(pictures()):
        Image.fromarray(px).save(os.path.join(OUT, "images", f"{i}.png"))
        x = torch.from_numpy(px).permute(2, 0, 1).float().div(255.0)[None]  # as ToTensor
        with torch.no_grad():
            feats.append(model(x)[0].squeeze(3).squeeze(2)[0].numpy())
    feats = np.stack(feats).astype(np.float32)
    np.save(os.path.join(OUT, "features.npy"), feats)
    print("pool3 features: mean", feats.mean(), "max", feats.max(), "std", feats.std())

    rng = np.random.default_rng(11)
    mix = rng.normal(size=(24, 24))
    a = (rng.normal(size=(40, 24)) @ mix).astype(np.float32)
    b = (rng.normal(size=(56, 24)) @ (mix + 0.3 * rng.normal(size=(24, 24))) + 0.5).astype(np.float32)
    c = (rng.normal(size=(12, 24)) @ mix).astype(np.float32)
    for name, arr in [("a", a), ("b", b), ("c", c)]:
        np.save(os.path.join(OUT, f"frechet_{name}.npy"), arr)

    def stats(f):
        f = f.astype(np.float64)
        return np.mean(f, axis=0), np.cov(f, rowvar=False)

    (ma, sa), (mb, sb), (mc, sc) = stats(a), stats(b), stats(c)
    fd = {"a_b": float(calculate_frechet_distance(ma, sa, mb, sb)),
          "a_c": float(calculate_frechet_distance(ma, sa, mc, sc))}
    with open(os.path.join(OUT, "frechet.json"), "w") as f:
        json.dump(fd, f, indent=1)
    print("frechet", fd)
    layout = {"seed_hash": "fnv1a64(name)", "mix": "splitmix64",
              "tensors": {k: list(v.shape) for k, v in sd.items()}}
    with open(os.path.join(OUT, "formula.json"), "w") as f:
        json.dump(layout, f, indent=0)
    if args.pth:
        torch.save(sd, args.pth)
        print("saved", args.pth)


if __name__ == "__main__":
    main()
