#!/usr/bin/env python3
"""Builds the tiny VQGAN parity fixtures in tests/fixtures/vqgan/ (needs PyTorch + safetensors).

The network below is a small, self-contained re-implementation of taming-transformers'
`taming/modules/diffusionmodules/model.py` (Encoder, Decoder, ResnetBlock, AttnBlock,
Downsample, Upsample), `taming/modules/vqvae/quantize.py` (VectorQuantizer2, legacy loss)
and `taming/models/vqgan.py` (VQModel: quant_conv / post_quant_conv), with taming's module
names, so `state_dict()` has exactly taming's keys. It is independent of the Rust code.

Weights are random (GroupNorm affine included) and rounded to float16 so that the float16
`.ckpt` and the safetensors file hold the very same values; all computation is float32.
The codebook is drawn from the encoder's own latents (plus noise) so that the indices vary,
and seeds are retried until no latent has a near-tie between its two nearest codes.

Outputs (all small):
  tiny.safetensors     model weights, taming names, float16
  tiny_config.json     our VqConfig JSON
  tiny_model.yaml      the same config in taming's model.yaml layout
  tiny.ckpt            Lightning-style torch.save({"state_dict": ..., "epoch": 3, ...})
                       with extra `loss.*` tensors (one bfloat16, one a strided view)
  tiny_io.safetensors  x (2,3,24,24) float16, z (after quant_conv), indices (int64),
                       reconstruction, loss, and the expected values of the loss.* tensors
  evil.ckpt            a torch zip whose data.pkl calls os.system (must be refused)
  missing_storage.ckpt a torch zip with one storage entry removed
  f16_1024_keys.txt    state-dict names and shapes of the full vqgan_imagenet_f16_1024
                       layout (built on the meta device, no weights), for a layout test
Run: python3 scripts/make_vqgan_fixtures.py
"""

import io
import json
import os
import sys
import types
import zipfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "vqgan")

DDCONFIG = dict(
    double_z=False,
    z_channels=8,
    resolution=32,
    in_channels=3,
    out_ch=3,
    ch=32,
    ch_mult=[1, 1],
    num_res_blocks=1,
    attn_resolutions=[16],  # level 1 of the encoder and decoder, plus the mid blocks
    dropout=0.0,
)
EMBED_DIM = 8
N_EMBED = 32
BETA = 0.25


# ---- taming/modules/diffusionmodules/model.py (the parts VQGAN uses) -------------------
def nonlinearity(x):
    return x * torch.sigmoid(x)


def Normalize(in_channels):
    return nn.GroupNorm(num_groups=32, num_channels=in_channels, eps=1e-6, affine=True)


class Upsample(nn.Module):
    def __init__(self, in_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, in_channels, 3, 1, 1)

    def forward(self, x):
        x = F.interpolate(x, scale_factor=2.0, mode="nearest")
        return self.conv(x)


class Downsample(nn.Module):
    def __init__(self, in_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, in_channels, 3, 2, 0)

    def forward(self, x):
        x = F.pad(x, (0, 1, 0, 1), mode="constant", value=0)
        return self.conv(x)


class ResnetBlock(nn.Module):
    def __init__(self, in_channels, out_channels, dropout):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.norm1 = Normalize(in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, 1, 1)
        self.norm2 = Normalize(out_channels)
        self.dropout = nn.Dropout(dropout)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1)
        if in_channels != out_channels:
            self.nin_shortcut = nn.Conv2d(in_channels, out_channels, 1, 1, 0)

    def forward(self, x):
        h = self.conv1(nonlinearity(self.norm1(x)))
        h = self.conv2(self.dropout(nonlinearity(self.norm2(h))))
        if self.in_channels != self.out_channels:
            x = self.nin_shortcut(x)
        return x + h


