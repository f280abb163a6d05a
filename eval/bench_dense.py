"""Dense retrieval benchmark on SciFact: encoding speed and quality, FAISS index types.

    python eval/bench_dense.py [--threads 2] [--sample 256] [--repeats 3] [--paths ...]

Encoding: docs/s of sentence-transformers' own `encode` (the reference) and of
each precision path of `retrieval.dense.Encoder`, on the same random sample of
SciFact documents, measured round-robin (so load from other processes hits
every path alike), median over repeats after a warm-up; nDCG@10 on SciFact
test from a full-corpus encoding with each path (flat index, query id removed
from its hits). Search: queries/s of flat, HNSW and IVF-PQ over the default
path's embeddings, recall@100 against flat. Prints one Markdown table and
writes it to eval/results/dense.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import faiss
import ir_measures
import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import cpu_model  # noqa: E402

from retrieval.collections import load_documents, load_qrels, load_topics  # noqa: E402
from retrieval.dense.encoder import (  # noqa: E402
    DEFAULT_PRECISION,
    PRECISIONS,
    Encoder,
    cache_root,
    cpu_has_bf16,
    default_model_dir,
    model_checksum,
)
from retrieval.dense.faiss_index import build_faiss  # noqa: E402
from retrieval.types import Run  # noqa: E402

REFERENCE = "sentence-transformers"
NDCG = ir_measures.parse_measure("nDCG@10")


class STPath:
    """sentence-transformers' own encode, the reference."""

    def __init__(self, threads: int):
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        self.threads = threads
        self.model = SentenceTransformer(str(default_model_dir()), device="cpu",
                                         local_files_only=True)
        self.model.max_seq_length = 256

    def encode(self, texts: list[str], desc: str = "") -> np.ndarray:
        torch.set_num_threads(self.threads)
        return self.model.encode(texts, batch_size=32, normalize_embeddings=True,
                                 show_progress_bar=False, convert_to_numpy=True)


def machine_line() -> str:
    cpu = cpu_model()
    import onnxruntime
    import sentence_transformers as st
    import transformers

    return (f"Machine: {len(os.sched_getaffinity(0))} cores, {cpu}, bf16 "
            f"instructions: {'yes' if cpu_has_bf16() else 'no'}; Python "
            f"{platform.python_version()}, torch {torch.__version__}, transformers "
            f"{transformers.__version__}, sentence-transformers {st.__version__},"
            f" onnxruntime {onnxruntime.__version__}, faiss {faiss.__version__}")


def evaluate(doc_ids: list[str], docs: np.ndarray, qids: list[str], queries: np.ndarray,
             qrels) -> float:
    index, _ = build_faiss(docs)
    scores, rows = index.search(queries, 1000)
    run = Run({q: [(doc_ids[r], float(s)) for r, s in zip(rows[i], scores[i])]
               for i, q in enumerate(qids)}).without_query_ids()
    return ir_measures.calc_aggregate([NDCG], qrels, run.scores())[NDCG]


