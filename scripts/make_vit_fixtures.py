#!/usr/bin/env python3
"""Builds random-weight HF ViT references and writes them as fixtures for the Rust tests.

Needs: pip install torch transformers safetensors  (fixtures only; the Rust tests never run this)

    python3 scripts/make_vit_fixtures.py            # writes tests/fixtures/vit/

Writes
  tiny/config.json, tiny/model.safetensors   HF ViTForImageClassification.save_pretrained
  tiny_io.safetensors                        inputs and outputs:
      pixel_values (2,3,32,32), hidden_states.{0..L} (2,65,32), last_hidden_state, logits (2,5)
      pixel_values_48 (1,3,48,48) with interpolate_pos_encoding=True:
      embeddings_48 (1,145,32), logits_48 (1,5)
      labels (2,), loss (1,), grad.<param> for every parameter (mean cross-entropy)
      the training engines' loss, label smoothing 0.1, on a batch of 6:
      ls.pixel_values (6,3,32,32), ls.labels (6,), ls.loss (1,), ls.grad.<param>  (hard labels)
      soft.targets (6,5) (rows sum to 1), soft.loss (1,), soft.grad.<param>       (soft targets)
"""
import os
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import ViTConfig, ViTForImageClassification

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "vit")


def main():
    torch.manual_seed(0)
    cfg = ViTConfig(
        image_size=32,
        patch_size=4,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        hidden_act="gelu",
        layer_norm_eps=1e-12,
        qkv_bias=True,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        id2label={i: f"class_{i}" for i in range(5)},
        label2id={f"class_{i}": i for i in range(5)},
    )
    model = ViTForImageClassification(cfg).eval()
    # Random weights everywhere (HF zero-inits biases and ones LayerNorm): make every
    # parameter matter, so a wrong name, transpose or eps shows up in the outputs.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layernorm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
    os.makedirs(os.path.join(ROOT, "tiny"), exist_ok=True)
    model.save_pretrained(os.path.join(ROOT, "tiny"), safe_serialization=True)

    x = torch.randn(2, 3, 32, 32)
    x48 = torch.randn(1, 3, 48, 48)
    with torch.no_grad():
        out = model(pixel_values=x, output_hidden_states=True)
        last = model.vit(pixel_values=x).last_hidden_state
        out48 = model(pixel_values=x48, interpolate_pos_encoding=True, output_hidden_states=True)
    tensors = {
        "pixel_values": x,
        "last_hidden_state": last,
        "logits": out.logits,
        "pixel_values_48": x48,
        "embeddings_48": out48.hidden_states[0],
        "logits_48": out48.logits,
    }
    for i, h in enumerate(out.hidden_states):
        tensors[f"hidden_states.{i}"] = h
    # Gradients w.r.t. every parameter: checks the whole backward pass (our kernels' custom
    # backwards, the fused engine) against PyTorch autograd. Three losses: the plain mean
    # cross-entropy, and the training loss (label smoothing 0.1) with hard labels and with
    # soft targets (probabilities, as a teacher's softmax would give).
    labels = torch.tensor([1, 3])
    xs = torch.randn(6, 3, 32, 32)
    ys = torch.tensor([0, 4, 2, 2, 1, 3])
    soft = torch.softmax(1.5 * torch.randn(6, 5), dim=1)
    runs = [("", x, labels, 0.0), ("ls.", xs, ys, 0.1), ("soft.", xs, soft, 0.1)]
    grads = {}
    for prefix, inp, target, eps in runs:
        model.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(pixel_values=inp).logits, target,
                                                 label_smoothing=eps)
        loss.backward()
        tensors[f"{prefix}loss"] = loss.detach().reshape(1)
        grads[prefix] = [p.grad.detach().clone() for p in model.parameters()]
    tensors["labels"] = labels.to(torch.int64)
    tensors["ls.pixel_values"] = xs
    tensors["ls.labels"] = ys.to(torch.int64)
    tensors["soft.targets"] = soft
    # transformers 5 names modules internally differently from the checkpoint keys it saves
    # (e.g. `vit.layers.0.attention.k_proj` vs `vit.encoder.layer.0.attention.attention.key`);
    # saving the gradients through save_pretrained gives them the checkpoint names.
    for prefix, _, _, _ in runs:
        with torch.no_grad():
            for p, g in zip(model.parameters(), grads[prefix]):
                p.copy_(g)
        with tempfile.TemporaryDirectory() as d:
            model.save_pretrained(d, safe_serialization=True)
            for name, g in load_file(os.path.join(d, "model.safetensors")).items():
                tensors[f"{prefix}grad.{name}"] = g
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(ROOT, "tiny_io.safetensors"))
    print("wrote", os.path.abspath(ROOT), file=sys.stderr)


if __name__ == "__main__":
    main()
