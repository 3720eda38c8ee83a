"""imgseq and the real ``huggingface_hub`` library share one cache: files that
``hf_hub_download`` fetched load in imgseq with ``HF_HUB_OFFLINE=1``, and files imgseq
downloaded are found by ``huggingface_hub`` with ``local_files_only=True``. Both talk to a small
stand-in of the Hub's HTTP API on loopback (no network), which serves the taming fixture."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, write_png

hf = pytest.importorskip("huggingface_hub")

COMMIT = "abcdef0123456789abcdef0123456789abcdef01"
FIXTURE = REPO / "tests" / "fixtures" / "vqgan"
FILES = {"tiny.safetensors": True, "tiny_config.json": False}  # name -> stored with LFS


def git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Hub(BaseHTTPRequestHandler):
    """GET /api/models/org/taming/revision/REV, HEAD/GET /org/taming/resolve/REV/FILE (LFS
    files answer 302 to /cdn/SHA256 with X-Linked-Etag and X-Linked-Size), Range requests."""

    files = {n: (FIXTURE / n).read_bytes() for n in FILES}
    cdn = ""  # the CDN's origin: another loopback address, as the Hub's CDN is another host

    def log_message(self, *args):  # quiet
        pass

    def send(self, code, headers, body=b""):
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def body(self, data):
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng[6:].split("-")[0])
            part = data[start:]
            self.send(206, {"Content-Length": str(len(part)),
                            "Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}, part)
        else:
            self.send(200, {"Content-Length": str(len(data))}, data)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        p = self.path.split("?")[0].strip("/").split("/")
        if p[:2] == ["api", "models"] and p[2:4] == ["org", "taming"] and p[4] == "revision":
            body = json.dumps({"id": "org/taming", "sha": COMMIT,
                               "siblings": [{"rfilename": n} for n in FILES]}).encode()
            return self.send(200, {"Content-Type": "application/json",
                                   "Content-Length": str(len(body))}, body)
        if p[0] == "cdn":
            for data in self.files.values():
                if hashlib.sha256(data).hexdigest() == p[1]:
                    return self.body(data)
        if p[:3] == ["org", "taming", "resolve"] and p[3] in ("main", COMMIT) and p[4] in FILES:
            name, data = p[4], self.files[p[4]]
            common = {"X-Repo-Commit": COMMIT}
            if FILES[name]:
                sha = hashlib.sha256(data).hexdigest()
                return self.send(302, {**common, "X-Linked-Etag": f'"{sha}"',
                                       "X-Linked-Size": str(len(data)),
                                       "ETag": f'"{git_sha1(data)}"',
                                       "Location": f"{self.cdn}/cdn/{sha}",
                                       "Content-Length": "0"})
            if self.command == "HEAD":
                return self.send(200, {**common, "ETag": f'"{git_sha1(data)}"',
                                       "Content-Length": str(len(data))})
            return self.body(data)
        self.send(404, {"Content-Length": "0"})


@pytest.fixture(scope="module")
def endpoint():
    servers = []
    for host in ("127.0.0.2", "127.0.0.1"):  # the CDN, then the Hub
        s = ThreadingHTTPServer((host, 0), Hub)
        threading.Thread(target=s.serve_forever, daemon=True).start()
        servers.append(s)
    Hub.cdn = f"http://127.0.0.2:{servers[0].server_address[1]}"
    yield f"http://127.0.0.1:{servers[1].server_address[1]}"
    for s in servers:
        s.shutdown()


def imgseq(cli, *args, env):
    return subprocess.run([cli, *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "IMGSEQ_WEIGHTS_DIR": "/nonexistent", **env})


def encode(cli, model, image, out, env):
    r = imgseq(cli, "encode", image, "--model", model, "--size", 32, "--precision", "f32",
               "-o", out, env=env)
    assert r.returncode == 0, r.stderr
    return np.load(out)


def test_what_huggingface_hub_downloaded_loads_in_imgseq_offline(cli, endpoint, tmp_path):
    cache = tmp_path / "cache"
    for name in FILES:
        got = hf.hf_hub_download("org/taming", name, cache_dir=cache, endpoint=endpoint)
        assert Path(got).read_bytes() == (FIXTURE / name).read_bytes()
    img = tmp_path / "p.png"
    write_png(img, (np.arange(40 * 36 * 3) % 251).reshape(36, 40, 3).astype(np.uint8))
    offline = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1",
               "HF_ENDPOINT": "http://127.0.0.1:9"}
    hub = encode(cli, "hf:org/taming/tiny.safetensors", img, tmp_path / "a.npy", offline)
    local = encode(cli, FIXTURE / "tiny.safetensors", img, tmp_path / "b.npy", offline)
    assert hub.dtype == np.int64 and np.array_equal(hub, local)


def test_what_imgseq_downloaded_huggingface_hub_finds_offline(cli, endpoint, tmp_path):
    cache = tmp_path / "cache"
    env = {"HF_HUB_CACHE": str(cache), "HF_ENDPOINT": endpoint}
    r = imgseq(cli, "inspect", "--model", "hf:org/taming/tiny.safetensors", env=env)
    assert r.returncode == 0, r.stderr
    assert f"hf:org/taming@{COMMIT}/tiny.safetensors" in r.stdout
    for name in FILES:
        got = hf.hf_hub_download("org/taming", name, cache_dir=cache, local_files_only=True)
        assert Path(got).read_bytes() == (FIXTURE / name).read_bytes()
    # The same by commit, as huggingface_hub resolves it from refs/main.
    got = hf.hf_hub_download("org/taming", "tiny.safetensors", cache_dir=cache,
                             revision=COMMIT, local_files_only=True)
    assert Path(got).is_file()


def test_the_catalogue_lists_every_family_with_hub_sources():
    import imgseq

    cat = imgseq.models()
    names = {e["name"] for e in cat}
    assert {"llamagen-vq16", "sd-vae-ft-mse", "open-magvit2-256", "janus-pro-1b", "ibq-16384"} <= names
    # Every family the loader reads is in the catalogue.
    assert {"llamagen", "janus", "diffusers", "taming", "ibq", "open_magvit2", "autoencoder_kl"} <= {
        e["family"] for e in cat
    }
    # A source is a Hub source, or the page of weights published elsewhere (taming's).
    assert all(e["source"].startswith(("hf:", "https://")) for e in cat)
    assert next(e for e in cat if e["name"] == "ibq-16384")["config"] == "ibq_16384"
