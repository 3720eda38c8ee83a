"""Pictures written by several encoders, and the pixels Pillow reads from them: the reference
for `imgseq_core::pillow` (crates/imgseq-core/tests/it/pillow_pixels.rs).

    pip install numpy pillow pypng imagecodecs mozjpeg-lossless-optimization
    apt-get install libjpeg-turbo-progs        # cjpeg, libjpeg-turbo's own encoder
    python scripts/make_pillow_fixtures.py

Writes crates/imgseq-core/tests/fixtures/pillow/: each picture, `<name>.rgb` (Pillow's
`Image.open(p).convert("RGB")` bytes, row-major), `<name>.l` (`convert("L")`), and
`manifest.json` (size, what wrote it, Pillow's mode, and for EXIF-rotated ones the bytes of
`ImageOps.exif_transpose(...).convert("RGB")` in `<name>.upright.rgb`).
"""
import io
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import PIL
from PIL import Image, ImageOps, features

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "crates/imgseq-core/tests/fixtures/pillow"


def photo(w: int, h: int) -> Image.Image:
    """A crop of the sample photo (real edges and colours, odd sizes for the edge blocks)."""
    im = Image.open(ROOT / "assets/coffee.png").convert("RGB")
    return im.resize((w * 4, h * 4), Image.BICUBIC).crop((w, h, 2 * w, 2 * h))


def cjpeg(im: Image.Image, *args: str) -> bytes:
    """libjpeg-turbo's command-line encoder."""
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "in.ppm"
        im.save(src)
        return subprocess.run(["cjpeg", *args, str(src)], check=True, capture_output=True).stdout


def pillow_jpeg(im: Image.Image, **kw) -> bytes:
    b = io.BytesIO()
    im.save(b, "JPEG", **kw)
    return b.getvalue()


def png16(rows: np.ndarray, **kw) -> bytes:
    import png  # pypng: writes any PNG bit depth

    b = io.BytesIO()
    h, w = rows.shape[:2]
    png.Writer(w, h, **kw).write(b, rows.reshape(h, -1).tolist())
    return b.getvalue()


