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

With --released DIR: dc-ae-f32c32-sana-1.0's layout at its released size (random weights, not
committed) and diffusers' encode/decode times at 512² (the #[ignore] Rust test reads DIR).
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


def released():
    """dc-ae-f32c32-sana-1.0's layout (diffusers' defaults but SANA's `Conv` / `interpolate`
    blocks and scaling) with random weights, saved to DIR with io.safetensors (x at 512²,
    latent, recon) and diffusers' timings; not committed (~1.3 GB)."""
    import sys
    import time

    out = sys.argv[sys.argv.index("--released") + 1]
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    torch.manual_seed(7)
    cfg = dict(
        encoder_block_types=("ResBlock",) * 3 + ("EfficientViTBlock",) * 3,
        decoder_block_types=("ResBlock",) * 3 + ("EfficientViTBlock",) * 3,
        encoder_layers_per_block=(2, 2, 2, 3, 3, 3),
        decoder_layers_per_block=(3, 3, 3, 3, 3, 3),
        downsample_block_type="Conv",
        upsample_block_type="interpolate",
        decoder_norm_types=("batch_norm",) * 3 + ("rms_norm",) * 3,
        decoder_act_fns=("relu",) * 3 + ("silu",) * 3,
        scaling_factor=0.41407,
    )
    m = randomize(AutoencoderDC(**cfg).eval(), 8)
    m.save_pretrained(out)
    x = image(512, 5)[None]
    with torch.no_grad():
        t = time.time()
        latent = m.encode(x).latent
        t_enc = time.time() - t
        t = time.time()
        recon = m.decode(latent).sample
        t_dec = time.time() - t
    print(f"diffusers AutoencoderDC f32c32, 512x512, {torch.get_num_threads()} threads: "
          f"encode {t_enc:.2f} s, decode {t_dec:.2f} s, latent {tuple(latent.shape)}")
    save_file({"x": x.contiguous(), "latent": latent.contiguous(), "recon": recon.contiguous()},
              os.path.join(out, "io.safetensors"))


if __name__ == "__main__":
    released() if "--released" in __import__("sys").argv else main()
