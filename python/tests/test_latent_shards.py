"""`imgseq vae tokenize` latent shards read by plain numpy / pyarrow and by
imgseq.read_latent_shards, equal to `imgseq vae encode`'s latents up to float16 rounding."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest

import imgseq
from conftest import REPO, make_image, run_cli, write_png

SD = REPO / "tests/fixtures/kl/sd"
# Every continuous-latent family: the SD VAE, FLUX.2's (latent BatchNorm), DC-AE (SANA-like).
VAES = [(SD, 0.18215), (REPO / "tests/fixtures/kl/flux2", 1.0),
        (REPO / "tests/fixtures/dcae/sana", 0.41407)]


@pytest.mark.parametrize("vae,scaling", VAES, ids=["sd", "flux2", "dcae"])
@pytest.mark.parametrize("patch", [None, 2])
def test_latent_shards_of_both_formats_equal_vae_encode(tmp_path, cli, patch, vae, scaling):
    src = tmp_path / "imgs"
    src.mkdir()
    names = ["a", "b", "c"]
    for i, n in enumerate(names):
        write_png(src / f"{n}.png", make_image(10 + i, 44, 36))
    p = [] if patch is None else ["--patch", patch]
    run_cli(cli, "vae", "encode", *[src / f"{n}.png" for n in names], "--weights", vae,
            "--size", 32, *p, "-o", tmp_path / "enc.npy")
    want = dict(zip(names, np.load(tmp_path / "enc.npy")))
    for fmt in ["wds", "parquet"]:
        out = tmp_path / fmt
        run_cli(cli, "vae", "tokenize", src, "--weights", vae, "--size", 32, *p,
                "--format", fmt, "--shard-size", 2, "-o", out)
        manifest = json.loads((out / "manifest.json").read_text())
        lat = manifest["tokenizer"]["latent"]
        assert manifest["format"] == "imgseq-latents/1"
        assert lat["dtype"] == "float16" and lat["patch"] == patch
        assert lat["scaling_factor"] == pytest.approx(scaling)
        # Plain numpy / pyarrow, no imgseq.
        plain = {}
        for s in manifest["shards"]:
            path = out / s["name"]
            if fmt == "wds":
                with tarfile.open(path) as tar:
                    for m in tar:
                        if m.name.endswith(".latent.npy"):
                            plain[m.name[:-11]] = np.load(io.BytesIO(tar.extractfile(m).read()))
            else:
                import pyarrow.parquet as pq

                for row in pq.read_table(path).to_pylist():
                    a = np.frombuffer(row["latent"], "<f2").reshape(row["shape"])
                    plain[row["key"]] = a
        read = {s["key"]: s["latent"] for s in imgseq.read_latent_shards(out)}
        assert sorted(plain) == sorted(read) == names
        for k in names:
            assert plain[k].dtype == read[k].dtype == np.float16
            assert list(plain[k].shape) == lat["shape"] == list(want[k].shape)
            np.testing.assert_array_equal(plain[k], read[k])
            np.testing.assert_allclose(plain[k].astype(np.float32), want[k],
                                       rtol=2 ** -10, atol=1e-7)
