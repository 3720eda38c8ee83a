#!/usr/bin/env python3
"""Dataset tokenization throughput: `imgseq vq tokenize` vs a PyTorch batch script, on the same
images, weights and thread count, in one run.

    cargo build --release -p imgseq
    python3 scripts/tokenize_bench.py /tmp/photos.txt --size 256 --threads 2 [--arch f16_1024]

The PyTorch side is what LlamaGen's `extract_codes` / TiTok's pre-tokenization do: a
DataLoader (1 worker, so decoding overlaps the model as imgseq's decoding thread does) that
opens each image with PIL, resizes the shorter side (bicubic) and centre-crops, then
`encode_latents` + nearest codebook entry in batches (eager f32, and `channels_last`).
Both sides are timed end to end (process start to all tokens written) and their peak RSS is
read from /usr/bin/time. Token agreement is reported (PIL's bicubic and imgseq's Catmull-Rom
resize are both a = -0.5 cubic filters but round differently, so a few tokens differ).

--arch shipped: weights/vqgan (the default model). --arch f16_1024: taming's
vqgan_imagenet_f16_1024 architecture with random weights (scripts/bench.py's setup).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)


def simd_flags():
    flags = open("/proc/cpuinfo").read().split("flags", 1)[1].split("\n", 1)[0].split()
    keep = [f for f in flags if f.startswith("avx") or f in ("fma", "f16c")]
    return " ".join(sorted(set(keep)))


def timed(cmd, env=None):
    """(wall seconds, peak RSS MB) of a command, via /usr/bin/time."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        t0 = time.time()
        subprocess.run(["/usr/bin/time", "-o", t.name, "-f", "%M"] + cmd, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        wall = time.time() - t0
        return wall, int(open(t.name).read().split()[-1]) / 1024.0


def torch_child(a):
    """The PyTorch batch script (run in its own process)."""
    import numpy as np
    import torch
    from PIL import Image
    from safetensors.torch import load_file
    import make_vqgan_fixtures as tm

    torch.set_num_threads(a.threads)
    cfg = json.load(open(a.config))
    model = tm.VQModel(cfg["ddconfig"], cfg["n_embed"], cfg["embed_dim"]).eval()
    sd = {k: v for k, v in load_file(a.weights).items()}
    model.load_state_dict(sd, strict=True)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    paths = [l.strip() for l in open(a.images) if l.strip() and not l.startswith("#")]

    class Images(torch.utils.data.Dataset):
        def __len__(self):
            return len(paths)

        def __getitem__(self, i):
            img = Image.open(paths[i]).convert("RGB")
            w, h = img.size
            s = a.size / min(w, h)
            nw, nh = max(a.size, round(w * s)), max(a.size, round(h * s))
            img = img.resize((nw, nh), Image.BICUBIC)
            x0, y0 = (nw - a.size) // 2, (nh - a.size) // 2
            img = img.crop((x0, y0, x0 + a.size, y0 + a.size))
            x = torch.from_numpy(np.asarray(img, dtype=np.float32).copy()).permute(2, 0, 1)
            return x / 127.5 - 1.0

    dl = torch.utils.data.DataLoader(Images(), batch_size=a.batch, num_workers=1)
    out = []
    with torch.no_grad():
        for x in dl:
            if a.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            z = model.encode_latents(x)
            b, c, h, w = z.shape
            idx = model.quantize.distances(z).argmin(1).view(b, h, w)
            out.append(idx.to(torch.int64).numpy())
    np.save(a.out, np.concatenate(out))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("images", help="a .txt list of image paths")
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--arch", choices=["shipped", "f16_1024"], default="shipped")
    p.add_argument("--bin", default=os.path.join(ROOT, "target/release/imgseq"))
    p.add_argument("--python", default=sys.executable, help="a Python with torch + pillow")
    # child mode
    p.add_argument("--torch-child", action="store_true")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--weights")
    p.add_argument("--config")
    p.add_argument("--out")
    a = p.parse_args()
    if a.torch_child:
        return torch_child(a)

    import numpy as np
    d = tempfile.mkdtemp(prefix="tokbench-")
    if a.arch == "shipped":
        weights = os.path.join(ROOT, "weights/vqgan/model.safetensors")
        config = os.path.join(ROOT, "weights/vqgan/config.json")
    else:
        subprocess.run([a.python, "-c", f"import sys; sys.path.insert(0, {HERE!r}); "
                        f"import bench; bench.setup_vq({d!r}, {a.size})"], check=True)
        weights, config = os.path.join(d, "model.safetensors"), os.path.join(d, "config.json")
    paths = [l.strip() for l in open(a.images) if l.strip() and not l.startswith("#")]
    n = len(paths)
    env = dict(os.environ, RAYON_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads))
    model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                  if l.startswith("model name")), platform.processor())
    print(f"{model}; SIMD: {simd_flags()}")
    print(f"{n} images, size {a.size}, batch {a.batch}, {a.threads} threads, arch {a.arch}")

    rows = []
    tok = os.path.join(d, "tokens")
    t, rss = timed([a.bin, "--threads", str(a.threads), "vq", "tokenize", a.images,
                    "--weights", weights, "--config", config, "--size", str(a.size),
                    "--batch-size", str(a.batch), "-o", tok], env)
    rows.append(("imgseq vq tokenize", t, rss))
    # imgseq's tokens in source order (shards are in index order, members in sample order).
    import io
    import tarfile
    ours = []
    for name in sorted(os.listdir(tok)):
        if name.endswith(".tar"):
            with tarfile.open(os.path.join(tok, name)) as tf:
                for m in tf.getmembers():
                    if m.name.endswith(".tokens.npy"):
                        ours.append(np.load(io.BytesIO(tf.extractfile(m).read())).astype(np.int64))
    ours_tokens = np.stack(ours)
    agree = {}
    for label, extra in [("PyTorch eager f32", []), ("PyTorch channels_last", ["--channels-last"])]:
        out = os.path.join(d, "torch.npy")
        t, rss = timed([a.python, os.path.abspath(__file__), a.images, "--torch-child",
                        "--size", str(a.size), "--batch", str(a.batch), "--threads",
                        str(a.threads), "--weights", weights, "--config", config, "--out", out]
                       + extra, env)
        rows.append((label, t, rss))
        theirs = np.load(out)
        agree[label] = float((theirs == ours_tokens).mean()) if theirs.shape == ours_tokens.shape else float("nan")
    base = rows[1][1]
    print()
    print("| pipeline | wall s | images/s | time vs PyTorch eager | peak RSS MB |")
    print("|---|---|---|---|---|")
    for label, t, rss in rows:
        print(f"| {label} | {t:.1f} | {n / t:.2f} | {t / base:.2f}x | {rss:.0f} |")
    for k, v in agree.items():
        print(f"tokens identical to imgseq ({k}): {100 * v:.1f}%")


if __name__ == "__main__":
    main()
