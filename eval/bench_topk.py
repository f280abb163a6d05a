"""Benchmark: which exact top-k path is faster, MaxScore or exhaustive scoring, by collection size and k.

    python eval/bench_topk.py [--collections cacm scifact vaswani] [--synthetic /tmp/scale/ours-100000]
                              [--repeats 3]

Both paths give the same top k, scores and order (tests/test_maxscore.py); only
speed differs. MaxScore's cost follows the postings it reads and grows with k
(a larger heap, a lower k-th score, less pruning), and it pays per document
for the lists it skips; the exhaustive kernel reads every posting of the
query's terms, term at a time within cache-sized windows of documents. The
searcher's "auto" (retrieval/sparse/searcher.py, auto_method) is the
exhaustive kernel; this table is the evidence for that choice. A second table
times the exhaustive kernel's two ways of keeping the top k, a heap and a
buffer (kernels.py), at each k: the evidence for the k the searcher switches
at (ImpactSearcher.large_k, kernels.LARGE_K).
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
from retrieval.index.native import Index, build_index  # noqa: E402
from retrieval.sparse.kernels import LARGE_K  # noqa: E402
from retrieval.sparse.rankers import BM25  # noqa: E402

KS = (10, 100, 1000, 10000)
SELECTION_KS = (20, 50, 100, 200, 1000)
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


def selection_rows(name: str, index: Index, texts: list[str], repeats: int) -> list[str]:
    """Exhaustive scoring with the top k kept in a heap against a buffer, at each k (same results)."""
    ranker = BM25(index, k1=0.9, b=0.4)
    queries = [ranker.weighted(ranker.analyse(t)) for t in texts]
    searcher, rows = ranker.searcher, []
    for k in SELECTION_KS:
        if k > index.num_docs:
            continue
        found = {}
        for way, large_k in (("heap", k + 1), ("buffer", k)):
            searcher.large_k = large_k
            found[way] = rates(lambda k=k: searcher.search_many(queries, k, method="exhaustive"),
                               len(queries), repeats)
        del searcher.large_k  # back to the class's LARGE_K
        used = "buffer" if k >= searcher.large_k else "heap"
        faster = max(found, key=lambda way: found[way][0])
        cells = [f"{found[w][0]:,.0f} ({found[w][1]:,.0f}-{found[w][2]:,.0f})" for w in found]
        rows.append(f"| {name} | {index.num_docs:,} | {k:,} | {cells[0]} | {cells[1]}"
                    f" | {found['buffer'][0] / found['heap'][0]:.2f} | {used}"
                    f" | {'yes' if used == faster else 'no'} |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--collections", nargs="*", default=["cacm", "scifact", "vaswani"])
    p.add_argument("--synthetic", type=Path, nargs="*", default=[],
                   help="indexes built by eval/bench_scale.py (e.g. /tmp/scale/ours-100000)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    rows, selection = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.collections:
            path = Path(tmp) / name
            build_index(load_documents(name), path, progress=False)
            texts = list(load_topics(name).values())
            rows += rows_for(name, Index.open(path), texts, args.repeats)
            selection += selection_rows(name, Index.open(path), texts, args.repeats)
    for path in args.synthetic:
        name, texts = path.name.replace("ours-", "synthetic "), synthetic_queries(path)
        rows += rows_for(name, Index.open(path, verify=False), texts, args.repeats)
        selection += selection_rows(name, Index.open(path, verify=False), texts, args.repeats)
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
        "",
        "Exhaustive scoring, the top k kept in a heap or in a buffer (kernels.exhaustive_top_k and"
        f" exhaustive_top_k_kept; identical results); the searcher uses the buffer from k = {LARGE_K} on.",
        "",
        "| collection | docs | k | heap q/s | buffer q/s | buffer / heap | searcher uses | uses the faster |",
        "|---|---:|---:|---:|---:|---:|---|---|",
        *selection,
    ])
    publish(RESULTS, text)


if __name__ == "__main__":
    main()
