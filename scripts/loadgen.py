#!/usr/bin/env python3
"""Load generator for `imgseq serve` (loopback only, bounded in clients and time; stdlib only).

N clients post the same images to one endpoint for a fixed time; prints images/s, p50/p99
latency, errors and the server's RSS. With --imgseq it starts the server itself (per
--max-batch value, so batch 1 and batching are compared on the same images; 256 leaves each
model's own batch bound, shown as "batching" from /healthz) and, with --cli, also times the
CLI on as many images as the best server run answered (`imgseq vq encode --size S` for
/v1/tokenize, `imgseq vit classify` for /v1/classify). Run the pairs back to back: on a busy
machine only their ratio means much.

    python3 scripts/loadgen.py --imgseq target/release/imgseq --images assets/coffee.png \\
        --vq-size 384 --clients 8 --seconds 20 --max-batch 1 256 --cli
    python3 scripts/loadgen.py --imgseq target/release/imgseq --endpoint /v1/classify \\
        --images assets/fmnist-t10k-00001.png --clients 8 --seconds 15 --max-batch 1 256 --cli
    python3 scripts/loadgen.py --url http://127.0.0.1:8080 --clients 4 --seconds 10   # a running server

With --hostile N, N more threads attack the server during the run, in turn: pipelining 300
requests for the 46 kB OpenAPI description and never reading, half-closing after a request,
up-scaling a 16384x1 sliver, uploading a 40-megapixel image, declaring a 60000x60000 PNG; the
row then counts their answers and the server's peak RSS says whether the memory budget held:

    python3 scripts/loadgen.py --imgseq target/release/imgseq --vq-size 384 --clients 4 \
        --seconds 30 --max-batch 256 --hostile 8
"""
from __future__ import annotations

import argparse
import http.client
import json
import socket
import struct
import zlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parent.parent
MAX_CLIENTS = 256
MAX_SECONDS = 600


def client(host, port, path, bodies, until, out, lock):
    lat, errors, i = [], {}, 0
    while time.monotonic() < until:
        body = bodies[i % len(bodies)]
        i += 1
        t0 = time.monotonic()
        try:
            c = http.client.HTTPConnection(host, port, timeout=120)
            c.request("POST", path, body=body, headers={"Content-Type": "application/octet-stream"})
            r = c.getresponse()
            r.read()
            c.close()
            if r.status == 200:
                lat.append(time.monotonic() - t0)
            else:
                errors[r.status] = errors.get(r.status, 0) + 1
        except OSError as e:
            errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
    with lock:
        out["lat"].extend(lat)
        for k, v in errors.items():
            out["errors"][str(k)] = out["errors"].get(str(k), 0) + v


def png_bytes(w, h, row):
    """An RGB PNG of w x h pixels whose every row is `row` (w*3 bytes), made with zlib."""
    raw = zlib.compress(b"".join(b"\x00" + row for _ in range(h)), 6)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", raw) + chunk(b"IEND", b""))