class AttnBlock(nn.Module):
    def __init__(self, in_channels):
        super().__init__()
        self.norm = Normalize(in_channels)
        self.q = nn.Conv2d(in_channels, in_channels, 1, 1, 0)
        self.k = nn.Conv2d(in_channels, in_channels, 1, 1, 0)
        self.v = nn.Conv2d(in_channels, in_channels, 1, 1, 0)
        self.proj_out = nn.Conv2d(in_channels, in_channels, 1, 1, 0)

    def forward(self, x):
        h_ = self.norm(x)
        q, k, v = self.q(h_), self.k(h_), self.v(h_)
        b, c, h, w = q.shape
        q = q.reshape(b, c, h * w).permute(0, 2, 1)  # b,hw,c
        k = k.reshape(b, c, h * w)  # b,c,hw
        w_ = torch.bmm(q, k) * (int(c) ** (-0.5))  # b,hw,hw
        w_ = F.softmax(w_, dim=2)
        v = v.reshape(b, c, h * w)
        w_ = w_.permute(0, 2, 1)
        h_ = torch.bmm(v, w_).reshape(b, c, h, w)
        return x + self.proj_out(h_)


class Encoder(nn.Module):
    def __init__(self, *, ch, ch_mult, num_res_blocks, attn_resolutions, dropout, in_channels,
                 resolution, z_channels, double_z, **ignore):
        super().__init__()
        self.num_resolutions = len(ch_mult)
        self.num_res_blocks = num_res_blocks
        self.conv_in = nn.Conv2d(in_channels, ch, 3, 1, 1)
        curr_res = resolution
        in_ch_mult = (1,) + tuple(ch_mult)
        self.down = nn.ModuleList()
        for i_level in range(self.num_resolutions):
            block, attn = nn.ModuleList(), nn.ModuleList()
            block_in, block_out = ch * in_ch_mult[i_level], ch * ch_mult[i_level]
            for _ in range(num_res_blocks):
                block.append(ResnetBlock(block_in, block_out, dropout))
                block_in = block_out
                if curr_res in attn_resolutions:
                    attn.append(AttnBlock(block_in))
            down = nn.Module()
            down.block, down.attn = block, attn
            if i_level != self.num_resolutions - 1:
                down.downsample = Downsample(block_in)
                curr_res = curr_res // 2
            self.down.append(down)
        self.mid = nn.Module()
        self.mid.block_1 = ResnetBlock(block_in, block_in, dropout)
        self.mid.attn_1 = AttnBlock(block_in)
        self.mid.block_2 = ResnetBlock(block_in, block_in, dropout)
        self.norm_out = Normalize(block_in)
        self.conv_out = nn.Conv2d(block_in, 2 * z_channels if double_z else z_channels, 3, 1, 1)

    def forward(self, x):
        hs = [self.conv_in(x)]
        for i_level in range(self.num_resolutions):
            for i_block in range(self.num_res_blocks):
                h = self.down[i_level].block[i_block](hs[-1])
                if len(self.down[i_level].attn) > 0:
                    h = self.down[i_level].attn[i_block](h)
                hs.append(h)
            if i_level != self.num_resolutions - 1:
                hs.append(self.down[i_level].downsample(hs[-1]))
        h = hs[-1]
        h = self.mid.block_2(self.mid.attn_1(self.mid.block_1(h)))
        return self.conv_out(nonlinearity(self.norm_out(h)))


