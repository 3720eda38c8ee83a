#!/usr/bin/env python3
"""Writes tests/fixtures/metrics/: small image pairs (.npy, float32, (c, h, w) in [0, 1]) and
the SSIM / PSNR values scikit-image computes for them (expected.json).

imgseq-core's metrics tests compare against these values to 1e-5.

    pip install numpy scikit-image
    python3 scripts/make_metric_fixtures.py
"""
import json
import os

import numpy as np
import skimage
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "metrics")


def pairs(rng):
    # Smooth-ish RGB image and a noisy copy.
    a = rng.random((3, 16, 20))
    a = (a + np.roll(a, 1, axis=1) + np.roll(a, 1, axis=2)) / 3
    b = np.clip(a + 0.1 * rng.standard_normal(a.shape), 0, 1)
    yield "rgb_noisy", a, b
    # Two unrelated random images, exactly the window size on one side.
    yield "rgb_random", rng.random((3, 11, 13)), rng.random((3, 11, 13))
    # One gray channel with structure (a gradient and a square), a shifted and darkened copy.
    y, x = np.mgrid[0:24, 0:17]
    g = (x / 16.0) * 0.5 + 0.25 * ((y > 6) & (y < 15) & (x > 4) & (x < 12))
    h = 0.8 * np.roll(g, 1, axis=1) + 0.05
    yield "gray_shift", g[None], h[None]


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(1234)
    expected = {"skimage": skimage.__version__, "numpy": np.__version__, "cases": {}}
    for name, a, b in pairs(rng):
        a = a.astype(np.float32)
        b = b.astype(np.float32)
        np.save(os.path.join(OUT, f"{name}_a.npy"), a)
        np.save(os.path.join(OUT, f"{name}_b.npy"), b)
        # skimage computes in the input's float type: give it float64 copies of the float32
        # values, as the Rust code computes in f64.
        a64 = a.astype(np.float64)
        b64 = b.astype(np.float64)
        ssim = structural_similarity(
            a64,
            b64,
            channel_axis=0,
            data_range=1.0,
            gaussian_weights=True,
            sigma=1.5,
            use_sample_covariance=False,
        )
        psnr = peak_signal_noise_ratio(a64, b64, data_range=1.0)
        expected["cases"][name] = {"shape": list(a.shape), "ssim": float(ssim), "psnr": float(psnr)}
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2)
        f.write("\n")
    print(json.dumps(expected, indent=2))


if __name__ == "__main__":
    main()
