#!/usr/bin/env python3
"""Builds tests/fixtures/gan/: parity of `vq train`'s adversarial loss and perceptual term
with taming-transformers' and the `lpips` package's own code, on random weights.

taming's modules are imported from a checkout of CompVis/taming-transformers (give its path
as TAMING=/path/to/checkout, or a bare git directory as TAMING_GIT=/path/to/repo.git whose
HEAD files are extracted): `taming/modules/discriminator/model.py` (NLayerDiscriminator,
weights_init), `taming/modules/util.py` (ActNorm) and `taming/modules/losses/vqperceptual.py`
(VQLPIPSWithDiscriminator, hinge/vanilla d-loss, the adaptive weight). Its LPIPS (which
downloads VGG16) is replaced by a stub: the GAN check runs with perceptual_weight 0. The
perceptual check uses the `lpips` package (pip install lpips) built with pretrained=False,
pnet_rand=True, so nothing is downloaded; its random VGG16 and linear heads are saved.

Outputs (all small):
  gan.safetensors    the discriminator (ndf 8, 2 layers, BatchNorm) before training
                     (`main.*`), the generator stand-in (h, W, b: recon = conv3x3(h, W) + b),
                     x, expected logits maps, g_loss, d_weight (λ), the total loss's gradient
                     at W, hinge and vanilla d-loss, logit means and the BatchNorm running
                     statistics after taming's three discriminator calls
  actnorm.safetensors an ActNorm discriminator, its input and its first training-mode logits
  lpips.safetensors  random LPIPS heads (`linK.model.1.weight`), two 32x32 images in
                     [-1, 1] and lpips' distance of each pair, its VGG16 set by a formula
                     (`formula_vgg16`) that the Rust test repeats
Run: TAMING_GIT=/path/to/taming.git /tmp/hfvenv/bin/python scripts/make_gan_fixtures.py
"""

import copy
import os
import subprocess
import sys
import tempfile
import types

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "gan")
FILES = [
    "taming/modules/discriminator/model.py",
    "taming/modules/util.py",
    "taming/modules/losses/vqperceptual.py",
]


