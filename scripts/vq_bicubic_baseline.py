#!/usr/bin/env python3
"""What a plain 16x bicubic down/up-sampling keeps of the held-out photos: the yardstick the
README puts next to the VQGAN's PSNR / SSIM.

    python3 scripts/vq_bicubic_baseline.py [data/photos/test.txt] [--size 384] [--factor 16]

Pre-processing is `imgseq vq eval`'s (shorter side resized to SIZE with a bicubic filter, centre
crop SIZE x SIZE); each image is box-downsampled by FACTOR (24x24x3 floats at 384, f16) and
bicubic-upsampled back; PSNR / SSIM on the 8-bit images with scikit-image (what imgseq's metrics
are tested against). Needs Pillow, numpy, scikit-image; not used by the tests.
"""
import argparse
import os

import numpy as np
from PIL import Image


def load_square(path, size):
    im = Image.open(path).convert("RGB")
    w, h = im.size
    s = size / min(w, h)
    im = im.resize((max(size, round(w * s)), max(size, round(h * s))), Image.BICUBIC)
    w, h = im.size
    l, t = (w - size) // 2, (h - size) // 2
    return im.crop((l, t, l + size, t + size))


def main():
    # here, not at the top: scripts/check_vqgan_taming.py imports load_square without it
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    ap = argparse.ArgumentParser()
    ap.add_argument("data", nargs="?", default="data/photos/test.txt")
    ap.add_argument("--size", type=int, default=384)
    ap.add_argument("--factor", type=int, default=16)
    a = ap.parse_args()
    if a.data.endswith(".txt"):
        base = os.path.dirname(os.path.abspath(a.data))
        paths = [os.path.join(base, l.strip()) for l in open(a.data)
                 if l.strip() and not l.startswith("#")]
    else:
        paths = [a.data]
    ps, ss = [], []
    for p in paths:
        im = load_square(p, a.size)
        small = a.size // a.factor
        back = im.resize((small, small), Image.BOX).resize((a.size, a.size), Image.BICUBIC)
        x, y = np.asarray(im), np.asarray(back)
        ps.append(peak_signal_noise_ratio(x, y, data_range=255))
        ss.append(structural_similarity(x, y, channel_axis=2, data_range=255))
        print(f"  {p}: PSNR {ps[-1]:.2f} dB, SSIM {ss[-1]:.4f}")
    print(f"bicubic f{a.factor} at {a.size}x{a.size}, {len(paths)} images: "
          f"PSNR {np.mean(ps):.2f} dB, SSIM {np.mean(ss):.4f} (mean)")


if __name__ == "__main__":
    main()
