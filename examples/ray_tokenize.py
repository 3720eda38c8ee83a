#!/usr/bin/env python3
"""Tokenize an image folder (or WebDataset shards) with Ray Data and the imgseq package.

    python examples/ray_tokenize.py IMAGES_DIR -o OUT_DIR [--size 384] [--workers 1]
    python examples/ray_tokenize.py shards/{00000..00009}.tar -o OUT_DIR    # WebDataset

Ray Data reads the images (``read_images``, or ``read_webdataset`` for ``.tar`` shards), runs
``map_batches`` with one :class:`imgseq.VQTokenizer` per worker (a class-based UDF: the model is
loaded once per worker, not once per batch) and writes Parquet with the columns of the CLI's
Parquet shards (``imgseq vq tokenize --format parquet``): one row per image with its ``key``
(file stem, or the WebDataset key), ``tokens`` (list<uint16>, the grid flattened in raster
order), ``height`` and ``width`` of the grid, ``source`` (the file) and ``metadata`` (a JSON
string: source and grid). The tokens equal ``imgseq vq encode --size SIZE`` of the same files.

This is the second way to scale out; the first is the CLI's job arrays
(``imgseq vq tokenize --num-shards N --shard-index I``). Needs ``pip install "ray[data]"``
and the imgseq package (``pip install ./python``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np


def _tokens_type():
    import pyarrow as pa

    # The CLI's Parquet shards: a list of non-null uint16 named "element" (Parquet's LIST layout).
    return pa.list_(pa.field("element", pa.uint16(), nullable=False))


class Tokenize:
    """The map_batches UDF: one VQTokenizer per Ray worker."""

    def __init__(self, weights: Optional[str] = None, config: Optional[str] = None,
                 size: int = 384, upscale: bool = False) -> None:
        import imgseq

        self.tok = imgseq.VQTokenizer(weights, config, size)
        self.upscale = upscale

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        images = [np.asarray(im, dtype=np.uint8) for im in batch["image"]]
        images = [np.repeat(im[..., None], 3, -1) if im.ndim == 2 else im[..., :3] for im in images]
        grids: List[Optional[np.ndarray]] = [None] * len(images)
        # Images of one shape go through the model together.
        by_shape: Dict[tuple, List[int]] = {}
        for i, im in enumerate(images):
            by_shape.setdefault(im.shape, []).append(i)
        for idx in by_shape.values():
            out = self.tok.encode(np.stack([images[i] for i in idx]), upscale=self.upscale)
            for i, g in zip(idx, out):
                grids[i] = g
        import pyarrow as pa

        TOKENS = _tokens_type()
        h, w = self.tok.grid()
        paths = [str(p) for p in batch["path"]]
        keys = [str(k) for k in batch["key"]] if "key" in batch else [Path(p).stem.replace(".", "_") for p in paths]
        # A pyarrow table, so that the types are the CLI's: list<uint16>, not Ray's tensor type.
        return pa.table(
            {
                "key": pa.array(keys, pa.string()),
                "tokens": pa.array([g.reshape(-1) for g in grids], TOKENS),
                "height": pa.array([h] * len(grids), pa.int32()),
                "width": pa.array([w] * len(grids), pa.int32()),
                "source": pa.array(paths, pa.string()),
                "metadata": pa.array([json.dumps({"key": k, "source": p, "grid": [h, w]})
                                      for k, p in zip(keys, paths)], pa.string()),
            }
        )


def read(sources: List[str]):
    import ray

    if all(s.endswith(".tar") for s in sources):
        ds = ray.data.read_webdataset(sources)
        image_key = next(k for k in ("jpg", "png", "webp", "jpeg") if k in ds.schema().names)
        return ds.map(lambda r: {"image": np.asarray(r[image_key]), "path": r["__url__"] if "__url__" in r else r["__key__"],
                                 "key": r["__key__"]})
    return ray.data.read_images(sources, include_paths=True, mode="RGB")


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", nargs="+", help="image folders/files, or WebDataset .tar shards")
    ap.add_argument("-o", "--output", required=True, help="output folder (Parquet files)")
    ap.add_argument("--weights", help="VQGAN weights (default: the shipped model)")
    ap.add_argument("--config", help="model config (default: beside the weights)")
    ap.add_argument("--size", type=int, default=384)
    ap.add_argument("--upscale", action="store_true")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--workers", type=int, default=1, help="tokenizer workers (one model each)")
    a = ap.parse_args(argv)

    import ray

    ray.init(ignore_reinit_error=True, include_dashboard=False)
    ds = read(a.sources)
    ds = ds.map_batches(
        Tokenize,
        fn_constructor_kwargs=dict(weights=a.weights, config=a.config, size=a.size, upscale=a.upscale),
        batch_size=a.batch_size,
        batch_format="numpy",
        concurrency=a.workers,
    )
    ds.write_parquet(a.output)
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
