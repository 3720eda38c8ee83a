#!/usr/bin/env python3
"""imgseq vs PyTorch eager, side by side, on identical weights, inputs and thread count.

    cargo build --release -p imgseq --examples
    cargo build --release -p imgseq-vit --example vit_train_bench      # workload b
    python3 scripts/bench.py [--threads 2] [--quick] [--markdown BENCHMARKS.md]

Workloads (issue #4):
  a  taming vqgan_imagenet_f16_1024 architecture (random weights), encode -> 576 indices ->
     decode, 384x384, batch 1
  b  ViT training step, batch 128 (forward + backward + AdamW): the shipped model's config
     (weights/vit-fashion-mnist: 1x32x32, 4 layers of 48, 4 heads, MLP 192) and an 8-layer
     variant, HF-initialised; imgseq on both engines (fused, autograd) vs one PyTorch run
  c  seed ViT inference, batch 256
  d  conv 3x3 128->128 at 96x96, batch 1
  a bf16: workload a in reduced precision: imgseq --precision bf16 (bf16 weights packed at load,
     vdpbf16ps or AMX tiles with f32 sums; the encoder f32, so the tokens are f32's) against
     PyTorch `torch.autocast("cpu", torch.bfloat16)` with channels_last model and input (oneDNN;
     AMX where the CPU has it); then imgseq with --bf16-encoder (the encoder's convs in bf16
     too, the user's opt-in) against the same, with its token agreement with f32
  f  SD VAE (diffusers AutoencoderKL, released config, random weights): encode 512² → posterior
     mean, and decode 64² latents → 512², batch 1, one pass each (no warm-up), against
     diffusers' AutoencoderKL f32 eager; peak RSS per process
  g  workload a at batch 4 (f32 against PyTorch eager), one pass each; also prints imgseq's time
     per image against batch 1 (row a) — batching must not cost more per image
  i  Chameleon's VQ (transformers `ChameleonVQVAE`, released config, random weights, saved with
     `save_pretrained`): encode 512² → 1,024 tokens, batch 1, one pass after a warm-up, against
     `ChameleonVQVAE.encode` f32 eager (transformers keeps no decoder)
  h  VAR's VQVAE (FoundationVision/VAR `VQVAE`, the released `vae_ch160v4096z32` layout, random
     weights, saved as its plain state dict): encode 256² → 680 multi-scale codes → decode, batch
     1 and 8, one pass each (batch 1 after a warm-up), against VAR's own code f32 eager (needs
     `--var CHECKOUT` of FoundationVision/VAR, or $VAR_ROOT); prints the codes' agreement

  j  TiTok-L-32 (bytedance/1d-tokenizer `TiTok`, the released `titok_l32` config with its
     MaskGIT-VQGAN pixel decoder, random weights, saved with `save_pretrained`): encode 256² → 32
     tokens and decode them, batch 1 and 8, one pass each (batch 1 after a warm-up), against the
     repository's own code f32 eager (needs a snapshot of bytedance/1d-tokenizer: `--titok`, or
     $TITOK_REPO, read as scripts/make_titok_fixtures.py reads it); prints the tokens' agreement
  k  Cosmos DI16x16 (NVIDIA Cosmos-Tokenizer `DiscreteImageTokenizer`, the released
     `discrete_image` config, upstream's random init, traced and saved as `encoder.jit` /
     `decoder.jit` in f32 as the release exports them): encode 256² → 256 FSQ codes and decode
     them, batch 1, one pass after a warm-up, against the family's own code f32 eager (needs a
     checkout of NVIDIA/Cosmos-Tokenizer: `--cosmos`, or $COSMOS_REPO); prints the codes'
     agreement
  l  DC-AE (diffusers `AutoencoderDC`, the released dc-ae-f32c32-sana-1.0 layout, random
     weights): encode 512² → (32, 16, 16) latent, and decode a latent → 512², batch 1, one pass
     each (no warm-up), against diffusers' AutoencoderDC f32 eager; peak RSS per process
  m  Emu3's VQ (transformers `Emu3VQVAE`, the released `Emu3VQVAEConfig`, random weights with
     the codebook drawn from its latents, saved with `save_pretrained`): encode 256² → 32×32 =
     1,024 tokens and decode them, batch 1, one pass after a warm-up, against transformers'
     `encode` + `decode` f32 eager (which runs the 2-D encoder on all four frames of the
     repeated image: ~110 s a picture on 2 cores, so no batch-8 row); prints the tokens'
     agreement

Each side runs in its own process (so peak RSS is per workload). Times are means over
repetitions after warm-up; compare the ratios, not absolute times (shared machines are noisy).
"""
import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def simd_flags():
    """The CPU's SIMD flags that decide our kernels: fma, avx2 and every avx512*."""
    try:
        flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split(":", 1)[1].split()
    except (OSError, StopIteration):
        return "unknown"
    keep = sorted(f for f in set(flags) if f in ("fma", "avx2") or f.startswith("avx512") or f.startswith("amx"))
    return " ".join(keep) or "none of fma/avx2/avx512"


