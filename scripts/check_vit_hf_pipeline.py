#!/usr/bin/env python3
"""HF's own pipeline on the Fashion-MNIST test images (as PNG files) against `imgseq vit eval`.

    cargo build --release -p imgseq
    python3 scripts/check_vit_hf_pipeline.py [CHECKPOINT_DIR] [--limit N] [--bin target/release/imgseq]

A user loads the shipped ViT folder the HF way — `pipeline("image-classification", model=DIR)`,
which reads `preprocessor_config.json` (resize to 32×32 with Pillow's bilinear filter, x/255,
(x − mean)/std) and converts every PNG to RGB. This script writes the test images as 28×28 gray
PNGs, classifies them with the pipeline, runs `imgseq vit eval` on the same IDX files, and fails
unless the two accuracies are within 0.1 point (and says how many predictions differ).
Needs: pip install torch transformers pillow numpy (never needed by the Rust tests).
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "/usr/share/datasets/fashion-mnist"


def idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def arguments():
    """The command line both HF checks take."""
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint", nargs="?", default=os.path.join(ROOT, "weights", "vit-fashion-mnist"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "imgseq"))
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--limit", type=int, default=None, help="first N test images (default: all 10,000)")
    ap.add_argument("--batch", type=int, default=256)
    return ap.parse_args()


def test_set(a):
    """The Fashion-MNIST test images and labels from `a.data`, and how many to use (--limit)."""
    images = idx(os.path.join(a.data, "t10k-images-idx3-ubyte.gz"))
    labels = idx(os.path.join(a.data, "t10k-labels-idx1-ubyte.gz"))
    n = len(labels) if a.limit is None else min(a.limit, len(labels))
    return images, labels, n


def imgseq_accuracy(a, n, precision=None):
    """`imgseq vit eval` accuracy (%) on the first `n` test images of `a.data`."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "eval.json")
        cmd = [a.bin, "vit", "eval", "--weights", a.checkpoint, "--json", report]
        if precision is not None:
            cmd += ["--precision", precision]
        if a.data != DATA:
            cmd += ["--data", a.data]
        if a.limit is not None:
            cmd += ["--limit", str(n)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(report) as f:
            return 100.0 * float(json.load(f)["accuracy"])


def compare(hf_label, hf_acc, our_label, our_acc, failure):
    """Prints both accuracies; exits with `failure` unless they are within 0.1 point."""
    diff = abs(hf_acc - our_acc)
    print(f"{hf_label}: {hf_acc:.2f}%")
    print(f"{our_label}: {our_acc:.2f}%")
    print(f"difference: {diff:.2f} points (allowed 0.10)")
    if diff > 0.1:
        sys.exit(failure)


def main():
    a = arguments()

    import torch
    from transformers import pipeline

    torch.set_num_threads(os.cpu_count() or 1)
    images, labels, n = test_set(a)

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i in range(n):
            p = os.path.join(tmp, f"{i:05d}.png")
            Image.fromarray(images[i], mode="L").save(p)
            paths.append(p)
        clf = pipeline("image-classification", model=a.checkpoint, device="cpu")
        proc = type(clf.image_processor).__name__
        label2id = clf.model.config.label2id
        preds = []
        for s in range(0, n, a.batch):
            out = clf(paths[s : s + a.batch], top_k=1, batch_size=a.batch)
            preds += [label2id[o[0]["label"]] for o in out]
        preds = np.array(preds)
        hf_acc = 100.0 * float((preds == labels[:n]).mean())
    our_acc = imgseq_accuracy(a, n)
    print(f"images: {n} (28x28 gray PNGs; the pipeline converts them to RGB)")
    compare(f"HF pipeline ({proc})", hf_acc, "imgseq vit eval", our_acc,
            "FAIL: the HF pipeline does not reproduce imgseq vit eval")


if __name__ == "__main__":
    main()
