#!/usr/bin/env python3
"""Builds the AutoencoderKL parity fixtures in tests/fixtures/kl/ (needs PyTorch, numpy,
safetensors and diffusers from PyPI: `pip install diffusers`).

The models are diffusers' own `AutoencoderKL` (`models/autoencoders/autoencoder_kl.py`,
`vae.py`) with random weights, written with `save_pretrained` (config.json +
diffusion_pytorch_model.safetensors):

  sd/          SD-like: block_out_channels (8, 16, 16) (f4), layers_per_block 1, 4 latent
               channels, norm_num_groups 4, quant convs, scaling 0.18215
  flux/        FLUX-like: (8, 16) (f2), 16 latent channels, no quant convs, scaling 0.3611,
               shift 0.1159
  flux2/       FLUX.2-like (`AutoencoderKLFlux2`): block_out_channels (8, 16) (f2) with
               decoder_block_out_channels (8, 8), 8 latent channels, quant convs, the latent
               BatchNorm over 2x2-patchified latents (32 channels) with random running
               statistics, batch_norm_eps 1e-4
  ldm.safetensors   sd/'s weights under the original LDM / taming names (single file, mid
               attention as 1x1 convs), checked by diffusers' own
               `convert_ldm_vae_checkpoint` mapping it back to sd/'s state dict
  io.safetensors    per model: x (2,3,S,S) in [-1, 1]; mean and logvar (clamped) of the
               posterior; recon = decode(mean); for flux also tokens = FluxPipeline.
               _pack_latents(mean) (2x2 patches) and unpacked = _unpack_latents(tokens);
               for sd also the tiled path (tile_sample_min_size 16): x_big (1,3,48,48),
               tiled_mean, tiled_recon (decode of tiled_mean, tiled), untiled_mean;
               for flux2 also latents = Flux2Pipeline's _encode_vae_image path on the
               mean (_patchify_latents, then (z - bn.running_mean) / sqrt(running_var +
               eps)), tokens = Flux2Pipeline._pack_latents(latents), and latents_recon = the
               pipeline's decode path from latents (z * std + mean, _unpatchify_latents,
               vae.decode)

With --released: builds the SD VAE at its released size (block_out_channels 128..512,
random weights, nothing written) and prints the figures the Rust side must reproduce.
Run: /tmp/hfvenv/bin/python scripts/make_kl_fixtures.py
"""

import os
import shutil
import sys

import torch
from diffusers import AutoencoderKL, AutoencoderKLFlux2, Flux2Pipeline, FluxPipeline
from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "kl")

CONFIGS = {
    "sd": dict(
        block_out_channels=(8, 16, 16),
        down_block_types=("DownEncoderBlock2D",) * 3,
        up_block_types=("UpDecoderBlock2D",) * 3,
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        sample_size=32,
        scaling_factor=0.18215,
    ),
    "flux": dict(
        block_out_channels=(8, 16),
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        layers_per_block=1,
        latent_channels=16,
        norm_num_groups=4,
        sample_size=16,
        scaling_factor=0.3611,
        shift_factor=0.1159,
        use_quant_conv=False,
        use_post_quant_conv=False,
    ),
    "flux2": dict(
        block_out_channels=(8, 16),
        decoder_block_out_channels=(8, 8),
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        layers_per_block=1,
        latent_channels=8,
        norm_num_groups=4,
        sample_size=16,
    ),
}


def image(size, seed):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    a = torch.stack([torch.sin(xx / 3.0) * torch.cos(yy / 4.0), torch.cos((xx + yy) / 5.0), (xx - yy) / size])
    return (a + 0.3 * torch.randn(a.shape, generator=g)).clamp(-1, 1).float()


def randomize(m, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p) if name.endswith("weight") else 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn_like(p))
    return m


def to_ldm(sd, levels):
    """diffusers AutoencoderKL names -> the original LDM names (mid attention as 1x1 convs)."""
    out = {}
    for k, v in sd.items():
        p = k.split(".")
        if p[1] == "down_blocks":
            i = p[2]
            if p[3] == "resnets":
                rest = [("nin_shortcut" if s == "conv_shortcut" else s) for s in p[5:]]
                n = [p[0], "down", i, "block", p[4]] + rest
            else:  # downsamplers.0.conv
                n = [p[0], "down", i, "downsample"] + p[5:]
        elif p[1] == "up_blocks":
            i = str(levels - 1 - int(p[2]))
            if p[3] == "resnets":
                rest = [("nin_shortcut" if s == "conv_shortcut" else s) for s in p[5:]]
                n = [p[0], "up", i, "block", p[4]] + rest
            else:
                n = [p[0], "up", i, "upsample"] + p[5:]
        elif p[1] == "mid_block":
            if p[2] == "resnets":
                rest = [("nin_shortcut" if s == "conv_shortcut" else s) for s in p[4:]]
                n = [p[0], "mid", "block_1" if p[3] == "0" else "block_2"] + rest
            else:
                layer = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out": "proj_out"}[p[4]]
                tail = p[6:] if p[4] == "to_out" else p[5:]
                n = [p[0], "mid", "attn_1", layer] + tail
                if layer != "norm" and v.dim() == 2:
                    v = v[:, :, None, None]
        elif p[1] == "conv_norm_out":
            n = [p[0], "norm_out"] + p[2:]
        else:
            n = p
        out[".".join(n)] = v.contiguous()
    return out


