"""Benchmark: native sparse indexing and batch BM25 against bm25s, side by side.

    python eval/bench_sparse.py [--repeats 5] [--collections cacm scifact]

Indexing is timed to a saved index for both (ours: doc store, postings,
manifest; bm25s: its arrays, vocabulary and the corpus). Both engines get the
same analysed text (this project's Lucene-compatible
analyzer, applied inside each timed indexing run with a fresh stem cache) and
the same BM25 parameters (Lucene variant, k1=0.9, b=0.4), k=1000 hits. Search
is timed end to end for both: query text in (analysis included), per query
the ranked doc ids and scores out as arrays (ours: a Run holding them; bm25s:
its row numbers mapped to doc ids); bm25s's raw retrieve (row numbers only,
no doc ids) is shown too. Ours is exact (only matching documents, ties by
doc id); bm25s pads with non-matching documents and breaks ties arbitrarily. Prints
one Markdown table and writes it to eval/results/sparse.md. Quote the ratios:
absolute times vary between runs.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import bm25s  # noqa: E402
import numpy as np  # noqa: E402
from benchlib import machine_line, median_time, publish  # noqa: E402

from retrieval.analysis import Analyzer  # noqa: E402
from retrieval.collections import load_documents, load_topics  # noqa: E402
from retrieval.index import Index, build_index  # noqa: E402
from retrieval.sparse.rankers import BM25  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "sparse.md"


def bench_collection(name: str, repeats: int, workdir: Path) -> list[dict]:
    docs = list(load_documents(name))
    queries = load_topics(name)
    texts = list(queries.values())
    path = workdir / name

    def ours_index(workers=1):
        build_index(docs, path, analyzer=Analyzer(), progress=False, workers=workers)

    def bm25s_index():
        """bm25s indexes and saves its index with the corpus (ours stores a doc store too)."""
        analyze = Analyzer()
        model = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
        model.index([analyze(d.contents) for d in docs], show_progress=False)
        model.save(str(workdir / f"{name}-bm25s"), corpus=[{"id": d.id, "text": d.contents}
                                                           for d in docs])
        return model

    rows = []
    t_bm25s = median_time(bm25s_index, repeats)  # bm25s indexes on one core
    for workers in (1, 2):
        t_ours = median_time(lambda workers=workers: ours_index(workers), repeats)
        rows.append({"collection": name, "measure": f"indexing docs/s, {workers} process(es)",
                     "ours": len(docs) / t_ours, "bm25s": len(docs) / t_bm25s})

    index = Index.open(path)
    model = bm25s_index()
    vocab = model.vocab_dict
    doc_ids = np.array([d.id for d in docs], dtype=object)
    query_analyzer = Analyzer()
    for threads in (1, 2):
        ours = BM25(index, k1=0.9, b=0.4, hits=1000, threads=threads)

        def bm25s_search(threads=threads, with_ids=True):
            tokens = [[t for t in query_analyzer(q) if t in vocab] or [""] for q in texts]
            rows_, scores = model.retrieve(tokens, k=min(1000, len(docs)), show_progress=False,
                                           n_threads=threads if threads > 1 else 0)
            if with_ids:  # the same output as ours: per query (doc id array, score array)
                return [(doc_ids[r], s) for r, s in zip(rows_, scores)]

        t_ours = median_time(lambda ours=ours: ours(queries), repeats)
        t_bm25s = median_time(bm25s_search, repeats)
        t_raw = median_time(lambda threads=threads: bm25s_search(threads, False), repeats)
        rows.append({"collection": name, "measure": f"BM25 queries/s, k=1000, {threads} thread(s)",
                     "ours": len(texts) / t_ours, "bm25s": len(texts) / t_bm25s,
                     "raw": len(texts) / t_raw})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| collection | measure | ours | bm25s | ours / bm25s | bm25s raw arrays |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        raw = f"{r['raw']:,.0f}" if "raw" in r else "n/a"
        lines.append(f"| {r['collection']} | {r['measure']} | {r['ours']:,.0f} | "
                     f"{r['bm25s']:,.0f} | {r['ours'] / r['bm25s']:.2f}x | {raw} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--collections", nargs="+", default=["cacm", "scifact"])
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [r for c in args.collections for r in bench_collection(c, args.repeats, Path(tmp))]
    out = (f"# Sparse indexing and BM25 search: this project vs bm25s\n\n"
           f"Machine: {machine_line('numpy', 'bm25s')}\n\nMedian of {args.repeats} runs after a warm-up; "
           f"regenerate with `python eval/bench_sparse.py`.\n\n{table(rows)}\n")
    publish(RESULTS, out)


if __name__ == "__main__":
    main()
