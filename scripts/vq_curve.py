#!/usr/bin/env python3
"""PSNR of a VQGAN run against the CPU time it trained: the curve to plan the next run from.

    # every snapshot: held-out PSNR / SSIM / usage, measured once with the run's own binary
    python3 scripts/vq_curve.py eval  runs/vq-photo/snapshots [--imgseq target/release/imgseq]
    # the plot (PNG): each run's state.json history and its snapshots' eval.json files
    python3 scripts/vq_curve.py plot  RUN[:SNAPSHOTS[:LABEL]] ... -o weights/vqgan/curve.png

A snapshot folder holds `step-NNNNN/{model.safetensors, config.json, state.json}` copies of the
run taken while it trained (the run folder itself only keeps its last checkpoint):
`imgseq vq train --snapshot-every N` writes them to `<run>/snapshots/` (runs from before 2026-12-02 used a
shell loop copying the checkpoint). `eval`
writes `eval.json` (the photos of data/photos/test.txt) and `coffee.json` (assets/coffee.png)
into each, with `imgseq vq eval --json --precision f32`; the figures are measurements only —
no choice of the run (steps, checkpoint, recipe) was made from them, so the held-out list stays
held out. `plot` draws, for each run, training-crop PSNR (its history windows, smoothed) and the
held-out / coffee PSNR of every snapshot against hours of training on the run's machine,
with CPU-hours (hours × threads) on the top axis, and a vertical line where a run's moving
average of the weights (`--ema`, `state.json` → `ema_since`) began: its later snapshots hold
the average. Needs matplotlib (plot only).
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def recipe_path(run):
    """A run's recipe: training.json, or train.json in runs written before that name."""
    new = os.path.join(run, "training.json")
    return new if os.path.exists(new) else os.path.join(run, "train.json")


def snapshots(folder, need="model.safetensors"):
    """(step, seconds, folder) of each `step-NNNNN` snapshot holding `need`: the weights to
    measure, or for the plot only `state.json` (a run's committed figures keep each snapshot's
    state.json, eval.json and coffee.json without its 13 MB of weights)."""
    out = []
    for name in sorted(os.listdir(folder)):
        p = os.path.join(folder, name)
        if name.startswith("step-") and os.path.isfile(os.path.join(p, need)):
            with open(os.path.join(p, "state.json")) as fh:
                st = json.load(fh)
            out.append((st["step"], st["seconds"], p))
    return out


def run_eval(imgseq, weights, data, out):
    cmd = [imgseq, "vq", "eval", data, "--weights", weights, "--precision", "f32", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)}: {r.stderr.strip()}")
    with open(out + ".tmp", "w") as fh:
        fh.write(r.stdout)
    os.replace(out + ".tmp", out)
    return json.loads(r.stdout)


def cmd_eval(a):
    coffee = os.path.join(ROOT, "assets", "coffee.png")  # `vq eval` takes one image as a set
    for step, _, p in snapshots(a.snapshots):
        w = os.path.join(p, "model.safetensors")
        for name, data in [("eval.json", a.data), ("coffee.json", coffee)]:
            out = os.path.join(p, name)
            if os.path.exists(out) and not a.again:
                continue
            psnr, ssim, codes = summary(run_eval(a.imgseq, w, data, out))
            print(f"step {step:5d} {name:11s} PSNR {psnr:.2f} dB  SSIM {ssim:.3f}  "
                  f"codes {codes}", flush=True)


def summary(r):
    """(mean PSNR, mean SSIM, codes used) from `vq eval --json`."""
    return r["psnr"], r["ssim"], r["codes_used"]


def smooth(ys, k):
    out, acc = [], []
    for y in ys:
        acc.append(y)
        if len(acc) > k:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def training_line(run):
    """(hours, PSNR) of a run's training windows. History points carry the run's training
    seconds (`seconds`, in runs from 2026-12-02 on); older points only their images/s, so for them
    the time is rebuilt from that (crop and batch by the saved recipe) and, in a run with
    no `seconds` at all, scaled so that the last point lands on the run's measured total."""
    with open(os.path.join(run, "state.json")) as fh:
        st = json.load(fh)
    with open(recipe_path(run)) as fh:
        train = json.load(fh)
    t, last_step, xs, ys = 0.0, 0, [], []
    for p in st["history"]:
        if p.get("seconds") is not None:
            t = p["seconds"]
        else:
            ctx = train["context_from"] and p["step"] > train["context_from"]
            batch = train["context_batch_size"] if ctx else train["batch_size"]
            t += (p["step"] - last_step) * batch / max(p["img_per_s"], 1e-9)
        last_step = p["step"]
        xs.append(t)
        ys.append(p["psnr"])
    exact = any(p.get("seconds") is not None for p in st["history"])
    scale = st["seconds"] / xs[-1] if xs and xs[-1] > 0 and not exact else 1.0
    return [x * scale / 3600 for x in xs], ys


