"""imgseq.Tokenizer.from_pretrained: every family the Rust side reads, equal to the CLI."""

from __future__ import annotations

import numpy as np
import pytest

import imgseq
from conftest import REPO, make_image, run_cli, write_png

KL = REPO / "tests/fixtures/kl"
VQ = REPO / "tests/fixtures/diffusers/vq"


def test_autoencoder_kl_latents_equal_the_cli(tmp_path, cli):
    img = make_image(3, 70, 64)
    write_png(tmp_path / "a.png", img)
    t = imgseq.Tokenizer.from_pretrained(KL / "flux", size=64, patch=2)
    assert t.family == "AutoencoderKL" and t.kind == "latents"
    got = t.encode(img[None])
    run_cli(cli, "vae", "encode", tmp_path / "a.png", "--weights", KL / "flux", "--size", 64,
            "--patch", 2, "-o", tmp_path / "a.npy")
    want = np.load(tmp_path / "a.npy")
    assert got.dtype == np.float32 and got.shape == (1,) + want.shape == (1, 256, 64)
    np.testing.assert_array_equal(got[0], want)
    rec = t.decode(got)
    assert rec.dtype == np.uint8 and rec.shape == (1, 64, 64, 3)


def test_ldm_single_file_with_config_and_latent_maps(tmp_path, cli):
    img = make_image(4, 64, 64)
    write_png(tmp_path / "b.png", img)
    t = imgseq.Tokenizer.from_pretrained(KL / "ldm.safetensors", config=KL / "sd/config.json", size=64)
    got = t.encode(img)
    run_cli(cli, "vae", "encode", tmp_path / "b.png", "--weights", KL / "ldm.safetensors",
            "--config", KL / "sd/config.json", "--size", 64, "-o", tmp_path / "b.npy")
    np.testing.assert_array_equal(got[0], np.load(tmp_path / "b.npy"))
    assert got.shape == (1, 4, 16, 16)


def test_vq_family_tokens_equal_the_cli(tmp_path, cli):
    img = make_image(5, 40, 32)
    write_png(tmp_path / "c.png", img)
    t = imgseq.Tokenizer.from_pretrained(VQ, size=32)
    assert t.kind == "tokens" and "VQModel" in t.family
    got = t.encode(img[None])
    run_cli(cli, "vq", "encode", tmp_path / "c.png", "--weights", VQ, "--size", 32,
            "-o", tmp_path / "c.npy")
    np.testing.assert_array_equal(got[0], np.load(tmp_path / "c.npy"))
    with pytest.raises(TypeError, match="integer"):
        t.decode(np.zeros((1, 4, 2, 2), np.float32))


def test_errors_are_value_errors_naming_the_problem():
    with pytest.raises(ValueError, match="--preset|preset"):
        imgseq.Tokenizer.from_pretrained(KL / "ldm.safetensors")
    with pytest.raises(ValueError, match="patch"):
        imgseq.Tokenizer.from_pretrained(KL / "flux", size=64, patch=3)
    with pytest.raises(FileNotFoundError):
        imgseq.Tokenizer.from_pretrained(KL / "missing.safetensors")


def test_lfq_tokens_equal_the_cli_and_decode(tmp_path, cli):
    lfq = REPO / "tests/fixtures/lfq"
    img = make_image(6, 40, 32)
    write_png(tmp_path / "d.png", img)
    t = imgseq.LFQTokenizer(lfq / "tiny.ckpt", config=lfq / "tiny.yaml", size=32)
    got = t.encode(img[None])
    run_cli(cli, "vq", "encode", tmp_path / "d.png", "--weights", lfq / "tiny.ckpt",
            "--config", lfq / "tiny.yaml", "--size", 32, "-o", tmp_path / "d.npy")
    np.testing.assert_array_equal(np.asarray(got[0], np.int64), np.load(tmp_path / "d.npy").astype(np.int64))
    rec = t.decode(got)
    assert rec.dtype == np.uint8 and rec.shape[0] == 1


# Every discrete family through Tokenizer.from_pretrained, on the committed tiny fixtures:
# (name, weights, config, family name contains).
FAMILIES = [
    ("taming", "vqgan/tiny.safetensors", "vqgan/tiny_config.json", "taming"),
    ("llamagen", "llamagen/vq_tiny.pt", None, "LlamaGen"),
    ("diffusers", "diffusers/vq", None, "VQModel"),
    ("janus", "janus", None, "Janus"),
    ("ibq", "ibq/ibq_tiny.ckpt", None, "IBQ"),
    ("open_magvit2", "lfq/tiny.ckpt", "lfq/tiny.yaml", "Open-MAGVIT2"),
    ("var", "var/tiny.pth", None, "VAR"),
    ("titok", "titok/l", None, "TiTok"),
    ("maskgit-vqgan", "maskgit/maskgit-vqgan-imagenet-f16-256.bin", None, "MaskGIT"),
]