def peak_flops(threads):
    """Peak f32 FLOP/s: cores x FMA units (2) x SIMD lanes x 2 x clock. AVX-512: 16 lanes,
    AVX2: 8. Clock from /proc/cpuinfo (MHz) or 3 GHz."""
    flags = open("/proc/cpuinfo").read()
    lanes = 16 if " avx512f" in flags else 8
    mhz = 3000.0
    for line in flags.splitlines():
        if line.startswith("cpu MHz"):
            mhz = float(line.split(":")[1])
            break
    return threads * 2 * lanes * 2 * mhz * 1e6, lanes, mhz


def peak_rss_mb():
    """VmHWM of this process. Not getrusage: on Linux ru_maxrss survives execve, so a child
    would report its (large) parent's peak."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def rust(bin_path, *args):
    out = subprocess.run([bin_path, *map(str, args)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"rust bench failed: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def torch_child(workload, d, *args):
    """Runs one PyTorch workload in a fresh process; returns ms and peak RSS."""
    out = subprocess.run([sys.executable, __file__, "--child", workload, d, *map(str, args)],
                         capture_output=True, text=True, env=os.environ)
    if out.returncode != 0:
        raise SystemExit(f"torch bench failed: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def timeit(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) * 1e3 / reps


# ---------------------------------------------------------------- workloads (PyTorch side)
def child(workload, d, *args):
    torch.set_num_threads(int(os.environ["BENCH_THREADS"]))
    from safetensors.torch import load_file
    if workload in ("vit-train", "vit-infer"):
        from transformers import ViTForImageClassification
        model = ViTForImageClassification.from_pretrained(d)
        inp = load_file(os.path.join(d, "inputs.safetensors"))
        batch, steps = int(args[0]), int(args[1])
        x, y = inp["x"][:batch], inp["y"][:batch].long()
        if workload == "vit-train":
            model.train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
            lossf = torch.nn.CrossEntropyLoss()

            def step():
                opt.zero_grad(set_to_none=True)
                loss = lossf(model(pixel_values=x).logits, y)
                loss.backward()
                opt.step()
            ms = timeit(step, 2, steps)
        else:
            model.eval()

            def infer():
                with torch.no_grad():
                    model(pixel_values=x)
            ms = timeit(infer, 2, steps)
    elif workload == "vq":
        import make_vqgan_fixtures as tm
        cfg = json.load(open(os.path.join(d, "config.json")))
        model = tm.VQModel(cfg["ddconfig"], cfg["n_embed"], cfg["embed_dim"]).eval()
        model.load_state_dict(load_file(os.path.join(d, "model.safetensors")), strict=True)
        x = load_file(os.path.join(d, "inputs.safetensors"))["x"]
        reps = int(args[0])
        mode = args[1] if len(args) > 1 else "eager"  # eager | cl (channels_last) | bf16
        bf16 = mode == "bf16"
        if mode in ("bf16", "cl"):  # PyTorch's best simple CPU settings: channels_last (+ autocast)
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        res = {}

        def roundtrip():
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                z = model.encode_latents(x)
                d2 = model.quantize.distances(z)
                idx = d2.argmin(1)
                b, c, h, w = z.shape
                zq = model.quantize.embedding(idx).view(b, h, w, c).permute(0, 3, 1, 2)
                res["indices"] = idx.view(b, h, w)
                res["reconstruction"] = model.decode(zq).float()
        ms = timeit(roundtrip, 1, reps)
        out = {"eager": "torch_out.safetensors"}.get(mode, f"torch_out_{mode}.safetensors")
        save_file({k: v.contiguous() for k, v in res.items()}, os.path.join(d, out))
    elif workload == "vq-encode":
        import make_vqgan_fixtures as tm
        cfg = json.load(open(os.path.join(d, "config.json")))
        model = tm.VQModel(cfg["ddconfig"], cfg["n_embed"], cfg["embed_dim"]).eval()
        model.load_state_dict(load_file(os.path.join(d, "model.safetensors")), strict=True)
        x = load_file(os.path.join(d, "inputs.safetensors"))["x"]
        reps = int(args[0])

        def encode():
            with torch.no_grad():
                model.quantize.distances(model.encode_latents(x)).argmin(1)
        ms = timeit(encode, 1, reps)
    elif workload in ("kl-encode", "kl-decode"):
        from diffusers import AutoencoderKL
        model = AutoencoderKL.from_pretrained(d).eval()
        inp = load_file(os.path.join(d, "inputs.safetensors"))

        def run():
            with torch.no_grad():
                if workload == "kl-encode":
                    model.encode(inp["x"]).latent_dist.mean
                else:
                    model.decode(inp["z"]).sample
        ms = timeit(run, 0, 1)
    elif workload in ("dcae-encode", "dcae-decode"):
        from diffusers import AutoencoderDC
        model = AutoencoderDC.from_pretrained(d).eval()
        inp = load_file(os.path.join(d, "inputs.safetensors"))

        def run():
            with torch.no_grad():
                if workload == "dcae-encode":
                    model.encode(inp["x"]).latent
                else:
                    model.decode(inp["z"]).sample
        ms = timeit(run, 0, 1)
    elif workload == "chameleon-encode":
        from transformers import ChameleonVQVAE
        model = ChameleonVQVAE.from_pretrained(d).eval()
        x = load_file(os.path.join(d, "inputs.safetensors"))["x"]
        res = {}

        def encode():
            with torch.no_grad():
                res["tokens"] = model.encode(x).image_tokens
        ms = timeit(encode, 1, int(args[0]))
        save_file({"tokens": res["tokens"].contiguous()}, os.path.join(d, "torch_tokens.safetensors"))
    elif workload == "var":
        sys.path.insert(0, os.environ["VAR_ROOT"])
        from models.vqvae import VQVAE
        model = VQVAE(vocab_size=4096, z_channels=32, ch=160, test_mode=True, share_quant_resi=4)
        model.load_state_dict(torch.load(os.path.join(d, "vae.pth"), map_location="cpu"))
        batch = int(args[0])
        x = load_file(os.path.join(d, "inputs.safetensors"))[f"x{batch}"]
        res = {}

        def roundtrip():
            with torch.no_grad():
                idx = model.img_to_idxBl(x)
                model.idxBl_to_img(idx, same_shape=True, last_one=True)
                res["tokens"] = torch.cat(idx, dim=1)
        ms = timeit(roundtrip, 1 if batch == 1 else 0, 1)
        save_file(res, os.path.join(d, f"torch_var_{batch}.safetensors"))
    elif workload == "titok-setup":
        setup_titok(d)
        ms = 0.0
    elif workload == "titok":
        titok = titok_modules()
        model = titok.TiTok.from_pretrained(d).eval()
        batch = int(args[0])
        x = load_file(os.path.join(d, "inputs.safetensors"))[f"x{batch}"]
        res = {}

        def roundtrip():
            with torch.no_grad():
                tokens = model.encode(x)[1]["min_encoding_indices"]
                model.decode_tokens(tokens)
                res["tokens"] = tokens.contiguous()
        ms = timeit(roundtrip, 1 if batch == 1 else 0, 1)
        save_file(res, os.path.join(d, f"torch_titok_{batch}.safetensors"))
    elif workload == "emu3":
        from transformers import Emu3VQVAE
        model = Emu3VQVAE.from_pretrained(d).eval()
        batch = int(args[0])
        x = load_file(os.path.join(d, "inputs.safetensors"))[f"x{batch}"]
        sizes = torch.tensor([list(x.shape[-2:])] * batch)
        res = {}

        def roundtrip():
            with torch.no_grad():
                tokens = torch.stack(model.encode(x, image_sizes=sizes).image_tokens)
                model.decode(tokens)
                res["tokens"] = tokens.contiguous()
        ms = timeit(roundtrip, 1 if batch == 1 else 0, 1)
        save_file(res, os.path.join(d, f"torch_emu3_{batch}.safetensors"))
    elif workload == "cosmos":
        model = cosmos_model(os.environ["COSMOS_REPO"])
        model.load_state_dict(torch.load(os.path.join(d, "state.pth"), map_location="cpu"))
        batch = int(args[0])
        x = load_file(os.path.join(d, "inputs.safetensors"))[f"x{batch}"]
        res = {}

        def roundtrip():
            with torch.no_grad():
                idx = model.encode(x)[0]
                model.decode_code(idx)
                res["tokens"] = idx.long().contiguous()
        ms = timeit(roundtrip, 1, 1)
        save_file(res, os.path.join(d, f"torch_cosmos_{batch}.safetensors"))
    elif workload == "conv":
        t = load_file(os.path.join(d, "conv.safetensors"))
        x, w, b = t["x"], t["weight"], t["bias"]
        reps = int(args[0])

        def conv():
            with torch.no_grad():
                torch.nn.functional.conv2d(x, w, b, padding=1)
        ms = timeit(conv, 2, reps)
    else:
        raise SystemExit(f"unknown workload {workload}")
    print(json.dumps({"ms": ms, "peak_rss_mb": peak_rss_mb()}))


# ---------------------------------------------------------------- setup + report
def setup_vit(d, batch):
    from transformers import ViTConfig, ViTForImageClassification
    torch.manual_seed(0)
    cfg = ViTConfig(image_size=32, patch_size=4, num_channels=3, hidden_size=48, num_hidden_layers=4,
                    num_attention_heads=4, intermediate_size=192, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0, id2label={i: str(i) for i in range(10)},
                    label2id={str(i): i for i in range(10)})
    ViTForImageClassification(cfg).save_pretrained(d, safe_serialization=True)
    save_file({"x": torch.randn(batch, 3, 32, 32), "y": torch.randint(0, 10, (batch,)).int()},
              os.path.join(d, "inputs.safetensors"))


def setup_vit_train(d, layers, batch):
    """The shipped ViT's config with `layers` layers, HF-initialised, and a labelled batch."""
    from transformers import ViTConfig, ViTForImageClassification
    torch.manual_seed(0)
    cfg = ViTConfig.from_pretrained(os.path.join(ROOT, "weights", "vit-fashion-mnist"))
    cfg.num_hidden_layers = layers
    ViTForImageClassification(cfg).save_pretrained(d, safe_serialization=True)
    x = torch.randn(batch, cfg.num_channels, cfg.image_size, cfg.image_size)
    save_file({"x": x, "y": torch.randint(0, cfg.num_labels, (batch,)).int()},
              os.path.join(d, "inputs.safetensors"))


