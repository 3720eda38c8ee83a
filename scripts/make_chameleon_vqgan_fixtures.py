#!/usr/bin/env python3
"""Builds tests/fixtures/chameleon/vqgan/: Chameleon's original image tokenizer (the
`tokenizer/vqgan.ckpt` + `vqgan.yaml` of the Chameleon / Anole release) with random weights,
built by Chameleon's own module (`chameleon/inference/vqgan.py` of facebookresearch/chameleon,
imported from a snapshot of the repository), so that imgseq's decoding of Chameleon tokens is
checked against Chameleon's (transformers' `ChameleonVQVAE` keeps the encoder only).

  vqgan.ckpt        {"state_dict": ...} as the release stores it (torch.save)
  vqgan.yaml        model.params: embed_dim 8, n_embed 64, ddconfig (ch 32, ch_mult [1, 1],
                    one res block, no attention but the middle one (as the release), z 8, resolution 32)
  io.safetensors    x (2, 3, 32, 32) in [-1, 1]; tokens (2, 16, 16) = encode(x)'s indices;
                    z_q (the quantised latents); recon = decode(get_codebook_entry(tokens)), as the
                    release's ImageTokenizer.pil_from_img_toks decodes

Run: /tmp/hfvenv/bin/python scripts/make_chameleon_vqgan_fixtures.py CHAMELEON_REPO
(CHAMELEON_REPO: a checkout of facebookresearch/chameleon, or a bare snapshot with --git-dir)
"""

import importlib.util
import os
import subprocess
import sys
import tempfile

import torch
import yaml
from safetensors.torch import save_file

from make_kl_fixtures import image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                   "chameleon", "vqgan")

CONFIG = {
    "embed_dim": 8,
    "n_embed": 64,
    "ddconfig": {"double_z": False, "z_channels": 8, "resolution": 32, "in_channels": 3,
                 "out_ch": 3, "ch": 32, "ch_mult": [1, 1], "num_res_blocks": 1,
                 "attn_resolutions": [], "dropout": 0.0},
}


def chameleon_vqgan(repo):
    """Chameleon's vqgan.py, from a checkout or a bare snapshot."""
    path = os.path.join(repo, "chameleon", "inference", "vqgan.py")
    if not os.path.exists(path):
        text = subprocess.run(["git", "--git-dir", repo, "show", "HEAD:chameleon/inference/vqgan.py"],
                              check=True, capture_output=True, text=True).stdout
        path = os.path.join(tempfile.mkdtemp(), "vqgan.py")
        with open(path, "w") as fh:
            fh.write(text)
    spec = importlib.util.spec_from_file_location("chameleon_vqgan", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    mod = chameleon_vqgan(sys.argv[1])
    torch.manual_seed(3)
    m = mod.VQModel(**CONFIG).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p) if name.endswith("weight") else 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn_like(p))
    os.makedirs(OUT, exist_ok=True)
    torch.save({"state_dict": m.state_dict()}, os.path.join(OUT, "vqgan.ckpt"))
    with open(os.path.join(OUT, "vqgan.yaml"), "w") as fh:
        yaml.safe_dump({"model": {"target": "chameleon.inference.vqgan.VQModel", "params": CONFIG}}, fh)
    x = torch.stack([image(32, 4), image(32, 5)])
    with torch.no_grad():
        z_q, _, (_, _, idx) = m.encode(x)
        tokens = idx.reshape(2, 16, 16)
        # As ImageTokenizer.pil_from_img_toks decodes (its VQModel.decode_code is broken).
        entry = m.quantize.get_codebook_entry(tokens.reshape(-1), (2, 16, 16, CONFIG["embed_dim"]))
        recon = m.decode(entry)
    save_file({"x": x.contiguous(), "tokens": tokens.contiguous(), "z_q": z_q.contiguous(),
               "recon": recon.contiguous()}, os.path.join(OUT, "io.safetensors"))
    for fn in sorted(os.listdir(OUT)):
        print(fn, os.path.getsize(os.path.join(OUT, fn)), "bytes")


if __name__ == "__main__":
    main()
