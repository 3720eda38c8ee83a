#!/usr/bin/env python3
"""The house rules, checked: run by `.ci/run`, exits 1 on any breach.

1. Crates depend downwards only: each workspace crate has a layer (LAYERS below) and may
   depend only on crates of a lower layer.
2. No module cycles inside a crate: a module's file that names `crate::a::b`, `super::x` or
   `self::x` depends on that module; the graph of these edges (re-exports and `mod`
   declarations aside) has no cycle.
3. No library source file over 700 lines (tests, examples, benches and generated code aside)
   and no function over 100 lines.
4. A light tree: no tracked file over 10 MB, no optimizer state, no unfinished training run.
5. Test hooks stay in tests: no normal dependency turns on a crate's `test-hooks` feature
   (imgseq-serve's test routes; its own tests turn it on as a dev-dependency).
6. Families are plug-ins: no source file outside the family layer (the family crates in
   FAMILY_CRATES, the loader, imgseq-models, and the trainer, imgseq-train) names a family
   crate; the CLI, the service, the dataset job and the Python package reach every family
   through `imgseq_models::open` and the `Tokenizer` contract.

    python3 scripts/check_layering.py            # check, print a summary
    python3 scripts/check_layering.py --report   # also list every module edge and the largest files

A breach listed in scripts/layering-debt.txt (one key a line, as printed after `debt key:`) is
reported as known debt and does not fail the check; the file shrinks as the debt is paid, and a
key that no longer matches a breach fails the check so that the list cannot go stale.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEBT_FILE = ROOT / "scripts" / "layering-debt.txt"

# One layer per crate: a crate may depend only on crates of a strictly lower layer.
LAYERS = {
    "imgseq-core": 0,
    "imgseq-kernels": 0,
    "imgseq-torch": 1,
    "imgseq-shards": 1,
    "imgseq-hub": 1,
    "imgseq-vit": 2,
    "imgseq-vqgan": 2,
    "imgseq-gpt": 2,
    "imgseq-lfq": 2,
    "imgseq-eval": 2,
    "imgseq-models": 3,
    "imgseq-train": 3,
    "imgseq-serve": 4,
    "imgseq": 5,
    "imgseq-py": 4,
}
# The tokenizer families' crates, and the crates that may name them (the family layer; training
# a VQGAN is family-specific, so imgseq-train is in it).
FAMILY_CRATES = ["imgseq-vqgan", "imgseq-lfq"]
FAMILY_LAYER = set(FAMILY_CRATES) | {"imgseq-models", "imgseq-train"}
MAX_FILE_LINES = 700
MAX_FN_LINES = 100
MAX_TRACKED_BYTES = 10 * 1024 * 1024
# Names that are optimizer states or unfinished runs wherever they sit in the tree.
FORBIDDEN_PATHS = [
    re.compile(r"(^|/)(teacher_)?optimizer\.safetensors$"),
    re.compile(r"^weights/in-progress/"),
    re.compile(r"^fuzz/logs"),
]

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def crate_dirs() -> dict[str, Path]:
    ws = tomllib.loads((ROOT / "Cargo.toml").read_text())
    dirs = {}
    for member in ws["workspace"]["members"] + ["python"]:
        d = ROOT / member
        name = tomllib.loads((d / "Cargo.toml").read_text())["package"]["name"]
        dirs[name] = d
    return dirs


def check_crate_deps(dirs: dict[str, Path]) -> list[str]:
    errors = []
    for name, d in dirs.items():
        if name not in LAYERS:
            errors.append((f"{d.relative_to(ROOT)}: crate {name} has no layer in LAYERS", f"layer {name}"))
            continue
        deps = tomllib.loads((d / "Cargo.toml").read_text()).get("dependencies", {})
        for dep, spec in deps.items():
            if isinstance(spec, dict) and "test-hooks" in spec.get("features", []):
                errors.append((
                    f"{d.relative_to(ROOT)}/Cargo.toml: {name} turns on {dep}'s test-hooks "
                    "feature in a normal dependency: test hooks stay out of what users run",
                    f"hooks {name} -> {dep}",
                ))
            if dep in dirs and LAYERS[dep] >= LAYERS[name]:
                errors.append((
                    f"{d.relative_to(ROOT)}/Cargo.toml: {name} (layer {LAYERS[name]}) depends on "
                    f"{dep} (layer {LAYERS[dep]}): crates depend downwards only",
                    f"dep {name} -> {dep}",
                ))
    return errors


def module_files(src: Path) -> dict[tuple[str, ...], Path]:
    """Module path (without `crate`) -> file, for every .rs file under src."""
    mods = {}
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src).with_suffix("").parts
        if rel[-1] in ("lib", "main", "mod"):
            rel = rel[:-1]
        mods[tuple(rel)] = f
    return mods


TOKEN = re.compile(
    r"//[^\n]*"                                   # line comment
    r"|/\*.*?\*/"                                 # block comment
    r"|(?<![A-Za-z0-9_])b?r(#*)\"(?:.|\n)*?\"\1"    # raw string
    r"|b?\"(?:\\.|[^\"\\])*\""                   # string
    r"|b?'(?:\\.|[^\\'\n])'",                     # char literal
    flags=re.S,
)


def strip_comments_and_strings(text: str) -> str:
    """Comments, strings and char literals blanked out, newlines kept (line numbers hold)."""
    return TOKEN.sub(lambda m: "\n" * m.group(0).count("\n") + ('""' if m.group(0)[-1:] in "\"'#" else ""), text)


def expand_use_tree(prefix: list[str], tree: str) -> list[list[str]]:
    """`a::{b, c::{d}}` -> [[a, b], [a, c, d]] (enough of Rust's use grammar for paths)."""
    tree = tree.strip()
    m = re.match(rf"^((?:{IDENT}\s*::\s*)*)\{{(.*)\}}$", tree, flags=re.S)
    if m:
        head = [p for p in re.split(r"\s*::\s*", m.group(1).strip()) if p]
        inner, depth, parts, cur = m.group(2), 0, [], ""
        for ch in inner:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        out = []
        for p in parts:
            if p.strip():
                out.extend(expand_use_tree(prefix + head, p))
        return out
    path = re.split(r"\s*::\s*", re.sub(r"\s+as\s+\w+$", "", tree))
    return [prefix + [p for p in path if p]]


def referenced_paths(text: str) -> list[list[str]]:
    paths = []
    body = []
    for stmt in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text):
        if stmt.group(1):  # a re-export: the module shows it, it does not depend on it
            continue
        paths.extend(expand_use_tree([], stmt.group(2)))
    body = re.sub(r"\b(pub(?:\([^)]*\))?\s+)?use\s+[^;]+;", "", text)
    for m in re.finditer(rf"\b((?:crate|super|self)(?:\s*::\s*{IDENT})+)", body):
        paths.append(re.split(r"\s*::\s*", m.group(1)))
    return paths