def hostile_bodies():
    sliver = png_bytes(16384, 1, bytes((x * 7) % 256 for x in range(16384 * 3)))
    big = png_bytes(7000, 5700, bytes((x // 3) % 256 for x in range(7000 * 3)))
    declared = png_bytes(1, 1, b"\x00\x00\x00")
    declared = declared[:16] + struct.pack(">II", 60000, 60000) + declared[24:29] + \
        struct.pack(">I", zlib.crc32(declared[12:16] + struct.pack(">II", 60000, 60000) + declared[24:29])) + declared[33:]
    return sliver, big, declared


def raw_request(host, port, data, half_close=False, read=True, timeout=60):
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        if not read:
            time.sleep(15)
            return "unread"
        head = s.recv(64).split(b"\r\n", 1)[0].decode(errors="replace")
        return head.split(" ")[1] if " " in head else "no answer"
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()


def hostile(host, port, until, out, lock, k):
    sliver, big, declared = hostile_bodies()
    post = lambda path, body: (f"POST {path} HTTP/1.1\r\nHost: h\r\nContent-Length: {len(body)}\r\n\r\n"
                               .encode() + body)
    kinds = [
        ("never_reads", lambda: raw_request(host, port, b"GET /v1/openapi.json HTTP/1.1\r\nHost: h\r\n\r\n" * 300,
                                            read=False)),
        ("half_close", lambda: raw_request(host, port, post("/v1/tokenize?upscale=true", sliver), half_close=True)),
        ("sliver_upscale", lambda: raw_request(host, port, post("/v1/tokenize?upscale=true", sliver))),
        ("40mp_upload", lambda: raw_request(host, port, post("/v1/tokenize", big))),
        ("declares_60000x60000", lambda: raw_request(host, port, post("/v1/tokenize", declared))),
    ]
    i = k
    while time.monotonic() < until:
        name, f = kinds[i % len(kinds)]
        i += 1
        status = f()
        with lock:
            key = f"{name}:{status}"
            out["hostile"][key] = out["hostile"].get(key, 0) + 1


def rss_mib(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def pct(v, q):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def run_load(url, endpoint, bodies, clients, seconds, pid=None, n_hostile=0):
    u = urlparse(url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("loadgen runs against loopback servers only")
    out, lock = {"lat": [], "errors": {}, "hostile": {}}, threading.Lock()
    t0 = time.monotonic()
    until = t0 + seconds
    ts = [threading.Thread(target=client, args=(u.hostname, u.port, endpoint, bodies, until, out, lock))
          for _ in range(clients)]
    ts += [threading.Thread(target=hostile, args=(u.hostname, u.port, until, out, lock, k))
           for k in range(n_hostile)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    lat = out["lat"]
    return {
        "clients": clients, "seconds": round(wall, 1), "images": len(lat),
        "images_per_s": round(len(lat) / wall, 2),
        "p50_ms": round(1000 * pct(lat, 0.50), 1), "p99_ms": round(1000 * pct(lat, 0.99), 1),
        "errors": out["errors"], "server_peak_rss_mib": rss_mib(pid) if pid else None,
        **({"hostile_answers": out["hostile"]} if n_hostile else {}),
    }


def start_server(imgseq, max_batch, wait_ms, extra):
    cmd = [imgseq, "serve", "--addr", "127.0.0.1:0", "--max-batch", str(max_batch),
           "--batch-wait-ms", str(wait_ms), "--queue", "256", *extra]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while time.time() - t0 < 300:
        line = p.stderr.readline()
        m = re.search(r"listening on (http://\S+)/", line)
        if m:
            return p, m.group(1)
        if not line and p.poll() is not None:
            break
    p.kill()
    sys.exit(f"{' '.join(cmd)} did not start")


def get(url, path):
    u = urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.request("GET", path)
    return c.getresponse().read().decode()


def metric(url, name):
    return [l for l in get(url, "/metrics").splitlines() if l.startswith(name)]


def cli_rate(imgseq, endpoint, images, n, batch, vq_size):
    paths = [str(images[i % len(images)]) for i in range(n)]
    with tempfile.TemporaryDirectory() as d:
        if endpoint == "/v1/classify":
            cmd = [imgseq, "vit", "classify", *paths, "-k", "5"]
        else:
            cmd = [imgseq, "vq", "encode", *paths, "--batch-size", str(batch), "-o", f"{d}/t.npy"]
            cmd += ["--size", str(vq_size)] if vq_size else []
        t0 = time.monotonic()
        subprocess.run(cmd, check=True, capture_output=True)
        wall = time.monotonic() - t0
    return {"cli": " ".join(cmd[1:3]), "cli_images": n, "cli_batch_size": batch,
            "cli_seconds": round(wall, 1), "cli_images_per_s": round(n / wall, 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (loopback)")
    ap.add_argument("--imgseq", help="start this imgseq binary's server (once per --max-batch)")
    ap.add_argument("--max-batch", type=int, nargs="+", default=[1, 256])
    ap.add_argument("--vq-size", type=int, help="VQ input side (server --vq-size, CLI --size)")
    ap.add_argument("--batch-wait-ms", type=int, default=0)
    ap.add_argument("--server-arg", action="append", default=[], help="more `imgseq serve` flags")
    ap.add_argument("--endpoint", default="/v1/tokenize")
    ap.add_argument("--images", nargs="+", default=[str(REPO / "assets" / "coffee.png")])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--cli", action="store_true", help="also time `imgseq vq encode` on the same images")
    ap.add_argument("--hostile", type=int, default=0, help="hostile clients mixed in (see above)")
    a = ap.parse_args()
    if not 1 <= a.clients <= MAX_CLIENTS or not 0 < a.seconds <= MAX_SECONDS:
        sys.exit(f"--clients 1..{MAX_CLIENTS}, --seconds up to {MAX_SECONDS}")
    bodies = [Path(p).read_bytes() for p in a.images]
    extra = a.server_arg + (["--vq-size", str(a.vq_size)] if a.vq_size else [])
    rows = []
    if a.url:
        rows.append(run_load(a.url, a.endpoint, bodies, a.clients, a.seconds, n_hostile=a.hostile))
    elif a.imgseq:
        for b in a.max_batch:
            p, url = start_server(a.imgseq, b, a.batch_wait_ms, extra)
            try:
                run_load(url, a.endpoint, bodies, 1, min(3, a.seconds))  # warm-up
                r = run_load(url, a.endpoint, bodies, a.clients, a.seconds, p.pid, a.hostile)
                r["memory_admitted_peak_mib"] = [round(int(l.split()[-1]) / 2**20, 1) for l in
                                                 metric(url, "imgseq_memory_admitted_peak_bytes")]
                r["max_batch"] = b
                r["batching"] = json.loads(get(url, "/healthz")).get("batching")
                counts = metric(url, "imgseq_batch_size_sum") + metric(url, "imgseq_batch_size_count")
                r["batch_size_metrics"] = counts
                rows.append(r)
            finally:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=60)
    else:
        sys.exit("give --url or --imgseq")
    for r in rows:
        print(json.dumps(r))
    if a.cli and a.imgseq:
        n = max(8, max(r["images"] for r in rows))
        sizes = [1] if a.endpoint == "/v1/classify" else sorted({min(b, 8) for b in a.max_batch})
        for b in sizes:
            print(json.dumps(cli_rate(a.imgseq, a.endpoint, [Path(p) for p in a.images], min(n, 200), b,
                                      a.vq_size)))


if __name__ == "__main__":
    main()
