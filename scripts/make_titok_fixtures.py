#!/usr/bin/env python3
"""Builds the TiTok and MaskGIT-VQGAN parity fixtures (tests/fixtures/titok/, tests/fixtures/maskgit/)
with bytedance/1d-tokenizer's own modules (needs PyTorch, einops, omegaconf, huggingface_hub,
safetensors).

The modules are read from a snapshot of github.com/bytedance/1d-tokenizer (a git directory:
TITOK_REPO, default /work/.mirror/bytedance+1d-tokenizer/repo; or a checkout) and written to a
temporary folder, with these changes only, so that the models stay small:
  - modeling/modules/__init__.py is left empty (upstream's imports the training losses);
  - `accelerate.utils.operations.gather` (used by the quantizer's training-only clustering) is a
    stand-in that raises;
  - blocks.py's size tables gain a "tiny" size (width 32, 2 layers, 2 heads) beside
    small/base/large, and the legacy decoder's 1024 output channels (MaskGIT-VQGAN's codebook) are
    PIXEL_CODES;
  - titok.py's two hard-coded MaskGIT-VQGAN configs (PretrainedTokenizer's and TiTok's pixel
    decoder) and pixel codebooks (1024 × 256) are PIXEL_CONF and PIXEL_CODES × PIXEL_DIM.

Outputs:
  maskgit/maskgit-vqgan-imagenet-f16-256.bin  the released layout (a plain state dict of
        `encoder.*`, `decoder.*`, `quantize.embedding.weight`, what `PretrainedTokenizer` loads
        strictly), weights rounded to float16 and stored so; the config: hidden_channels 32,
        channel_mult [2, 1] (every block changes its width once, so `nin_shortcut` runs),
        num_res_blocks 1, z_channels 8, 64 codes (released: 128, [1, 1, 2, 2, 4], 2, 256, 1024)
  maskgit/io.safetensors  x (2,3,32,32) in [0, 1]; z (2,8,16,16) = encoder(x); tokens (2,256)
        int64 = PretrainedTokenizer.encode(x); decoded (2,3,32,32) = decode(tokens) (clamped
        to [0, 1] as upstream)
  titok/l/  TiTok.save_pretrained (config.json + model.safetensors, float16) of the VQ variant
        with the MaskGIT-VQGAN pixel decoder (`finetune_decoder` true, `is_legacy` true: the
        TiTok-L-32 / B-64 / S-128 layout) at crop_size 32, vit_enc_patch_size 8 (4×4 patches),
        vit_dec_patch_size 2 (16×16 grid for the pixel decoder), "tiny" encoder and decoder,
        8 latent tokens, token_size 4, 32 codes, use_l2_norm true; pixel decoder
        hidden_channels 32, channel_mult [1, 1], num_res_blocks 1, z_channels 8, 64 codes
  titok/l/io.safetensors  x (2,3,32,32) in [0, 1]; z (2,4,1,8) = encoder(x, latent_tokens)
        (before the quantizer); tokens (2,1,8) int64 = encode(x)[1]["min_encoding_indices"];
        decoded (2,3,32,32) = decode_tokens(tokens) (upstream does not clamp it)
  titok/vq8k/  the same for the non-legacy VQ variant that predicts pixels directly
        (`finetune_decoder` false, `is_legacy` false, use_l2_norm false: the BL-64 / BL-128 /
        SL-256 VQ8k layout), vit_dec_patch_size 8
  */margin.txt  smallest relative gap between the nearest and second-nearest code

Seeds are retried until no latent has a near-tie between its two nearest codes (relative gap
under 1e-4). Run: /tmp/hfvenv/bin/python scripts/make_titok_fixtures.py
(written with bytedance/1d-tokenizer at 942a96f, torch 2.x, omegaconf 2.4)
"""

import os
import re
import subprocess
import sys
import tempfile
import types

import torch
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
REPO = os.environ.get("TITOK_REPO", "/work/.mirror/bytedance+1d-tokenizer/repo")
FILES = ["modeling/__init__.py", "modeling/titok.py", "modeling/modules/base_model.py",
         "modeling/modules/blocks.py", "modeling/modules/maskgit_vqgan.py",
         "modeling/quantizer/__init__.py", "modeling/quantizer/quantizer.py"]
PIXEL_CODES, PIXEL_DIM = 64, 8
MASKGIT_CONF = {"channel_mult": [2, 1], "num_resolutions": 2, "dropout": 0.0,
                "hidden_channels": 32, "num_channels": 3, "num_res_blocks": 1,
                "resolution": 32, "z_channels": PIXEL_DIM}