def resolve(here: tuple[str, ...], is_mod_file: bool, path: list[str], mods) -> tuple[str, ...] | None:
    if not path or path[0] not in ("crate", "super", "self"):
        return None
    # The module a file *is*: for a/b.rs and a/b/mod.rs both `a::b`; `super` is its parent.
    cur = list(here)
    i = 0
    if path[0] == "crate":
        cur, i = [], 1
    else:
        while i < len(path) and path[i] in ("super", "self"):
            if path[i] == "super":
                cur = cur[:-1]
            i += 1
    best = None
    for j in range(i, len(path) + 1):
        cand = tuple(cur + path[i:j])
        if cand in mods:
            best = cand
    return best


def module_edges(src: Path) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    mods = module_files(src)
    edges: dict[tuple[str, ...], set[tuple[str, ...]]] = {m: set() for m in mods}
    for m, f in mods.items():
        text = strip_comments_and_strings(f.read_text())
        is_mod = f.name in ("mod.rs", "lib.rs", "main.rs")
        # #[cfg(test)] modules inside a file are that file's tests: they may reach anywhere.
        text = re.split(r"#\[cfg\(test\)\]\s*mod\s+tests", text)[0]
        for p in referenced_paths(text):
            target = resolve(m, is_mod, p, mods)
            if target is None or target == m:
                continue
            # A module reaching into its own child is fine (it declares it); the child naming
            # its parent's items is a real dependency, kept.
            if target[: len(m)] == m:
                continue
            edges[m].add(target)
    return edges