def taming_root():
    if os.environ.get("TAMING"):
        return os.environ["TAMING"]
    git = os.environ.get("TAMING_GIT")
    if not git:
        sys.exit("set TAMING=<checkout> or TAMING_GIT=<git dir> of CompVis/taming-transformers")
    root = tempfile.mkdtemp(prefix="taming-")
    for f in FILES:
        dst = os.path.join(root, f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb") as fh:
            fh.write(subprocess.check_output(["git", "-C", git, "show", f"HEAD:{f}"]))
    return root


def import_taming(root):
    """Imports taming's three modules without its package __init__s or its LPIPS."""
    for pkg in ["taming", "taming.modules", "taming.modules.losses",
                "taming.modules.discriminator"]:
        m = types.ModuleType(pkg)
        m.__path__ = [os.path.join(root, *pkg.split("."))]
        sys.modules[pkg] = m
    stub = types.ModuleType("taming.modules.losses.lpips")

    class LPIPS(nn.Module):  # never called: perceptual_weight is 0
        def forward(self, a, b):
            raise AssertionError("LPIPS stub called")

    stub.LPIPS = LPIPS
    sys.modules["taming.modules.losses.lpips"] = stub
    import importlib
    return importlib.import_module("taming.modules.losses.vqperceptual")


def state(module):
    return {k: v.detach().clone().contiguous() for k, v in module.state_dict().items()}


def gan_fixture(vqp):
    torch.manual_seed(0)
    loss = vqp.VQLPIPSWithDiscriminator(
        disc_start=3, codebook_weight=1.0, disc_num_layers=2, disc_ndf=8,
        disc_weight=0.8, perceptual_weight=0.0, disc_loss="hinge").train()
    disc = loss.discriminator
    out = {f"disc.{k}": v for k, v in state(disc).items()}
    h = torch.randn(2, 4, 32, 32)
    W = nn.Parameter(torch.randn(3, 4, 3, 3) * 0.2)
    b = torch.randn(3) * 0.1
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    codebook_loss = torch.tensor(0.3)
    recon = F.conv2d(h, W, b, padding=1)
    # The logits maps, from copies (train mode: batch statistics, same output).
    fake_map = copy.deepcopy(disc)(recon).detach()
    real_map = copy.deepcopy(disc)(x).detach()
    total, log0 = loss(codebook_loss, x, recon, 0, global_step=5, last_layer=W)
    total.backward()
    d_loss, log1 = loss(codebook_loss, x, recon.detach(), 1, global_step=5)
    out.update({
        "h": h, "W": W.detach(), "b": b, "x": x,
        "logits_fake": fake_map, "logits_real": real_map,
        "g_loss": log0["train/g_loss"].reshape(1),
        "d_weight": log0["train/d_weight"].reshape(1),
        "nll_loss": log0["train/nll_loss"].reshape(1),
        "total_loss": total.detach().reshape(1),
        "W_grad": W.grad.detach().clone(),
        "d_loss_hinge": d_loss.detach().reshape(1),
        "d_loss_vanilla": vqp.vanilla_d_loss(real_map, fake_map).reshape(1),
        "logits_real_mean": log1["train/logits_real"].reshape(1),
        "logits_fake_mean": log1["train/logits_fake"].reshape(1),
    })
    for k, v in state(disc).items():
        if "running" in k or "num_batches" in k:
            out[f"after.{k}"] = v
    save_file(out, os.path.join(OUT, "gan.safetensors"))
    print("gan: d_weight", out["d_weight"].item(), "g_loss", out["g_loss"].item(),
          "d_loss", out["d_loss_hinge"].item())

    from taming.modules.discriminator.model import NLayerDiscriminator, weights_init
    torch.manual_seed(1)
    an = NLayerDiscriminator(input_nc=3, ndf=8, n_layers=2, use_actnorm=True).apply(weights_init)
    an.train()
    before = {f"disc.{k}": v for k, v in state(an).items()}
    xa = torch.rand(2, 3, 32, 32) * 2 - 1
    before["x"] = xa
    before["logits"] = an(xa).detach()
    save_file(before, os.path.join(OUT, "actnorm.safetensors"))


VGG16_CONVS = [0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28]


def formula_vgg16(features):
    """Deterministic VGG16 weights (the Rust test builds the same ones, so the 59 MB of a
    random VGG16 need not be stored): for the l-th conv, weight element i (flattened) is
    sqrt(3/fan_in)*sin(0.731*i + 1.3*l), bias element i is 0.05*cos(0.917*i + l)."""
    for l, idx in enumerate(VGG16_CONVS):
        conv = features[idx]
        n = conv.weight.numel()
        fan_in = conv.weight.shape[1] * 9
        i = torch.arange(n, dtype=torch.float64)
        w = (3.0 / fan_in) ** 0.5 * torch.sin(0.731 * i + 1.3 * l)
        conv.weight.data = w.float().reshape(conv.weight.shape)
        j = torch.arange(conv.bias.numel(), dtype=torch.float64)
        conv.bias.data = (0.05 * torch.cos(0.917 * j + l)).float()


def lpips_fixture():
    import lpips
    torch.manual_seed(2)
    net = lpips.LPIPS(net="vgg", pretrained=False, pnet_rand=True, lpips=True, verbose=False)
    features = {}
    for s in range(1, 6):
        for name, m in getattr(net.net, f"slice{s}").named_children():
            features[int(name)] = m
    formula_vgg16(features)
    out = {}
    for lin in [net.lin0, net.lin1, net.lin2, net.lin3, net.lin4]:
        w = lin.model[1].weight
        w.data = torch.rand_like(w) * 0.1  # non-negative like trained heads
    for k, v in net.state_dict().items():
        if k.startswith("lin") and not k.startswith("lins"):
            out[k] = v.contiguous()
    net.eval()
    a = torch.rand(2, 3, 32, 32) * 2 - 1
    b = (a + 0.3 * torch.randn_like(a)).clamp(-1, 1)
    with torch.no_grad():
        d = net(a, b)  # (2, 1, 1, 1), inputs in [-1, 1] (normalize=False)
    out.update({"a": a, "b": b, "dist": d.reshape(-1).contiguous()})
    save_file(out, os.path.join(OUT, "lpips.safetensors"))
    print("lpips:", d.reshape(-1).tolist())


def main():
    os.makedirs(OUT, exist_ok=True)
    vqp = import_taming(taming_root())
    gan_fixture(vqp)
    lpips_fixture()


if __name__ == "__main__":
    main()
