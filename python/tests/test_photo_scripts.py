"""The Qt resource (.rcc) reader of scripts/extract_photo_resources.py, on small files written
here in that format (gcompris-qt-data ships its photos that way)."""

from __future__ import annotations

import importlib.util
import struct
import zlib

import pytest

from conftest import REPO


def load_script():
    spec = importlib.util.spec_from_file_location(
        "extract_photo_resources", REPO / "scripts" / "extract_photo_resources.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_rcc(path, version=2, files=None):
    """root/ → a/ → {x.webp (zlib), y.txt (stored)}, as Qt's rcc writes it."""
    files = files or [("x.webp", b"RIFF....WEBPVP8 fake", True), ("y.txt", b"hello", False)]
    names = b""
    name_off = {}
    for n in ["a"] + [f[0] for f in files]:
        name_off[n] = len(names)
        enc = n.encode("utf-16-be")
        names += struct.pack(">HI", len(n), 0) + enc
    data = b""
    data_off = []
    for _, blob, comp in files:
        data_off.append(len(data))
        stored = struct.pack(">I", len(blob)) + zlib.compress(blob) if comp else blob
        data += struct.pack(">I", len(stored)) + stored
    tail = b"\0" * 8 if version >= 2 else b""  # last-modified
    # node 0 = root (1 child from node 1), node 1 = a/ (children from node 2), then files
    tree = struct.pack(">IHII", 0, 2, 1, 1) + tail
    tree += struct.pack(">IHII", name_off["a"], 2, len(files), 2) + tail
    for (n, _, comp), off in zip(files, data_off):
        tree += struct.pack(">IHHHI", name_off[n], 1 if comp else 0, 0, 0, off) + tail
    header = 20 if version < 3 else 24
    t, d = header, header + len(tree)
    nm = d + len(data)
    head = b"qres" + struct.pack(">IIII", version, t, d, nm)
    if version >= 3:
        head += struct.pack(">I", 0)
    path.write_bytes(head + tree + data + names)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_rcc_reader_gives_every_file_with_its_resource_path(tmp_path, version):
    mod = load_script()
    p = tmp_path / "t.rcc"
    write_rcc(p, version)
    got = dict(mod.rcc_files(str(p)))
    assert got == {"a/x.webp": b"RIFF....WEBPVP8 fake", "a/y.txt": b"hello"}


def test_truncated_or_foreign_rcc_is_an_error_naming_the_file(tmp_path):
    mod = load_script()
    p = tmp_path / "t.rcc"
    write_rcc(p)
    full = p.read_bytes()
    p.write_bytes(full[: len(full) - 12])  # the names table cut short
    with pytest.raises(mod.RccError, match="t.rcc"):
        list(mod.rcc_files(str(p)))
    p.write_bytes(b"PK\x03\x04" + full[4:])
    with pytest.raises(mod.RccError, match="not a Qt resource file"):
        list(mod.rcc_files(str(p)))
