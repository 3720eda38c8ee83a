"""`read_token_shards` against hostile shards: float "tokens", npy headers declaring more than
they hold, FIFOs and broken tars are one ValueError/OSError naming the shard, never a
MemoryError, a hang or a float array passed on as tokens. Pure Python (tarfile + numpy)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest

import imgseq


def shard(path: Path, members: dict) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def npy(a: np.ndarray) -> bytes:
    b = io.BytesIO()
    np.save(b, a, allow_pickle=False)
    return b.getvalue()


def header_claiming(shape: tuple, dtype: str = "<u2") -> bytes:
    """An npy header declaring `shape` with almost no data behind it."""
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %r, }" % (dtype, shape)
    h = h + " " * (63 - (len(h) + 10) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h.encode() + b"\0" * 8


def test_read_token_shards_refuses_float_tokens(tmp_path):
    p = shard(tmp_path / "f.tar", {"a.tokens.npy": npy(np.zeros((2, 2), np.float32))})
    with pytest.raises(ValueError, match=r"f\.tar: a\.tokens\.npy holds float32 values"):
        list(imgseq.read_token_shards(p))


def test_read_token_shards_refuses_npy_header_larger_than_its_data(tmp_path):
    p = shard(tmp_path / "h.tar", {"a.tokens.npy": header_claiming((1000000, 1000000))})
    with pytest.raises(ValueError, match=r"h\.tar: a\.tokens\.npy declares shape"):
        list(imgseq.read_token_shards(p))


def test_read_token_shards_refuses_empty_and_3d_grids(tmp_path):
    p = shard(tmp_path / "e.tar", {"a.tokens.npy": npy(np.zeros((0, 5), np.uint16))})
    with pytest.raises(ValueError, match="empty"):
        list(imgseq.read_token_shards(p))
    p = shard(tmp_path / "d.tar", {"a.tokens.npy": npy(np.zeros((1, 2, 2), np.uint16))})
    with pytest.raises(ValueError, match=r"expected \(h, w\)"):
        list(imgseq.read_token_shards(p))


def test_read_token_shards_reads_good_shards_exactly(tmp_path):
    t = np.arange(6, dtype=np.uint16).reshape(2, 3)
    p = shard(tmp_path / "ok.tar", {"a.tokens.npy": npy(t), "a.json": b'{"x": 1}'})
    (s,) = list(imgseq.read_token_shards(p))
    assert s["key"] == "a" and s["json"] == {"x": 1}
    np.testing.assert_array_equal(s["tokens"], t)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_read_token_shards_refuses_a_fifo_without_hanging(tmp_path):
    p = tmp_path / "pipe.tar"
    os.mkfifo(p)
    with pytest.raises(OSError, match="not a regular file"):
        list(imgseq.read_token_shards(p))


def test_read_token_shards_refuses_a_broken_tar_with_value_error(tmp_path):
    p = tmp_path / "broken.tar"
    p.write_bytes(b"not a tar at all" * 64)
    with pytest.raises(ValueError, match=r"broken\.tar: not a readable tar"):
        list(imgseq.read_token_shards(p))