def setup_vq(d, size, batch=1):
    import make_vqgan_fixtures as tm
    ddconfig = dict(ch=128, ch_mult=[1, 1, 2, 2, 4], num_res_blocks=2, attn_resolutions=[16],
                    z_channels=256, double_z=False, resolution=256, in_channels=3, out_ch=3, dropout=0.0)
    torch.manual_seed(0)
    model = tm.VQModel(ddconfig, 1024, 256).eval()
    tm.randomise(model, torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.quantize.embedding.weight.uniform_(-1.0 / 1024, 1.0 / 1024)
    x = torch.rand(batch, 3, size, size) * 2 - 1
    with torch.no_grad():  # spread the codebook over real latents so indices vary
        z = model.encode_latents(x).permute(0, 2, 3, 1).reshape(-1, 256)
        pick = torch.randint(0, z.shape[0], (1024,))
        model.quantize.embedding.weight.copy_(z[pick] + 0.1 * z.std() * torch.randn(1024, 256))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(d, "model.safetensors"))
    json.dump({"ddconfig": ddconfig, "embed_dim": 256, "n_embed": 1024}, open(os.path.join(d, "config.json"), "w"))
    save_file({"x": x}, os.path.join(d, "inputs.safetensors"))


def setup_chameleon(d, size):
    """transformers' ChameleonVQVAE at its released config, random weights, one picture; the
    codebook drawn from its latents so that the tokens spread over it."""
    from transformers import ChameleonVQVAE, ChameleonVQVAEConfig
    torch.manual_seed(0)
    model = ChameleonVQVAE(ChameleonVQVAEConfig()).eval()
    x = (torch.rand(1, 3, size, size) * 2 - 1).contiguous()
    with torch.no_grad():
        h = model.quant_conv(model.encoder(x)).permute(0, 2, 3, 1).reshape(-1, 256)
        pick = torch.randint(0, h.shape[0], (8192,))
        model.quantize.embedding.weight.copy_(h[pick] + 0.01 * torch.randn(8192, 256))
    model.save_pretrained(d)
    save_file({"x": x}, os.path.join(d, "inputs.safetensors"))


