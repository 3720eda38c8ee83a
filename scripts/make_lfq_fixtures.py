#!/usr/bin/env python3
"""Builds the Open-MAGVIT2 (LFQ) parity fixtures in tests/fixtures/lfq/ with the package's own
classes (PyPI `open-magvit2` 1.1: `taming/modules/diffusionmodules/improved_model.py`
Encoder/Decoder, `taming/modules/vqvae/lookup_free_quantize.py` LFQ, `taming/modules/ema.py`
LitEma). Needs PyTorch, einops, safetensors, PyYAML and `pip install --no-deps open-magvit2`.

`taming/models/lfqgan.py`'s VQModel is a LightningModule whose loss needs LPIPS weights from
the internet, so the container below holds the same submodules under the same names
(`encoder`, `decoder`, `loss.discriminator`, `loss.perceptual_loss`, `quantize`, `model_ema`
= LitEma over the container's trainable parameters, built last as VQModel does), so that its
`state_dict()` has exactly VQModel's keys. The checkpoint is written as Lightning's
`trainer.save_checkpoint` writes it: `torch.save` of a dict with `epoch`, `global_step`,
`pytorch-lightning_version`, `state_dict`, `loops`, `callbacks`, `optimizer_states` (empty
here: no optimizer state in the tree) and `lr_schedulers`.

The EMA copies differ from the raw weights (a small perturbation) in every tensor under
20,000 values; the larger ones share their storage with the raw tensor (torch.save writes a
shared storage once), which keeps the file under 2 MB and exercises shared storages in the
reader. The small model (`ch` 32, `ch_mult` [2, 1], one res block, `z_channels` 18 → 2^18
codes) has channel-changing res blocks (1x1 `nin_shortcut`) in both halves, an encoder
downsample and a decoder depth-to-space upsample.

Seeds are retried until no pre-quantisation value is within 1e-4 of 0 (a sign flip there
would be float noise, not a difference of implementation); the smallest |value| goes to
margin.txt.

Outputs (tests/fixtures/lfq/):
  tiny.ckpt        the Lightning-style checkpoint
  tiny.yaml        the LightningCLI config (their configs/gpu/imagenet_lfqgan_256_L.yaml
                   layout: model.class_path / model.init_args)
  io.safetensors   x (2,3,32,32) f32 input in [-1, 1];
                   for w in (ema, raw): h_{w} encoder output (2,18,16,16), indices_{w}
                   (2,16,16) int64 (LFQ forward), pre_{w} / post_{w} the factorised [9, 9]
                   indices of LFQ(token_factorization=True), recon_{w} VQModel.forward's
                   decode (2,3,32,32), codes_{w} decoder(get_codebook_entry(indices)) and
                   fact_{w} decoder(concat(get_codebook_entry(pre, "pre"),
                   get_codebook_entry(post, "post")));
                   tokens (1,16,16) int64 random in [0, 2^18), tokens_dec their decode (EMA)
  margin.txt       smallest |h| over both weight sets
  no_ema.ckpt      a one-level model (ch_mult [1], no downsampling) trained without EMA:
                   no model_ema.* tensors (for the "no EMA weights" error and the raw default)
Run: /tmp/hfvenv/bin/python scripts/make_lfq_fixtures.py
     /tmp/hfvenv/bin/python scripts/make_lfq_fixtures.py --released OUT_DIR
       (the released 2^18 layout — ch 128, ch_mult [1,1,2,2,4], 4 res blocks — on one 256²
       image, EMA storages all shared so the file is the raw model's size; not committed;
       also prints their encode / decode time, f32 eager, THREADS threads, default 2). The
       Rust side: IMGSEQ_LFQ_RELEASED=OUT_DIR cargo test -p imgseq-lfq --test parity --
       --ignored --nocapture
"""

import argparse
import os
from collections import OrderedDict

import torch
import torch.nn as nn
import yaml
from safetensors.torch import save_file

from open_magvit2.taming.modules.diffusionmodules.improved_model import Decoder, Encoder
from open_magvit2.taming.modules.ema import LitEma
from open_magvit2.taming.modules.vqvae.lookup_free_quantize import LFQ

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "lfq")
SHARE_ABOVE = 20_000


class Loss(nn.Module):
    """What VQLPIPSWithDiscriminator contributes to the state dict, made tiny."""

    def __init__(self):
        super().__init__()
        self.discriminator = nn.Module()
        self.discriminator.main = nn.Sequential(nn.Conv2d(3, 4, 4, 2, 1))
        self.perceptual_loss = nn.Module()
        self.perceptual_loss.lin0 = nn.Conv2d(4, 1, 1, bias=False)
        for p in self.perceptual_loss.parameters():
            p.requires_grad = False  # LPIPS is frozen: not in the EMA