def ema_start(run):
    """(hours, step) where the run's moving average of the weights (`vq train --ema`) began,
    or None: from then on its snapshots hold the average."""
    with open(os.path.join(run, "state.json")) as fh:
        st = json.load(fh)
    since = st.get("ema_since")
    if since is None:
        return None
    xs, _ = training_line(run)
    steps = [p["step"] for p in st["history"]]
    i = next((k for k, s in enumerate(steps) if s >= since), len(steps) - 1)
    return (xs[i] if xs else 0.0), since


def snapshot_points(folder, name, after=0):
    """(hours, PSNR, step) of the measured snapshots past step `after` (the autoencoder
    warm-up: before its k-means init the codebook is not the model's, so eval means nothing)."""
    pts = []
    for step, secs, p in snapshots(folder, need="state.json"):
        if step <= after:
            continue
        f = os.path.join(p, name)
        if os.path.exists(f):
            with open(f) as fh:
                pts.append((secs / 3600, summary(json.load(fh))[0], step))
    return pts


def cmd_plot(a):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    threads = a.threads
    outside = a.legend == "outside"
    fig, ax = plt.subplots(figsize=(11.5 if outside else 8.5, 4.8), dpi=110)
    styles = ["-", "--", ":"]
    drawn = set()  # a run given twice (two snapshot folders) has one training line
    ema_labelled = set()  # runs averaging from the same step share one label
    for i, spec in enumerate(a.runs):
        run, snaps, label = (spec.split(":", 2) + ["", ""])[:3]
        label = label or os.path.basename(os.path.normpath(run))
        ls = styles[i % len(styles)]
        if os.path.realpath(run) not in drawn:
            drawn.add(os.path.realpath(run))
            xs, ys = training_line(run)
            ax.plot(xs, smooth(ys, 8), color="#aaaaaa", lw=1.1, ls=ls,
                    label=f"{label}: training crops (smoothed)")
            ema = ema_start(run)
            if ema:
                ax.axvline(ema[0], color="#2ca02c", ls=ls, lw=0.9)
            if ema and ema[1] not in ema_labelled:
                ema_labelled.add(ema[1])
                ax.text(ema[0], 0.45, f" weight average from step {ema[1]}",
                        color="#2ca02c", fontsize=7, rotation=90, va="bottom", ha="right",
                        transform=ax.get_xaxis_transform())
        if not snaps:
            continue
        with open(recipe_path(run)) as fh:
            warm = json.load(fh).get("ae_warmup", 0)
        for name, colour, what in [("eval.json", "#1f77b4", "held-out photos"),
                                   ("coffee.json", "#d62728", "coffee")]:
            pts = snapshot_points(snaps, name, warm)
            if not pts:
                continue
            ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], "o", ls=ls, color=colour,
                    ms=3.5, lw=1.4, label=f"{label}: {what}")
            x, y, s = pts[-1]
            ax.annotate(f"{y:.2f} dB (step {s})", (x, y), textcoords="offset points",
                        xytext=(-6, 6), ha="right", color=colour, fontsize=8)
    for target, colour, what in [(23.0, "#1f77b4", "target, held-out"),
                                 (21.0, "#d62728", "target, coffee")]:
        ax.axhline(target, color=colour, ls=":", lw=0.9)
        ax.text(0.01, target + 0.1, what, color=colour, fontsize=7,
                transform=ax.get_yaxis_transform())
    ax.set_xlabel(f"hours of training on {threads} CPU cores")
    ax.set_ylabel("PSNR (dB), 384² reconstructions")
    ax.set_title(a.title or "VQGAN: PSNR against training time")
    top = ax.secondary_xaxis("top", functions=(lambda h: h * threads, lambda c: c / threads))
    top.set_xlabel("CPU-hours")
    save_plot(fig, ax, a.output, a.legend)


def save_plot(fig, ax, output, legend="lower right"):
    """The house finish of a curve plot (grid, legend, tight layout), written to `output` via a
    temporary file so that an interrupted run never leaves a half-written PNG there. Also used
    by scripts/vit_curve.py. `legend` is a matplotlib location or "outside" (right of the axes)."""
    ax.grid(alpha=0.3)
    if legend == "outside":
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    else:
        ax.legend(loc=legend, fontsize=7)
    fig.tight_layout()
    tmp = output + ".tmp.png"
    fig.savefig(tmp)
    os.replace(tmp, output)
    print(f"wrote {output}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("eval", help="held-out PSNR of every snapshot")
    e.add_argument("snapshots")
    e.add_argument("--imgseq", default=os.path.join(ROOT, "target", "release", "imgseq"))
    e.add_argument("--data", default=os.path.join(ROOT, "data", "photos", "test.txt"))
    e.add_argument("--again", action="store_true", help="re-measure snapshots already measured")
    p = sub.add_parser("plot", help="the PNG")
    p.add_argument("runs", nargs="+", metavar="RUN[:SNAPSHOTS[:LABEL]]",
                   help="a run folder (its state.json / train.json), optionally its snapshots "
                        "folder and a legend label")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--legend", default="lower right",
                   help='a matplotlib legend location, or "outside" (right of the plot)')
    p.add_argument("--title")
    a = ap.parse_args()
    {"eval": cmd_eval, "plot": cmd_plot}[a.cmd](a)


if __name__ == "__main__":
    main()
