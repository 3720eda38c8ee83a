"""What the vision-tower fixture scripts (make_clip_fixtures.py, make_siglip_fixtures.py,
make_dinov2_fixtures.py) share: random weights, the released-size shapes, and the image
processor parity: a few pictures of different sizes and aspects run through transformers' own
image processor (PIL backend) and through the tower.

The pictures (tests/fixtures/processor/*.png, written here, small): `wide` 75x41, `tall` 37x90
(more than twice as tall as wide: Pillow 13 resizes it vertically first), `square` 48x48 and
`small` 20x27 (smaller than every crop: upscaled).

processor_io() gives, for each picture P and model folder F (one safetensors file per family):
  F.P.uint8            (S, S, 3) uint8: the processor's picture before rescale and normalise,
                       made here with Pillow alone from the processor's settings, and checked
                       to give the processor's pixel_values exactly
  F.P.pixel_values     (1, 3, S, S) float32: the processor's output
  F.P.last_hidden_state  the tower's output on those pixel_values (`last_key` picks which)
"""

import json
import os

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures")
PICTURES = os.path.join(ROOT, "processor")
SIZES = {"wide": (75, 41), "tall": (37, 90), "square": (48, 48), "small": (20, 27)}


def randomise(m, ones=("weight",), scaled=("norm",)):
    """Norm weights (and any parameter named by `scaled`) near 1 (`ones` suffixes) or 0, the
    rest N(0, 0.2²)."""
    with torch.no_grad():
        for name, p in m.named_parameters():
            if any(s in name for s in scaled):
                one = 1.0 if name.endswith(ones) else 0.0
                p.copy_(one + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))


def released(model_cls, cfg, out, side):
    """`cfg`'s config and shapes.json (every tensor's shape, the outputs' shapes at side²)
    from a model built on the meta device."""
    from transformers.core_model_loading import revert_weight_conversion

    with torch.device("meta"):
        m = model_cls(cfg).eval()
        o = m(pixel_values=torch.empty(1, 3, side, side), output_hidden_states=True)
    os.makedirs(out, exist_ok=True)
    cfg.to_json_file(os.path.join(out, "config.json"))
    shapes = {
        "tensors": {k: list(v.shape)
                    for k, v in revert_weight_conversion(m, m.state_dict()).items()},
        "last_hidden_state": list(o.last_hidden_state.shape),
        "pooler_output": list(o.pooler_output.shape),
        "hidden_states": len(o.hidden_states),
    }
    with open(os.path.join(out, "shapes.json"), "w") as fh:
        json.dump(shapes, fh, indent=1, sort_keys=True)


