#!/usr/bin/env python3
"""HF's AutoImageProcessor + ViTForImageClassification on gray PIL images against `imgseq vit eval`.

    cargo build --release -p imgseq
    python3 scripts/check_vit_hf_gray.py [CHECKPOINT_DIR] [--limit N] [--bin target/release/imgseq]

Fashion-MNIST images are gray. A user who loads the shipped ViT folder with
`AutoImageProcessor.from_pretrained(DIR)` and hands it gray (mode `L`) PIL images gets three
equal channels only because the folder's `preprocessor_config.json` sets `"do_convert_rgb":
true`; without it the processor refuses them ("mean must have 1 elements"). This script
classifies the Fashion-MNIST test images as gray PIL images that way (no PNG files, no
`pipeline()`), checks that every processed image has three equal channels, runs
`imgseq vit eval` on the same IDX files, and fails unless the two accuracies are within 0.1
point. `scripts/check_vit_hf_pipeline.py` is the same check through `pipeline()`.
Needs: pip install torch transformers pillow numpy (never needed by the Rust tests).
"""
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_vit_hf_pipeline import arguments, compare, imgseq_accuracy, test_set  # noqa: E402


def hf_predictions(checkpoint, images, batch):
    """Argmax labels of the HF model on `images` (uint8 (n, 28, 28)) as gray PIL images."""
    import torch
    from transformers import AutoImageProcessor, ViTForImageClassification

    proc = AutoImageProcessor.from_pretrained(checkpoint)
    model = ViTForImageClassification.from_pretrained(checkpoint).eval()
    preds = []
    for s in range(0, len(images), batch):
        pil = [Image.fromarray(a, mode="L") for a in images[s : s + batch]]
        x = proc(pil, return_tensors="pt")["pixel_values"]
        if x.shape[1] != 3 or not (torch.equal(x[:, 0], x[:, 1]) and torch.equal(x[:, 1], x[:, 2])):
            sys.exit(f"FAIL: the processor made {tuple(x.shape)} inputs, not three equal channels")
        with torch.no_grad():
            preds.append(model(pixel_values=x).logits.argmax(-1).numpy())
    return type(proc).__name__, np.concatenate(preds)


def main():
    a = arguments()

    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    images, labels, n = test_set(a)
    proc, preds = hf_predictions(a.checkpoint, images[:n], a.batch)
    hf_acc = 100.0 * float((preds == labels[:n]).mean())
    # f32: HF runs the model in f32 (`auto` may pick bf16, 93.06% on the shipped model).
    our_acc = imgseq_accuracy(a, n, precision="f32")
    print(f"images: {n} (28x28 gray PIL images, mode L)")
    compare(f"HF AutoImageProcessor ({proc}) + ViTForImageClassification", hf_acc,
            "imgseq vit eval --precision f32", our_acc,
            "FAIL: HF's processor on gray images does not reproduce imgseq vit eval")


if __name__ == "__main__":
    main()
