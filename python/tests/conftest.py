"""Shared helpers: the `imgseq` command (to compare against), PNG writing without Pillow,
deterministic test images."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import List

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def write_png(path: Path, img: np.ndarray) -> None:
    """An 8-bit gray (h, w) or RGB (h, w, 3) PNG, written with zlib only."""
    img = np.ascontiguousarray(img, dtype=np.uint8)
    h, w = img.shape[:2]
    color = 0 if img.ndim == 2 else 2
    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + tag
            + data
            + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
        )

    png = b"\x89PNG\r\n\x1a\n"
    png += chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 6))
    png += chunk(b"IEND", b"")
    Path(path).write_bytes(png)


def make_image(seed: int, h: int, w: int) -> np.ndarray:
    """A smooth, textured RGB image (gradients, blobs, a little noise): gives varied tokens."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    for c in range(3):
        fx, fy, ph = rng.uniform(0.005, 0.05, 2).tolist() + [rng.uniform(0, 6.28)]
        img[..., c] = 127 + 100 * np.sin(fx * x + ph) * np.cos(fy * y)
    for _ in range(6):
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(10, 60)
        blob = np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * r * r))
        img += blob[..., None] * rng.uniform(-120, 120, 3)
    img += rng.normal(0, 6, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _find_cli() -> str:
    env = os.environ.get("IMGSEQ_BIN")
    if env:
        if not Path(env).is_file():
            pytest.fail(f"IMGSEQ_BIN={env} does not exist")
        return env
    for p in (REPO / "target/release/imgseq", REPO / "target/ci/imgseq", REPO / "target/debug/imgseq"):
        if p.is_file():
            return str(p)
    found = shutil.which("imgseq")
    if found:
        return found
    pytest.skip("no imgseq binary (set IMGSEQ_BIN or `cargo build --release -p imgseq`)")


@pytest.fixture(scope="session")
def cli() -> str:
    return _find_cli()


def run_cli(cli: str, *args: object) -> subprocess.CompletedProcess:
    """Runs `imgseq ARGS`, failing the test with its stderr when it fails."""
    env = dict(os.environ, IMGSEQ_WEIGHTS_DIR=str(REPO / "weights"))
    p = subprocess.run(
        [cli, *map(str, args)], capture_output=True, text=True, env=env, timeout=300
    )
    if p.returncode != 0:
        pytest.fail(f"imgseq {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


def cli_encode(cli: str, paths: List[Path], size: int, out: Path) -> np.ndarray:
    """`imgseq vq encode` of image files with the shipped model: (n, h, w) int64."""
    run_cli(cli, "vq", "encode", *paths, "--size", size, "-o", out)
    t = np.load(out)
    return t[None] if t.ndim == 2 else t


@pytest.fixture(scope="session")
def tokenizer256():
    import imgseq

    return imgseq.VQTokenizer(size=256)
