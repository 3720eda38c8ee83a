"""Token shards written by `imgseq vq tokenize` read back by plain Python (tarfile + numpy),
by `imgseq.read_token_shards` and by the `webdataset` package; their tokens equal
`imgseq vq encode` of the same images and the package's `VQTokenizer.encode`."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

import imgseq
from conftest import cli_encode, make_image, run_cli, write_png

SIZE = 256


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory, cli):
    """Five PNGs of different sizes (one in a subfolder), tokenized into shards of 2, and the
    CLI's `vq encode` of each, by source path."""
    root = tmp_path_factory.mktemp("shards")
    src = root / "images"
    (src / "sub").mkdir(parents=True)
    sizes = [(256, 300), (300, 256), (280, 280), (400, 260), (256, 256)]
    paths = []
    for i, (h, w) in enumerate(sizes):
        p = src / ("sub" if i == 3 else "") / f"img{i}.png"
        write_png(p, make_image(100 + i, h, w))
        paths.append(p)
    out = root / "out"
    run_cli(cli, "vq", "tokenize", src, "-o", out, "--size", SIZE, "--shard-size", 2)
    expected = {}
    for i, p in enumerate(paths):
        expected[p.resolve()] = cli_encode(cli, [p], SIZE, root / f"e{i}.npy")[0]
    return out, expected


def source_of(meta: dict) -> Path:
    return Path(meta["source"]).resolve()


def test_manifest(tokenized):
    out, expected = tokenized
    m = json.loads((out / "manifest.json").read_text())
    assert m["tokenizer"]["size"] == SIZE and m["tokenizer"]["grid"] == [16, 16]
    assert sum(s["samples"] for s in m["shards"]) == len(expected) == 5
    assert sorted(s["name"] for s in m["shards"]) == sorted(p.name for p in out.glob("*.tar"))


def test_tarfile_and_numpy(tokenized):
    out, expected = tokenized
    seen = {}
    for shard in sorted(out.glob("*.tar")):
        with tarfile.open(shard) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
        keys = [n[: -len(".tokens.npy")] for n in members if n.endswith(".tokens.npy")]
        assert keys and len(members) == 2 * len(keys)
        for key in keys:
            tokens = np.load(io.BytesIO(members[f"{key}.tokens.npy"]))
            meta = json.loads(members[f"{key}.json"])
            assert tokens.dtype == np.uint16 and tokens.shape == (16, 16)
            seen[source_of(meta)] = tokens
    assert seen.keys() == expected.keys()
    for src, tokens in seen.items():
        np.testing.assert_array_equal(tokens.astype(np.int64), expected[src])


def test_read_token_shards(tokenized, tokenizer256):
    out, expected = tokenized
    samples = list(imgseq.read_token_shards(out))
    assert len(samples) == 5
    assert len({s["key"] for s in samples}) == 5
    for s in samples:
        assert s["tokens"].dtype == np.uint16 and s["tokens"].shape == (16, 16)
        assert s["json"]["key"] == s["key"]
        np.testing.assert_array_equal(s["tokens"].astype(np.int64), expected[source_of(s["json"])])
    # One shard, a list of shards.
    first = sorted(out.glob("*.tar"))[0]
    assert len(list(imgseq.read_token_shards(first))) == 2
    assert len(list(imgseq.read_token_shards(sorted(out.glob("*.tar"))))) == 5
    # The package's encoder gives the shards' tokens.
    for s in samples[:2]:
        img = read_png_rgb(source_of(s["json"]))
        np.testing.assert_array_equal(tokenizer256.encode(img[None])[0], s["tokens"])


def test_read_token_shards_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(imgseq.read_token_shards(tmp_path / "nothing"))
    with pytest.raises(FileNotFoundError, match="no .tar token shards"):
        list(imgseq.read_token_shards(tmp_path))


def test_webdataset(tokenized):
    wds = pytest.importorskip("webdataset")
    out, expected = tokenized
    urls = [str(p) for p in sorted(out.glob("*.tar"))]
    ds = wds.WebDataset(urls, shardshuffle=False).decode()
    n = 0
    for sample in ds:
        tokens, meta = sample["tokens.npy"], sample["json"]
        assert tokens.dtype == np.uint16 and tokens.shape == (16, 16)
        np.testing.assert_array_equal(tokens.astype(np.int64), expected[source_of(meta)])
        n += 1
    assert n == 5


def read_png_rgb(path: Path) -> np.ndarray:
    """Reads the 8-bit RGB PNGs conftest.write_png writes (filter 0 rows only)."""
    import struct
    import zlib

    data = path.read_bytes()
    pos, idat, w, h = 8, b"", 0, 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        tag, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        if tag == b"IHDR":
            w, h = struct.unpack(">II", body[:8])
        elif tag == b"IDAT":
            idat += body
        pos += 12 + n
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + w * 3)
    assert (raw[:, 0] == 0).all()
    return raw[:, 1:].reshape(h, w, 3).copy()
