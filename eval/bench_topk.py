"""Benchmark: which exact top-k path is faster, MaxScore or exhaustive scoring, by collection size and k.

    python eval/bench_topk.py [--collections cacm scifact vaswani] [--synthetic /tmp/scale/ours-100000]
                              [--repeats 3]

Both paths give the same top k, scores and order (tests/test_maxscore.py); only
speed differs. MaxScore's cost follows the postings it reads and grows with k
(a larger heap, a lower k-th score, less pruning), and it pays per document
for the lists it skips; the exhaustive kernel reads every posting of the
query's terms, term at a time within cache-sized windows of documents. The
searcher's "auto" (retrieval/sparse/searcher.py, auto_method) is the
exhaustive kernel; this table is the evidence for that choice.
BM25 (k1=0.9, b=0.4), one thread, queries already analysed; q/s is the median
(min-max) of the timed runs after a warm-up. `--synthetic` adds indexes built
by eval/bench_scale.py (their queries are read from the corpus directory
beside them, synth-N). Writes eval/results/topk.md.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from benchlib import machine_line, publish, rates  # noqa: E402

from retrieval.collections import load_documents, load_topics  # noqa: E402
from retrieval.index import Index, build_index  # noqa: E402
from retrieval.sparse.rankers import BM25  # noqa: E402

KS = (10, 100, 1000, 10000)
RESULTS = Path(__file__).parent / "results" / "topk.md"


def synthetic_queries(index_dir: Path) -> list[str]:
    """The queries of the corpus an eval/bench_scale.py index was built from (synth-N beside ours-N)."""
    import json

    corpus = index_dir.parent / index_dir.name.replace("ours-", "synth-")
    with open(corpus / "queries.jsonl") as f:
        return [json.loads(line)["text"] for line in f]


def rows_for(name: str, index: Index, texts: list[str], repeats: int) -> list[str]:
    ranker = BM25(index, k1=0.9, b=0.4)
    queries = [ranker.weighted(ranker.analyse(t)) for t in texts]
    rows = []
    for k in KS:
        if k > 2 * index.num_docs:
            continue
        found = {m: rates(lambda m=m, k=k: ranker.searcher.search_many(queries, k, method=m), len(queries),
                         repeats) for m in ("maxscore", "exhaustive")}
        faster = max(found, key=lambda m: found[m][0])
        auto = ranker.searcher.auto_method(k)
        cells = [f"{found[m][0]:,.0f} ({found[m][1]:,.0f}-{found[m][2]:,.0f})" for m in found]
        rows.append(f"| {name} | {index.num_docs:,} | {k:,} | {index.num_docs / k:,.0f} | {cells[0]}"
                    f" | {cells[1]} | {found['maxscore'][0] / found['exhaustive'][0]:.2f} | {auto}"
                    f" | {'yes' if auto == faster else 'no'} |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--collections", nargs="*", default=["cacm", "scifact", "vaswani"])
    p.add_argument("--synthetic", type=Path, nargs="*", default=[],
                   help="indexes built by eval/bench_scale.py (e.g. /tmp/scale/ours-100000)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.collections:
            path = Path(tmp) / name
            build_index(load_documents(name), path, progress=False)
            rows += rows_for(name, Index.open(path), list(load_topics(name).values()), args.repeats)
    for path in args.synthetic:
        rows += rows_for(path.name.replace("ours-", "synthetic "), Index.open(path, verify=False),
                         synthetic_queries(path), args.repeats)
    text = "\n".join([
        "# Exact top k: MaxScore or exhaustive scoring",
        "",
        machine_line("numpy", "numba", "scipy"),
        "",
        f"BM25 (k1=0.9, b=0.4), one thread, all topics of each collection (synthetic: its 1,000 queries),"
        f" analysed beforehand; q/s median (min-max) of {args.repeats} timed runs after a warm-up. Both"
        " paths return identical results. \"auto\" is the searcher's default (auto_method).",
        "",
        "| collection | docs | k | docs / k | MaxScore q/s | exhaustive q/s | MaxScore / exhaustive"
        " | auto picks | auto picks the faster |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
        *rows,
    ])
    publish(RESULTS, text)


if __name__ == "__main__":
    main()
