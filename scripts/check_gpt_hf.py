#!/usr/bin/env python3
"""Checks that Hugging Face transformers loads an imgseq GPT folder unchanged and computes the
same logits as imgseq.

Needs: pip install torch transformers safetensors

    python3 scripts/check_gpt_hf.py weights/gpt-fashion-mnist

Runs `cargo run --release -p imgseq-gpt --example gpt_logits -- DIR TMP` for imgseq's logits
(or pass --io FILE written by that example), then
  * GPT2LMHeadModel.from_pretrained(DIR, output_loading_info=True): no missing, unexpected or
    mismatched keys (the tied lm_head is not stored, as HF's own save_pretrained),
  * HF logits on the same input_ids vs imgseq's: max relative error ≤ 1e-4.
Exits non-zero on any failure.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import GPT2LMHeadModel

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--io", help="output of the gpt_logits example (default: run it)")
    a = ap.parse_args()
    io_path = a.io
    if io_path is None:
        io_path = os.path.join(tempfile.mkdtemp(), "io.safetensors")
        subprocess.run(
            ["cargo", "run", "--release", "-q", "-p", "imgseq-gpt", "--example", "gpt_logits",
             "--", os.path.abspath(a.model_dir), io_path],
            cwd=ROOT, check=True)
    model, info = GPT2LMHeadModel.from_pretrained(a.model_dir, output_loading_info=True)
    model.eval()
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    print("loading info:", {k: list(v) for k, v in info.items() if k != "error_msgs"})
    io = load_file(io_path)
    with torch.no_grad():
        logits = model(io["input_ids"]).logits
    ours = io["logits"]
    err = float((logits - ours).abs().max() / ours.abs().max())
    print(f"config: vocab {model.config.vocab_size}, n_positions {model.config.n_positions}, "
          f"n_embd {model.config.n_embd}, n_layer {model.config.n_layer}, "
          f"activation {model.config.activation_function}, "
          f"imgseq_n_codes {getattr(model.config, 'imgseq_n_codes', None)}")
    print(f"logits {tuple(logits.shape)}: max relative error vs imgseq {err:.3e}")
    ok = not bad and err <= 1e-4 and tuple(logits.shape) == tuple(ours.shape)
    print("OK" if ok else f"FAILED {bad}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
