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
# A TorchScript archive (torch.jit.save; module objects, code/ beside data.pkl).
copy("torch_ckpt", "tests/fixtures/cosmos/reader/tiny_bf16.jit")

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

# vq_family_config: LlamaGen's and diffusers' config.json files of the parity fixtures, the
# released models' configs and our `variant` objects.
def seeds_vq_family_config():
    for p in ["tests/fixtures/llamagen/config.json", "tests/fixtures/diffusers/vq/config.json",
              "tests/fixtures/diffusers/amused/vqvae/config.json"]:
        copy("vq_family_config", p, p.split("fixtures/")[1].replace("/", "_"))
    llamagen_vq16 = {"codebook_size": 16384, "codebook_embed_dim": 8, "codebook_l2_norm": True,
                     "codebook_show_usage": True, "commit_loss_beta": 0.25, "entropy_loss_ratio": 0.0,
                     "encoder_ch_mult": [1, 1, 2, 2, 4], "decoder_ch_mult": [1, 1, 2, 2, 4],
                     "z_channels": 256, "dropout_p": 0.0}
    put("vq_family_config", "llamagen_vq16.json", json.dumps(llamagen_vq16).encode())
    amused = {"_class_name": "VQModel", "act_fn": "silu", "block_out_channels": [128, 256, 256, 512, 768],
              "down_block_types": ["DownEncoderBlock2D"] * 5, "up_block_types": ["UpDecoderBlock2D"] * 5,
              "force_upcast": True, "in_channels": 3, "latent_channels": 64, "layers_per_block": 2,
              "lookup_from_codebook": True, "mid_block_add_attention": False, "norm_num_groups": 32,
              "norm_type": "group", "num_vq_embeddings": 8192, "out_channels": 3, "sample_size": 32,
              "scaling_factor": 0.18215, "vq_embed_dim": None}
    put("vq_family_config", "amused_vqvae.json", json.dumps(amused).encode())
    put("vq_family_config", "variant.json", json.dumps(
        {"family": "diffusers", "norm_groups": 8, "mid_attn": False, "l2_norm": True,
         "distance": "cdist", "resize": "adm_center_crop", "range": "zero_one"}).encode())
    put("vq_family_config", "movq.json", json.dumps(dict(amused, norm_type="spatial")).encode())

seeds_vq_family_config()