def pictures() -> dict[str, tuple[bytes, str]]:
    """name → (file bytes, what wrote it)."""
    im = photo(67, 45)
    out = {
        "pillow_420.jpg": (pillow_jpeg(im, quality=85), "Pillow, 4:2:0"),
        "pillow_422.jpg": (pillow_jpeg(im, quality=90, subsampling=1), "Pillow, 4:2:2"),
        "pillow_444.jpg": (pillow_jpeg(im, quality=95, subsampling=0), "Pillow, 4:4:4"),
        "pillow_progressive.jpg": (pillow_jpeg(im, quality=80, progressive=True), "Pillow, progressive"),
        "pillow_gray.jpg": (pillow_jpeg(im.convert("L"), quality=85), "Pillow, gray"),
        "pillow_cmyk.jpg": (pillow_jpeg(im.convert("CMYK"), quality=90), "Pillow, CMYK (Adobe)"),
        "pillow_restart.jpg": (pillow_jpeg(im, quality=85, restart_marker_rows=1), "Pillow, restart markers"),
        "libjpeg_420.jpg": (cjpeg(im, "-quality", "75"), "cjpeg, 4:2:0"),
        "libjpeg_440.jpg": (cjpeg(im, "-sample", "1x2", "-quality", "88"), "cjpeg, 4:4:0"),
        "libjpeg_411.jpg": (cjpeg(im, "-sample", "4x1", "-quality", "88"), "cjpeg, 4:1:1"),
        "libjpeg_restart.jpg": (cjpeg(im, "-restart", "1B", "-quality", "70"), "cjpeg, restart every block"),
        "libjpeg_arith.jpg": (cjpeg(im, "-arithmetic", "-quality", "80"), "cjpeg, arithmetic coding"),
        "libjpeg_rgb.jpg": (cjpeg(im, "-rgb", "-quality", "90"), "cjpeg, RGB (no YCbCr)"),
        "libjpeg_progressive.jpg": (cjpeg(im, "-progressive", "-optimize", "-quality", "60"), "cjpeg, progressive"),
    }
    import mozjpeg_lossless_optimization as moz

    out["mozjpeg_progressive.jpg"] = (moz.optimize(out["libjpeg_420.jpg"][0]), "mozjpeg, progressive re-encode")
    import imagecodecs

    cmyk = np.asarray(im.convert("CMYK"))
    out["imagecodecs_ycck.jpg"] = (
        bytes(imagecodecs.jpeg8_encode(cmyk, level=90, colorspace="CMYK", outcolorspace="YCCK")),
        "imagecodecs (libjpeg-turbo), YCCK",
    )
    small = photo(33, 21)
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to view"
    out["exif_orientation6.jpg"] = (pillow_jpeg(small, quality=90, exif=exif), "Pillow, EXIF orientation 6")

    # PNG: 16-bit colour (Pillow keeps the high byte), 16-bit gray (Pillow's I;16), gray+alpha,
    # palette with transparency, low bit depths.
    rgb = np.asarray(small).astype(np.uint16)
    wide = rgb * 257 + np.arange(rgb.size, dtype=np.uint16).reshape(rgb.shape) % 251
    out["png_rgb16.png"] = (png16(wide, bitdepth=16, greyscale=False), "pypng, 16-bit RGB")
    alpha = (np.arange(small.width * small.height, dtype=np.uint32) * 97 % 65536).astype(np.uint16).reshape(small.height, small.width, 1)
    out["png_rgba16.png"] = (png16(np.concatenate([wide, alpha], 2), bitdepth=16, greyscale=False, alpha=True), "pypng, 16-bit RGBA")
    gray16 = (np.asarray(small.convert("L")).astype(np.uint16) * 3)  # some above 255, most below
    out["png_gray16.png"] = (png16(gray16[..., None], bitdepth=16, greyscale=True), "pypng, 16-bit gray")
    out["png_graya16.png"] = (png16(np.concatenate([(gray16[..., None].astype(np.uint32) * 85).astype(np.uint16), alpha], 2), bitdepth=16, greyscale=True, alpha=True), "pypng, 16-bit gray+alpha")
    out["png_gray4.png"] = (png16((np.asarray(small.convert("L")) >> 4)[..., None], bitdepth=4, greyscale=True), "pypng, 4-bit gray")
    pal = small.convert("P", palette=Image.ADAPTIVE, colors=23)
    b = io.BytesIO()
    pal.save(b, "PNG", transparency=3)
    out["png_palette_trns.png"] = (b.getvalue(), "Pillow, palette + tRNS")
    return out


def main() -> None:
    assert features.check_feature("libjpeg_turbo"), "Pillow must be built with libjpeg-turbo"
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    manifest = {
        "pillow": PIL.__version__,
        "libjpeg_turbo": features.version("libjpeg_turbo"),
        "files": [],
    }
    for name, (data, writer) in pictures().items():
        (OUT / name).write_bytes(data)
        im = Image.open(OUT / name)
        im.load()
        entry = {"name": name, "writer": writer, "mode": im.mode, "width": im.width, "height": im.height}
        (OUT / f"{name}.rgb").write_bytes(im.convert("RGB").tobytes())
        (OUT / f"{name}.l").write_bytes(im.convert("L").tobytes())
        up = ImageOps.exif_transpose(Image.open(OUT / name))
        if up.size != im.size or up.tobytes() != im.tobytes():
            entry["upright"] = [up.width, up.height]
            (OUT / f"{name}.upright.rgb").write_bytes(up.convert("RGB").tobytes())
        manifest["files"].append(entry)
        print(f"{name:28} {im.mode:5} {im.width}x{im.height} {len(data):6} bytes  {writer}")
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