class Decoder(nn.Module):
    def __init__(self, *, ch, out_ch, ch_mult, num_res_blocks, attn_resolutions, dropout,
                 resolution, z_channels, **ignore):
        super().__init__()
        self.num_resolutions = len(ch_mult)
        self.num_res_blocks = num_res_blocks
        block_in = ch * ch_mult[self.num_resolutions - 1]
        curr_res = resolution // 2 ** (self.num_resolutions - 1)
        self.conv_in = nn.Conv2d(z_channels, block_in, 3, 1, 1)
        self.mid = nn.Module()
        self.mid.block_1 = ResnetBlock(block_in, block_in, dropout)
        self.mid.attn_1 = AttnBlock(block_in)
        self.mid.block_2 = ResnetBlock(block_in, block_in, dropout)
        self.up = nn.ModuleList()
        for i_level in reversed(range(self.num_resolutions)):
            block, attn = nn.ModuleList(), nn.ModuleList()
            block_out = ch * ch_mult[i_level]
            for _ in range(num_res_blocks + 1):
                block.append(ResnetBlock(block_in, block_out, dropout))
                block_in = block_out
                if curr_res in attn_resolutions:
                    attn.append(AttnBlock(block_in))
            up = nn.Module()
            up.block, up.attn = block, attn
            if i_level != 0:
                up.upsample = Upsample(block_in)
                curr_res = curr_res * 2
            self.up.insert(0, up)  # prepend to get consistent order
        self.norm_out = Normalize(block_in)
        self.conv_out = nn.Conv2d(block_in, out_ch, 3, 1, 1)

    def forward(self, z):
        h = self.conv_in(z)
        h = self.mid.block_2(self.mid.attn_1(self.mid.block_1(h)))
        for i_level in reversed(range(self.num_resolutions)):
            for i_block in range(self.num_res_blocks + 1):
                h = self.up[i_level].block[i_block](h)
                if len(self.up[i_level].attn) > 0:
                    h = self.up[i_level].attn[i_block](h)
            if i_level != 0:
                h = self.up[i_level].upsample(h)
        return self.conv_out(nonlinearity(self.norm_out(h)))


# ---- taming/modules/vqvae/quantize.py: VectorQuantizer2 (legacy=True) -----------------
class VectorQuantizer2(nn.Module):
    def __init__(self, n_e, e_dim, beta, legacy=True):
        super().__init__()
        self.n_e, self.e_dim, self.beta, self.legacy = n_e, e_dim, beta, legacy
        self.embedding = nn.Embedding(n_e, e_dim)
        self.embedding.weight.data.uniform_(-1.0 / n_e, 1.0 / n_e)

    def distances(self, z):
        z = z.permute(0, 2, 3, 1).contiguous()
        zf = z.view(-1, self.e_dim)
        return (torch.sum(zf**2, dim=1, keepdim=True) + torch.sum(self.embedding.weight**2, dim=1)
                - 2 * torch.einsum("bd,dn->bn", zf, self.embedding.weight.t()))

    def forward(self, z):
        b, c, h, w = z.shape
        zp = z.permute(0, 2, 3, 1).contiguous()
        idx = torch.argmin(self.distances(z), dim=1)
        z_q = self.embedding(idx).view(zp.shape)
        if not self.legacy:
            loss = self.beta * torch.mean((z_q.detach() - zp) ** 2) + torch.mean((z_q - zp.detach()) ** 2)
        else:
            loss = torch.mean((z_q.detach() - zp) ** 2) + self.beta * torch.mean((z_q - zp.detach()) ** 2)
        z_q = zp + (z_q - zp).detach()
        z_q = z_q.permute(0, 3, 1, 2).contiguous()
        return z_q, loss, idx.reshape(b, h, w)  # sane_index_shape


# ---- taming/models/vqgan.py: VQModel (inference part) --------------------------------
class VQModel(nn.Module):
    def __init__(self, ddconfig, n_embed, embed_dim):
        super().__init__()
        self.encoder = Encoder(**ddconfig)
        self.decoder = Decoder(**ddconfig)
        self.quantize = VectorQuantizer2(n_embed, embed_dim, beta=BETA)
        self.quant_conv = nn.Conv2d(ddconfig["z_channels"], embed_dim, 1)
        self.post_quant_conv = nn.Conv2d(embed_dim, ddconfig["z_channels"], 1)

    def encode_latents(self, x):
        return self.quant_conv(self.encoder(x))

    def decode(self, quant):
        return self.decoder(self.post_quant_conv(quant))