class Container(nn.Module):
    """VQModel's submodules under VQModel's names (see the module docstring)."""

    def __init__(self, ddconfig, n_embed, embed_dim, factorized):
        super().__init__()
        self.encoder = Encoder(**ddconfig)
        self.decoder = Decoder(**ddconfig)
        self.loss = Loss()
        self.quantize = LFQ(dim=embed_dim, codebook_size=n_embed, token_factorization=factorized,
                            factorized_bits=[9, 9])
        self.model_ema = LitEma(self)


def randomise(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.ndim == 1:  # GroupNorm affine
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p[0].numel() if p.ndim > 1 else 1
                p.copy_(torch.randn(p.shape, generator=gen) / fan_in ** 0.5)


def make_ema(model, gen, share_all):
    """EMA buffers: perturbed copies of small tensors, the raw tensor itself for large ones."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            s = model.model_ema.m_name2s_name[name]
            if share_all or p.numel() > SHARE_ABOVE:
                setattr(model.model_ema, s, p.data)  # same storage
                model.model_ema._buffers[s] = p.data
            else:
                b = model.model_ema._buffers[s]
                b.copy_(p + 0.05 * p.abs().mean() * torch.randn(p.shape, generator=gen))


def lightning_ckpt(state_dict):
    return {
        "epoch": 3,
        "global_step": 1234,
        "pytorch-lightning_version": "2.2.1",
        "state_dict": state_dict,
        "loops": {"fit_loop": {"state_dict": {}, "epoch_progress": {"total": {"ready": 4}}}},
        "callbacks": {
            "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0}": {
                "monitor": None,
                "best_model_score": None,
                "best_model_path": "",
                "current_score": None,
                "dirpath": "../../checkpoints/vqgan/test",
                "best_k_models": {},
                "kth_best_model_path": "",
                "kth_value": torch.tensor(float("inf")),
                "last_model_path": "",
            }
        },
        "optimizer_states": [],
        "lr_schedulers": [],
    }


def yaml_config(dd, n_embed, embed_dim, size):
    return {
        "seed_everything": True,
        "model": {
            "class_path": "open_magvit2.taming.models.lfqgan.VQModel",
            "init_args": {
                "ddconfig": dict(dd),
                "lossconfig": {
                    "target": "open_magvit2.taming.modules.losses.vqperceptual.VQLPIPSWithDiscriminator",
                    "params": {"disc_conditional": False, "disc_in_channels": 3, "disc_start": 0},
                },
                "n_embed": n_embed,
                "embed_dim": embed_dim,
                "learning_rate": 1e-4,
                "sample_minimization_weight": 1.0,
                "batch_maximization_weight": 1.0,
                "scheduler_type": "None",
                "use_ema": True,
                "resume_lr": None,
                "lr_drop_epoch": [200, 250],
            },
        },
        "data": {"init_args": {"test": {"params": {"config": {"size": size, "subset": None}}}}},
        "ckpt_path": None,
    }


@torch.no_grad()
def run_model(m, fq, x, suffix):
    """Their forward and decode-from-indices under one weight set."""
    h = m.encoder(x)
    (quant, _, idx), _ = m.quantize(h, return_loss_breakdown=True)
    (_, _, (pre, post)), _ = fq(h, return_loss_breakdown=True)
    b, _, gh, gw = h.shape
    indices = idx.view(b, gh, gw)
    pre, post = pre.view(b, gh, gw), post.view(b, gh, gw)
    recon = m.decoder(quant)
    bhwc = (b, gh, gw, h.shape[1])
    codes = m.decoder(m.quantize.get_codebook_entry(indices.view(b, -1), bhwc, None))
    q_pre = fq.get_codebook_entry(pre.view(b, -1), (b, gh, gw, 9), order="pre")
    q_post = fq.get_codebook_entry(post.view(b, -1), (b, gh, gw, 9), order="post")
    fact = m.decoder(torch.cat([q_pre, q_post], dim=1))
    return {
        f"h_{suffix}": h, f"indices_{suffix}": indices, f"pre_{suffix}": pre,
        f"post_{suffix}": post, f"recon_{suffix}": recon, f"codes_{suffix}": codes,
        f"fact_{suffix}": fact,
    }


def build(dd, seed, share_all):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    m = Container(dd, 2 ** dd["z_channels"], dd["z_channels"], factorized=False).eval()
    randomise(m, gen)
    m.model_ema = LitEma(m)  # as VQModel: the EMA starts as a copy of the weights
    make_ema(m, gen, share_all)
    fq = LFQ(dim=dd["z_channels"], codebook_size=2 ** dd["z_channels"], token_factorization=True,
             factorized_bits=[9, 9]).eval()
    return m, fq


def outputs(m, fq, x):
    raw = run_model(m, fq, x, "raw")
    m.model_ema.store(m.parameters())
    m.model_ema.copy_to(m)  # their ema_scope()
    ema = run_model(m, fq, x, "ema")
    m.model_ema.restore(m.parameters())
    return raw, ema


def write_no_ema(out):
    dd = dict(double_z=False, z_channels=18, resolution=8, in_channels=3, out_ch=3, ch=32,
              ch_mult=[1], num_res_blocks=1)
    m, _ = build(dd, 0, share_all=True)
    sd = OrderedDict((k, v) for k, v in m.state_dict().items() if not k.startswith("model_ema."))
    torch.save(lightning_ckpt(sd), os.path.join(out, "no_ema.ckpt"))


@torch.no_grad()
def time_released(m, x):
    """Their encode (encoder + LFQ) and decode (decoder) of one image, f32 eager, best of 3."""
    import time
    best = {}
    for _ in range(3):
        t = time.perf_counter()
        (q, _, _), _ = m.quantize(m.encoder(x), return_loss_breakdown=True)
        t1 = time.perf_counter()
        m.decoder(q)
        t2 = time.perf_counter()
        best["encode"] = min(best.get("encode", 1e9), t1 - t)
        best["decode"] = min(best.get("decode", 1e9), t2 - t1)
    print(f"PyTorch {torch.__version__} f32 eager, {torch.get_num_threads()} threads, "
          f"{tuple(x.shape)}: encode {best['encode']:.2f} s, decode {best['decode']:.2f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--released", help="write the released-layout model here instead")
    args = ap.parse_args()
    if args.released:
        dd = dict(double_z=False, z_channels=18, resolution=128, in_channels=3, out_ch=3,
                  ch=128, ch_mult=[1, 1, 2, 2, 4], num_res_blocks=4)
        out, size, seeds, share = args.released, 256, range(1), True
        torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    else:
        dd = dict(double_z=False, z_channels=18, resolution=32, in_channels=3, out_ch=3,
                  ch=32, ch_mult=[2, 1], num_res_blocks=1)
        out, size, seeds, share = OUT, 32, range(100), False
    os.makedirs(out, exist_ok=True)
    for seed in seeds:
        m, fq = build(dd, seed, share)
        gen = torch.Generator().manual_seed(1000 + seed)
        x = (torch.rand((1 if args.released else 2, 3, size, size), generator=gen) * 2 - 1)
        x = torch.nn.functional.avg_pool2d(x, 3, 1, 1).clamp(-1, 1)  # a little smoother
        raw, ema = outputs(m, fq, x)
        margin = min(raw["h_raw"].abs().min().item(), ema["h_ema"].abs().min().item())
        if margin > 1e-4 or args.released:
            break
    print(f"seed {seed}, margin {margin:.3g}")
    sd = OrderedDict((k, v) for k, v in m.state_dict().items())
    torch.save(lightning_ckpt(sd), os.path.join(out, "tiny.ckpt" if not args.released else "released.ckpt"))
    name = "tiny.yaml" if not args.released else "released.yaml"
    with open(os.path.join(out, name), "w") as f:
        yaml.safe_dump(yaml_config(dd, 2 ** dd["z_channels"], dd["z_channels"], size), f,
                       sort_keys=False)
    gh = size // 2 ** (len(dd["ch_mult"]) - 1)
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, 2 ** 18, (1, gh, gw := gh), generator=gen)
    m.model_ema.copy_to(m)
    with torch.no_grad():
        q = m.quantize.get_codebook_entry(tokens.view(1, -1), (1, gh, gw, 18), None)
        tokens_dec = m.decoder(q)
    tensors = {"x": x, "tokens": tokens, "tokens_dec": tokens_dec, **raw, **ema}
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out, "io.safetensors"))
    with open(os.path.join(out, "margin.txt"), "w") as f:
        f.write(f"{margin:.6g}\n")
    if not args.released:
        write_no_ema(out)
    else:
        time_released(m, x)
    for p in sorted(os.listdir(out)):
        print(p, os.path.getsize(os.path.join(out, p)))


if __name__ == "__main__":
    main()
