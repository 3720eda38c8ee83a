"""Token shards written by `imgseq vq tokenize` read back by plain Python (tarfile + numpy),
by `imgseq.read_token_shards` and by the `webdataset` package; their tokens equal
`imgseq vq encode` of the same images and the package's `VQTokenizer.encode`. Parquet shards
(`--format parquet`) and Parquet sources (img2dataset's and Hugging Face `datasets`' layouts,
written here by pyarrow) are checked with `pyarrow` the same way."""

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
        # Shards store uint16; the reader gives int64, as every API does.
        assert s["tokens"].dtype == np.int64 and s["tokens"].shape == (16, 16)
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


@pytest.fixture(scope="module")
def tokenized_parquet(tmp_path_factory, cli, tokenized):
    """The images of `tokenized`, tokenized into Parquet shards of 2."""
    _, expected = tokenized
    out = tmp_path_factory.mktemp("pq") / "out"
    src = next(iter(expected)).parent
    src = src.parent if src.name == "sub" else src
    run_cli(cli, "vq", "tokenize", src, "-o", out, "--size", SIZE, "--shard-size", 2, "--format", "parquet")
    return out, expected


def test_parquet_shards_with_pyarrow(tokenized_parquet):
    pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (CI installs it)")
    import pyarrow.parquet as pq

    out, expected = tokenized_parquet
    m = json.loads((out / "manifest.json").read_text())
    names = sorted(p.name for p in out.glob("*.parquet"))
    assert names == [s["name"] for s in m["shards"]] == [f"shard-00000{i}.parquet" for i in range(3)]
    seen = {}
    for rec in m["shards"]:
        t = pq.read_table(out / rec["name"])
        assert t.num_rows == rec["samples"]
        assert t.schema.field("key").type == pa.string()
        assert t.schema.field("tokens").type.value_type == pa.uint16()
        assert t.schema.field("height").type == t.schema.field("width").type == pa.int32()
        assert t.schema.field("metadata").type == pa.string()
        for r in t.to_pylist():
            meta = json.loads(r["metadata"])
            assert meta["key"] == r["key"] and meta["source"] == r["source"]
            tokens = np.asarray(r["tokens"], np.int64).reshape(r["height"], r["width"])
            seen[source_of(meta)] = tokens
    assert seen.keys() == expected.keys()
    for src, tokens in seen.items():
        np.testing.assert_array_equal(tokens, expected[src])


def _png_bytes(path: Path, img: np.ndarray) -> bytes:
    write_png(path, img)
    return path.read_bytes()


def test_parquet_sources_written_by_pyarrow_equal_vq_encode(tmp_path, cli):
    """img2dataset's layout (key, a binary `jpg` column, metadata columns; a failed download with
    a null image) and Hugging Face's (a struct image {bytes, path} + an int label), as pyarrow
    writes them by default (snappy) and with gzip: tokens equal `vq encode` of the same bytes."""
    pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (CI installs it)")
    import pyarrow.parquet as pq

    sizes = [(256, 300), (300, 256), (260, 260)]
    files = [tmp_path / f"img{i}.png" for i in range(3)]
    blobs = [_png_bytes(f, make_image(300 + i, h, w)) for i, (f, (h, w)) in enumerate(zip(files, sizes))]
    expected = cli_encode(cli, files, SIZE, tmp_path / "e.npy")
    i2d = pa.table(
        {
            "key": [f"{i:09d}" for i in range(4)],
            "caption": [f"caption {i}" for i in range(4)],
            "status": ["success", "success", "failed_to_download", "success"],
            "error_message": [None, None, "timeout", None],
            "jpg": pa.array([blobs[0], blobs[1], None, blobs[2]], pa.binary()),
        }
    )
    pq.write_table(i2d, tmp_path / "i2d.parquet")
    image = pa.array([{"bytes": b, "path": f"p{i}.png"} for i, b in enumerate(blobs)],
                     pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    pq.write_table(pa.table({"image": image, "label": [3, 1, 4]}), tmp_path / "hf.parquet",
                   compression="gzip", row_group_size=2)
    out = tmp_path / "out"
    p = run_cli(cli, "vq", "tokenize", tmp_path / "i2d.parquet", tmp_path / "hf.parquet", "-o", out,
                "--size", SIZE, "--format", "parquet")
    assert "6 tokenized, 1 skipped" in p.stdout
    rows = []
    for f in sorted(out.glob("shard-*.parquet")):
        rows.extend(pq.read_table(f).to_pylist())
    keys = [r["key"] for r in rows]
    assert keys == ["000000000", "000000001", "000000003", "hf-00000", "hf-00001", "hf-00002"]
    for r, want in zip(rows, [0, 1, 2, 0, 1, 2]):
        tokens = np.asarray(r["tokens"], np.int64).reshape(r["height"], r["width"])
        np.testing.assert_array_equal(tokens, expected[want])
    metas = [json.loads(r["metadata"]) for r in rows]
    assert metas[2]["caption"] == "caption 3" and metas[2]["json"]["status"] == "success"
    assert [m["label"] for m in metas[3:]] == [3, 1, 4]
    assert metas[4]["json"]["image.path"] == "p1.png"
    errors = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    assert [e["key"] for e in errors] == ["000000002"]
    assert errors[0]["reason"].endswith("no image, jpg is null (timeout)")


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