def posterior(m, x):
    with torch.no_grad():
        d = m.encode(x).latent_dist
    return d.mean.contiguous(), d.logvar.contiguous()


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    io = {}
    for seed, (name, cfg) in enumerate(CONFIGS.items()):
        cls = AutoencoderKLFlux2 if name == "flux2" else AutoencoderKL
        m = randomize(cls(**cfg).eval(), 100 + seed)
        if name == "flux2":
            g = torch.Generator().manual_seed(11)
            n = m.bn.running_mean.numel()
            m.bn.running_mean.copy_(0.3 * torch.randn(n, generator=g))
            m.bn.running_var.copy_(0.5 + torch.rand(n, generator=g))
        m.save_pretrained(os.path.join(OUT, name))
        s = cfg["sample_size"]
        x = torch.stack([image(s, 1), image(s, 2)])
        mean, logvar = posterior(m, x)
        with torch.no_grad():
            recon = m.decode(mean).sample
        io[f"{name}.x"] = x.contiguous()
        io[f"{name}.mean"] = mean
        io[f"{name}.logvar"] = logvar
        io[f"{name}.recon"] = recon.contiguous()
        b, c, h, w = mean.shape
        if name == "flux":
            tokens = FluxPipeline._pack_latents(mean, b, c, h, w)
            f = 2 ** (len(cfg["block_out_channels"]) - 1)
            io[f"{name}.tokens"] = tokens.contiguous()
            io[f"{name}.unpacked"] = FluxPipeline._unpack_latents(tokens, h * f, w * f, f).contiguous()
            assert torch.equal(io[f"{name}.unpacked"], mean)
        if name == "flux2":
            z = Flux2Pipeline._patchify_latents(mean)
            bn_mean = m.bn.running_mean.view(1, -1, 1, 1)
            bn_std = torch.sqrt(m.bn.running_var.view(1, -1, 1, 1) + m.config.batch_norm_eps)
            latents = ((z - bn_mean) / bn_std).contiguous()
            io[f"{name}.latents"] = latents
            io[f"{name}.tokens"] = Flux2Pipeline._pack_latents(latents).contiguous()
            back = Flux2Pipeline._unpatchify_latents(latents * bn_std + bn_mean)
            with torch.no_grad():
                io[f"{name}.latents_recon"] = m.decode(back).sample.contiguous()
        if name == "sd":
            levels = len(cfg["block_out_channels"])
            ldm = to_ldm(m.state_dict(), levels)
            back = convert_ldm_vae_checkpoint(ldm, dict(m.config))
            sd = m.state_dict()
            assert sorted(back) == sorted(sd), set(back) ^ set(sd)
            assert all(torch.equal(back[k].reshape(sd[k].shape), sd[k]) for k in sd)
            save_file(ldm, os.path.join(OUT, "ldm.safetensors"))
            big = image(48, 3)[None]
            io["sd.x_big"] = big.contiguous()
            io["sd.untiled_mean"] = posterior(m, big)[0]
            m.enable_tiling()
            m.tile_sample_min_size = 16
            m.tile_latent_min_size = 16 // 2 ** (levels - 1)
            tiled_mean, _ = posterior(m, big)
            with torch.no_grad():
                tiled_recon = m.decode(tiled_mean).sample
            io["sd.tiled_mean"] = tiled_mean
            io["sd.tiled_recon"] = tiled_recon.contiguous()
    save_file(io, os.path.join(OUT, "io.safetensors"))
    for root, _, files in os.walk(OUT):
        for fn in sorted(files):
            p = os.path.join(root, fn)
            size = os.path.getsize(p)
            assert size < 2 << 20, p
            print(f"{os.path.relpath(p, OUT)}: {size} bytes")


def released():
    """The SD VAE at its released size, random weights: what Rust must match (not written)."""
    import time
    out = sys.argv[sys.argv.index("--released") + 1]
    os.makedirs(out, exist_ok=True)
    cfg = dict(block_out_channels=(128, 256, 512, 512), down_block_types=("DownEncoderBlock2D",) * 4,
               up_block_types=("UpDecoderBlock2D",) * 4, layers_per_block=2, latent_channels=4,
               sample_size=512, scaling_factor=0.18215)
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    m = randomize(AutoencoderKL(**cfg).eval(), 7)
    m.save_pretrained(out)
    x = image(256, 5)[None]
    t = time.time()
    mean, logvar = posterior(m, x)
    with torch.no_grad():
        recon = m.decode(mean).sample
    print(f"released SD VAE, 256x256: encode+decode {time.time() - t:.1f} s")
    save_file({"x": x.contiguous(), "mean": mean, "recon": recon.contiguous()}, os.path.join(out, "io.safetensors"))
    print(f"wrote {out}")


if __name__ == "__main__":
    released() if "--released" in sys.argv else main()