def randomise(model, gen):
    """Non-trivial random weights (unit-ish activations), rounded to float16 values."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("quantize."):
                continue
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:  # conv weight (out, in, k, k)
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen) * (1.5 / fan_in) ** 0.5)
            p.copy_(p.half().float())


def build(seed, x):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = VQModel(DDCONFIG, N_EMBED, EMBED_DIM).eval()
    randomise(model, gen)
    with torch.no_grad():
        z = model.encode_latents(x)
        rows = z.permute(0, 2, 3, 1).reshape(-1, EMBED_DIM)
        pick = torch.randperm(rows.shape[0], generator=gen)[:N_EMBED]
        code = rows[pick] + 0.3 * rows.std() * torch.randn(N_EMBED, EMBED_DIM, generator=gen)
        model.quantize.embedding.weight.copy_(code.half().float())
        d = model.quantize.distances(z)
        top2 = torch.topk(d, 2, dim=1, largest=False).values
        gap = (top2[:, 1] - top2[:, 0]).min().item()
    return model, z, gap


def write_torch_zip_with(path, entries):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in entries:
            zf.writestr(name, data)


def main():
    torch.set_grad_enabled(False)
    os.makedirs(OUT, exist_ok=True)
    gen = torch.Generator().manual_seed(0)
    # A smooth pattern plus noise, batch 2, in [-1, 1].
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 24), torch.linspace(-1, 1, 24), indexing="ij")
    base = torch.stack([torch.sin(3 * xx), torch.cos(2 * yy), xx * yy])
    x = torch.stack([base, base.flip(-1)]) + 0.3 * torch.randn(2, 3, 24, 24, generator=gen)
    x = x.clamp(-1, 1).half().float()

    for seed in range(1, 200):
        model, z, gap = build(seed, x)
        if gap > 1e-2:
            break
    else:
        sys.exit("no seed without near-ties")
    zq, loss, idx = model.quantize(z)
    rec = model.decode(zq)
    used = idx.unique().numel()
    print(f"seed {seed}: min distance gap {gap:.4f}, {used}/{N_EMBED} codes used, "
          f"z std {z.std():.3f}, rec std {rec.std():.3f}")

    sd = model.state_dict()  # OrderedDict with _metadata, taming's key names
    save_file({k: v.half().contiguous() for k, v in sd.items()},
              os.path.join(OUT, "tiny.safetensors"), metadata={"format": "pt"})
    cfg = {"ddconfig": DDCONFIG, "embed_dim": EMBED_DIM, "n_embed": N_EMBED, "beta": BETA, "legacy": True}
    with open(os.path.join(OUT, "tiny_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(OUT, "tiny_model.yaml"), "w") as f:
        dd = DDCONFIG
        f.write(
            "model:\n  base_learning_rate: 4.5e-06\n  target: taming.models.vqgan.VQModel\n  params:\n"
            f"    embed_dim: {EMBED_DIM}\n    n_embed: {N_EMBED}\n    ddconfig:\n"
            f"      double_z: False\n      z_channels: {dd['z_channels']}\n"
            f"      resolution: {dd['resolution']}\n      in_channels: 3\n      out_ch: 3\n"
            f"      ch: {dd['ch']}\n      ch_mult: [ {','.join(map(str, dd['ch_mult']))} ]\n"
            f"      num_res_blocks: {dd['num_res_blocks']}\n      attn_resolutions: {dd['attn_resolutions']}\n"
            "      dropout: 0.0\n    lossconfig:\n"
            "      target: taming.modules.losses.vqperceptual.VQLPIPSWithDiscriminator\n"
            "      params:\n        disc_conditional: False\n        disc_in_channels: 3\n"
            "        disc_start: 250001\n        disc_weight: 0.8\n        codebook_weight: 1.0\n")

    # Lightning-style checkpoint: float16 model tensors (same values), training-only extras.
    ckpt_sd = type(sd)((k, v.half()) for k, v in sd.items())
    ckpt_sd._metadata = sd._metadata  # as torch's state_dict(): pickled through BUILD
    base_loss = torch.arange(24, dtype=torch.float32).reshape(4, 6) / 7.0
    ckpt_sd["loss.discriminator.main.0.weight"] = base_loss
    ckpt_sd["loss.discriminator.view"] = base_loss[1:, ::2].t()  # shares storage, strided
    ckpt_sd["loss.logvar"] = torch.tensor([0.5, -1.25], dtype=torch.bfloat16)
    # Old Lightning keys its callbacks dict by the callback *class*.
    mod = types.ModuleType("pytorch_lightning.callbacks.model_checkpoint")
    ModelCheckpoint = type("ModelCheckpoint", (), {"__module__": mod.__name__})
    mod.ModelCheckpoint = ModelCheckpoint
    for parent in ("pytorch_lightning", "pytorch_lightning.callbacks"):
        sys.modules.setdefault(parent, types.ModuleType(parent))
    sys.modules[mod.__name__] = mod
    # Lightning's hyper-parameters are an AttributeDict (a dict subclass, pickled via NEWOBJ).
    parsing = types.ModuleType("pytorch_lightning.utilities.parsing")
    AttributeDict = type("AttributeDict", (dict,), {"__module__": parsing.__name__})
    parsing.AttributeDict = AttributeDict
    sys.modules.setdefault("pytorch_lightning.utilities", types.ModuleType("pytorch_lightning.utilities"))
    sys.modules[parsing.__name__] = parsing
    ckpt = {
        "hyper_parameters": AttributeDict(embed_dim=EMBED_DIM, n_embed=N_EMBED, device=torch.device("cpu")),
        "epoch": 3,
        "global_step": 10,
        "pytorch-lightning_version": "1.0.8",
        "callbacks": {ModelCheckpoint: {"best_model_score": torch.tensor(0.5), "best_model_path": "x.ckpt"}},
        "optimizer_states": [{"state": {0: {"exp_avg": torch.zeros(3)}},
                              "param_groups": [{"lr": 4.5e-6, "betas": (0.5, 0.9), "params": [0, 1]}]}],
        "lr_schedulers": [],
        "state_dict": ckpt_sd,
    }
    torch.save(ckpt, os.path.join(OUT, "tiny.ckpt"))
    # Check that torch reads it back identically.
    back = torch.load(os.path.join(OUT, "tiny.ckpt"), weights_only=False)["state_dict"]
    assert all(torch.equal(back[k].float(), sd[k]) for k in sd)

    save_file({
        "x": x.half().contiguous(),  # float16 values by construction
        "z": z.contiguous(),
        "indices": idx.to(torch.int64).contiguous(),
        "reconstruction": rec.contiguous(),
        "loss": loss.reshape(1),
        "ckpt.loss.discriminator.view": ckpt_sd["loss.discriminator.view"].contiguous(),
        "ckpt.loss.logvar": ckpt_sd["loss.logvar"].float(),
    }, os.path.join(OUT, "tiny_io.safetensors"))

    # A "checkpoint" whose pickle would run os.system("echo pwned") under pickle.load.
    small = io.BytesIO()
    torch.save({"state_dict": {"w": torch.ones(2)}}, small)
    evil_pkl = b"\x80\x02cos\nsystem\nq\x00X\x0a\x00\x00\x00echo pwnedq\x01\x85q\x02Rq\x03."
    with zipfile.ZipFile(io.BytesIO(small.getvalue())) as zin:
        entries = [(n, zin.read(n)) for n in zin.namelist()]
    write_torch_zip_with(os.path.join(OUT, "evil.ckpt"),
                         [(n, evil_pkl if n.endswith("/data.pkl") else d) for n, d in entries])
    # A checkpoint with a storage entry missing.
    small = io.BytesIO()
    torch.save({"state_dict": {"a": torch.ones(2), "b": torch.zeros(3)}}, small)
    with zipfile.ZipFile(io.BytesIO(small.getvalue())) as zin:
        entries = [(n, zin.read(n)) for n in zin.namelist() if not n.endswith("/data/1")]
    write_torch_zip_with(os.path.join(OUT, "missing_storage.ckpt"), entries)

    # The full-size layout (taming's configs/imagenet_vqgan.yaml), names and shapes only.
    full_dd = dict(double_z=False, z_channels=256, resolution=256, in_channels=3, out_ch=3, ch=128,
                   ch_mult=[1, 1, 2, 2, 4], num_res_blocks=2, attn_resolutions=[16], dropout=0.0)
    with torch.device("meta"):
        full = VQModel(full_dd, 1024, 256)
    with open(os.path.join(OUT, "f16_1024_keys.txt"), "w") as f:
        for k, v in full.state_dict().items():
            f.write(f"{k} {','.join(map(str, v.shape))}\n")

    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"wrote {OUT} ({total / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
