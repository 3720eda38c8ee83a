"""ViT: embeddings (n, 65, 48) float32 equal to `imgseq vit embed --npy`, classification."""

from __future__ import annotations

import numpy as np
import pytest

import imgseq
from conftest import make_image, run_cli, write_png


@pytest.fixture(scope="module")
def vit():
    # f32 on both sides of every comparison with the CLI: the embeddings are compared to f32
    # references, and `auto` takes bf16 on some CPUs (AMD Zen 4).
    return imgseq.ViT(precision="f32")


def garment(seed: int, h: int = 28, w: int = 28) -> np.ndarray:
    """A light object on black, as in Fashion-MNIST."""
    rng = np.random.default_rng(seed)
    img = np.zeros((h, w), np.uint8)
    top, left = rng.integers(2, 6, 2)
    img[top : h - top, left : w - left] = rng.integers(120, 250)
    img[h // 2 :, w // 2 - 1 : w // 2 + 1] = 0  # two legs
    return img


def test_properties(vit):
    assert vit.labels[:2] == ["T-shirt/top", "Trouser"] and len(vit.labels) == 10
    assert vit.image_size == 32 and vit.num_channels == 3 and vit.hidden_size == 48
    assert "ViT" in repr(vit)


def test_embed_shapes(vit):
    gray = np.stack([garment(i) for i in range(3)])
    e = vit.embed(gray)
    assert e.dtype == np.float32 and e.shape == (3, 65, 48)
    assert np.isfinite(e).all()
    # Gray input becomes three equal channels for the 3-channel model (as HF's pipeline
    # makes of a gray PNG), so an RGB of three equal channels is the same; (n, h, w, 1) is gray.
    rgb = np.repeat(gray[..., None], 3, axis=-1)
    np.testing.assert_allclose(vit.embed(rgb), e, rtol=0, atol=0)
    np.testing.assert_array_equal(vit.embed(gray[..., None]), e)
    # Another input size: interpolated positions, more tokens.
    assert vit.embed(gray, size=48).shape == (3, 145, 48)
    assert vit.embed(gray[:0]).shape == (0, 65, 48)


def test_embed_equals_cli(tmp_path, cli, vit):
    img = garment(7, 40, 30)
    write_png(tmp_path / "g.png", img)
    run_cli(cli, "vit", "embed", tmp_path / "g.png", "--npy", tmp_path / "e.npy", "--precision", "f32")
    expected = np.load(tmp_path / "e.npy")
    assert expected.shape == (1, 65, 48)
    np.testing.assert_array_equal(vit.embed(img[None]), expected)
    # A colour photo: converted to gray exactly as the CLI converts it.
    rgb = make_image(1, 50, 60)
    write_png(tmp_path / "c.png", rgb)
    run_cli(cli, "vit", "embed", tmp_path / "c.png", "--npy", tmp_path / "c.npy", "--precision", "f32")
    np.testing.assert_array_equal(vit.embed(rgb[None]), np.load(tmp_path / "c.npy"))


def test_precision_is_the_clis(tmp_path, cli):
    """precision= means what --precision means: f32 embeddings equal `--precision f32`'s."""
    img = garment(3, 28, 28)
    write_png(tmp_path / "g.png", img)
    run_cli(cli, "vit", "embed", tmp_path / "g.png", "--npy", tmp_path / "e.npy", "--precision", "f32")
    np.testing.assert_array_equal(imgseq.ViT(precision="f32").embed(img[None]), np.load(tmp_path / "e.npy"))
    with pytest.raises(ValueError, match="precision: unknown precision `f16`"):
        imgseq.ViT(precision="f16")
    with pytest.raises(ValueError, match="precision"):
        imgseq.VQTokenizer(precision="int8")


def test_classify(tmp_path, cli, vit):
    imgs = np.stack([garment(i) for i in range(2)])
    top = vit.classify(imgs, k=3)
    assert len(top) == 2
    for row in top:
        assert len(row) == 3
        assert all(label in vit.labels for label, _ in row)
        probs = [p for _, p in row]
        assert probs == sorted(probs, reverse=True) and 0 < probs[0] <= 1
    p = vit.probabilities(imgs)
    assert p.shape == (2, 10) and p.dtype == np.float32
    np.testing.assert_allclose(p.sum(axis=1), 1, atol=1e-5)
    assert vit.labels[int(p[0].argmax())] == top[0][0][0]
    # The CLI's top label and probability (printed to 3 decimals) for the same image.
    write_png(tmp_path / "g.png", imgs[0])
    out = run_cli(cli, "vit", "classify", tmp_path / "g.png", "-k", "1", "--precision", "f32").stdout
    label, prob = out.strip().split(": ", 1)[1].rsplit(" ", 1)
    assert label == top[0][0][0]
    assert float(prob) == pytest.approx(top[0][0][1], abs=6e-4)
    assert len(vit.classify(imgs, k=100)[0]) == 10


def test_errors(vit, tmp_path):
    with pytest.raises(TypeError, match="uint8"):
        vit.embed(np.zeros((1, 28, 28), np.float32))
    with pytest.raises(ValueError, match=r"shape \(n, h, w\) or \(n, h, w, 3\)"):
        vit.embed(np.zeros((28, 28), np.uint8))
    with pytest.raises(ValueError, match="k 0 must be positive"):
        vit.classify(np.zeros((1, 28, 28), np.uint8), k=0)
    with pytest.raises(ValueError, match="50"):
        vit.embed(np.zeros((1, 28, 28), np.uint8), size=50)
    with pytest.raises(FileNotFoundError):
        imgseq.ViT(tmp_path / "nothing")