def cycles(edges) -> list[list[tuple[str, ...]]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def long_functions(f: Path) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every fn longer than MAX_FN_LINES, by brace matching."""
    lines = f.read_text().splitlines()
    clean = strip_comments_and_strings(f.read_text()).splitlines()
    # strip_comments_and_strings keeps line count only approximately for raw strings; good enough
    out = []
    fn_re = re.compile(rf"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+\"C\"\s+)?fn\s+({IDENT})")
    i = 0
    while i < len(clean):
        m = fn_re.match(clean[i])
        if not m:
            i += 1
            continue
        depth, started, j = 0, False, i
        while j < len(clean):
            for ch in clean[j]:
                if ch == "{":
                    depth += 1
                    started = True
                elif ch == "}":
                    depth -= 1
            if started and depth <= 0:
                break
            if not started and clean[j].rstrip().endswith(";"):
                break
            j += 1
        n = j - i + 1
        if started and n > MAX_FN_LINES:
            out.append((m.group(1), i + 1, n))
        i += 1 if not started else 1
    del lines
    return out


def library_files(dirs) -> list[Path]:
    files = []
    for d in dirs.values():
        for f in sorted((d / "src").rglob("*.rs")):
            files.append(f)
    return files


def check_sizes(dirs) -> tuple[list[str], list[tuple[int, Path]]]:
    errors, sizes = [], []
    for f in library_files(dirs):
        text = f.read_text()
        if text.startswith("// @generated"):
            continue
        # Unit tests at a file's end are tests, not library code.
        # (an inline `mod tests { ... }` block; `mod tests;` declares a file of its own and
        # the code after it is still library code).
        code = re.split(r"\n#\[cfg\(test\)\]\s*\nmod\s+tests\s*\{", text)[0]
        n = code.count("\n") + 1
        sizes.append((n, f))
        rel = f.relative_to(ROOT)
        if n > MAX_FILE_LINES:
            errors.append((f"{rel}: {n} lines of library code (at most {MAX_FILE_LINES})", f"size {rel}"))
        for name, line, length in long_functions(f):
            # functions inside the file's unit tests are exempt
            if line <= n:
                errors.append((f"{rel}:{line}: fn {name} is {length} lines (at most {MAX_FN_LINES})", f"fn {rel}::{name}"))
    return errors, sorted(sizes, reverse=True)


def check_families(dirs) -> list[tuple[str, str]]:
    """Library files outside the family layer that name a family crate."""
    names = [c.replace("-", "_") for c in FAMILY_CRATES]
    pattern = re.compile(r"\b(" + "|".join(names) + r")\s*::")
    errors = []
    for crate, d in dirs.items():
        if crate in FAMILY_LAYER:
            continue
        for f in sorted((d / "src").rglob("*.rs")):
            text = strip_comments_and_strings(f.read_text())
            found = sorted(set(pattern.findall(text)))
            if found:
                rel = f.relative_to(ROOT)
                errors.append((
                    f"{rel}: names the family crate(s) {', '.join(found)} outside the family "
                    f"layer (open models with imgseq_models::open and use the Tokenizer contract)",
                    f"family {rel}",
                ))
    return errors


def check_tree() -> list[str]:
    errors = []
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode()
    for p in filter(None, out.split("\0")):
        path = ROOT / p
        if any(r.search(p) for r in FORBIDDEN_PATHS):
            errors.append((f"{p}: optimizer states, unfinished runs and fuzz logs stay out of the tree", f"tree {p}"))
        elif path.is_file() and path.stat().st_size > MAX_TRACKED_BYTES:
            errors.append((f"{p}: {path.stat().st_size / 2**20:.1f} MB (at most 10 MB a file)", f"tree {p}"))
    return errors


ALL_CHECKS = ["deps", "cycles", "sizes", "tree", "families"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", action="store_true", help="print module edges and the largest files")
    ap.add_argument("--only", choices=ALL_CHECKS, action="append")
    args = ap.parse_args()
    only = set(args.only or ALL_CHECKS)
    dirs = crate_dirs()
    errors: list[tuple[str, str]] = []
    if "deps" in only:
        errors += check_crate_deps(dirs)
    n_cycles = 0
    if "cycles" in only:
        for name, d in dirs.items():
            edges = module_edges(d / "src")
            if args.report:
                for m, ts in sorted(edges.items()):
                    for t in sorted(ts):
                        print(f"edge {name}: {'::'.join(m) or 'crate'} -> {'::'.join(t) or 'crate'}")
            for comp in cycles(edges):
                n_cycles += 1
                names = ", ".join("::".join(m) or "crate" for m in comp)
                errors.append((f"{d.relative_to(ROOT)}: module cycle between {names}", f"cycle {name}: {names}"))
    if "sizes" in only:
        size_errors, sizes = check_sizes(dirs)
        errors += size_errors
        if args.report:
            for n, f in sizes[:15]:
                print(f"{n:6d} {f.relative_to(ROOT)}")
    if "tree" in only:
        errors += check_tree()
    if "families" in only:
        errors += check_families(dirs)
    debt = set()
    if DEBT_FILE.exists():
        for line in DEBT_FILE.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                debt.add(line)
    failing, known = [], []
    for msg, key in errors:
        (known if key in debt else failing).append((msg, key))
    stale = sorted(debt - {k for _, k in errors}) if only == set(ALL_CHECKS) else []
    for msg, key in known:
        print(f"known debt: {msg}")
    for msg, key in failing:
        print(f"error: {msg}\n  debt key: {key}")
    for key in stale:
        print(f"error: {DEBT_FILE.relative_to(ROOT)} lists '{key}', which no longer breaches a rule: delete the line")
    print(f"layering: {len(failing) + len(stale)} problems, {len(known)} known debt ({n_cycles} module cycles)")
    return 1 if failing or stale else 0

if __name__ == "__main__":
    sys.exit(main())
