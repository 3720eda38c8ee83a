#!/usr/bin/env python3
"""Builds the DC-AE parity fixtures in tests/fixtures/dcae/ (needs PyTorch, safetensors and
diffusers from PyPI: `pip install diffusers`).

The models are diffusers' own `AutoencoderDC` (`models/autoencoders/autoencoder_dc.py`: the
deep-compression autoencoder of SANA) with random weights and random BatchNorm statistics,
written with `save_pretrained` (config.json + diffusion_pytorch_model.safetensors):

  dc/      pixel_unshuffle / pixel_shuffle blocks, widths (8, 16, 16, 32) (f8), 8 latent
           channels, ResBlocks at the first two levels and EfficientViT blocks (multi-scale
           linear attention, kernels 3 and 5; GLUMBConv) at the last two, attention_head_dim
           16 (so the 4x4 level runs the quadratic branch and the 8x8 level the linear one),
           decoder norms batch_norm, batch_norm, rms_norm, rms_norm with relu, relu, silu, silu
  sana/    as SANA's dc-ae-f32c32-sana-1.0 is built: no layers at the first level (the input
           conv is a stride-2 `Conv` down block), `Conv` down blocks and `interpolate` up
           blocks, widths (8, 16, 32) (f4), 4 latent channels, scaling_factor 0.41407

  io.safetensors   per model: x (2,3,32,32) in [-1, 1]; latent = encode(x).latent (unscaled);
           recon = decode(latent); scaled = latent * scaling_factor (what SANA's pipeline
           feeds its transformer)

Run: /tmp/hfvenv/bin/python scripts/make_dcae_fixtures.py
"""

import os
import shutil

import torch
from diffusers import AutoencoderDC
from safetensors.torch import save_file

from make_kl_fixtures import image, randomize as kl_randomize

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "dcae")

CONFIGS = {
    "dc": dict(
        in_channels=3,
        latent_channels=8,
        attention_head_dim=16,
        encoder_block_types=("ResBlock", "ResBlock", "EfficientViTBlock", "EfficientViTBlock"),
        decoder_block_types=("ResBlock", "ResBlock", "EfficientViTBlock", "EfficientViTBlock"),
        encoder_block_out_channels=(8, 16, 16, 32),
        decoder_block_out_channels=(8, 16, 16, 32),
        encoder_layers_per_block=(1, 1, 1, 1),
        decoder_layers_per_block=(1, 1, 1, 1),
        encoder_qkv_multiscales=((), (), (3,), (5,)),
        decoder_qkv_multiscales=((), (), (3,), (5,)),
        upsample_block_type="pixel_shuffle",
        downsample_block_type="pixel_unshuffle",
        decoder_norm_types=("batch_norm", "batch_norm", "rms_norm", "rms_norm"),
        decoder_act_fns=("relu", "relu", "silu", "silu"),
        scaling_factor=1.0,
    ),
    "sana": dict(
        in_channels=3,
        latent_channels=4,
        attention_head_dim=8,
        encoder_block_types=("ResBlock", "ResBlock", "EfficientViTBlock"),
        decoder_block_types=("ResBlock", "ResBlock", "EfficientViTBlock"),
        encoder_block_out_channels=(8, 16, 32),
        decoder_block_out_channels=(8, 16, 32),
        encoder_layers_per_block=(0, 1, 1),
        decoder_layers_per_block=(0, 1, 1),
        encoder_qkv_multiscales=((), (), (5,)),
        decoder_qkv_multiscales=((), (), (5,)),
        upsample_block_type="interpolate",
        downsample_block_type="Conv",
        decoder_norm_types=("batch_norm", "batch_norm", "rms_norm"),
        decoder_act_fns=("relu", "relu", "silu"),
        scaling_factor=0.41407,
    ),
}


def randomize(m, seed):
    """make_kl_fixtures' randomisation, plus random BatchNorm running statistics."""
    kl_randomize(m, seed)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.copy_(0.1 * torch.randn_like(mod.running_mean))
                mod.running_var.copy_(0.5 + torch.rand_like(mod.running_var))
    return m


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    io = {}
    for seed, (name, cfg) in enumerate(CONFIGS.items()):
        torch.manual_seed(200 + seed)
        m = randomize(AutoencoderDC(**cfg).eval(), 100 + seed)
        m.save_pretrained(os.path.join(OUT, name))
        x = torch.stack([image(32, 1), image(32, 2)])
        with torch.no_grad():
            latent = m.encode(x).latent
            recon = m.decode(latent).sample
        io[f"{name}.x"] = x.contiguous()
        io[f"{name}.latent"] = latent.contiguous()
        io[f"{name}.recon"] = recon.contiguous()
        io[f"{name}.scaled"] = (latent * m.config.scaling_factor).contiguous()
        print(name, "latent", tuple(latent.shape), "recon", tuple(recon.shape))
    save_file(io, os.path.join(OUT, "io.safetensors"))
    for root, _, files in os.walk(OUT):
        for fn in sorted(files):
            p = os.path.join(root, fn)
            size = os.path.getsize(p)
            assert size < 1 << 20, p
            print(f"{os.path.relpath(p, OUT)}: {size} bytes")


if __name__ == "__main__":
    main()
