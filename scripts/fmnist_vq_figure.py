"""Figure of weights/vq-fashion-mnist/README.md: Fashion-MNIST test images (top row of each
pair) and their reconstructions from 64 tokens (bottom row), the first two of each class.

    imgseq vq detokenize TOKENS/test --weights weights/vq-fashion-mnist/model.safetensors \
        --limit 60 -o /tmp/fm_detok
    python scripts/fmnist_vq_figure.py /tmp/fm_detok weights/vq-fashion-mnist/reconstructions.png

Needs numpy and pillow; reads the test set from /usr/share/datasets/fashion-mnist.
"""
import gzip
import sys

import numpy as np
from PIL import Image

SRC = "/usr/share/datasets/fashion-mnist/"
detok, out = sys.argv[1], sys.argv[2]
imgs = np.frombuffer(gzip.open(SRC + "t10k-images-idx3-ubyte.gz").read()[16:], np.uint8)
imgs = imgs.reshape(-1, 28, 28)
labels = np.frombuffer(gzip.open(SRC + "t10k-labels-idx1-ubyte.gz").read()[8:], np.uint8)
picked = [i for c in range(10) for i in [j for j in range(60) if labels[j] == c][:2]]
scale, gap = 3, 4
cell = 32 * scale
sheet = Image.new("L", (len(picked) * (cell + gap), 2 * cell + gap), 255)
for k, i in enumerate(picked):
    canvas = np.zeros((32, 32), np.uint8)
    canvas[2:30, 2:30] = imgs[i]
    orig = Image.fromarray(canvas).resize((cell, cell), Image.NEAREST)
    rec = Image.open(f"{detok}/t10k-{i:05d}.png").convert("L").resize((cell, cell), Image.NEAREST)
    sheet.paste(orig, (k * (cell + gap), 0))
    sheet.paste(rec, (k * (cell + gap), cell + gap))
sheet.save(out)
print("wrote", out, "images", picked)