def setup_emu3(d, size):
    """transformers' Emu3VQVAE at its released config, random weights, inputs of batch 1 and
    8; the codebook drawn from the latents so that the tokens spread over it."""
    from transformers import Emu3VQVAE, Emu3VQVAEConfig
    torch.manual_seed(0)
    model = Emu3VQVAE(Emu3VQVAEConfig()).eval()
    x8 = (torch.rand(8, 3, size, size) * 2 - 1).contiguous()
    cfg = model.config
    with torch.no_grad():
        v = x8[:2].unsqueeze(1).repeat(1, cfg.temporal_downsample_factor, 1, 1, 1)
        h = model.quant_conv(model.encoder(v).permute(0, 2, 1, 3, 4)).permute(0, 2, 1, 3, 4)
        h = h[:, 0].permute(0, 2, 3, 1).reshape(-1, cfg.embed_dim)
        n = cfg.codebook_size
        pick = torch.randint(0, h.shape[0], (n,))
        model.quantize.embedding.weight.copy_(h[pick] * (0.7 + 0.6 * torch.rand(n, 1)))
    model.save_pretrained(d)
    save_file({"x1": x8[:1].clone(), "x8": x8}, os.path.join(d, "inputs.safetensors"))


def setup_var(d, var_root):
    """VAR's VQVAE in its released layout with random weights (as `torch.save(state_dict)`),
    256² inputs of batch 1 and 8."""
    sys.path.insert(0, var_root)
    from models.vqvae import VQVAE
    torch.manual_seed(0)
    model = VQVAE(vocab_size=4096, z_channels=32, ch=160, test_mode=True, share_quant_resi=4)
    torch.save(model.state_dict(), os.path.join(d, "vae.pth"))
    x8 = (torch.rand(8, 3, 256, 256) * 2 - 1).contiguous()
    save_file({"x1": x8[:1].clone(), "x8": x8}, os.path.join(d, "inputs.safetensors"))


