#!/usr/bin/env python3
"""Test accuracy by epoch of ViT students and their CNN teachers: the picture behind the
ViT model card's lists of numbers.

    python3 scripts/vit_curve.py weights/vit-fashion-mnist:"shipped student" \\
        weights/vit-fashion-mnist/history/d6-t93.state.json:"student of the 93.14% teacher" \\
        weights/teacher-fashion-mnist-w32:"teacher, 12 epochs" \\
        -o weights/vit-fashion-mnist/curve.png

Each argument is `PATH[:LABEL]`: a `vit train` run folder (its `state.json`), a `vit teacher`
run folder (its `teacher_state.json`; drawn dashed) or one of those JSON files itself. Every
curve is the test accuracy recorded after each epoch (for students: of the EMA weights, what is
saved) — measurements only: no epoch, checkpoint or recipe was chosen from them. A horizontal
line marks #14's target (`--target`). Needs matplotlib.
"""
import argparse
import json
import os


def load(path):
    """(accuracies in %, is_teacher) of a run folder or state file."""
    if os.path.isdir(path):
        for name, teacher in [("state.json", False), ("teacher_state.json", True)]:
            f = os.path.join(path, name)
            if os.path.isfile(f):
                path = f
                break
        else:
            raise SystemExit(f"error: {path}: no state.json or teacher_state.json")
    try:
        with open(path) as fh:
            st = json.load(fh)
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: {path}: {e}")
    acc = st.get("test_accuracy") if isinstance(st, dict) else None
    if not acc:
        raise SystemExit(f"error: {path}: no `test_accuracy` list")
    teacher = os.path.basename(path).startswith("teacher")
    return [100 * a for a in acc], teacher


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", metavar="PATH[:LABEL]")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--target", type=float, default=93.0)
    ap.add_argument("--ymin", type=float, default=84.0,
                    help="lower edge of the accuracy axis (the first epochs sit below it)")
    ap.add_argument("--title", default="Fashion-MNIST test accuracy by epoch")
    a = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from vq_curve import save_plot  # this script's folder is on sys.path when it runs

    fig, ax = plt.subplots(figsize=(8.5, 4.8), dpi=110)
    top = a.target
    for spec in a.runs:
        path, _, label = spec.partition(":")
        acc, teacher = load(path)
        label = label or os.path.basename(os.path.normpath(path))
        epochs = list(range(1, len(acc) + 1))
        top = max(top, max(acc))
        line, = ax.plot(epochs, acc, ls="--" if teacher else "-", lw=1.4,
                        marker="o" if teacher else None, ms=2.5, label=label)
        ax.annotate(f"{acc[-1]:.2f}%", (epochs[-1], acc[-1]), textcoords="offset points",
                    xytext=(4, -3 if teacher else 3), color=line.get_color(), fontsize=8)
    ax.axhline(a.target, color="black", ls=":", lw=0.9)
    ax.text(0.01, a.target + 0.1, f"target {a.target:g}%", fontsize=7,
            transform=ax.get_yaxis_transform())
    ax.set_ylim(a.ymin, top + 1.0)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%), 10,000 images")
    ax.set_title(a.title)
    save_plot(fig, ax, a.output)


if __name__ == "__main__":
    main()