TITOK_PIXEL_CONF = dict(MASKGIT_CONF, channel_mult=[1, 1])


def read(path):
    if os.path.isdir(os.path.join(REPO, "modeling")):
        with open(os.path.join(REPO, path)) as f:
            return f.read()
    return subprocess.run(["git", "--git-dir", REPO, "show", f"HEAD:{path}"], check=True,
                          capture_output=True, text=True).stdout


def replace(src, old, new, count):
    n = src.count(old)
    if n != count:
        raise SystemExit(f"expected {count} of {old!r} in the upstream source, found {n}")
    return src.replace(old, new)


def extract(tmp):
    for f in FILES:
        src = read(f)
        if f.endswith("blocks.py"):
            src = replace(src, "self.width = {", 'self.width = {"tiny": 32, ', 2)
            src = replace(src, "self.num_layers = {", 'self.num_layers = {"tiny": 2, ', 2)
            src = replace(src, "self.num_heads = {", 'self.num_heads = {"tiny": 2, ', 2)
            src = replace(src, "nn.Conv2d(2 * self.width, 1024,",
                          "nn.Conv2d(2 * self.width, PIXEL_CODES,", 1)
            src = "PIXEL_CODES = None\n" + src
        if f.endswith("titok.py"):
            src, n = re.subn(r'OmegaConf\.create\(\s*\{"channel_mult".*?"z_channels": 256\}\)',
                             "OmegaConf.create(PIXEL_CONF)", src, flags=re.S)
            assert n == 2, n
            src = replace(src, "num_embeddings=1024, embedding_dim=256",
                          "num_embeddings=PIXEL_CODES, embedding_dim=PIXEL_DIM", 2)
            src = src.replace("import json\n", "import json\nPIXEL_CONF = PIXEL_CODES = PIXEL_DIM = None\n", 1)
        path = os.path.join(tmp, f)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(src)
    open(os.path.join(tmp, "modeling/modules/__init__.py"), "w").close()
    acc = types.ModuleType("accelerate")
    utils = types.ModuleType("accelerate.utils")
    ops = types.ModuleType("accelerate.utils.operations")

    def gather(_):
        raise RuntimeError("training only")

    ops.gather = gather
    sys.modules.update({"accelerate": acc, "accelerate.utils": utils,
                        "accelerate.utils.operations": ops})
    sys.path.insert(0, tmp)
    import modeling.modules.blocks as blocks
    import modeling.titok as titok
    blocks.PIXEL_CODES = PIXEL_CODES
    titok.PIXEL_CODES, titok.PIXEL_DIM = PIXEL_CODES, PIXEL_DIM
    return titok


def randomise(m, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if ("norm" in name or "ln_" in name) and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn_like(p))
            elif p.dim() > 1 and "embedding" not in name and "token" not in name:
                torch.nn.init.normal_(p, std=(1.0 / p[0].numel()) ** 0.5)
            else:
                p.copy_(0.5 * torch.randn_like(p))


def half_round(m):
    with torch.no_grad():
        for t in m.state_dict().values():
            if t.is_floating_point():
                t.copy_(t.half().float())


def gap(z, e):
    """Smallest relative gap between the two nearest codes of rows z among rows e."""
    z, e = z.double(), e.double()
    d = z.square().sum(1, keepdim=True) + e.square().sum(1) - 2 * z @ e.T
    two = d.topk(2, dim=1, largest=False).values
    return ((two[:, 1] - two[:, 0]) / two[:, 1].abs().clamp_min(1e-12)).min().item()


# --- MaskGIT-VQGAN ----------------------------------------------------------------------------

class Vqgan(torch.nn.Module):
    """The modules PretrainedTokenizer holds, under its names, to make its weights file."""

    def __init__(self, titok):
        super().__init__()
        from omegaconf import OmegaConf
        from modeling.modules import maskgit_vqgan as mv
        conf = OmegaConf.create(MASKGIT_CONF)
        self.encoder = mv.Encoder(conf)
        self.decoder = mv.Decoder(conf)
        self.quantize = mv.VectorQuantizer(PIXEL_CODES, PIXEL_DIM, 0.25)


