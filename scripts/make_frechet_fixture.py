#!/usr/bin/env python3
"""Writes tests/fixtures/frechet/: two sets of correlated 16-dimensional feature vectors
(a.npy (300, 16), b.npy (250, 16), float32) and their Fréchet distance computed with
pytorch-fid's formula (numpy.cov + scipy.linalg.sqrtm of Σa·Σb, real part), expected.json.

imgseq-core's `frechet` tests compare against it to 1e-6 relative.

    pip install numpy scipy
    python3 scripts/make_frechet_fixture.py
"""
import json
import os

import numpy as np
import scipy
from scipy import linalg

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "frechet")


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(7)
    d = 16
    mix_a = rng.standard_normal((d, d))
    mix_b = mix_a + 0.5 * rng.standard_normal((d, d))
    a = (rng.standard_normal((300, d)) @ mix_a + 0.3).astype(np.float32)
    b = (rng.standard_normal((250, d)) @ mix_b - 0.2).astype(np.float32)
    mu_a, mu_b = a.astype(np.float64).mean(0), b.astype(np.float64).mean(0)
    s_a = np.cov(a.astype(np.float64), rowvar=False)
    s_b = np.cov(b.astype(np.float64), rowvar=False)
    covmean = linalg.sqrtm(s_a.dot(s_b))
    covmean = covmean.real
    fd = float(((mu_a - mu_b) ** 2).sum() + np.trace(s_a) + np.trace(s_b) - 2 * np.trace(covmean))
    np.save(os.path.join(OUT, "a.npy"), a)
    np.save(os.path.join(OUT, "b.npy"), b)
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({"fd": fd, "numpy": np.__version__, "scipy": scipy.__version__}, f, indent=1)
    print(f"fd = {fd}")


if __name__ == "__main__":
    main()