def full_encoding(name: str, path, texts: list[str], qtexts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Corpus and query embeddings of one path, cached on disk (.npy, keyed by the model's
    checksum, the path and the texts) so a rerun re-measures speed without re-encoding."""
    key = hashlib.sha256(json.dumps([model_checksum(None), name, texts, qtexts]).encode()).hexdigest()
    cache = cache_root() / "bench-dense" / f"{name}-{key[:16]}.npz"
    if cache.is_file():
        with np.load(cache, allow_pickle=False) as stored:
            return stored["docs"], stored["queries"]
    print(f"full-corpus encoding with {name} ...", file=sys.stderr, flush=True)
    docs, queries = path.encode(texts), path.encode(qtexts)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, docs=docs, queries=queries)
    return docs, queries


def encoding_rows(args, corpus, qids, qtexts, qrels) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Encoding speed and nDCG rows; returns them with the default path's embeddings."""
    paths = {REFERENCE: STPath(args.threads)}
    for name in args.paths:
        paths[name] = Encoder(precision=name, threads=args.threads, progress=False)
    doc_ids, texts = [d.id for d in corpus], [d.contents for d in corpus]
    rng = np.random.default_rng(0)
    sample = [texts[i] for i in rng.choice(len(texts), args.sample, replace=False)]
    times: dict[str, list[float]] = {name: [] for name in paths}
    for path in paths.values():
        path.encode(sample[:32])  # warm-up
    for _ in range(args.repeats):
        for name, path in paths.items():
            start = time.perf_counter()
            path.encode(sample)
            times[name].append(time.perf_counter() - start)
    rate = {name: args.sample / statistics.median(t) for name, t in times.items()}
    print("docs/s: " + ", ".join(f"{n} {r:.1f}" for n, r in rate.items()), file=sys.stderr,
          flush=True)
    ndcg, default_docs, default_queries = {}, None, None
    for name, path in paths.items():
        if name not in args.ndcg_paths and name != DEFAULT_PRECISION:
            continue
        docs, queries = full_encoding(name, path, texts, qtexts)
        ndcg[name] = evaluate(doc_ids, docs, qids, queries, qrels)
        if name == DEFAULT_PRECISION:
            default_docs, default_queries = docs, queries
    # The reference for quality: torch fp32, else sentence-transformers, else ONNX's fp32 graph
    # (the same network: cosine 1.00000 to torch fp32, checked in tests/test_dense.py).
    ref = next((n for n in ("fp32", REFERENCE, "onnx") if n in ndcg), None)
    fp32 = ndcg.get(ref) if ref else None
    lines = [f"| encoder path | docs/s (median of {args.repeats}, {args.sample} docs) |"
             f" × {REFERENCE} | nDCG@10 | Δ vs {ref or 'fp32'} |", "|---|---:|---:|---:|---:|"]
    for name in paths:
        label = name + (" (default)" if name == DEFAULT_PRECISION else "")
        quality = (f"{ndcg[name]:.4f} | {ndcg[name] - fp32:+.4f}" if name in ndcg and fp32
                   else f"{ndcg[name]:.4f} | –" if name in ndcg else "– | –")
        lines.append(f"| {label} | {rate[name]:.1f} | {rate[name] / rate[REFERENCE]:.2f}× |"
                     f" {quality} |")
    return lines, default_docs, default_queries


def search_rows(args, doc_ids, docs, qids, queries, qrels) -> list[str]:
    """Queries/s and recall@100 against flat for flat, HNSW and IVF-PQ."""
    faiss.omp_set_num_threads(args.threads)
    lines = ["| index | params | queries/s (k=100) | × flat | recall@100 vs flat | nDCG@10 |",
             "|---|---|---:|---:|---:|---:|"]
    truth, flat_rate = None, None
    for kind in ("flat", "hnsw", "ivfpq"):
        index, params = build_faiss(docs, kind)
        index.search(queries, 100)
        runs = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            found = index.search(queries, 100)[1]
            runs.append(time.perf_counter() - start)
        rate = len(queries) / statistics.median(runs)
        truth = found if truth is None else truth
        flat_rate = flat_rate or rate
        recall = np.mean([len(set(a) & set(b)) / len(a) for a, b in zip(truth, found)])
        scores, rows = index.search(queries, 1000)
        run = Run({q: [(doc_ids[r], float(s)) for r, s in zip(rows[i], scores[i]) if r >= 0]
                   for i, q in enumerate(qids)}).without_query_ids()
        ndcg = ir_measures.calc_aggregate([NDCG], qrels, run.scores())[NDCG]
        shown = ", ".join(f"{k}={v}" for k, v in params.items()) or "exact"
        lines.append(f"| {kind} | {shown} | {rate:.0f} | {rate / flat_rate:.2f}× | {recall:.4f} |"
                     f" {ndcg:.4f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sample", type=int, default=256, help="docs timed per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--paths", nargs="+", default=[p for p in PRECISIONS
                                                      if p != "bf16" or cpu_has_bf16()])
    parser.add_argument("--ndcg-paths", nargs="+", default=None,
                        help="paths to evaluate on the full corpus (default: all; slow)")
    parser.add_argument("--out", type=Path, default=ROOT / "eval" / "results" / "dense.md")
    args = parser.parse_args()
    if DEFAULT_PRECISION not in args.paths:
        args.paths.append(DEFAULT_PRECISION)
    if args.ndcg_paths is None:
        args.ndcg_paths = [REFERENCE, *args.paths]
    corpus = list(load_documents("scifact"))
    topics, qrels = load_topics("scifact"), load_qrels("scifact")
    qids, qtexts = list(topics), list(topics.values())
    enc_lines, docs, queries = encoding_rows(args, corpus, qids, qtexts, qrels)
    search = search_rows(args, [d.id for d in corpus], docs, qids, queries, qrels)
    table = "\n".join(
        ["# Dense retrieval: SciFact (5,183 docs, 300 test queries), all-MiniLM-L6-v2", "",
         f"Encoding, {args.threads} threads, max length 256, batch 32, sorted by length:", "",
         *enc_lines, "", f"Search over the default path's embeddings, {args.threads} threads:",
         "", *search, "", machine_line(), "",
         "Regenerate: `python eval/bench_dense.py` (timings are medians after a warm-up,"
         " all paths measured round-robin in one run).", ""])
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table)


if __name__ == "__main__":
    main()