@pytest.mark.parametrize("name,weights,config,family", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_every_family_gives_the_clis_tokens_in_the_shard_dtype(tmp_path, cli, name, weights,
                                                                 config, family):
    fx = REPO / "tests/fixtures"
    img = make_image(7, 44, 36)
    write_png(tmp_path / "e.png", img)
    cfg = [] if config is None else ["--config", fx / config]
    t = imgseq.Tokenizer.from_pretrained(fx / weights, config=None if config is None else fx / config,
                                         size=32)
    assert t.kind == "tokens" and family in t.family, t.family
    # The description the manifests and the service give: the family's registry name.
    d = t.description
    assert d["family"] == name and d["output"]["kind"] == "codes", d
    assert len(d["weights"]["sha256"]) == 64 and d["input"]["size"] == 32
    got = t.encode(img[None])
    # One dtype rule: int64 at every API (the CLI's .npy too); only shards store less.
    assert got.dtype == np.int64, (got.dtype, t.n_codes)
    run_cli(cli, "vq", "encode", tmp_path / "e.png", "--weights", fx / weights, *cfg,
            "--size", 32, "-o", tmp_path / "e.npy")
    want = np.load(tmp_path / "e.npy")
    np.testing.assert_array_equal(got[0].astype(np.int64), want)
    rec = t.decode(got)
    assert rec.dtype == np.uint8 and rec.shape[0] == 1 and rec.shape[3] == 3
    # Any integer dtype decodes alike.
    np.testing.assert_array_equal(t.decode(got.astype(np.int64)), rec)
    bad = got.astype(np.int64)
    bad[0, 0, 0] = t.n_codes
    with pytest.raises(ValueError, match="outside the codebook"):
        t.decode(bad)


def test_chameleon_encodes_as_the_cli_and_says_it_has_no_decoder(tmp_path, cli):
    # transformers' ChameleonVQVAE keeps the encoder only: tokens, no pictures.
    fx = REPO / "tests/fixtures/chameleon"
    img = make_image(5, 40, 36)
    write_png(tmp_path / "c.png", img)
    t = imgseq.Tokenizer.from_pretrained(fx / "vq", size=32)
    assert t.description["family"] == "chameleon"
    got = t.encode(img[None])
    run_cli(cli, "encode", tmp_path / "c.png", "--model", fx / "vq", "--size", 32,
            "-o", tmp_path / "c.npy")
    np.testing.assert_array_equal(got[0], np.load(tmp_path / "c.npy"))
    with pytest.raises(ValueError, match="no decoder"):
        t.decode(got)


def test_cosmos_tokens_and_latents_equal_the_cli(tmp_path, cli):
    # NVIDIA's Cosmos tokenizers: TorchScript encoder.jit + decoder.jit, read weights-only.
    fx = REPO / "tests/fixtures/cosmos"
    img = make_image(9, 70, 64)
    write_png(tmp_path / "c.png", img)
    di = imgseq.Tokenizer.from_pretrained(fx / "di", size=64)
    assert di.description["family"] == "cosmos" and di.kind == "tokens"
    got = di.encode(img[None])
    run_cli(cli, "encode", tmp_path / "c.png", "--model", fx / "di", "--size", 64,
            "-o", tmp_path / "c.npy")
    np.testing.assert_array_equal(got[0], np.load(tmp_path / "c.npy"))
    assert got.shape == (1, 8, 8) and got.max() < 64000
    assert di.decode(got).shape == (1, 64, 64, 3)
    ci = imgseq.Tokenizer.from_pretrained(fx / "ci" / "encoder.jit", size=64)
    assert ci.kind == "latents"
    z = ci.encode(img[None])
    run_cli(cli, "encode", tmp_path / "c.png", "--model", fx / "ci", "--size", 64,
            "-o", tmp_path / "z.npy")
    np.testing.assert_array_equal(z[0], np.load(tmp_path / "z.npy"))
    assert z.shape == (1, 16, 8, 8)
    assert ci.decode(z).shape == (1, 64, 64, 3)


@pytest.mark.parametrize("kind", ["420", "444", "progressive", "gray", "cmyk", "committed"])
def test_jpeg_tokens_from_pillow_arrays_equal_the_cli(tmp_path, cli, kind):
    """The reference pipelines decode JPEG with Pillow: imgseq decodes as Pillow does, so the
    tokens of Pillow's arrays and of the CLI reading the file are the same, all of them."""
    Image = pytest.importorskip("PIL.Image")
    if kind == "committed":
        path = REPO / "crates/imgseq-core/tests/fixtures/pillow/libjpeg_411.jpg"
    else:
        im = Image.fromarray(make_image(7, 56, 72))
        im = {"gray": im.convert("L"), "cmyk": im.convert("CMYK")}.get(kind, im)
        opts = {"444": {"subsampling": 0}, "progressive": {"progressive": True}}.get(kind, {})
        path = tmp_path / f"{kind}.jpg"
        im.save(path, quality=87, **opts)
    pixels = np.asarray(Image.open(path).convert("RGB"))
    t = imgseq.Tokenizer.from_pretrained(VQ, size=32)
    got = t.encode(pixels[None])
    run_cli(cli, "vq", "encode", path, "--weights", VQ, "--size", 32, "-o", tmp_path / "c.npy")
    np.testing.assert_array_equal(got[0], np.load(tmp_path / "c.npy"))