def titok_modules():
    """1d-tokenizer's `modeling.titok` at the released sizes (scripts/make_titok_fixtures.py's
    extraction, its size hooks set to the hard-coded MaskGIT-VQGAN's)."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import make_titok_fixtures as mtf
    tmp = tempfile.mkdtemp(prefix="titok-src-")
    titok = mtf.extract(tmp)
    import modeling.modules.blocks as blocks
    blocks.PIXEL_CODES = titok.PIXEL_CODES = 1024
    titok.PIXEL_DIM = 256
    titok.PIXEL_CONF = {"channel_mult": [1, 1, 2, 2, 4], "num_resolutions": 5, "dropout": 0.0,
                        "hidden_channels": 128, "num_channels": 3, "num_res_blocks": 2,
                        "resolution": 256, "z_channels": 256}
    return titok


def setup_titok(d):
    """TiTok-L-32 (`configs/infer/TiTok/titok_l32.yaml`) with upstream's random init, saved
    with `save_pretrained`; [0, 1] inputs of batch 1 and 8."""
    titok = titok_modules()
    torch.manual_seed(0)
    cfg = {"model": {"vq_model": {"codebook_size": 4096, "token_size": 12, "use_l2_norm": True,
                                  "commitment_cost": 0.25, "vit_enc_model_size": "large",
                                  "vit_dec_model_size": "large", "vit_enc_patch_size": 16,
                                  "vit_dec_patch_size": 16, "num_latent_tokens": 32,
                                  "finetune_decoder": True}},
           "dataset": {"preprocessing": {"crop_size": 256}}}
    titok.TiTok(cfg).save_pretrained(d)
    x8 = torch.rand(8, 3, 256, 256).contiguous()
    save_file({"x1": x8[:1].clone(), "x8": x8}, os.path.join(d, "inputs.safetensors"))


def cosmos_model(repo):
    """Cosmos-Tokenizer's DI16x16 (`networks/configs.py` `discrete_image`) in f32, eval."""
    sys.path.insert(0, repo)
    from cosmos_tokenizer.networks import TokenizerConfigs, TokenizerModels
    model = TokenizerModels.DI.value(**TokenizerConfigs.DI.value).eval()
    model.to(dtype=torch.float32)  # also the quantizer's output dtype (bfloat16 by default)
    return model


def setup_cosmos(d, repo):
    """The DI16x16 with upstream's random init: its state dict for the PyTorch side, and
    `encoder.jit` / `decoder.jit` traced as the release exports them for imgseq; a 256² input."""
    torch.manual_seed(0)
    model = cosmos_model(repo)
    torch.save(model.state_dict(), os.path.join(d, "state.pth"))
    x1 = (torch.rand(1, 3, 256, 256) * 2 - 1).contiguous()
    with torch.no_grad():
        enc = torch.jit.trace(model.encoder_jit(), x1, check_trace=False)
        idx = enc(x1)[0]
        dec = torch.jit.trace(model.decoder_jit(), idx, check_trace=False)
    torch.jit.save(enc, os.path.join(d, "encoder.jit"))
    torch.jit.save(dec, os.path.join(d, "decoder.jit"))
    save_file({"x1": x1}, os.path.join(d, "inputs.safetensors"))


