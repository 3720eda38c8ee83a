"""Pillow's bilinear resize on a few random 8-bit images: the reference for
`imgseq_core::resample::resize_bilinear_pil` (crates/imgseq-core/tests/it/pil_resize.rs).

    python scripts/make_resize_fixtures.py   # needs numpy + pillow; writes the JSON fixture
"""
import json
from pathlib import Path

import numpy as np
import PIL
from PIL import Image

OUT = Path(__file__).resolve().parents[1] / "crates/imgseq-core/tests/fixtures/pil_resize.json"
# (channels, h, w) -> (out_h, out_w): Fashion-MNIST 28→32 (the shipped ViT), shrinking (Pillow
# stretches the filter: antialiasing), odd and mixed ratios, 1-pixel edges, RGB.
#
# Pillow ≤ 12 always runs the horizontal pass first. Pillow 13 runs the vertical pass first
# when the height shrinks by more than twice as many pixels as the width (h - out_h >
# 2 * (w - out_w)); the two orders differ by a level or more in a few pixels. imgseq follows
# Pillow 13 (`resample::vertical_first`); the last four cases take the vertical pass first, so
# this fixture needs Pillow 13 (the script refuses an older one).
CASES = [
    ((1, 28, 28), (32, 32)),
    ((1, 32, 32), (28, 28)),
    ((1, 17, 23), (32, 32)),
    ((1, 5, 7), (11, 3)),
    ((1, 9, 40), (13, 2)),
    ((1, 1, 6), (4, 1)),
    ((1, 29, 28), (9, 8)),
    ((3, 10, 12), (16, 9)),
    ((3, 64, 48), (32, 32)),
    ((1, 40, 9), (13, 20)),
    ((3, 50, 30), (36, 36)),
    ((1, 90, 37), (77, 32)),
    ((1, 60, 60), (20, 50)),
]


def main() -> None:
    assert int(PIL.__version__.split(".")[0]) >= 13, "the vertical-first cases need Pillow 13"
    rng = np.random.default_rng(0)
    cases = []
    for (c, h, w), (oh, ow) in CASES:
        img = rng.integers(0, 256, size=(h, w, c), dtype=np.uint8)
        # Mostly smooth with sharp edges, like real pictures: a gradient plus noise plus a bar.
        yy, xx = np.mgrid[0:h, 0:w]
        img = ((img.astype(np.int32) // 4 + (yy * 7 + xx * 3)[..., None] * 2) % 256).astype(np.uint8)
        img[h // 3 : h // 3 + 2] = 255
        pil = Image.fromarray(img[..., 0] if c == 1 else img, mode="L" if c == 1 else "RGB")
        out = np.asarray(pil.resize((ow, oh), resample=Image.BILINEAR))
        out = out[..., None] if c == 1 else out
        cases.append(
            {
                "shape": [c, h, w],
                "out": [oh, ow],
                "src": img.transpose(2, 0, 1).ravel().tolist(),
                "expected": out.transpose(2, 0, 1).ravel().tolist(),
            }
        )
    OUT.write_text(json.dumps({"pillow": PIL.__version__, "cases": cases}, separators=(",", ":")))
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, Pillow {PIL.__version__})")


if __name__ == "__main__":
    main()
