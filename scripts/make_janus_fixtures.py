#!/usr/bin/env python3
"""Builds the Janus VQ parity fixtures in tests/fixtures/janus/ (needs PyTorch, numpy,
Pillow, safetensors and transformers >= 5, whose `models/janus` holds `JanusVQVAE`).

The model is transformers' own `JanusVQVAE(JanusVQVAEConfig(...))` with random weights and a
small config (`base_channels` 32, `channel_multiplier` [1, 1, 2], one res block, 64 codes of
8 values, 16 latent channels), saved with `save_pretrained` (config.json +
model.safetensors). The codebook is drawn from the encoder's own latents so that the indices
vary; seeds are retried until no latent has a near-tie between its two nearest codes under
either search:

* the original Janus / LlamaGen `VectorQuantizer(l2_norm=True)`: z and the codebook
  l2-normalised, argmin of the squared distance (written out below);
* transformers' `JanusVQVAEVectorQuantizer.forward`: the same argmin over the raw,
  un-normalised z and codebook.

Both decode with the l2-normalised entry (`get_codebook_entry`), through `JanusVQVAE.decode`.
The preprocessing is transformers' `JanusImageProcessorPil` (longest side resized to the size
with Pillow's bicubic, padded to a square with the mean colour, then (x/255 − 0.5)/0.5).

Outputs:
  model.safetensors, config.json   JanusVQVAE.save_pretrained (weights rounded to float16
                                   values; the safetensors re-saved as float16)
  full_config.json                 JanusConfig.save_pretrained of a tiny full Janus model
                                   whose `vq_config` is this one
  full_prefix.txt                  the prefix of the VQ tensors in the full model's state dict
  photo.png                        a 300x211 input image
  io.safetensors                   square (32,32,3) uint8 after resize + pad, x (1,3,32,32),
                                   z (after quant_conv), indices_l2 / indices_hf (1,8,8)
                                   int64, recon_l2 / recon_hf (decode of each)
  margin.txt                       smallest gap between nearest and second-nearest distance
                                   (l2 search, raw search)
Run: /tmp/hfvenv/bin/python scripts/make_janus_fixtures.py
"""

import json
import os
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import JanusConfig, JanusForConditionalGeneration, JanusVQVAE, JanusVQVAEConfig
from transformers.models.janus.image_processing_pil_janus import JanusImageProcessorPil

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "janus")
SIZE = 32


def vq_config():
    return JanusVQVAEConfig(embed_dim=8, num_embeddings=64, latent_channels=16, base_channels=32,
                            channel_multiplier=[1, 1, 2], num_res_blocks=1, num_patches=8)


def photo():
    """A smooth, colourful 300x211 image with some edges."""
    h, w = 211, 300
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 128 + 100 * np.sin(xx / 17.0) * np.cos(yy / 23.0)
    g = 128 + 90 * np.cos((xx + yy) / 31.0)
    b = np.where((xx - 150) ** 2 + (yy - 100) ** 2 < 60 ** 2, 230.0, 40.0 + yy / 3)
    return Image.fromarray(np.clip(np.stack([r, g, b], -1), 0, 255).astype(np.uint8))


def distances(zf, emb):
    return (zf ** 2).sum(1, keepdim=True) + (emb ** 2).sum(1) - 2 * zf @ emb.t()


def l2_indices(z, emb):
    """LlamaGen's / the original Janus `VectorQuantizer` with `l2_norm`."""
    zf = F.normalize(z.permute(0, 2, 3, 1).reshape(-1, emb.shape[1]), dim=-1)
    d = distances(zf, F.normalize(emb, dim=-1))
    return d.argmin(1), d


def margin(d):
    top2 = torch.topk(d, 2, dim=1, largest=False).values
    return float((top2[:, 1] - top2[:, 0]).min())


def preprocess(img):
    proc = JanusImageProcessorPil(size={"height": SIZE, "width": SIZE}, image_mean=[0.5] * 3,
                                  image_std=[0.5] * 3)
    x = torch.from_numpy(np.asarray(proc(img, return_tensors="np")["pixel_values"]))
    # The 8-bit square before the rescale: x = (v/255 − 0.5)/0.5 ⇒ v = (x + 1)·127.5.
    sq = ((x[0] + 1) * 127.5).round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0)
    back = (sq.permute(2, 0, 1).float() / 255 - 0.5) / 0.5
    assert torch.allclose(back, x[0], atol=1e-6), "not an 8-bit picture"
    return x.float().contiguous(), sq.contiguous()


