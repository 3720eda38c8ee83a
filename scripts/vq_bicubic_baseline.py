#!/usr/bin/env python3
"""What a plain 16x bicubic down/up-sampling keeps of the held-out photos: the yardstick the
README puts next to the VQGAN's PSNR / SSIM.

    python3 scripts/vq_bicubic_baseline.py [data/photos/test.txt] [--size 384] [--factor 16]
    python3 scripts/vq_bicubic_baseline.py --codec [--bits 10]

`--codec` is the other yardstick: an image codec given the tokens' bytes. 576 tokens of 10 bits
are 720 bytes per 384x384 image (0.039 bits per pixel); at that size WebP cannot hold a 384x384
image at any quality (its quality-0 files are larger for 13 of the 14 held-out photos), so each
image is downscaled (bicubic) to one of 64..256 px, WebP-encoded at qualities 0..100 in steps of
5, decoded and bicubic-upscaled, and the best PSNR among the files within the budget (whole file,
header included) counts. That choice is made per image, looking at the image: an upper bound of
what this simple codec does at the rate, not a fixed setting.

Pre-processing is `imgseq vq eval`'s (shorter side resized to SIZE with a bicubic filter, centre
crop SIZE x SIZE); each image is box-downsampled by FACTOR (24x24x3 floats at 384, f16) and
bicubic-upsampled back; PSNR / SSIM on the 8-bit images with scikit-image (what imgseq's metrics
are tested against). Needs Pillow, numpy, scikit-image; not used by the tests.
"""
import argparse
import io
import os
import sys

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
    ap.add_argument("--codec", action="store_true",
                    help="WebP within the tokens' byte budget instead of bicubic (see above)")
    ap.add_argument("--bits", type=int, default=10, help="bits per token (--codec)")
    a = ap.parse_args()
    if a.data.endswith(".txt"):
        base = os.path.dirname(os.path.abspath(a.data))
        paths = [os.path.join(base, l.strip()) for l in open(a.data)
                 if l.strip() and not l.startswith("#")]
    else:
        paths = [a.data]
    budget = (a.size // a.factor) ** 2 * a.bits // 8
    ps, ss = [], []
    for p in paths:
        im = load_square(p, a.size)
        x = np.asarray(im)
        if a.codec:
            best = None
            for side in (64, 96, 128, 160, 192, 256):
                small = im.resize((side, side), Image.BICUBIC)
                for q in range(0, 101, 5):
                    buf = io.BytesIO()
                    small.save(buf, "WEBP", quality=q, method=6)
                    if buf.tell() > budget:
                        break
                    back = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
                    y = np.asarray(back.resize((a.size, a.size), Image.BICUBIC))
                    v = peak_signal_noise_ratio(x, y, data_range=255)
                    if best is None or v > best[0]:
                        best = (v, y, f"{side} px, quality {q}, {buf.tell()} bytes")
            if best is None:
                sys.exit(f"error: {p}: no WebP file within {budget} bytes")
            v, y, how = best
        else:
            small = a.size // a.factor
            back = im.resize((small, small), Image.BOX).resize((a.size, a.size), Image.BICUBIC)
            y, how = np.asarray(back), "bicubic"
        ps.append(peak_signal_noise_ratio(x, y, data_range=255))
        ss.append(structural_similarity(x, y, channel_axis=2, data_range=255))
        print(f"  {p}: PSNR {ps[-1]:.2f} dB, SSIM {ss[-1]:.4f} ({how})")
    what = (f"WebP within {budget} bytes" if a.codec else f"bicubic f{a.factor}")
    print(f"{what} at {a.size}x{a.size}, {len(paths)} images: "
          f"PSNR {np.mean(ps):.2f} dB, SSIM {np.mean(ss):.4f} (mean)")


if __name__ == "__main__":
    main()
