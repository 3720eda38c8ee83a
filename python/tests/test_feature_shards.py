"""`imgseq tokenize --model TOWER` feature shards read by plain numpy / pyarrow and by
imgseq.read_feature_shards, equal to `imgseq encode`'s embeddings up to float16 (or bfloat16)
rounding; a vision tower opened by imgseq.Tokenizer with its layer choice."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest

import imgseq
from conftest import REPO, make_image, run_cli, write_png

CLIP = REPO / "tests/fixtures/clip/vision"


def _plain(out, fmt):
    """key → the stored array, read with numpy / pyarrow only (bfloat16 widened by hand)."""
    manifest = json.loads((out / "manifest.json").read_text())
    plain = {}
    for s in manifest["shards"]:
        path = out / s["name"]
        if fmt == "wds":
            with tarfile.open(path) as tar:
                for m in tar:
                    if m.name.endswith(".features.npy"):
                        a = np.load(io.BytesIO(tar.extractfile(m).read()))
                        if a.dtype == np.uint16:
                            a = (a.astype(np.uint32) << 16).view(np.float32)
                        plain[m.name[: -len(".features.npy")]] = a
        else:
            import pyarrow.parquet as pq

            table = pq.read_table(path)
            bf16 = (table.schema.metadata or {}).get(b"imgseq.dtype") == b"bfloat16"
            for row in table.to_pylist():
                a = np.frombuffer(row["features"], "<u2" if bf16 else "<f2").reshape(row["shape"])
                if bf16:
                    a = (a.astype(np.uint32) << 16).view(np.float32)
                plain[row["key"]] = a
    return manifest, plain


@pytest.mark.parametrize("fmt", ["wds", "parquet"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_feature_shards_of_both_formats_equal_encode(tmp_path, cli, fmt, dtype):
    src = tmp_path / "imgs"
    src.mkdir()
    names = ["a", "b", "c"]
    for i, n in enumerate(names):
        write_png(src / f"{n}.png", make_image(20 + i, 44, 36))
    layer = ["--layer", "-2", "--patches-only"]
    run_cli(cli, "encode", *[src / f"{n}.png" for n in names], "--model", CLIP, *layer,
            "-o", tmp_path / "enc.npy")
    want = dict(zip(names, np.load(tmp_path / "enc.npy")))
    out = tmp_path / "feats"
    run_cli(cli, "tokenize", src, "--model", CLIP, *layer, "--format", fmt, "--dtype", dtype,
            "--shard-size", 2, "-o", out)
    manifest, plain = _plain(out, fmt)
    feats = manifest["tokenizer"]["features"]
    assert manifest["format"] == "imgseq-features/1"
    assert feats == {"dtype": dtype, "shape": [16, 32], "output": "hidden_states[-2]",
                     "patches_only": True}
    read = {s["key"]: s["features"] for s in imgseq.read_feature_shards(out)}
    assert sorted(plain) == sorted(read) == names
    # float16 keeps 11 significant bits, bfloat16 8; bfloat16 comes back as exact float32.
    rtol, kind = (2 ** -10, np.float16) if dtype == "float16" else (2 ** -7, np.float32)
    for k in names:
        assert plain[k].dtype == read[k].dtype == kind
        assert list(read[k].shape) == feats["shape"] == list(want[k].shape)
        np.testing.assert_array_equal(plain[k], read[k])
        np.testing.assert_allclose(read[k].astype(np.float32), want[k], rtol=rtol, atol=1e-7)
    # One shard, or a list of them, reads the same.
    one = [s["key"] for s in imgseq.read_feature_shards(out / manifest["shards"][0]["name"])]
    assert one == ["a", "b"]
    # The latent reader refuses the folder.
    with pytest.raises(ValueError, match="not a latent shard set"):
        list(imgseq.read_latent_shards(out))


def test_a_tower_opens_in_tokenizer_with_its_layer_choice(tmp_path, cli):
    ext = pytest.importorskip("imgseq._imgseq")
    assert ext is not None
    img = make_image(7, 40, 48)
    write_png(tmp_path / "a.png", img)
    t = imgseq.Tokenizer.from_pretrained(CLIP, layer=-2, patches_only=True)
    assert t.kind == "embeddings" and t.n_codes is None
    assert t.description["config"]["output"] == "hidden_states[-2]"
    got = t.encode(img[None])
    run_cli(cli, "encode", tmp_path / "a.png", "--model", CLIP, "--layer", -2, "--patches-only",
            "-o", tmp_path / "a.npy")
    want = np.load(tmp_path / "a.npy")
    assert got.dtype == np.float32 and got.shape == (1, 16, 32) == (1,) + want.shape
    np.testing.assert_array_equal(got[0], want)
    pooled = imgseq.Tokenizer.from_pretrained(CLIP, pooled=True).encode(img[None])
    assert pooled.shape == (1, 1, 32)
