"""examples/ray_tokenize.py on a local Ray instance: its Parquet tokens equal `imgseq vq encode`,
in the columns and types of the CLI's Parquet shards (`vq tokenize --format parquet`).

Runs where `ray` (with Ray Data, pyarrow and Pillow) is installed: CI installs them (about
140 s on 2 cores) and runs it on a local Ray instance; elsewhere it is skipped with that reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, cli_encode, make_image, run_cli, write_png

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'ray[data]' pillow)")
pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed")
pytest.importorskip("PIL", reason="Pillow is not installed (Ray Data's read_images needs it)")

SIZE = 256


def test_ray_tokenize_equals_cli(tmp_path, cli):
    src = tmp_path / "images"
    src.mkdir()
    paths = []
    for i, (h, w) in enumerate([(256, 300), (300, 256), (256, 256), (256, 300)]):
        paths.append(src / f"img{i}.png")
        write_png(paths[-1], make_image(200 + i, h, w))
    out = tmp_path / "parquet"
    # As a user runs it: a fresh process that starts (and stops) a local Ray instance.
    p = subprocess.run(
        [sys.executable, str(REPO / "examples/ray_tokenize.py"), str(src), "-o", str(out),
         "--size", str(SIZE), "--batch-size", "3", "--workers", "1"],
        capture_output=True, text=True, timeout=600,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    cli_out = tmp_path / "cli"
    run_cli(cli, "vq", "tokenize", paths[0], "-o", cli_out, "--size", SIZE, "--format", "parquet")
    cli_schema = pq.read_schema(cli_out / "shard-000000.parquet")
    rows = []
    for f in sorted(out.glob("*.parquet")):
        t = pq.read_table(f)
        for name in ("key", "tokens", "height", "width", "source", "metadata"):
            assert t.schema.field(name).type == cli_schema.field(name).type, name
        rows.extend(t.to_pylist())
    assert len(rows) == len(paths)
    for r in rows:
        assert json.loads(r["metadata"])["source"] == r["source"]
        assert r["key"] == Path(r["source"]).stem
        p = Path(r["source"])
        p = p if p.is_absolute() else Path("/") / p
        i = int(p.stem[3:])
        expected = cli_encode(cli, [paths[i]], SIZE, tmp_path / f"e{i}.npy")[0]
        tokens = np.asarray(r["tokens"]).reshape(r["height"], r["width"])
        np.testing.assert_array_equal(tokens.astype(np.int64), expected)
