#!/usr/bin/env python3
"""The vision towers' speed rows: CLIP ViT-L/14-336 and SigLIP so400m-patch14-384 at their
released size with random weights, imgseq's forward against transformers' (eager attention,
and `sdpa`, its best simple setting) on the same weights, inputs and threads, in f32 and in
bf16, with each side's peak resident set.

  bench_towers.py --out DIR [--batch 1,16] [--precision f32,bf16] [--threads 2]
                  [--only clip,siglip] [--reps 2] [--warmup 1]

One command prints, per tower, batch and precision: the seconds of one forward (best of
--reps after --warmup untimed ones) of imgseq, transformers eager and transformers sdpa; imgseq's time
over sdpa's; each side's peak resident set (`VmHWM`, MiB); and how imgseq's (and
transformers' bf16) last hidden state agrees with transformers' f32 one (the least cosine of
a token's two vectors, the largest difference relative to the largest value). First the CPU
and its SIMD flags. Every row runs in a process of its own, so a peak is that row's only:
transformers in a child of this script (`--row`), imgseq in the ignored Rust test
`released_tower_speed` (imgseq-models' families test, its binary built once and run per row).

bf16 on each side: imgseq `--precision bf16` (every linear layer and the patch projection on
bf16 weights packed at load, bf16 activations, f32 sums; norms, softmax and residuals f32;
the f32 weights let go); transformers `torch.autocast("cpu", dtype=torch.bfloat16)` on its
f32 model (its matmuls and linears in bf16 through oneDNN, the rest as autocast keeps it).

Writes DIR/{clip,siglip}/ (config.json + model.safetensors, ~1.2 / 1.6 GB, not committed),
DIR/<tower>-b<B>.safetensors (pixel_values and transformers' f32 eager last_hidden_state)
and DIR/rows.json (every row). Needs: torch, transformers, safetensors (PyTorch only here,
never in imgseq). A smoke run in seconds: --small (towers of 2 blocks of 64 values at 56²
instead of the released sizes; another --out).
"""

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# Released sizes (openai/clip-vit-large-patch14-336, google/siglip-so400m-patch14-384).
CONFIGS = {
    "clip": dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                 num_attention_heads=16, patch_size=14, image_size=336, projection_dim=768,
                 hidden_act="quick_gelu"),
    "siglip": dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27,
                   num_attention_heads=16, patch_size=14, image_size=384),
}
SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             patch_size=14, image_size=56)


def config(name, small):
    if small:
        return dict(SMALL, hidden_act=CONFIGS[name].get("hidden_act", "gelu_pytorch_tanh"))
    return CONFIGS[name]


def tower_classes(name):
    from transformers import CLIPVisionConfig, CLIPVisionModel, SiglipVisionConfig, SiglipVisionModel
    return {"clip": (CLIPVisionModel, CLIPVisionConfig),
            "siglip": (SiglipVisionModel, SiglipVisionConfig)}[name]


def cpu():
    info = open("/proc/cpuinfo").read()
    name = re.search(r"model name\s*:\s*(.*)", info).group(1)
    flags = set(re.search(r"flags\s*:\s*(.*)", info).group(1).split())
    simd = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                        "amx_tile", "amx_bf16", "amx_int8") if f in flags]
    return f"{name}; SIMD: {' '.join(simd)}; {os.cpu_count()} logical CPUs"


def peak_mib():
    """This process's peak resident set (VmHWM), MiB."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def agreement(got, want):
    """(least token cosine, largest difference / largest |want|) of two (b, n, D) states."""
    import torch
    g, w = got.double().flatten(0, -2), want.double().flatten(0, -2)
    cos = torch.nn.functional.cosine_similarity(g, w, dim=-1).min().item()
    rel = ((g - w).abs().max() / w.abs().max()).item()
    return cos, rel


def io_path(out, name, b):
    return os.path.join(out, f"{name}-b{b}.safetensors")


def make(a):
    """Saves the tower with random weights (seeded) in transformers' layout."""
    import torch
    cls, cfg = tower_classes(a.row)
    torch.manual_seed(0)
    cls(cfg(**config(a.row, a.small))).eval().save_pretrained(os.path.join(a.out, a.row))


def row(a):
    """One transformers row in this process: prints `ROW {json}`."""
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(a.threads)
    base = peak_mib()  # torch and transformers imported, no model yet
    name, impl, prec, b = a.row, a.impl, a.precision, a.batch
    cls, _ = tower_classes(name)
    t0 = time.perf_counter()
    m = cls.from_pretrained(os.path.join(a.out, name), attn_implementation=impl).eval()
    load = time.perf_counter() - t0
    path = io_path(a.out, name, b)
    if os.path.exists(path):
        io = load_file(path)
        x = io["pixel_values"]
    else:
        side = m.config.image_size
        x = torch.randn(b, 3, side, side, generator=torch.Generator().manual_seed(b))
        io = None
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if prec == "bf16" else contextlib.nullcontext()
    with torch.inference_mode(), ctx:
        for _ in range(a.warmup):
            m(pixel_values=x)
        best = float("inf")
        for _ in range(a.reps):
            t = time.perf_counter()
            y = m(pixel_values=x).last_hidden_state
            best = min(best, time.perf_counter() - t)
    y = y.float()
    if io is None:
        if (impl, prec) != ("eager", "f32"):
            sys.exit(f"{path} is missing: the eager f32 row writes it")
        save_file({"pixel_values": x.contiguous(), "last_hidden_state": y.contiguous()}, path)
        io = {"last_hidden_state": y}
    cos, rel = agreement(y, io["last_hidden_state"])
    print("ROW " + json.dumps({"side": f"transformers {impl}", "tower": name, "precision": prec,
                               "batch": b, "secs": best, "load_secs": load,
                               "peak_mib": peak_mib(), "base_mib": base, "min_cosine": cos, "max_rel": rel}))