def setup_kl(d, size):
    """The SD VAE's released config with random weights, an image and a latent."""
    from diffusers import AutoencoderKL
    torch.manual_seed(0)
    cfg = dict(block_out_channels=(128, 256, 512, 512), down_block_types=("DownEncoderBlock2D",) * 4,
               up_block_types=("UpDecoderBlock2D",) * 4, layers_per_block=2, latent_channels=4,
               sample_size=512, scaling_factor=0.18215)
    AutoencoderKL(**cfg).eval().save_pretrained(d)
    save_file({"x": torch.rand(1, 3, size, size) * 2 - 1, "z": torch.randn(1, 4, size // 8, size // 8)},
              os.path.join(d, "inputs.safetensors"))


def setup_dcae(d, size):
    """dc-ae-f32c32-sana-1.0's layout (as scripts/make_dcae_fixtures.py --released) with
    diffusers' default initialisation, an image and a latent."""
    from diffusers import AutoencoderDC
    torch.manual_seed(0)
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
    AutoencoderDC(**cfg).eval().save_pretrained(d)
    save_file({"x": torch.rand(1, 3, size, size) * 2 - 1,
               "z": torch.randn(1, 32, size // 32, size // 32)},
              os.path.join(d, "inputs.safetensors"))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(*sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "examples", "bench"))
    ap.add_argument("--vit-bin", default=os.path.join(ROOT, "target", "release", "examples", "vit_train_bench"),
                    help="the ViT training-step bench (workload b)")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--only", default="a,b,c,d,e,f,g,h,i,j,k,l,m")
    ap.add_argument("--markdown", help="append the result table to this file")
    ap.add_argument("--titok", default=os.environ.get("TITOK_REPO"),
                    help="a snapshot of bytedance/1d-tokenizer, git dir or checkout (workload j)")
    ap.add_argument("--cosmos", default=os.environ.get("COSMOS_REPO"),
                    help="a checkout of NVIDIA/Cosmos-Tokenizer (workload k)")
    ap.add_argument("--var", default=os.environ.get("VAR_ROOT"),
                    help="a checkout of FoundationVision/VAR (workload h)")
    a = ap.parse_args()
    os.environ["BENCH_THREADS"] = str(a.threads)
    os.environ["RAYON_NUM_THREADS"] = str(a.threads)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    if not os.path.exists(a.bin):
        raise SystemExit(f"{a.bin} not found: run `cargo build --release -p imgseq --examples` first")
    if "b" in a.only.split(",") and not os.path.exists(a.vit_bin):
        raise SystemExit(f"{a.vit_bin} not found: run "
                         "`cargo build --release -p imgseq-vit --example vit_train_bench` first")
    peak, lanes, mhz = peak_flops(a.threads)
    reps = 3 if a.quick else 10
    rows = []
    tmp = tempfile.mkdtemp(prefix="imgseq-bench-")
    only = set(a.only.split(","))

    def row(name, work, flops, t, r, better_if_lower=True, unit_imgs=None):
        ratio = r["ms"] / t["ms"]
        rows.append(dict(name=name, work=work, torch_ms=t["ms"], rust_ms=r["ms"], ratio=ratio,
                         torch_rss=t["peak_rss_mb"], rust_rss=r["peak_rss_mb"],
                         rust_gflops=flops / r["ms"] / 1e6 if flops else None,
                         torch_gflops=flops / t["ms"] / 1e6 if flops else None, imgs=unit_imgs))
        print(f"{name}: torch {t['ms']:.1f} ms, imgseq {r['ms']:.1f} ms, time ratio imgseq/torch {ratio:.2f}",
              flush=True)

    if "d" in only:
        d = os.path.join(tmp, "conv")
        os.makedirs(d)
        torch.manual_seed(0)
        save_file({"x": torch.randn(1, 128, 96, 96), "weight": torch.randn(128, 128, 3, 3) * 0.03,
                   "bias": torch.randn(128)}, os.path.join(d, "conv.safetensors"))
        flops = 2 * 128 * 128 * 9 * 96 * 96
        row("d conv3x3 128->128 @96²", "forward", flops, torch_child("conv", d, reps * 3),
            rust(a.bin, "conv", d, reps * 3))
    if "b" in only:
        for layers in (4, 8):
            d = os.path.join(tmp, f"vit-train-{layers}")
            os.makedirs(d)
            setup_vit_train(d, layers, 128)
            t = torch_child("vit-train", d, 128, reps * 2)
            for engine in ("fused", "autograd"):
                row(f"b ViT train step, {layers} layers, {engine}", "batch 128", None, t,
                    rust(a.vit_bin, d, 128, reps * 2, engine), unit_imgs=128)
    if "c" in only:
        d = os.path.join(tmp, "vit")
        os.makedirs(d)
        setup_vit(d, 256)
        t = torch_child("vit-infer", d, 256, reps * 2)
        row("c ViT inference (Classifier: fused forward)", "batch 256", None, t,
            rust(a.bin, "vit-infer", d, 256, reps * 2), unit_imgs=256)
        row("c ViT inference (candle model)", "batch 256", None, t,
            rust(a.bin, "vit-infer", d, 256, reps * 2, "candle"), unit_imgs=256)
    agreement = bf16_agreement = bf16_encoder_agreement = batch1_ms = None
    if "a" in only:
        d = os.path.join(tmp, "vq")
        os.makedirs(d)
        setup_vq(d, 384)
        r = rust(a.bin, "vq", d, 1 if a.quick else 2)
        t = torch_child("vq", d, 1 if a.quick else 2)
        from safetensors.torch import load_file
        ro, to = load_file(os.path.join(d, "rust_out.safetensors")), load_file(os.path.join(d, "torch_out.safetensors"))
        agreement = (ro["indices"].long() == to["indices"].long()).float().mean().item()
        rec_err = ((ro["reconstruction"] - to["reconstruction"]).abs().max() /
                   to["reconstruction"].abs().max()).item()
        row("a VQGAN f16-1024 enc+dec 384²", "batch 1", 883e9, t, r)
        batch1_ms = r["ms"]
        row("a f32, PyTorch channels_last", "batch 1", 883e9, torch_child("vq", d, 1 if a.quick else 2, "cl"), r)
        print(f"   token agreement with PyTorch {100 * agreement:.2f}%, reconstruction max rel diff {rec_err:.2e}")
        # Reduced precision: imgseq bf16 against PyTorch autocast(bf16) + channels_last.
        r16 = rust(a.bin, "vq", d, 1 if a.quick else 2, "bf16")
        t16 = torch_child("vq", d, 1 if a.quick else 2, "bf16")
        ro16 = load_file(os.path.join(d, "rust_out_bf16.safetensors"))
        to16 = load_file(os.path.join(d, "torch_out_bf16.safetensors"))

        def same(p, q):
            return (p["indices"].long() == q["indices"].long()).float().mean().item()

        def psnr(p, q):
            """Decode of p against q's (f32) decode, peak = q's value range."""
            a, b = p["reconstruction"].double(), q["reconstruction"].double()
            mse = ((a - b) ** 2).mean().item()
            rng = (b.max() - b.min()).item()
            return float("inf") if mse == 0 else 10 * math.log10(rng * rng / mse)
        bf16_agreement = (same(ro16, ro), same(to16, to), psnr(ro16, ro), psnr(to16, to))
        row("a bf16: imgseq bf16 vs PyTorch autocast(bf16)+channels_last", "batch 1", 883e9, t16, r16)
        print(f"   bf16 tokens equal to the same side's f32 tokens: imgseq {100 * bf16_agreement[0]:.2f}%, "
              f"PyTorch {100 * bf16_agreement[1]:.2f}%; bf16 decode vs the same side's f32 decode: "
              f"imgseq {bf16_agreement[2]:.1f} dB, PyTorch {bf16_agreement[3]:.1f} dB")
        # The user's opt-in: the encoder's convs in bf16 too (`--bf16-encoder`).
        re16 = rust(a.bin, "vq", d, 1 if a.quick else 2, "bf16-encoder")
        roe = load_file(os.path.join(d, "rust_out_bf16_encoder.safetensors"))
        bf16_encoder_agreement = same(roe, ro)
        row("a bf16 encoder too (--bf16-encoder, opt-in) vs PyTorch autocast(bf16)+channels_last",
            "batch 1", 883e9, t16, re16)
        print(f"   --bf16-encoder tokens equal to imgseq's f32 tokens: {100 * bf16_encoder_agreement:.2f}% "
              f"(PyTorch autocast: {100 * bf16_agreement[1]:.2f}% of its f32 tokens)")

    if "e" in only:
        d = os.path.join(tmp, "vq-encode")
        os.makedirs(d)
        setup_vq(d, 256, 8)
        reps = 1 if a.quick else 2
        row("e VQGAN f16-1024 encode 256² (many images)", "batch 8", None,
            torch_child("vq-encode", d, reps), rust(a.bin, "vq-encode", d, reps), unit_imgs=8)

    if "g" in only:
        # The batched 384² round trip (what `imgseq serve` runs when it batches requests):
        # per image it should cost no more than batch 1 (row a).
        d = os.path.join(tmp, "vq-batch")
        os.makedirs(d)
        setup_vq(d, 384, 4)
        r = rust(a.bin, "vq", d, 1)
        row("g VQGAN f16-1024 enc+dec 384², f32 vs eager", "batch 4", 4 * 883e9,
            torch_child("vq", d, 1), r, unit_imgs=4)
        if batch1_ms is not None:
            print(f"   imgseq per image: batch 4 {r['ms'] / 4:.0f} ms vs batch 1 {batch1_ms:.0f} ms "
                  f"({r['ms'] / 4 / batch1_ms:.2f}x)")

    if "f" in only:
        d = os.path.join(tmp, "kl")
        os.makedirs(d)
        setup_kl(d, 512)
        for w in ("kl-encode", "kl-decode"):
            row(f"f SD VAE {w[3:]} 512²", "batch 1", None, torch_child(w, d), rust(a.bin, w, d))

    if "l" in only:
        d = os.path.join(tmp, "dcae")
        os.makedirs(d)
        setup_dcae(d, 512)
        for w in ("dcae-encode", "dcae-decode"):
            row(f"l DC-AE f32c32 {w[5:]} 512²", "batch 1", None, torch_child(w, d), rust(a.bin, w, d))

    if "i" in only:
        d = os.path.join(tmp, "chameleon")
        os.makedirs(d)
        setup_chameleon(d, 512)
        reps = 1 if a.quick else 2
        r = rust(a.bin, "chameleon-encode", d, reps)
        t = torch_child("chameleon-encode", d, reps)
        row("i Chameleon VQ encode 512² (1,024 tokens)", "batch 1", None, t, r, unit_imgs=1)
        from safetensors.torch import load_file
        ro = load_file(os.path.join(d, "rust_tokens.safetensors"))["tokens"].long().flatten()
        to = load_file(os.path.join(d, "torch_tokens.safetensors"))["tokens"].long().flatten()
        print(f"   tokens equal to transformers': {100 * (ro == to).float().mean().item():.2f}%")

    if "h" in only:
        if not a.var:
            print("h skipped: VAR needs --var CHECKOUT (FoundationVision/VAR) or $VAR_ROOT")
        else:
            os.environ["VAR_ROOT"] = os.path.abspath(a.var)
            d = os.path.join(tmp, "var")
            os.makedirs(d)
            setup_var(d, a.var)
            from safetensors.torch import load_file
            for batch in (1, 8):
                r = rust(a.bin, "var", d, batch)
                t = torch_child("var", d, batch)
                row(f"h VAR VQVAE enc+dec 256² (680 codes)", f"batch {batch}", None, t, r,
                    unit_imgs=batch)
                ro = load_file(os.path.join(d, f"rust_var_{batch}.safetensors"))["tokens"]
                to = load_file(os.path.join(d, f"torch_var_{batch}.safetensors"))["tokens"]
                print(f"   codes equal to VAR's: {100 * (ro.long() == to.long()).float().mean().item():.2f}%")

    if "j" in only:
        if not a.titok:
            print("j skipped: TiTok needs --titok SNAPSHOT (bytedance/1d-tokenizer) or $TITOK_REPO")
        else:
            os.environ["TITOK_REPO"] = os.path.abspath(a.titok)
            d = os.path.join(tmp, "titok")
            os.makedirs(d)
            torch_child("titok-setup", d)
            from safetensors.torch import load_file
            for batch in (1, 8):
                r = rust(a.bin, "titok", d, batch)
                t = torch_child("titok", d, batch)
                row(f"j TiTok-L-32 enc+dec 256² (32 tokens)", f"batch {batch}", None, t, r,
                    unit_imgs=batch)
                ro = load_file(os.path.join(d, f"rust_titok_{batch}.safetensors"))["tokens"]
                to = load_file(os.path.join(d, f"torch_titok_{batch}.safetensors"))["tokens"]
                print(f"   tokens equal to TiTok's: {100 * (ro.long() == to.long()).float().mean().item():.2f}%")

    if "k" in only:
        if not a.cosmos:
            print("k skipped: Cosmos needs --cosmos CHECKOUT (NVIDIA/Cosmos-Tokenizer) or $COSMOS_REPO")
        else:
            os.environ["COSMOS_REPO"] = os.path.abspath(a.cosmos)
            d = os.path.join(tmp, "cosmos")
            os.makedirs(d)
            setup_cosmos(d, os.environ["COSMOS_REPO"])
            from safetensors.torch import load_file
            r = rust(a.bin, "cosmos", d, 1)
            t = torch_child("cosmos", d, 1)
            row("k Cosmos DI16x16 enc+dec 256² (256 FSQ codes)", "batch 1", None, t, r, unit_imgs=1)
            ro = load_file(os.path.join(d, "rust_cosmos_1.safetensors"))["tokens"]
            to = load_file(os.path.join(d, "torch_cosmos_1.safetensors"))["tokens"]
            print(f"   codes equal to Cosmos': {100 * (ro.long() == to.long()).float().mean().item():.2f}%")

    if "m" in only:
        d = os.path.join(tmp, "emu3")
        os.makedirs(d)
        setup_emu3(d, 256)
        from safetensors.torch import load_file
        for batch in (1,):
            r = rust(a.bin, "emu3", d, batch)
            t = torch_child("emu3", d, batch)
            row(f"m Emu3 VQ enc+dec 256² (1,024 tokens)", f"batch {batch}", None, t, r,
                unit_imgs=batch)
            ro = load_file(os.path.join(d, f"rust_emu3_{batch}.safetensors"))["tokens"]
            to = load_file(os.path.join(d, f"torch_emu3_{batch}.safetensors"))["tokens"]
            print(f"   tokens equal to transformers': {100 * (ro.long() == to.long()).float().mean().item():.2f}%")

    print()
    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M')} on {cpu_model()}, {a.threads} threads, "
             f"PyTorch {torch.__version__}; peak f32 {peak / 1e9:.0f} GFLOP/s "
             f"({a.threads} cores x 2 FMA x {lanes} lanes x 2 x {mhz:.0f} MHz); SIMD: {simd_flags()}", "",
             "| workload | PyTorch ms | imgseq ms | imgseq/PyTorch time | speed-up | GFLOP/s imgseq (% peak) | GFLOP/s PyTorch (% peak) | peak RSS PyTorch | peak RSS imgseq |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = lambda v: f"{v:.0f} ({100 * v * 1e9 / peak:.0f}%)" if v else "–"
        extra = ""
        if r["imgs"]:
            ips = lambda ms: f"{r['imgs'] / ms * 1e3:.{0 if r['imgs'] / ms * 1e3 >= 10 else 2}f}"
            extra = f" ({ips(r['torch_ms'])} vs {ips(r['rust_ms'])} img/s)"
        lines.append(f"| {r['name']} ({r['work']}) | {r['torch_ms']:.1f} | {r['rust_ms']:.1f} | {r['ratio']:.2f} | "
                     f"{1 / r['ratio']:.2f}x{extra} | {g(r['rust_gflops'])} | {g(r['torch_gflops'])} | "
                     f"{r['torch_rss']:.0f} MB | {r['rust_rss']:.0f} MB |")
    if agreement is not None:
        lines.append("")
        lines.append(f"VQGAN token agreement imgseq vs PyTorch: {100 * agreement:.2f}% of 576.")
    if bf16_agreement is not None:
        lines.append(f"bf16 tokens equal to the same side's f32 tokens: imgseq {100 * bf16_agreement[0]:.2f}%, "
                     f"PyTorch autocast {100 * bf16_agreement[1]:.2f}% of 576; bf16 decode against the same "
                     f"side's f32 decode (random weights, peak = the f32 decode's range): imgseq "
                     f"{bf16_agreement[2]:.1f} dB, PyTorch autocast {bf16_agreement[3]:.1f} dB.")
    if bf16_encoder_agreement is not None:
        lines.append(f"--bf16-encoder tokens equal to imgseq's f32 tokens: {100 * bf16_encoder_agreement:.2f}% of 576.")
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        with open(a.markdown, "a") as f:
            f.write("\n" + text + "\n")


if __name__ == "__main__":
    main()
