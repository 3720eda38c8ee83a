"""One image → model input rule for every family and channel count: `VQTokenizer.encode` of
an array gives the tokens `imgseq vq encode` gives for the same picture as a file — with the
family's crop (LlamaGen: ADM's centre crop) and the model's channels (a gray model: the luma)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import imgseq
from conftest import REPO, make_image, run_cli, write_png

LLAMAGEN = REPO / "tests/fixtures/llamagen/vq_tiny.pt"

TINY_GRAY = {
    "embed_dim": 8,
    "n_embed": 16,
    "ddconfig": {
        "ch": 32,
        "ch_mult": [1, 1, 1],
        "num_res_blocks": 1,
        "attn_resolutions": [],
        "z_channels": 8,
        "double_z": False,
        "resolution": 32,
        "in_channels": 1,
        "out_ch": 1,
        "dropout": 0.0,
    },
}


def cli_tokens(cli: str, paths, out: Path, *model_args: object) -> np.ndarray:
    run_cli(cli, "vq", "encode", *paths, *model_args, "--precision", "f32", "-o", out)
    t = np.load(out)
    return t[None] if t.ndim == 2 else t


def test_llamagen_tokens_equal_the_cli(tmp_path, cli):
    t = imgseq.VQTokenizer(LLAMAGEN, size=32, precision="f32")
    assert t.crop == "adm_center_crop" and t.channels == 3
    # Sizes that take ADM's box halving (shorter side ≥ 64), odd aspect ratios, a square.
    imgs = [make_image(40, 70, 90), make_image(41, 150, 100), make_image(42, 32, 32)]
    paths = []
    for i, img in enumerate(imgs):
        paths.append(tmp_path / f"{i}.png")
        write_png(paths[-1], img)
        want = cli_tokens(cli, [paths[-1]], tmp_path / f"{i}.npy", "--weights", LLAMAGEN, "--size", 32)
        np.testing.assert_array_equal(t.encode(img).astype(np.int64), want)
    # The shorter-side crop of imgseq's own models gives other inputs here: the rule matters.
    other = imgseq.VQTokenizer(
        REPO / "tests/fixtures/vqgan/tiny.safetensors",
        REPO / "tests/fixtures/vqgan/tiny_config.json",
        size=32,
        precision="f32",
    )
    assert other.crop == "shorter_side"


@pytest.fixture(scope="module")
def gray_model(tmp_path_factory, cli) -> Path:
    d = tmp_path_factory.mktemp("gray")
    data = d / "data"
    data.mkdir()
    for i in range(4):
        write_png(data / f"{i}.png", make_image(60 + i, 40, 48)[..., 0])
    cfg = d / "tiny_gray.json"
    cfg.write_text(json.dumps(TINY_GRAY))
    run = d / "run"
    run_cli(
        cli, "vq", "train", "--data", data, "--config", cfg, "--out", run, "--steps", 2,
        "--crop", 32, "--resize", 32, "--batch-size", 4, "--ae-warmup", 0,
        "--kmeans-rows", 64, "--checkpoint-every", 2,
    )
    return run / "model.safetensors"


def test_gray_model_tokens_equal_the_cli(tmp_path, cli, gray_model):
    t = imgseq.VQTokenizer(gray_model, size=32, precision="f32")
    assert t.channels == 1
    model_args = ("--weights", gray_model, "--size", 32)
    # RGB arrays: the model reads their luma, as the CLI does with colour files.
    rgb = np.stack([make_image(70 + i, 36, 44) for i in range(3)])
    paths = []
    for i, img in enumerate(rgb):
        paths.append(tmp_path / f"c{i}.png")
        write_png(paths[-1], img)
    want = cli_tokens(cli, paths, tmp_path / "c.npy", *model_args)
    got = t.encode(rgb)
    assert got.shape == want.shape == (3, 8, 8)
    np.testing.assert_array_equal(got.astype(np.int64), want)
    # Gray arrays (n, h, w, 1) against gray files.
    gray = rgb[..., 1:2]
    paths = []
    for i, img in enumerate(gray):
        paths.append(tmp_path / f"g{i}.png")
        write_png(paths[-1], img[..., 0])
    want = cli_tokens(cli, paths, tmp_path / "g.npy", *model_args)
    np.testing.assert_array_equal(t.encode(gray).astype(np.int64), want)
    # Decoding gives gray pictures (r = g = b).
    rec = t.decode(got)
    assert rec.shape == (3, 32, 32, 3)
    assert (rec[..., 0] == rec[..., 1]).all() and (rec[..., 1] == rec[..., 2]).all()


JANUS = REPO / "tests/fixtures/janus"


def test_janus_folder_pads_to_square_and_tokens_equal_the_cli(tmp_path, cli):
    # transformers' JanusVQVAE as save_pretrained writes it; its processor's resize + pad.
    t = imgseq.VQTokenizer(JANUS, size=32, precision="f32")
    assert t.crop == "pad_to_square" and t.channels == 3
    imgs = [make_image(50, 40, 90), make_image(51, 70, 45), make_image(52, 32, 32)]
    for i, img in enumerate(imgs):
        p = tmp_path / f"j{i}.png"
        write_png(p, img)
        want = cli_tokens(cli, [p], tmp_path / f"j{i}.npy", "--weights", JANUS, "--size", 32)
        np.testing.assert_array_equal(t.encode(img).astype(np.int64), want)
