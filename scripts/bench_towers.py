#!/usr/bin/env python3
"""The vision towers' speed row: CLIP ViT-L/14-336 and SigLIP so400m-patch14-384 at their
released size with random weights, transformers' forward (f32, eager attention, and `sdpa`,
its best simple setting) against imgseq's on the same weights, inputs and threads.

  bench_towers.py --out DIR [--batch 1,16] [--threads 2] [--only clip,siglip] [--bin PATH]

Writes DIR/{clip,siglip}/ (config.json + model.safetensors, ~1.2 / 1.6 GB, not committed) and
DIR/<tower>-b<B>.safetensors (pixel_values and transformers' last_hidden_state), times
transformers here, then runs the ignored Rust test `released_tower_speed` (imgseq-models'
families test) on the same files and prints the ratios, the CPU and its SIMD flags.
Needs: torch, transformers, safetensors (PyTorch only here, never in imgseq).
"""

import argparse
import os
import re
import subprocess
import time

import torch
from safetensors.torch import save_file
from transformers import CLIPVisionConfig, CLIPVisionModel, SiglipVisionConfig, SiglipVisionModel

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

TOWERS = {
    "clip": (CLIPVisionModel, CLIPVisionConfig(hidden_size=1024, intermediate_size=4096,
             num_hidden_layers=24, num_attention_heads=16, patch_size=14, image_size=336,
             projection_dim=768, hidden_act="quick_gelu"), 336),
    "siglip": (SiglipVisionModel, SiglipVisionConfig(hidden_size=1152, intermediate_size=4304,
               num_hidden_layers=27, num_attention_heads=16, patch_size=14, image_size=384), 384),
}


def cpu():
    info = open("/proc/cpuinfo").read()
    name = re.search(r"model name\s*:\s*(.*)", info).group(1)
    flags = set(re.search(r"flags\s*:\s*(.*)", info).group(1).split())
    simd = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
    return f"{name} ({' '.join(simd)})"


def timeit(fn, reps):
    fn()  # warm-up
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="clip,siglip")
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f"CPU: {cpu()}; {a.threads} threads; torch {torch.__version__}")
    for name in a.only.split(","):
        cls, cfg, side = TOWERS[name]
        folder = os.path.join(a.out, name)
        if not os.path.exists(os.path.join(folder, "model.safetensors")):
            m = cls(cfg).eval()
            m.save_pretrained(folder)
        for impl in ("eager", "sdpa"):
            m = cls.from_pretrained(folder, attn_implementation=impl).eval()
            for b in [int(x) for x in a.batch.split(",")]:
                x = torch.randn(b, 3, side, side, generator=torch.Generator().manual_seed(b))
                with torch.no_grad():
                    secs = timeit(lambda: m(pixel_values=x), a.reps)
                    if impl == "eager":
                        y = m(pixel_values=x).last_hidden_state
                        save_file({"pixel_values": x.contiguous(), "last_hidden_state": y.contiguous()},
                                  os.path.join(a.out, f"{name}-b{b}.safetensors"))
                print(f"transformers {name} {impl} batch {b}: {secs:.2f} s ({secs / b:.3f} s/image)")
    env = dict(os.environ, IMGSEQ_TOWER_BENCH=a.out, IMGSEQ_TOWER_BATCHES=a.batch,
               IMGSEQ_TOWER_ONLY=a.only, RAYON_NUM_THREADS=str(a.threads))
    subprocess.run(["cargo", "test", "--profile", "ci", "-p", "imgseq-models", "--test", "families",
                    "released_tower_speed", "--", "--ignored", "--nocapture"],
                   cwd=ROOT, env=env, check=True)


if __name__ == "__main__":
    main()
