#!/usr/bin/env python3
"""Writes the hand-made seed inputs of fuzz/corpus/<target>/ (plus copies of small repo
fixtures). Run from the repository root; then minimise with `cargo fuzz cmin`."""
import gzip, json, os, shutil, struct, zlib, glob, sys

root = os.getcwd()
C = os.path.join(root, "fuzz", "corpus")

def put(target, name, data):
    d = os.path.join(C, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def copy(target, src, name=None):
    with open(src, "rb") as f:
        put(target, name or os.path.basename(src), f.read())

# torch_ckpt: the small checkpoint fixtures (tiny.ckpt is 500 KB: left out).
for p in ["tests/fixtures/vqgan/evil.ckpt", "tests/fixtures/vqgan/missing_storage.ckpt"]:
    copy("torch_ckpt", p)
for p in glob.glob("crates/imgseq-torch/tests/fixtures/*.ckpt"):
    copy("torch_ckpt", p)

# npy
for p in glob.glob("tests/fixtures/metrics/*.npy")[:3]:
    copy("npy", p)
def npy(descr, shape, data, ver=1):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    d += " " * ((64 - (len(d) + 11 + (2 if ver > 1 else 0)) % 64) % 64) + "\n"
    if ver == 1:
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode() + data
    return b"\x93NUMPY" + bytes([ver, 0]) + struct.pack("<I", len(d)) + d.encode() + data
put("npy", "tokens_i8.npy", npy("<i8", "(2, 3)", struct.pack("<6q", 0, 1, 2, 3, 1023, 5)))
put("npy", "f4.npy", npy("<f4", "(3,)", struct.pack("<3f", 0.5, -1, 2)))
put("npy", "u1_v2.npy", npy("|u1", "(4,)", bytes([0, 1, 2, 255]), ver=2))
put("npy", "scalar_u8.npy", npy("<u8", "()", struct.pack("<Q", 7), ver=3))

# safetensors_audited: tiny_io.safetensors plus small hand-made files keyed like the model.
copy("safetensors_audited", "tests/fixtures/vqgan/tiny_io.safetensors")
def st(tensors):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data
put("safetensors_audited", "conv_in.safetensors",
    st({"encoder.conv_in.weight": ("F32", [32, 3, 3, 3], bytes(32 * 27 * 4)),
        "encoder.conv_in.bias": ("F32", [32], bytes(128))}))
put("safetensors_audited", "codebook_f16.safetensors",
    st({"quantize.embedding.weight": ("F16", [8, 4], bytes(64)),
        "loss.x": ("BF16", [2], bytes(4))}))

# idx: 2-byte split offset + image file + label file.
def idx(magic, dims, data):
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + data
imgs = idx(0x803, [2, 3, 4], bytes(range(24)))
labs = idx(0x801, [2], bytes([1, 9]))
put("idx", "pair_plain", struct.pack("<H", len(imgs)) + imgs + labs)
gi, gl = gzip.compress(imgs, 9, mtime=0), gzip.compress(labs, 9, mtime=0)
put("idx", "pair_gzip", struct.pack("<H", len(gi)) + gi + gl)
put("idx", "count_mismatch", struct.pack("<H", len(imgs)) + imgs + idx(0x801, [3], bytes(3)))

# cifar: two records and a bad label.
rec = lambda l, v: bytes([l]) + bytes([v]) * 3072
put("cifar", "two_records.bin", rec(3, 10) + rec(9, 200))
put("cifar", "bad_label.bin", rec(10, 0))

# vq_config
for p in ["tests/fixtures/vqgan/tiny_config.json", "tests/fixtures/vqgan/tiny_model.yaml"]:
    copy("vq_config", p)

# image_header: a tiny PNG and BMP made here, the JPEG/WebP of CPython's test data.
def png(w, h):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    raw = b"".join(b"\x00" + b"".join(bytes([x * 9 % 256, y * 9 % 256, 128]) for x in range(w)) for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
put("image_header", "rgb_20x18.png", png(20, 18))
def bmp(w, h):
    row = (w * 3 + 3) // 4 * 4
    pix = b"".join(
        b"".join(bytes([x * 12 % 256, y * 12 % 256, 64]) for x in range(w)) + bytes(row - 3 * w)
        for y in range(h))
    return (b"BM" + struct.pack("<IHHI", 54 + len(pix), 0, 0, 54)
            + struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, len(pix), 2835, 2835, 0, 0) + pix)
put("image_header", "rgb_17x16.bmp", bmp(17, 16))
for ext in ["jpg", "webp"]:
    p = os.path.join(sys.prefix, "lib", "python3.%d" % sys.version_info[1], "test", "test_email", "data", "python." + ext)
    if os.path.exists(p):
        copy("image_header", p, "cpython_test_data." + ext)