def pictures():
    """The test pictures, written afresh each run (the same bytes: a fixed seed), then read
    back as files: smooth gradients with noise and sharp bars, as photographs have."""
    os.makedirs(PICTURES, exist_ok=True)
    rng = np.random.default_rng(7)
    paths = {}
    for name, (w, h) in SIZES.items():
        p = os.path.join(PICTURES, f"{name}.png")
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1),
                         (xx + yy) * 127 // max(w + h - 2, 1)], -1)
        noise = rng.integers(-40, 41, size=(h, w, 3))
        img = np.clip(base + noise, 0, 255).astype(np.uint8)
        img[h // 3: h // 3 + 2] = [255, 255, 255]
        img[:, w // 2] = [0, 0, 0]
        Image.fromarray(img, "RGB").save(p)
        paths[name] = p
    return paths


def pil_kwargs(proc):
    return {k: v for k, v in proc.to_dict().items()
            if k not in ("image_processor_type", "processor_class", "backend")}


def pil_processor(proc):
    """transformers' PIL-backend class of the processor `proc` (CLIPImageProcessorPil for
    CLIPImageProcessor): the Pillow path, the one imgseq follows."""
    import transformers
    name = type(proc).__name__
    base = name[:-len("Pil")] if name.endswith("Pil") else name
    return getattr(transformers, base + "Pil")(**pil_kwargs(proc))


def reference_uint8(img, proc):
    """The processor's 8-bit picture made with Pillow alone from its settings: transformers'
    resize (shortest edge: the longer side int(S * longer / shorter)) and centre crop
    (top left at floor((side - crop) / 2), zero padding)."""
    size, resample = proc.size, proc.resample
    w, h = img.size
    if size.get("shortest_edge"):
        s = size["shortest_edge"]
        short, long = min(w, h), max(w, h)
        new_long = int(s * long / short)
        nw, nh = (s, new_long) if w <= h else (new_long, s)
    else:
        nw, nh = size["width"], size["height"]
    img = img.resize((nw, nh), resample=resample)
    a = np.asarray(img)
    if proc.do_center_crop:
        ch, cw = proc.crop_size["height"], proc.crop_size["width"]
        out = np.zeros((ch, cw, 3), np.uint8)
        top, left = (nh - ch) // 2, (nw - cw) // 2
        for y in range(ch):
            for x in range(cw):
                sy, sx = y + top, x + left
                if 0 <= sy < nh and 0 <= sx < nw:
                    out[y, x] = a[sy, sx]
        a = out
    return a


def processor_io(proc, forward, folder, path):
    """Runs the picture set through `proc` (saved into the model folder `path`, named
    `folder` in the keys, with `save_pretrained`) and `forward` (pixel_values -> dict of
    named outputs); checks the Pillow reference against the processor. Returns the tensors
    (`folder.picture.what`) for save()."""
    pil = pil_processor(proc)
    pil.save_pretrained(path)
    tensors = {}
    worst_fast = 0.0
    for name, pic in pictures().items():
        img = Image.open(pic)
        pv = pil(images=img, return_tensors="pt")["pixel_values"]
        u8 = reference_uint8(img.convert("RGB"), pil)
        x = (u8.astype(np.float64) * pil.rescale_factor).astype(np.float32)
        mean = np.array(pil.image_mean, dtype=np.float32)
        std = np.array(pil.image_std, dtype=np.float32)
        x = ((x - mean) / std).transpose(2, 0, 1)[None]
        assert np.array_equal(x, pv.numpy()), f"{folder} {name}: the Pillow reference differs"
        # The torchvision backend (AutoImageProcessor's default in transformers 5), for the
        # record: it resizes with torch's antialiased bicubic, not Pillow.
        import transformers
        fast = getattr(transformers, type(pil).__name__[:-len("Pil")])(**pil_kwargs(pil))
        fv = fast(images=img, return_tensors="pt")["pixel_values"]
        worst_fast = max(worst_fast, (fv - pv).abs().max().item())
        k = f"{folder}.{name}"
        tensors[f"{k}.uint8"] = torch.from_numpy(np.array(u8, copy=True))
        tensors[f"{k}.pixel_values"] = pv.contiguous()
        with torch.no_grad():
            for o, t in forward(pv).items():
                tensors[f"{k}.{o}"] = t.contiguous()
    d = pil.to_dict()
    print(f"{folder}: {type(pil).__name__} size {d['size']} crop {d.get('crop_size')} "
          f"resample {d['resample']}; torchvision backend vs PIL backend: max |pixel_values| "
          f"difference {worst_fast:.4f}")
    return tensors


def save(tensors, out_file):
    save_file(tensors, out_file)
    print(f"wrote {out_file} ({os.path.getsize(out_file)} bytes)")


def alpha_note(proc):
    """What the processor does with a transparent picture: transformers 5's convert_to_rgb
    composites it onto white; Pillow's convert("RGB") (what imgseq decodes, and transformers
    4's convert_to_rgb) drops the alpha."""
    pil = pil_processor(proc)
    rng = np.random.default_rng(3)
    rgba = rng.integers(0, 256, size=(40, 40, 4), dtype=np.uint8)
    img = Image.fromarray(rgba, "RGBA")
    a = pil(images=img, return_tensors="pt")["pixel_values"]
    b = pil(images=img.convert("RGB"), return_tensors="pt")["pixel_values"]
    print(f"{type(pil).__name__}: RGBA picture vs its convert('RGB'): max difference "
          f"{(a - b).abs().max().item():.3f} (alpha composited onto white)")
