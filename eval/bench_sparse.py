"""Benchmark: native sparse indexing and batch BM25 against bm25s, each at its best setting.

    python eval/bench_sparse.py [--repeats 5] [--collections cacm scifact]

Both engines index the same analysed text (this project's Lucene-compatible
analyzer, run inside each timed indexing with a fresh stem cache) with the
same BM25 (Lucene variant, k1=0.9, b=0.4). Indexing is timed to a saved index
(ours: doc store, postings, impacts, manifest; bm25s: its arrays, vocabulary
and the corpus), ours with 1 and 2 processes, bm25s with the analyzer run in
1 and 2 processes (bm25s's own indexing is one process). Search is timed end
to end for both at k=10 and k=1000: query text in (analysis included), per
query the ranked doc ids and scores out; bm25s is tried with its numpy and
numba backends at 1 and 2 threads and the best is reported and named, as is
ours' best thread count. Ours is exact (only matching documents, ties by doc
id); bm25s pads with non-matching documents and breaks ties arbitrarily.
Figures: median (min-max) over the repeats after a warm-up. Writes
eval/results/sparse.md. Quote the ratios: absolute times vary between runs.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import bm25s  # noqa: E402
import numpy as np  # noqa: E402
from benchlib import machine_line, publish, rates  # noqa: E402

from retrieval.analysis import Analyzer  # noqa: E402
from retrieval.collections import load_documents, load_topics  # noqa: E402
from retrieval.index.native import Index, build_index  # noqa: E402
from retrieval.sparse.rankers import BM25  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "sparse.md"
KS = (10, 1000)
THREADS = (1, 2)


def best(candidates: dict[str, tuple[float, float, float]]) -> tuple[str, tuple[float, float, float]]:
    """The setting with the highest median."""
    label = max(candidates, key=lambda c: candidates[c][0])
    return label, candidates[label]


def analyse_all(texts: list[str], processes: int) -> list[list[str]]:
    """Our analyzer over every text, in `processes` processes (a fresh stem cache in each)."""
    if processes == 1:
        analyze = Analyzer()
        return [analyze(t) for t in texts]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(processes) as pool:
        return list(pool.map(_analyse, texts, chunksize=256))


_worker_analyzer: Analyzer | None = None


def _analyse(text: str) -> list[str]:
    """Analyse in a worker process, with one analyzer (and stem cache) per process."""
    global _worker_analyzer
    if _worker_analyzer is None:
        _worker_analyzer = Analyzer()
    return _worker_analyzer(text)


def bench_collection(name: str, repeats: int, workdir: Path) -> list[dict]:
    docs = list(load_documents(name))
    queries = load_topics(name)
    texts = list(queries.values())
    path = workdir / name

    def bm25s_index(processes: int = 1):
        """bm25s indexes and saves its index with the corpus (ours stores a doc store too)."""
        model = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
        model.index(analyse_all([d.contents for d in docs], processes), show_progress=False)
        model.save(str(workdir / f"{name}-bm25s"), corpus=[{"id": d.id, "text": d.contents} for d in docs])
        return model

    ours = {f"{w} process(es)": rates(lambda w=w: build_index(docs, path, analyzer=Analyzer(), progress=False,
                                                               workers=w), len(docs), repeats)
            for w in THREADS}
    peer = {f"analysis in {w} process(es)": rates(lambda w=w: bm25s_index(w), len(docs), repeats)
            for w in THREADS}
    rows = [{"collection": name, "measure": "indexing docs/s", "ours": best(ours), "bm25s": best(peer)}]

    index = Index.open(path)
    model = bm25s_index()
    vocab = model.vocab_dict
    doc_ids = np.array([d.id for d in docs], dtype=object)
    query_analyzer = Analyzer()

    def bm25s_search(k: int, threads: int, backend: str):
        tokens = [[t for t in query_analyzer(q) if t in vocab] or [""] for q in texts]
        rows_, scores = model.retrieve(tokens, k=min(k, len(docs)), show_progress=False, n_threads=threads,
                                       backend_selection=backend)
        return [(doc_ids[r], s) for r, s in zip(rows_, scores)]

    for k in KS:
        rankers = {t: BM25(index, k1=0.9, b=0.4, hits=k, threads=t) for t in THREADS}
        ours = {f"{t} thread(s)": rates(lambda r=rankers[t]: r(queries), len(texts), repeats)
                for t in THREADS}
        peer = {}
        for backend in ("numpy", "numba"):
            for t in THREADS:
                try:
                    peer[f"{backend}, {t} thread(s)"] = rates(
                        lambda k=k, t=t, b=backend: bm25s_search(k, t, b), len(texts), repeats)
                except Exception as e:  # noqa: BLE001 - a backend that does not run here is named, not fatal
                    print(f"bm25s {backend} backend failed: {type(e).__name__}: {e}")
        rows.append({"collection": name, "measure": f"BM25 queries/s, k={k}", "ours": best(ours),
                     "bm25s": best(peer)})
    return rows


def cell(found: tuple[str, tuple[float, float, float]]) -> str:
    label, (median, low, high) = found
    return f"{median:,.0f} ({low:,.0f}-{high:,.0f}) [{label}]"


def table(rows: list[dict]) -> str:
    lines = ["| collection | measure | ours (best setting) | bm25s (best setting) | ours / bm25s |",
             "|---|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['collection']} | {r['measure']} | {cell(r['ours'])} | {cell(r['bm25s'])} | "
                     f"{r['ours'][1][0] / r['bm25s'][1][0]:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--collections", nargs="+", default=["cacm", "scifact"])
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [r for c in args.collections for r in bench_collection(c, args.repeats, Path(tmp))]
    out = (f"# Sparse indexing and BM25 search: this project vs bm25s, each at its best setting\n\n"
           f"{machine_line('numpy', 'numba', 'bm25s')}\n\n"
           f"Median (min-max) of {args.repeats} runs after a warm-up; the setting each side did best with is"
           f" in brackets (tried: ours 1 and 2 processes / threads; bm25s numpy and numba backends, 1 and 2"
           f" threads, analysis in 1 and 2 processes). Same analyzer, same BM25; ours exact, bm25s pads and"
           f" breaks ties arbitrarily.\n\n{table(rows)}\n")
    publish(RESULTS, out)


if __name__ == "__main__":
    main()
