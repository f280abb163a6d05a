"""Alternating builds of two revisions of the code on the Wikipedia passages: is a build change faster?

    python eval/build_pairs.py --wiki /work/data/wiki --base REV [--head REV] [--passages 200000]
                               [--pairs 6] [--tantivy] [--scratch DIR] [--out FILE]

Each revision's `retrieval/` (`git archive REV`; --head defaults to this checkout as it is) builds the
first --passages passages of WIKI/corpus.jsonl (sliced as bench_real.py slices them; 0: all) in a
fresh child process (`bench_real.py --child ours`: `build_index(workers=1)`, its wall seconds, CPU
seconds of every thread, peak RSS and the load average before and after), base then head, --pairs
times, after one unrecorded build of each on the first WARM_PASSAGES passages (numba compiles its
kernels into each copy's cache once). --tantivy adds one build of tantivy's (bench_real.py's) after
the pairs, for reference.
On a shared machine other work changes every timing, so the pairs alternate and the comparison is
within each pair: the table gives each pair, the medians, and a paired t-test on the wall and CPU
seconds. The two indexes are then compared file by file (the manifest apart from its timestamps).
Writes eval/results/build_pairs.md.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import statistics
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "build_pairs.md"
WARM_PASSAGES = 5000  # the unrecorded first build of each copy


def checkout(rev: str, where: Path) -> Path:
    """REV's retrieval/ package under `where` (the directory to put on PYTHONPATH)."""
    if not (where / "retrieval").is_dir():
        data = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "retrieval"], check=True,
                              capture_output=True).stdout
        where.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=BytesIO(data)) as tar:
            tar.extractall(where, filter="data")
    return where


def build(code: Path, corpus: Path, out: Path, engine: str = "ours") -> dict:
    """One build in a child process with `code` first on its path (bench_real's child for `engine`)."""
    env = os.environ | {"TQDM_DISABLE": "1", "BENCH_REAL_THREADS": "1", "NUMBA_NUM_THREADS": "1",
                        "PYTHONPATH": os.pathsep.join([str(code), str(HERE)])}
    proc = subprocess.run([sys.executable, str(HERE / "bench_real.py"), "--child", engine, str(corpus),
                           str(out)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"build with {code} failed: {(proc.stderr.strip().splitlines() or ['killed'])[-1]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def differing(a: Path, b: Path) -> list[str]:
    """The files in which two index directories differ (the manifest apart from its timestamps)."""
    def timeless(value: object) -> object:
        if isinstance(value, dict):
            return {k: timeless(v) for k, v in value.items() if k not in ("created", "built")}
        return value

    files_a = {p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file()}
    out = sorted(files_a ^ files_b)
    for name in sorted(files_a & files_b):
        if name == "manifest.json":
            manifests = [timeless(json.loads((d / name).read_text())) for d in (a, b)]
            same = manifests[0] == manifests[1]
        else:
            same = filecmp.cmp(a / name, b / name, shallow=False)
        if not same:
            out.append(name)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wiki", type=Path, required=True, help="the output directory of wiki_passages.py")
    ap.add_argument("--base", required=True, help="the revision to compare against (e.g. main)")
    ap.add_argument("--head", help="the revision measured (default: this checkout as it is)")
    ap.add_argument("--passages", type=int, default=200_000, help="first N passages (0: all)")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--scratch", type=Path, help="the slice, code and indexes (default WIKI/pairs-N)")
    ap.add_argument("--tantivy", action="store_true", help="then one build of tantivy's (bench_real's)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    from bench_real import slice_corpus
    from benchlib import publish
    from scipy import stats

    scratch = a.scratch or a.wiki / f"pairs-{a.passages or 'all'}"
    corpus, count = slice_corpus(a.wiki, scratch, a.passages)
    base_rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", a.base], check=True,
                              capture_output=True, text=True).stdout.strip()
    code = {"base": checkout(base_rev, scratch / f"code-{base_rev}"),
            "head": checkout(a.head, scratch / f"code-{a.head}") if a.head else ROOT}
    warm, _ = slice_corpus(a.wiki, scratch / "warm", WARM_PASSAGES)
    for who in code:  # numba compiles each copy's kernels into its cache once
        build(code[who], warm, scratch / f"index-{who}")
    rows, seconds = [], {who: {"wall": [], "cpu": [], "rss": []} for who in code}
    for i in range(1, a.pairs + 1):
        got = {who: build(code[who], corpus, scratch / f"index-{who}") for who in code}
        for who, r in got.items():
            seconds[who]["wall"].append(r["seconds"])
            seconds[who]["cpu"].append(r["cpu"])
            seconds[who]["rss"].append(r["rss"])
        cells = [f"{r['seconds']:.2f} / {r['cpu']:.2f} ({r['load'][0]:.1f} → {r['load'][1]:.1f})"
                 for r in got.values()]
        rows.append(f"| {i} | {' | '.join(cells)} | {got['head']['seconds'] - got['base']['seconds']:+.2f} |")
        print(rows[-1], file=sys.stderr, flush=True)
    head_name = a.head or "this checkout"
    lines = [f"{count:,} passages (the first of the corpus); base {a.base} ({base_rev}), head {head_name};"
             f" {a.pairs} alternating pairs, one analysis thread (`build_index(workers=1)`).",
             "", "| pair | base: wall / CPU s (load before → after) | head: wall / CPU s (load)"
             " | head − base, wall s |", "|---:|---:|---:|---:|", *rows, ""]
    for kind in ("wall", "cpu"):
        b, h = seconds["base"][kind], seconds["head"][kind]
        p = stats.ttest_rel(h, b).pvalue if len(b) > 1 else float("nan")
        mb, mh = statistics.median(b), statistics.median(h)
        lines.append(f"- {kind} seconds, median: base {mb:.2f}, head {mh:.2f} ({mh / mb - 1:+.0%});"
                     f" paired t-test p = {p:.2g}")
    lines.append(f"- peak RSS, largest: base {max(seconds['base']['rss']):.2f} GB, head"
                 f" {max(seconds['head']['rss']):.2f} GB")
    if a.tantivy:
        t = build(ROOT, corpus, scratch / "index-tantivy", "tantivy")
        lines.append(f"- tantivy, built right after (bench_real.py's build: one writer thread, its doc-store"
                     " compressor and merge threads; the id stored, not the text):"
                     f" wall {t['seconds']:.2f} s, CPU {t['cpu']:.2f} s (load {t['load'][0]:.1f} →"
                     f" {t['load'][1]:.1f}), peak RSS {t['rss']:.2f} GB")
    diff = differing(scratch / "index-base", scratch / "index-head")
    lines.append(f"- index files differing (manifest apart from its timestamps): {', '.join(diff) or 'none'}")
    publish(a.out, "# Build time, two revisions in alternating pairs\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
