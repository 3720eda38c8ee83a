#!/usr/bin/env python3
"""Checks that a ViT checkpoint written by imgseq loads unchanged in HF transformers and gives
the same logits as imgseq.

    cargo build --release -p imgseq
    python3 scripts/check_vit_hf_interop.py [CHECKPOINT_DIR] [--bin target/release/imgseq]

CHECKPOINT_DIR defaults to the shipped weights/vit-fashion-mnist. The script feeds the same
random pre-processed batch to `ViTForImageClassification.from_pretrained(DIR)` and to
`imgseq vit forward`, and fails unless the logits agree within 1e-4 relative.
Needs: pip install torch transformers numpy (not needed by the Rust tests).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import ViTForImageClassification

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint", nargs="?", default=os.path.join(ROOT, "weights", "vit-fashion-mnist"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "imgseq"))
    ap.add_argument("--batch", type=int, default=16)
    a = ap.parse_args()
    model = ViTForImageClassification.from_pretrained(a.checkpoint).eval()
    cfg = model.config
    x = torch.randn(a.batch, cfg.num_channels, cfg.image_size, cfg.image_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(pixel_values=x).logits.numpy()
    with tempfile.TemporaryDirectory() as d:
        np.save(os.path.join(d, "x.npy"), x.numpy())
        out = os.path.join(d, "logits.npy")
        # f32: a parity check of the weights and the arithmetic (bf16 is ~0.5% off by design).
        subprocess.run([a.bin, "vit", "forward", os.path.join(d, "x.npy"), "--weights", a.checkpoint, "-o", out,
                        "--precision", "f32"],
                       check=True, stdout=subprocess.DEVNULL)
        got = np.load(out)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    same = (got.argmax(1) == ref.argmax(1)).mean()
    print(f"{a.checkpoint}: HF loaded it unchanged ({sum(p.numel() for p in model.parameters())} params); "
          f"logits max rel diff {err:.2e}, same prediction for {100 * same:.0f}% of {a.batch}")
    if err > 1e-4:
        sys.exit("FAIL: logits differ by more than 1e-4 relative")
    print("OK")


if __name__ == "__main__":
    main()
