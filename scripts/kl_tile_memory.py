#!/usr/bin/env python3
"""Peak memory and seam error of `imgseq vae decode` at 1024², tiled and untiled.

Decodes one (4, 128, 128) latent (a smooth field plus noise, seeded; unit-ish variance like
scaled SD latents) with the SD VAE at its released size, under `/usr/bin/time -v`, once per
--tile setting and once untiled, then compares the tiled pictures with the untiled one: PSNR
over the picture, over the blend bands of diffusers' scheme (tiles start every 3/4 of a tile,
blended over a quarter tile) and elsewhere.

Needs numpy and Pillow only (no PyTorch). The weights: random, made by
`/tmp/hfvenv/bin/python scripts/make_kl_fixtures.py --released DIR` (diffusers' AutoencoderKL
with the SD VAE's released config, `save_pretrained`).

Run: python3 scripts/kl_tile_memory.py --weights DIR [--imgseq target/release/imgseq]
     [--tiles 512 256] [--out /tmp/kl_tiles]
"""

import argparse
import os
import re
import subprocess

import numpy as np
from PIL import Image


def latent(side: int = 128, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:side, 0:side] / side
    z = np.stack([np.sin(6 * x + c) + np.cos(5 * y - c) for c in range(4)]) * 0.7
    return (z + 0.3 * rng.standard_normal((4, side, side))).astype(np.float32)


def run(imgseq: str, args: list, log: str) -> dict:
    cmd = ["/usr/bin/time", "-v", imgseq] + args
    r = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "w") as f:
        f.write(r.stdout + r.stderr)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", r.stderr).group(1)
    return {"rss_mb": rss / 1024, "wall": wall}


def psnr(err: np.ndarray) -> float:
    return float(10 * np.log10(255.0**2 / err.mean()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--imgseq", default="target/release/imgseq")
    ap.add_argument("--tiles", type=int, nargs="+", default=[512, 256])
    ap.add_argument("--out", default="/tmp/kl_tiles")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    z = os.path.join(a.out, "z1024.npy")
    np.save(z, latent())
    pics, stats = {}, {}
    for tile in [None] + a.tiles:
        name = "untiled" if tile is None else f"tile{tile}"
        png = os.path.join(a.out, f"{name}.png")
        args = ["vae", "decode", z, "--weights", a.weights, "-o", png]
        if tile is not None:
            args += ["--tile", str(tile)]
        stats[name] = run(a.imgseq, args, os.path.join(a.out, f"{name}.log"))
        pics[name] = np.asarray(Image.open(png)).astype(np.float64)
    ref = pics["untiled"]
    print(f"untiled: peak RSS {stats['untiled']['rss_mb']:.0f} MB, {stats['untiled']['wall']}")
    for tile in a.tiles:
        name = f"tile{tile}"
        err = ((pics[name] - ref) ** 2).mean(axis=2)
        side = err.shape[0]
        band = np.zeros(side, bool)
        stride, blend = tile * 3 // 4, tile // 4
        for start in range(stride, side, stride):
            band[start:start + blend] = True
        m = band[:, None] | band[None, :]
        print(
            f"{name}: peak RSS {stats[name]['rss_mb']:.0f} MB, {stats[name]['wall']}; vs untiled "
            f"{psnr(err):.2f} dB PSNR (blend bands {psnr(err[m]):.2f} dB, elsewhere "
            f"{psnr(err[~m]):.2f} dB)"
        )


if __name__ == "__main__":
    main()
