#!/usr/bin/env python3
"""Photos that Debian ships packed inside Qt resource files (`.rcc`), unpacked to plain files
so that `scripts/make_photo_split.py` can list them for `imgseq vq train`.

    apt-get install gcompris-qt-data
    python3 scripts/extract_photo_resources.py     # → data/photos/extracted/ (git-ignored)

Only the standard library. What it takes is fixed below (`SOURCES`): the photo resources of
gcompris-qt-data's activities that are photographs (monuments, animals, musicians, the sea),
reviewed by eye — not the cartoons, maps, paintings (`details` holds Van Goghs)
or the planets. The files keep their resource paths, so each one traces back to its `.rcc`
and its place in GCompris' source tree (the `README`/licence files next to them in that tree
name each picture's author and licence: public domain, CC0, CC-BY, CC-BY-SA, Wikimedia
Commons; Debian's copyright file covers the package as GPL-3+).

The Qt resource format (`qres` header, v1–v3): a tree of 14-byte (v1) or 22-byte (v2+)
nodes — name offset u32, flags u16, then (directory) child count u32 + first child u32 or
(file) country/language u32 + data offset u32 — a names table (u16 length, u32 hash, UTF-16BE
name) and a data table (u32 length + bytes; flag 1 = zlib with a 4-byte size prefix, flag 4 =
zstd, which these files do not use and which is refused by name). All integers big-endian.
"""
import fnmatch
import os
import struct
import sys
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "data", "photos", "extracted")
RCC_DIR = "/usr/share/gcompris-qt/rcc"

# (package, rcc file, glob of the resource paths taken)
SOURCES = [
    ("gcompris-qt-data", "explore_monuments.rcc", "*/resource/*/*.webp"),
    ("gcompris-qt-data", "erase.rcc", "*/resource/*.webp"),
    ("gcompris-qt-data", "explore_world_animals.rcc", "*/resource/*/*.webp"),
    ("gcompris-qt-data", "explore_farm_animals.rcc", "*/resource/*/*.webp"),
    ("gcompris-qt-data", "explore_world_music.rcc", "*/resource/*/*.webp"),
    ("gcompris-qt-data", "clickgame.rcc", "*/resource/sea*.webp"),
]


class RccError(Exception):
    pass


def rcc_files(path):
    """Yields (resource path, bytes) of every file in the Qt resource file `path`."""
    with open(path, "rb") as fh:
        b = fh.read()

    def u(fmt, off):
        try:
            return struct.unpack_from(fmt, b, off)
        except struct.error:
            raise RccError(f"{path}: truncated at byte {off}") from None

    if b[:4] != b"qres":
        raise RccError(f"{path}: not a Qt resource file (no 'qres' magic)")
    version, tree, data, names = u(">IIII", 4)
    if version not in (1, 2, 3):
        raise RccError(f"{path}: Qt resource format version {version} (1-3 supported)")
    node_size = 14 if version == 1 else 22

    def name(off):
        (n,) = u(">H", names + off)
        raw = b[names + off + 6:names + off + 6 + 2 * n]
        if len(raw) != 2 * n:
            raise RccError(f"{path}: truncated name table")
        return raw.decode("utf-16-be")

    stack = [(0, "")]
    seen = set()
    while stack:
        i, parent = stack.pop()
        if i in seen:
            raise RccError(f"{path}: the resource tree has a cycle at node {i}")
        seen.add(i)
        p = tree + i * node_size
        name_off, flags = u(">IH", p)
        here = f"{parent}/{name(name_off)}" if i else ""
        if flags & 2:  # directory
            count, first = u(">II", p + 6)
            stack += [(c, here) for c in range(first, first + count)]
            continue
        (off,) = u(">I", p + 10)
        (size,) = u(">I", data + off)
        blob = b[data + off + 4:data + off + 4 + size]
        if len(blob) != size:
            raise RccError(f"{path}: {here}: truncated data")
        if flags & 4:
            raise RccError(f"{path}: {here}: zstd-compressed resources are not supported")
        if flags & 1:
            blob = zlib.decompress(blob[4:])
        yield here.lstrip("/"), blob


def main():
    written = 0
    for pkg, rcc, pattern in SOURCES:
        src = os.path.join(RCC_DIR, rcc)
        if not os.path.isfile(src):
            print(f"note: {src} missing (apt-get install {pkg}), skipped", file=sys.stderr)
            continue
        base = os.path.join(OUT, pkg, rcc[:-len(".rcc")])
        try:
            files = [(r, d) for r, d in rcc_files(src) if fnmatch.fnmatch(r, pattern)]
        except (RccError, zlib.error) as e:
            sys.exit(f"error: {e}")
        for res, blob in files:
            dst = os.path.join(base, res)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if os.path.exists(dst):
                with open(dst, "rb") as fh:
                    if fh.read() == blob:
                        continue
            tmp = dst + ".part"
            with open(tmp, "wb") as fh:
                fh.write(blob)
            os.replace(tmp, dst)
            written += 1
        print(f"{rcc}: {len(files)} photos")
    print(f"{written} file(s) written under {os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    main()
