"""Runs the shell blocks of the README, docs/, the model cards and python/README.md, and checks
the output lines they quote: the docs cannot drift from the program.

    python3 scripts/run_docs.py                 # every runnable block (CI runs this)
    python3 scripts/run_docs.py --list          # what would run, what is not run and why
    python3 scripts/run_docs.py docs/vq-tokens.md --keep /tmp/docs-sandbox

Every ```sh / ```bash block says what it is, after the language:

* ```` ```sh runnable ````: run here, line by line in one `bash -e` shell, in a sandbox folder
  where the repository's folders are linked and placeholder inputs have small stand-ins
  (`STANDINS` below: `a.jpg` and `b.jpg` are committed photos, `shoe.png` a Fashion-MNIST
  picture, ...). `imgseq` is the binary `cargo test --profile ci` built, and
  `cargo run --release -p imgseq --` means it too.
* ```` ```sh needs:WHAT ````: not run, and why (`network`, `released-weights`, `photos` — the
  Debian wallpaper packages —, `pytorch`, `python-packages`, `training`, `server`,
  `toolchain`, `placeholder` — inputs only the reader has —, `long` — many minutes). `needs:fashion-mnist` blocks run
  where Debian's `dataset-fashion-mnist` is installed (CI installs it).

Setup lines — `apt-get`, `pip install`, `cargo build`, `cargo test`, `bash .ci/run` — are not
run: CI has done them before the runner starts.

A runnable block may be followed by a ```` ```text output ```` block: each of its lines must
appear in what the commands printed (`…` matches anything; figures are compared as written, so
quote the precision and CPU kind that produced them in the prose).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELLS = {"sh", "bash", "shell", "console"}
NEEDS = {
    "network", "released-weights", "photos", "pytorch", "python-packages", "training", "server",
    "toolchain", "placeholder", "fashion-mnist", "long",
}
FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
# Lines CI has run before the runner (installs, builds, the tests themselves).
SETUP = re.compile(r"^\s*(apt-get|pip install|cargo build|cargo test|bash \.ci/run)\b")
# Placeholder names in the docs → the small file standing in for them in the sandbox.
STANDINS = {
    "a.jpg": "tests/fixtures/docs/a.jpg",
    "b.jpg": "tests/fixtures/docs/b.jpg",
    "photo.jpg": "tests/fixtures/docs/a.jpg",
    "photos/a.jpg": "tests/fixtures/docs/a.jpg",
    "photos/b.jpg": "tests/fixtures/docs/b.jpg",
    "photos/c.png": "assets/coffee.png",
    "photo.png": "assets/fmnist-t10k-00001.png",
    "shoe.png": "assets/fmnist-t10k-00001.png",
    "shirt.png": "assets/fmnist-t10k-00001.png",
}
# The repository's top-level entries the sandbox links to (relative paths in the docs work).
LINKED = ["assets", "crates", "data", "docs", "examples", "python", "scripts", "tests", "weights"]


def documents(only: list[str]) -> list[Path]:
    if only:
        return [ROOT / p for p in only]
    out = [ROOT / "README.md", ROOT / "python/README.md"]
    out += sorted((ROOT / "docs").rglob("*.md"))
    out += sorted((ROOT / "weights").rglob("README.md"))
    return out


def blocks(path: Path):
    """(line, language, words after it, body lines, the output block after it or None)."""
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*(.*)$", lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        start, lang, words = i + 1, m.group(1), m.group(2).split()
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        body = lines[i + 1 : j]
        i = j + 1
        found.append([start, lang, words, body, None])
    for k in range(len(found) - 1):
        nxt = found[k + 1]
        if nxt[1] == "text" and "output" in nxt[2]:
            found[k][4] = nxt[3]
    return found


def sandbox(keep: str | None) -> Path:
    d = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="imgseq-docs-"))
    d.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        link = d / name
        if not link.exists():
            link.symlink_to(ROOT / name)
    for name, src in STANDINS.items():
        dst = d / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists():
            shutil.copyfile(ROOT / src, dst)
    return d


def binary() -> Path:
    b = Path(os.environ.get("IMGSEQ_BIN", ROOT / "target/ci/imgseq"))
    if not b.is_file():
        sys.exit(f"error: {b}: no imgseq binary (run `cargo test --profile ci` first or set IMGSEQ_BIN)")
    return b


def script_of(body: list[str]) -> str:
    kept, cont = [], False
    for line in body:
        skip = cont or bool(SETUP.match(line))
        cont = skip and line.rstrip().endswith("\\")
        if not skip:
            kept.append(line)
    text = "\n".join(kept)
    text = re.sub(r"cargo run (--release|--profile \S+) -p imgseq --", "imgseq", text)
    return "set -eo pipefail\n" + text + "\n"


def quoted_lines_missing(quoted: list[str], printed: str) -> list[str]:
    missing = []
    for q in quoted:
        q = q.strip()
        if not q:
            continue
        pattern = ".*".join(re.escape(part.strip()) for part in q.split("…"))
        if not re.search(pattern, printed):
            missing.append(q)
    return missing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="documents to run (default: all)")
    ap.add_argument("--list", action="store_true", help="list the blocks, run nothing")
    ap.add_argument("--keep", help="sandbox folder to use and keep")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per block")
    args = ap.parse_args()

    problems, runnable, skipped = [], [], {}
    for doc in documents(args.files):
        rel = doc.relative_to(ROOT)
        for line, lang, words, body, output in blocks(doc):
            if lang not in SHELLS:
                continue
            needs = [w.split(":", 1)[1] for w in words if w.startswith("needs:")]
            if "runnable" in words or (needs == ["fashion-mnist"] and FASHION_MNIST.is_dir()):
                runnable.append((f"{rel}:{line}", body, output))
            elif needs and all(n in NEEDS for n in needs):
                for n in needs:
                    skipped.setdefault(n, []).append(f"{rel}:{line}")
            else:
                problems.append(
                    f"{rel}:{line}: a ```{lang} block must say `runnable` or `needs:WHAT` "
                    f"({', '.join(sorted(NEEDS))}) after the language"
                )
    if args.list:
        for where, body, _ in runnable:
            print(f"run   {where}: {len(body)} lines")
        for n, wheres in sorted(skipped.items()):
            for w in wheres:
                print(f"skip  {w}: needs {n}")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    if args.list:
        return 0

    box = sandbox(args.keep)
    bindir = box / ".bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "imgseq"
    if not exe.exists():
        exe.symlink_to(binary())
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", IMGSEQ_WEIGHTS_DIR=str(ROOT / "weights"))
    failed = []
    for where, body, output in runnable:
        t = time.time()
        p = subprocess.run(["bash", "-c", script_of(body)], cwd=box, env=env, capture_output=True,
                           text=True, timeout=args.timeout)
        printed = p.stdout + p.stderr
        took = time.time() - t
        if p.returncode != 0:
            failed.append(f"{where}: exit {p.returncode}\n{printed[-2000:]}")
            print(f"FAIL  {where} ({took:.1f} s)")
            continue
        missing = quoted_lines_missing(output or [], printed)
        if missing:
            failed.append(f"{where}: the quoted output lines were not printed:\n  " + "\n  ".join(missing)
                          + f"\n--- printed:\n{printed[-2000:]}")
            print(f"FAIL  {where} ({took:.1f} s)")
        else:
            print(f"ok    {where} ({took:.1f} s{', output checked' if output else ''})")
    if not args.keep:
        shutil.rmtree(box, ignore_errors=True)
    n_skip = sum(len(v) for v in skipped.values())
    print(f"docs: {len(runnable) - len(failed)} of {len(runnable)} runnable blocks passed; "
          f"{n_skip} not run ({', '.join(f'{k}: {len(v)}' for k, v in sorted(skipped.items()))})")
    if failed:
        print("\n\n".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
