#!/usr/bin/env python3
"""Writes the Parquet source fixtures in tests/fixtures/parquet/ with pyarrow, in the layouts
real datasets ship in (needs pyarrow + Pillow: /tmp/torchenv/bin/python, `pip install pyarrow`).

  img2dataset.parquet  img2dataset's `--output_format parquet` layout (its writer.py: the
                       downloader's metadata columns, then the image bytes in a binary column
                       named after `--encode_format`, "jpg" by default; null for a failed
                       download): url, caption, key, status, error_message, width, height,
                       original_width, original_height, exif, sha256, jpg. 4 rows, the third a
                       failed download. JPEG bytes; `sha256` is the SHA-256 of the stored bytes,
                       so a reader's bytes can be checked against it. pyarrow's defaults
                       (snappy, dictionary encoding, one row group).
  hf_datasets.parquet  Hugging Face `datasets`' layout for an `Image()` feature: a struct
                       column image {bytes: binary, path: string} and a ClassLabel `label`
                       (int64), with the `huggingface` schema metadata `datasets` writes. 5 rows
                       of PNGs, row groups of 2 rows (datasets uses 100 for image data).
  zstd.parquet         one row of the img2dataset layout compressed with zstd (a codec imgseq
                       does not read: must be refused with a one-line error).

The pictures are `picture(i)` of crates/imgseq/tests/it/tokenize.rs (40x36, different per i).
Run: /tmp/torchenv/bin/python scripts/make_parquet_fixtures.py
"""

import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "parquet"


def picture(i: int) -> np.ndarray:
    """The tokenize tests' picture(i): 40 wide, 36 high, RGB."""
    y, x = np.mgrid[0:36, 0:40].astype(np.int64)
    check = np.where(((x + i) // 5 + y // 5) % 2 == 0, 210, 30)
    r = (x * 7 + i * 13) % 256
    b = (x * y + i * 31) % 256
    return np.stack([r, check, b], -1).astype(np.uint8)


def encode(i: int, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(picture(i)).save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def img2dataset_table(rows):
    schema = pa.schema(
        [
            ("url", pa.string()),
            ("caption", pa.string()),
            ("key", pa.string()),
            ("status", pa.string()),
            ("error_message", pa.string()),
            ("width", pa.int32()),
            ("height", pa.int32()),
            ("original_width", pa.int32()),
            ("original_height", pa.int32()),
            ("exif", pa.string()),
            ("sha256", pa.string()),
            ("jpg", pa.binary()),
        ]
    )
    cols = {name: [] for name in schema.names}
    for i, ok in rows:
        img = encode(i, "JPEG") if ok else None
        vals = {
            "url": f"https://example.com/{i}.jpg",
            "caption": f"picture number {i}",
            "key": f"{i:09d}",
            "status": "success" if ok else "failed_to_download",
            "error_message": None if ok else "HTTP Error 404: Not Found",
            "width": 40 if ok else None,
            "height": 36 if ok else None,
            "original_width": 40 if ok else None,
            "original_height": 36 if ok else None,
            "exif": "{}" if ok else None,
            "sha256": hashlib.sha256(img).hexdigest() if ok else None,
            "jpg": img,
        }
        for k, v in vals.items():
            cols[k].append(v)
    return pa.Table.from_pydict(cols, schema=schema)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    pq.write_table(img2dataset_table([(1, True), (4, True), (5, False), (7, True)]), OUT / "img2dataset.parquet")
    pq.write_table(img2dataset_table([(2, True)]), OUT / "zstd.parquet", compression="zstd")

    names = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat"]
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    features = {
        "image": {"_type": "Image"},
        "label": {"names": names, "_type": "ClassLabel"},
    }
    schema = pa.schema([("image", image_type), ("label", pa.int64())]).with_metadata(
        {"huggingface": json.dumps({"info": {"features": features}})}
    )
    images = [{"bytes": encode(i, "PNG"), "path": f"img_{i}.png"} for i in (0, 3, 6, 8, 9)]
    table = pa.Table.from_pydict({"image": images, "label": [0, 3, 1, 4, 2]}, schema=schema)
    pq.write_table(table, OUT / "hf_datasets.parquet", row_group_size=2)
    for p in sorted(OUT.glob("*.parquet")):
        print(f"{p.name}: {p.stat().st_size} bytes, {pq.ParquetFile(p).metadata.num_rows} rows")


if __name__ == "__main__":
    main()
