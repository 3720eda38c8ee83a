#!/usr/bin/env python3
"""Run the imgseq-kernels benchmark and print its rows as a Markdown table.

Usage: scripts/bench_kernels.py [FILTER] [--repeat N]

Builds and runs `cargo run --release -p imgseq-kernels --example kernel_bench -- FILTER` N times
(default 1) and keeps, per row, the best time of each side (other processes only ever add
time). Prints `| op | pass | candle ms | ours ms | speedup |`.
"""
import argparse
import re
import subprocess
import sys

ROW = re.compile(
    r"^(?P<name>.+?)\s+(?P<pass>fwd\+bwd|fwd)\s+candle\s+(?P<candle>[\d.]+) ms\s+ours\s+(?P<ours>[\d.]+) ms"
)


def run_once(filt: str) -> list[tuple[str, str, float, float]]:
    cmd = ["cargo", "run", "--quiet", "--release", "-p", "imgseq-kernels", "--example", "kernel_bench", "--", filt]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        m = ROW.match(line.strip())
        if m:
            rows.append((m["name"].strip(), m["pass"], float(m["candle"]), float(m["ours"])))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("filter", nargs="?", default="")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    best: dict[tuple[str, str], list[float]] = {}
    order: list[tuple[str, str]] = []
    for _ in range(max(1, args.repeat)):
        for name, p, c, o in run_once(args.filter):
            key = (name, p)
            if key not in best:
                best[key] = [c, o]
                order.append(key)
            else:
                best[key] = [min(best[key][0], c), min(best[key][1], o)]
    print("| op | pass | candle ms | ours ms | speedup |")
    print("|---|---|---:|---:|---:|")
    for key in order:
        c, o = best[key]
        print(f"| {key[0]} | {key[1]} | {c:.2f} | {o:.2f} | {c / o:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
