"""VQTokenizer: shapes, dtypes, equality with `imgseq vq encode`, errors."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import numpy as np
import pytest

import imgseq
from conftest import REPO, cli_encode, make_image, write_png


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_default_weights_are_inside_the_package(monkeypatch):
    monkeypatch.delenv("IMGSEQ_WEIGHTS_DIR", raising=False)
    pkg = Path(imgseq.__file__).resolve().parent
    assert imgseq.default_weights_dir() == pkg / "weights"
    for model, files in {
        "vqgan": ["model.safetensors", "config.json"],
        "vit-fashion-mnist": ["model.safetensors", "config.json", "training.json"],
    }.items():
        for f in files:
            shipped = pkg / "weights" / model / f
            assert shipped.is_file(), shipped
            assert sha256(shipped) == sha256(REPO / "weights" / model / f)
    # Training state is not inference: it stays out of the wheel.
    assert not (pkg / "weights" / "vqgan" / "optimizer.safetensors").exists()
    t = imgseq.VQTokenizer()
    assert Path(t.weights).resolve() == (pkg / "weights/vqgan/model.safetensors").resolve()


def test_properties(tokenizer256):
    t = tokenizer256
    assert t.n_codes == 1024
    assert t.size == 256
    assert t.downsample_factor == 16
    assert t.grid() == (16, 16)
    assert t.grid(384) == (24, 24)
    assert "VQTokenizer" in repr(t)
    with pytest.raises(ValueError, match="multiple of 16"):
        t.grid(100)


def test_bf16_encoder_is_an_opt_in_that_keeps_most_tokens(tokenizer256):
    assert tokenizer256.encoder_precision == "f32"
    assert tokenizer256.precision in ("f32", "bf16")
    t = imgseq.VQTokenizer(size=256, bf16_encoder=True)
    assert t.encoder_precision == "bf16"
    img = make_image(7, 256, 256)
    a, b = tokenizer256.encode(img), t.encode(img)
    assert a.shape == b.shape and a.shape[-2:] == (16, 16) and a.dtype == b.dtype
    assert ((b >= 0) & (b < 1024)).all()
    assert (a == b).mean() >= 0.9, (a == b).mean()


def test_encode_decode_shapes_and_dtypes(tokenizer256):
    imgs = np.stack([make_image(i, 260, 300) for i in range(2)])
    tok = tokenizer256.encode(imgs)
    assert tok.dtype == np.int64 and tok.shape == (2, 16, 16)
    assert int(tok.max()) < tokenizer256.n_codes
    # One image (h, w, 3) gives a batch of one.
    one = tokenizer256.encode(imgs[1])
    assert one.shape == (1, 16, 16)
    np.testing.assert_array_equal(one[0], tok[1])
    rec = tokenizer256.decode(tok)
    assert rec.dtype == np.uint8 and rec.shape == (2, 256, 256, 3)
    # (h, w) grids and any integer dtype decode too, to the same pixels.
    rec1 = tokenizer256.decode(tok[0].astype(np.int64))
    assert rec1.shape == (1, 256, 256, 3)
    np.testing.assert_array_equal(rec1[0], rec[0])
    # Non-contiguous input is fine.
    np.testing.assert_array_equal(tokenizer256.decode(tok[:, ::-1, :][:, ::-1, :]), rec)
    # Empty batches.
    assert tokenizer256.encode(np.zeros((0, 256, 256, 3), np.uint8)).shape == (0, 16, 16)


def test_encode_equals_cli(tmp_path, cli, tokenizer256):
    # Different sizes and aspect ratios: the resize + centre crop must match the CLI's.
    imgs = [make_image(10, 300, 420), make_image(11, 512, 256), make_image(12, 256, 256)]
    for i, img in enumerate(imgs):
        write_png(tmp_path / f"{i}.png", img)
        expected = cli_encode(cli, [tmp_path / f"{i}.png"], 256, tmp_path / f"{i}.npy")
        got = tokenizer256.encode(img[None])
        np.testing.assert_array_equal(got.astype(np.int64), expected)
    # A batch at another size, against the CLI's batch.
    batch = np.stack([make_image(20 + i, 200, 240) for i in range(3)])
    paths = []
    for i, img in enumerate(batch):
        paths.append(tmp_path / f"b{i}.png")
        write_png(paths[-1], img)
    t192 = imgseq.VQTokenizer(size=192)
    expected = cli_encode(cli, paths, 192, tmp_path / "b.npy")
    np.testing.assert_array_equal(t192.encode(batch).astype(np.int64), expected)


def test_out_of_range_tokens_are_a_one_line_value_error(tokenizer256):
    tok = np.zeros((2, 4, 4), np.int64)
    tok[1, 2, 3] = 1024
    with pytest.raises(ValueError) as e:
        tokenizer256.decode(tok)
    msg = str(e.value)
    assert "\n" not in msg
    assert "token 1024 at [1, 2, 3] is outside the codebook (n_embed = 1024, valid 0..=1023)" in msg
    with pytest.raises(ValueError, match=r"token -1 at \[0, 0\]"):
        tokenizer256.decode(np.full((4, 4), -1, np.int32))
    with pytest.raises(ValueError, match="outside the codebook"):
        tokenizer256.decode(np.full((1, 2, 2), 2**64 - 1, np.uint64))


def test_bad_input_errors(tokenizer256):
    img = make_image(0, 256, 256)
    with pytest.raises(TypeError, match="uint8"):
        tokenizer256.encode(img.astype(np.float32)[None])
    with pytest.raises(TypeError, match="numpy array"):
        tokenizer256.encode([[1, 2, 3]])
    with pytest.raises(ValueError, match=r"shape \(n, h, w, 3\)"):
        tokenizer256.encode(img[None, ..., :2])
    with pytest.raises(ValueError, match=r"image 0: image is 200x100, its shorter side 100 is smaller than the requested size 256"):
        tokenizer256.encode(np.zeros((1, 100, 200, 3), np.uint8))
    small = tokenizer256.encode(np.zeros((1, 100, 200, 3), np.uint8), upscale=True)
    assert small.shape == (1, 16, 16)
    with pytest.raises(ValueError, match="batch_size 0 must be positive"):
        tokenizer256.encode(img[None], batch_size=0)
    with pytest.raises(TypeError, match="integer"):
        tokenizer256.decode(np.zeros((1, 4, 4), np.float32))
    with pytest.raises(ValueError, match=r"shape \(n, h, w\) or \(h, w\)"):
        tokenizer256.decode(np.zeros((4,), np.int64))


def test_model_loading_errors(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        imgseq.VQTokenizer(weights=tmp_path / "missing.safetensors", config=REPO / "weights/vqgan/config.json")
    assert "missing.safetensors" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match="size 100 must be a positive multiple of 16"):
        imgseq.VQTokenizer(size=100)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="bad.safetensors"):
        imgseq.VQTokenizer(weights=bad, config=REPO / "weights/vqgan/config.json")


def test_tiny_fixture_model_loads(tmp_path):
    fx = REPO / "tests/fixtures/vqgan"
    t = imgseq.VQTokenizer(fx / "tiny.safetensors", fx / "tiny_config.json", size=32)
    tok = t.encode(np.stack([make_image(3, 40, 48)]))
    assert tok.shape == (1,) + t.grid() and tok.dtype == np.int64
    assert t.decode(tok).shape == (1, 32, 32, 3)


def test_threads_share_a_tokenizer(tokenizer256):
    # The GIL is released during compute: two threads on one tokenizer give the same tokens as
    # one thread.
    imgs = np.stack([make_image(30 + i, 256, 256) for i in range(2)])
    expected = tokenizer256.encode(imgs)
    out = [None, None]

    def work(i):
        out[i] = tokenizer256.encode(imgs)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for o in out:
        np.testing.assert_array_equal(o, expected)