def main():
    os.makedirs(OUT, exist_ok=True)
    img = photo()
    x, square = preprocess(img)
    cfg = vq_config()
    for seed in range(300):
        torch.manual_seed(seed)
        model = JanusVQVAE(cfg).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.copy_(1.0 + 0.2 * torch.randn_like(p) if name.endswith("weight") else 0.1 * torch.randn_like(p))
            z = model.quant_conv(model.encoder(x))
            zf = z.permute(0, 2, 3, 1).reshape(-1, cfg.embed_dim)
            pick = F.normalize(zf, dim=-1)[torch.randperm(zf.shape[0])[: cfg.num_embeddings]]
            # Entries of varied length, so that the raw and the normalised searches differ.
            scale = 0.5 + torch.rand(pick.shape[0], 1)
            model.quantize.embedding.weight.copy_((pick + 0.15 * torch.randn_like(pick)) * scale)
            for p in model.parameters():
                p.copy_(p.half().float())
            enc = model.encode(x)
            z = model.quant_conv(model.encoder(x))
            emb = model.quantize.embedding.weight
            idx_l2, d_l2 = l2_indices(z, emb)
            idx_hf = enc.image_tokens
            d_hf = distances(z.permute(0, 2, 3, 1).reshape(-1, cfg.embed_dim), emb)
            m_l2, m_hf = margin(d_l2), margin(d_hf)
            used = len(torch.unique(idx_l2))
            differ = int((idx_l2 != idx_hf).sum())
        if m_l2 > 2e-4 and m_hf > 2e-4 and used >= 12 and differ >= 4:
            break
    else:
        raise SystemExit("no seed without near-ties")
    print(f"seed {seed}: margins {m_l2:.2e} / {m_hf:.2e}, {used} codes, {differ} indices differ")
    n = cfg.num_patches
    with torch.no_grad():
        recon_l2 = model.decode(idx_l2.reshape(1, -1))
        recon_hf = model.decode(idx_hf.reshape(1, -1))
        # transformers' forward = encode (raw search) + decode (normalised entries).
        fwd = model(x).decoded_pixel_values
        assert torch.equal(fwd, recon_hf)
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        with open(os.path.join(d, "config.json"), "rb") as f, open(os.path.join(OUT, "config.json"), "wb") as g:
            g.write(f.read())
        # Stored as float16 (the values are float16-exact) to keep the file small.
        st = load_file(os.path.join(d, "model.safetensors"))
        save_file({k: v.half() for k, v in st.items()}, os.path.join(OUT, "model.safetensors"),
                  metadata={"format": "pt"})
    # A full Janus model: where its VQ tensors live and what its config.json looks like.
    full_cfg = JanusConfig(
        text_config={"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
                     "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
                     "vocab_size": 128},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "image_size": 32, "patch_size": 4},
        vq_config=cfg.to_dict(),
    )
    full = JanusForConditionalGeneration(full_cfg)
    keys = [k for k in full.state_dict() if k.endswith("quantize.embedding.weight")]
    assert len(keys) == 1, keys
    with open(os.path.join(OUT, "full_prefix.txt"), "w") as f:
        f.write(keys[0][: -len("quantize.embedding.weight")] + "\n")
    with tempfile.TemporaryDirectory() as d:
        full_cfg.save_pretrained(d)
        with open(os.path.join(d, "config.json")) as f:
            full_json = json.load(f)
    with open(os.path.join(OUT, "full_config.json"), "w") as f:
        json.dump(full_json, f, indent=2)
        f.write("\n")
    img.save(os.path.join(OUT, "photo.png"))
    save_file(
        {
            "square": square,
            "x": x,
            "z": z.contiguous(),
            "indices_l2": idx_l2.reshape(1, n, n).long().contiguous(),
            "indices_hf": idx_hf.reshape(1, n, n).long().contiguous(),
            "recon_l2": recon_l2.contiguous(),
            "recon_hf": recon_hf.contiguous(),
        },
        os.path.join(OUT, "io.safetensors"),
    )
    with open(os.path.join(OUT, "margin.txt"), "w") as f:
        f.write(f"{m_l2:.6e} {m_hf:.6e}\n")
    for name in sorted(os.listdir(OUT)):
        print(f"{name}: {os.path.getsize(os.path.join(OUT, name))} bytes")


if __name__ == "__main__":
    main()
