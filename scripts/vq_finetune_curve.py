#!/usr/bin/env python3
"""Held-out PSNR, SSIM and sharpness of a fine-tuning run's snapshots against its steps.

    # measure the starting model and every snapshot (imgseq vq eval --json --precision f32)
    python3 scripts/vq_finetune_curve.py eval weights/vqgan runs/vq-gan-dec/snapshots -o runs/evals
    # plot: one panel per figure, one line per held-out set, the start at step 0
    python3 scripts/vq_finetune_curve.py plot runs/evals -o weights/vqgan/decoder-gan-curve.png

The three sets: `data/photos/test-objects.txt` (photos that are not wallpapers),
`data/photos/test.txt` (wallpapers) and `assets/coffee.png`, all held out: the figures are
measurements only, nothing in the run was chosen from them. `eval` writes
`<out>/<name>-<set>.json` (name `start` for the starting model, `step-NNNNN` per snapshot) and
skips files already there. Needs matplotlib (plot only).
"""
import argparse
import glob
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETS = {
    "objects": ("data/photos/test-objects.txt", "photos, not wallpapers (9)"),
    "walls": ("data/photos/test.txt", "wallpapers (14)"),
    "coffee": ("assets/coffee.png", "coffee"),
}
FIGURES = [("psnr", "PSNR (dB)"), ("ssim", "SSIM"), ("sharpness", "sharpness (1.0 = as sharp)")]


def measure(imgseq, weights, name, out):
    for key, (data, _) in SETS.items():
        path = os.path.join(out, f"{name}-{key}.json")
        if os.path.exists(path) and os.path.getsize(path) > 0:
            continue
        cmd = [imgseq, "vq", "eval", os.path.join(ROOT, data), "--weights", weights,
               "--upscale", "--precision", "f32", "--json"]
        res = subprocess.run(cmd, check=True, capture_output=True, text=True)
        with open(path, "w") as f:
            f.write(res.stdout)


def cmd_eval(a):
    os.makedirs(a.output, exist_ok=True)
    measure(a.imgseq, a.start, "start", a.output)
    for snap in sorted(glob.glob(os.path.join(a.snapshots, "step-*"))):
        measure(a.imgseq, snap, os.path.basename(snap), a.output)


def points(folder):
    """{set: [(step, report)]} with the starting model at step 0."""
    out = {k: [] for k in SETS}
    for path in glob.glob(os.path.join(folder, "*-*.json")):
        name, key = os.path.basename(path)[:-5].rsplit("-", 1)
        if key not in SETS or os.path.getsize(path) == 0:
            continue
        step = 0 if name == "start" else int(name.split("-")[1])
        with open(path) as f:
            out[key].append((step, json.load(f)))
    return {k: sorted(v, key=lambda p: p[0]) for k, v in out.items()}


def cmd_plot(a):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pts = points(a.evals)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, (fig_key, label) in zip(axes, FIGURES):
        for key, (_, set_label) in SETS.items():
            if pts[key]:
                xs = [s for s, _ in pts[key]]
                ys = [r[fig_key] for _, r in pts[key]]
                ax.plot(xs, ys, marker="o", label=set_label)
        ax.set_xlabel("fine-tuning step (0 = the starting model)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(a.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(a.output, dpi=80)
    for key in SETS:
        for step, r in pts[key]:
            print(f"{key:8s} step {step:5d}: {r['psnr']:.2f} dB  SSIM {r['ssim']:.4f}  "
                  f"sharpness {r['sharpness']:.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("eval")
    e.add_argument("start", help="the model the run started from")
    e.add_argument("snapshots", help="the run's snapshots folder")
    e.add_argument("-o", "--output", required=True, help="folder for the reports")
    e.add_argument("--imgseq", default=os.path.join(ROOT, "target", "release", "imgseq"))
    p = sub.add_parser("plot")
    p.add_argument("evals", help="the folder `eval` wrote")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--title", default="decoder fine-tuning with the adversarial loss (encoder and codebook frozen)")
    a = ap.parse_args()
    cmd_eval(a) if a.cmd == "eval" else cmd_plot(a)


if __name__ == "__main__":
    main()
