#!/usr/bin/env python3
"""Builds random-weight HF GPT-2 language models and writes them as fixtures for imgseq-gpt.

Needs: pip install torch transformers safetensors  (fixtures only; the Rust tests never run this)

    python3 scripts/make_gpt_fixtures.py        # writes crates/imgseq-gpt/tests/fixtures/

Writes, for two models:
  gelu/      GPT2LMHeadModel.save_pretrained (config.json + model.safetensors): an imgseq-style
             model (exact-erf "gelu", imgseq_* fields: 32 codes, 4 classes, 4x4 grid,
             vocab 32 + 4 + 1 = 37, n_positions 17)
  gelu_new/  a plain GPT-2 config (tanh "gelu_new", n_inner 48, no imgseq_* fields)
  <name>_io.safetensors:
      input_ids (3, 17) int64 (class token first, then 16 codes), logits (3, 17, vocab),
      loss (1,): mean cross-entropy of positions 0..15 predicting tokens 1..16 over the first
      32 logits (the codebook entries), and grad.<param> of that loss for a few parameters.
All weights (LayerNorms and biases included) are random, so nothing is checked against a
trivial value.
"""
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "crates", "imgseq-gpt", "tests", "fixtures"
)
N_CODES = 32
CLASSES = ["tee", "trouser", "bag", "boot"]
GRAD_PARAMS = [
    "transformer.wte.weight",
    "transformer.wpe.weight",
    "transformer.h.0.attn.c_attn.weight",
    "transformer.h.0.ln_1.weight",
    "transformer.h.1.mlp.c_fc.bias",
    "transformer.h.1.attn.c_proj.weight",
    "transformer.ln_f.bias",
]


def build(name, **kw):
    torch.manual_seed({"gelu": 0, "gelu_new": 1}[name])
    cfg = GPT2Config(
        n_positions=17,
        n_embd=32,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        **kw,
    )
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("ln_1.weight") or n.endswith("ln_2.weight") or n.endswith("ln_f.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    model.eval()
    out = os.path.join(ROOT, name)
    model.save_pretrained(out, safe_serialization=True)

    g = torch.Generator().manual_seed(5)
    codes = torch.randint(0, N_CODES, (3, 16), generator=g)
    cls = torch.tensor([[N_CODES + 0], [N_CODES + 3], [N_CODES + len(CLASSES)]])
    ids = torch.cat([cls, codes], 1)  # (3, 17)
    logits = model(ids).logits  # (3, 17, vocab)
    loss = F.cross_entropy(logits[:, :-1, :N_CODES].reshape(-1, N_CODES), ids[:, 1:].reshape(-1))
    loss.backward()
    params = dict(model.named_parameters())
    tensors = {
        "input_ids": ids.contiguous(),
        "logits": logits.detach().contiguous(),
        "loss": loss.detach().reshape(1),
    }
    for p in GRAD_PARAMS:
        tensors["grad." + p] = params[p].grad.detach().contiguous()
    save_file(tensors, os.path.join(ROOT, f"{name}_io.safetensors"))
    print(name, "vocab", cfg.vocab_size, "loss", float(loss))


def main():
    os.makedirs(ROOT, exist_ok=True)
    vocab = N_CODES + len(CLASSES) + 1
    build(
        "gelu",
        vocab_size=vocab,
        activation_function="gelu",
        bos_token_id=vocab - 1,
        eos_token_id=vocab - 1,
        imgseq_format="imgseq-gpt/1",
        imgseq_n_codes=N_CODES,
        imgseq_class_names=CLASSES,
        imgseq_grid=[4, 4],
    )
    build("gelu_new", vocab_size=vocab, activation_function="gelu_new", n_inner=48)


if __name__ == "__main__":
    main()