def run_rows(cmd, env=None):
    p = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    sys.stdout.flush()
    if p.returncode != 0:
        print(p.stdout)
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}")
    # libtest prints `test NAME ... ` before the test's own output, on the same line.
    return [json.loads(l[l.index("ROW {") + 4:]) for l in p.stdout.splitlines() if "ROW {" in l]


def test_binary():
    """Builds imgseq-models' families test (ci profile) and gives its executable."""
    out = subprocess.run(["cargo", "test", "--profile", "ci", "-p", "imgseq-models", "--test",
                          "families", "--no-run", "--message-format=json"],
                         cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "families" \
                and msg.get("executable"):
            return msg["executable"]
    sys.exit("cargo built no families test binary")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--precision", default="f32,bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="clip,siglip")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--row", help=argparse.SUPPRESS)
    ap.add_argument("--make", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--impl", help=argparse.SUPPRESS)
    a, _ = ap.parse_known_args()
    if a.row and a.make:
        return make(a)
    if a.row:
        a.batch = int(a.batch)
        return row(a)
    import torch
    import transformers
    print(f"CPU: {cpu()}")
    print(f"{a.threads} threads each side; torch {torch.__version__}, transformers "
          f"{transformers.__version__}; best of {a.reps} after {a.warmup} untimed")
    os.makedirs(a.out, exist_ok=True)
    batches = [int(b) for b in a.batch.split(",")]
    precisions = a.precision.split(",")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), RAYON_NUM_THREADS=str(a.threads),
               RUST_BACKTRACE="0")
    me = [sys.executable, os.path.abspath(__file__), "--out", a.out, "--threads", str(a.threads),
          "--reps", str(a.reps), "--warmup", str(a.warmup)]
    binary = test_binary()
    rows = []
    names = a.only.split(",")
    for name in names:
        if not os.path.exists(os.path.join(a.out, name, "model.safetensors")):
            subprocess.run(me + ["--row", name, "--make"] + (["--small"] if a.small else []),
                           env=env, check=True)
    for b in batches:
        for name in names:
            for prec in precisions:
                for impl in ("eager", "sdpa"):
                    rows += run_rows(me + ["--row", name, "--impl", impl, "--precision", prec,
                                           "--batch", str(b)], env)
                    print(f"  {rows[-1]['side']} {name} {prec} batch {b}: {rows[-1]['secs']:.2f} s, "
                          f"peak {rows[-1]['peak_mib']:.0f} MiB", flush=True)
                renv = dict(env, IMGSEQ_TOWER_BENCH=os.path.abspath(a.out), IMGSEQ_TOWER_ONLY=name,
                            IMGSEQ_TOWER_BATCHES=str(b), IMGSEQ_TOWER_PRECISION=prec,
                            IMGSEQ_TOWER_REPS=str(a.reps), IMGSEQ_TOWER_WARMUP=str(a.warmup))
                for r in run_rows([binary, "released_tower_speed", "--exact", "--ignored",
                                   "--nocapture", "--test-threads", "1"], renv):
                    rows.append(dict(r, side="imgseq"))
                print(f"  imgseq {name} {prec} batch {b}: {rows[-1]['secs']:.2f} s, "
                      f"peak {rows[-1]['peak_mib']:.0f} MiB", flush=True)
                with open(os.path.join(a.out, "rows.json"), "w") as f:
                    json.dump(rows, f, indent=1)
    table(rows)


def table(rows):
    by = {(r["side"], r["tower"], r["precision"], r["batch"]): r for r in rows}
    keys = sorted({(r["tower"], r["batch"], r["precision"]) for r in rows},
                  key=lambda k: (k[0], k[1], k[2] != "f32"))
    print()
    print("| tower | batch | precision | imgseq s | eager s | sdpa s | imgseq / sdpa | peak RSS MiB "
          "imgseq / eager / sdpa | imgseq vs transformers f32: cosine, rel. | sdpa vs f32: cosine |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for tower, b, prec in keys:
        i, e, s = (by.get((side, tower, prec, b)) for side in
                   ("imgseq", "transformers eager", "transformers sdpa"))
        f = lambda r, k, fmt: format(r[k], fmt) if r else "–"
        ratio = f"{i['secs'] / s['secs']:.2f}×" if i and s else "–"
        print(f"| {tower} | {b} | {prec} | {f(i, 'secs', '.2f')} | {f(e, 'secs', '.2f')} | "
              f"{f(s, 'secs', '.2f')} | {ratio} | {f(i, 'peak_mib', '.0f')} / {f(e, 'peak_mib', '.0f')} / "
              f"{f(s, 'peak_mib', '.0f')} | {f(i, 'min_cosine', '.5f')}, {f(i, 'max_rel', '.1e')} | "
              f"{f(s, 'min_cosine', '.5f')} |")
    base = [r["base_mib"] for r in rows if "base_mib" in r]
    if base:
        print(f"\ntransformers' processes held {min(base):.0f} to {max(base):.0f} MiB with torch and "
              "transformers imported, before any model (part of their peaks).")


if __name__ == "__main__":
    main()