def maskgit(titok, x, out):
    titok.PIXEL_CONF = MASKGIT_CONF
    path = os.path.join(out, "maskgit-vqgan-imagenet-f16-256.bin")
    for seed in range(200):
        m = Vqgan(titok).eval()
        randomise(m, seed)
        with torch.no_grad():
            z = m.encoder(x)
            pool = z.permute(0, 2, 3, 1).reshape(-1, PIXEL_DIM)
            pick = torch.randperm(pool.shape[0])[:PIXEL_CODES]
            m.quantize.embedding.weight.copy_(pool[pick] * (0.7 + 0.6 * torch.rand(PIXEL_CODES, 1)))
            y = m.decoder(m.quantize(z)[0])
            s = 0.3 / y.std()
            m.decoder.conv_out.weight.mul_(s)
            m.decoder.conv_out.bias.fill_(0.5)
            half_round(m)
            margin = gap(m.encoder(x).permute(0, 2, 3, 1).reshape(-1, PIXEL_DIM),
                         m.quantize.embedding.weight)
        if margin > 1e-4:
            break
    else:
        raise SystemExit("no seed without near-ties")
    os.makedirs(out, exist_ok=True)
    torch.save({k: v.half() for k, v in m.state_dict().items()}, path)
    tok = titok.PretrainedTokenizer(path)  # loads strictly: the layout is the released one
    with torch.no_grad():
        z = tok.encoder(x)
        tokens = tok.encode(x)
        decoded = tok.decode(tokens)
    print(f"maskgit: seed {seed}, margin {margin:.3g}, tokens {tuple(tokens.shape)} distinct "
          f"{tokens.unique().numel()}, decoded {decoded.min().item():.3f}..{decoded.max().item():.3f}")
    save_file({"x": x.contiguous(), "z": z.contiguous(), "tokens": tokens.contiguous(),
               "decoded": decoded.contiguous()}, os.path.join(out, "io.safetensors"))
    with open(os.path.join(out, "margin.txt"), "w") as fh:
        fh.write(f"{margin:.6g}\n")


# --- TiTok ------------------------------------------------------------------------------------

def titok_config(legacy):
    vq = {"codebook_size": 32, "token_size": 4, "use_l2_norm": legacy, "commitment_cost": 0.25,
          "vit_enc_model_size": "tiny", "vit_dec_model_size": "tiny", "vit_enc_patch_size": 8,
          "vit_dec_patch_size": 2 if legacy else 8, "num_latent_tokens": 8,
          "finetune_decoder": legacy}
    if not legacy:
        vq["is_legacy"] = False
    return {"model": {"vq_model": vq}, "dataset": {"preprocessing": {"crop_size": 32}}}


def titok_model(titok, x, out, legacy):
    titok.PIXEL_CONF = TITOK_PIXEL_CONF
    for seed in range(200):
        torch.manual_seed(seed)
        m = titok.TiTok(titok_config(legacy)).eval()
        randomise(m, seed)
        with torch.no_grad():
            z = m.encoder(pixel_values=x, latent_tokens=m.latent_tokens)
            y = m.decode_tokens(m.encode(x)[1]["min_encoding_indices"])
            last = m.pixel_decoder.conv_out if legacy else m.decoder.conv_out
            last.weight.mul_(0.3 / y.std())
            last.bias.fill_(0.5)
            half_round(m)
            z = m.encoder(pixel_values=x, latent_tokens=m.latent_tokens)
            rows = z.permute(0, 2, 3, 1).reshape(-1, z.shape[1])
            e = m.quantize.embedding.weight
            if legacy:
                rows = torch.nn.functional.normalize(rows, dim=-1)
                e = torch.nn.functional.normalize(e, dim=-1)
            margin = gap(rows, e)
        if margin > 1e-4:
            break
    else:
        raise SystemExit("no seed without near-ties")
    with torch.no_grad():
        tokens = m.encode(x)[1]["min_encoding_indices"]
        decoded = m.decode_tokens(tokens)
    print(f"titok {'legacy' if legacy else 'vq8k'}: seed {seed}, margin {margin:.3g}, tokens "
          f"{tokens.tolist()}, decoded {decoded.min().item():.3f}..{decoded.max().item():.3f}")
    m.to(torch.float16).save_pretrained(out)
    save_file({"x": x.contiguous(), "z": z.contiguous(), "tokens": tokens.contiguous(),
               "decoded": decoded.contiguous()}, os.path.join(out, "io.safetensors"))
    with open(os.path.join(out, "margin.txt"), "w") as fh:
        fh.write(f"{margin:.6g}\n")


def main():
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(5)
    x = torch.rand(2, 3, 32, 32, generator=g)
    with tempfile.TemporaryDirectory() as tmp:
        titok = extract(tmp)
        maskgit(titok, x, os.path.join(ROOT, "tests", "fixtures", "maskgit"))
        titok_model(titok, x, os.path.join(ROOT, "tests", "fixtures", "titok", "l"), True)
        titok_model(titok, x, os.path.join(ROOT, "tests", "fixtures", "titok", "vq8k"), False)


if __name__ == "__main__":
    main()
