"""Benchmark: BM25 cost against collection size (synthetic corpora), this project vs bm25s, one run.

    python eval/bench_scale.py [--sizes 100000 1000000 8800000] [--scratch /tmp/scale] [--repeats 3]
                               [--bm25s-backends numpy numba] [--reuse SIZE ...]

Corpora come from ../shared/tools/synth_corpus.py (1,000 queries each), generated
into --scratch (never into the repository) when missing; indexes are built
there too, and reused with their recorded build time and RSS by a later run
unless --rebuild. Every build and every search runs in a fresh child process,
so its peak RSS (getrusage, the process and its children) is its own.

Each side at its best setting, labelled in the table:
- build: ours in one process (`build_index(workers=1)`: since the compiled
  tokenizer, one process builds faster than two on two cores), this
  project's Lucene-compatible analyzer; bm25s with its own tokenizer
  (`bm25s.tokenize`, English stopwords, no stemmer: PyStemmer is not
  installed) on its one process. Time to a saved index, one run.
- search, end to end (query text in, per-query doc ids and scores out), top k
  for k = 10, 100, 1000 on 1 and 2 threads: ours with its default ("auto",
  which picks the compiled exhaustive or MaxScore kernel; both exact: the
  same top k, float64 scores and tie order), and each kernel forced at k=10
  on 1 thread; bm25s with each backend in --bm25s-backends (numpy, numba)
  at n_threads 1 and 2, the best of them shown (its retrieve pads results
  with non-matching documents and breaks ties arbitrarily).
- bm25s's build runs under an address-space limit (--bm25s-memory-gb); past
  it, the table says it did not build, and bm25s is not searched at that size.
Median queries/s over --repeats timed runs after a warm-up, with the range.
Writes this machine's section of eval/results/scale.md and the log-log plot
eval/results/scale.png (--out: another Markdown file, its plot beside it with
the suffix .png); the Zen 4 section's plot is eval/results/scale-zen4.png.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "scale.md"  # and its plot, scale.png; --out names another (scale-zen4.md)
TOOL = HERE.parents[1] / "shared" / "tools" / "synth_corpus.py"
KS = (10, 100, 1000)
THREADS = (1, 2)


def peak_rss_gb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 2**20


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def read_queries(corpus_dir: Path) -> dict[str, str]:
    with open(corpus_dir / "queries.jsonl") as f:
        return {q["_id"]: q["text"] for q in map(json.loads, f)}


def timings(fn, repeats: int, warm_up=None) -> list[float]:
    """Wall times of `repeats` calls of fn() after one warm-up call (compilation, page cache)."""
    from benchlib import timed_runs  # eval/ is the script's directory, also in the child processes

    (warm_up or fn)()
    return timed_runs(fn, repeats)


# ---- child processes: each prints one JSON line -------------------------------------------------

def child_build_ours(corpus: Path, index: Path) -> dict:
    from retrieval.collections import load_documents
    from retrieval.index.native import build_index

    start = time.perf_counter()
    build_index(load_documents(corpus / "corpus.jsonl"), index, progress=False, workers=1)
    return {"seconds": time.perf_counter() - start, "rss": peak_rss_gb(),
            "bytes": dir_bytes(index / "inverted"), "total_bytes": dir_bytes(index)}


def child_build_bm25s(corpus: Path, out: Path, memory_gb: int) -> dict:
    import bm25s

    limit = memory_gb << 30  # a MemoryError here, not the kernel's OOM killer on the whole machine
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    start = time.perf_counter()
    with open(corpus / "corpus.jsonl") as f:
        texts = [(d["title"] + " " + d["text"]).strip() for d in map(json.loads, f)]
    tokens = bm25s.tokenize(texts, stopwords="en", show_progress=False)
    del texts
    model = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    model.index(tokens, show_progress=False)
    model.save(str(out))
    return {"seconds": time.perf_counter() - start, "rss": peak_rss_gb(), "bytes": dir_bytes(out)}


def child_search_ours(corpus: Path, index_path: Path, repeats: int) -> dict:
    from retrieval.index.native import Index
    from retrieval.sparse.rankers import BM25

    queries = read_queries(corpus)
    index = Index.open(index_path, verify=False)
    out = {}
    for threads in THREADS:
        for k in KS:
            ranker = BM25(index, k1=0.9, b=0.4, hits=k, threads=threads)
            out[f"ours/{k}/{threads}"] = timings(lambda r=ranker: r(queries), repeats)
            out[f"method/{k}"] = ranker.searcher.auto_method(k)
    ranker = BM25(index, k1=0.9, b=0.4, hits=10, threads=1)
    for method in ("maxscore", "exhaustive"):  # both exact paths, whichever "auto" picks
        def search(method=method):
            weighted = [ranker.weighted(ranker.analyse(t)) for t in queries.values()]
            results = ranker.searcher.search_many(weighted, 10, 1, method=method)
            return [(index.doc_id_objects[d], s) for d, s in results]

        out[f"{method}/10/1"] = timings(search, repeats)
    out["rss"] = peak_rss_gb()
    return out


def load_bm25s(model_dir: Path, backend: str):
    """bm25s's saved model, loaded into memory, searching with `backend` (numpy or numba)."""
    import bm25s

    model = bm25s.BM25.load(str(model_dir), mmap=False)
    model.backend = backend
    if backend == "numba":
        model.activate_numba_scorer()
    return model


def bm25s_tokens(texts: list[str]) -> list[list[str]]:
    """bm25s's own tokenizer as its index was built with it (English stopwords, no stemmer)."""
    import bm25s

    return bm25s.tokenize(texts, stopwords="en", show_progress=False, return_ids=False)


def bm25s_searcher(model, tokenize: Callable[[list[str]], list[list[str]]] = bm25s_tokens):
    """bm25s end to end, as it is used: search(texts, k, threads) tokenizes the query texts (with
    `tokenize`, the index's tokenizer), retrieves the top k and maps rows to doc ids (the id table and
    vocabulary are built once, untimed)."""
    import numpy as np

    vocab = model.vocab_dict
    doc_ids = np.array([f"d{i}" for i in range(model.scores["num_docs"])], dtype=object)
    selection = "numpy" if model.backend == "numpy" else "auto"

    def search(texts: list[str], k: int, threads: int) -> list:
        tokens = [[t for t in q if t in vocab] or [next(iter(vocab))] for q in tokenize(texts)]
        rows, scores = model.retrieve(tokens, k=k, show_progress=False, n_threads=threads,
                                      backend_selection=selection)
        return [(doc_ids[r], s) for r, s in zip(rows, scores)]

    return search


def child_search_bm25s(corpus: Path, model_dir: Path, repeats: int, backends: str) -> dict:
    texts = list(read_queries(corpus).values())
    out = {}
    for backend in backends.split(","):
        try:
            search = bm25s_searcher(load_bm25s(model_dir, backend))
        except Exception as e:  # noqa: BLE001 - a backend that does not run here is reported, not fatal
            out[f"{backend}/error"] = f"{type(e).__name__}: {e}"
            continue
        for threads in THREADS:
            for k in KS:
                def run(k=k, threads=threads, search=search, texts=texts):
                    return search(texts, k, threads)
                try:
                    # Warm up on 100 queries: a full extra pass of the slow backend costs minutes.
                    warm = lambda run=run: run(texts=texts[:100])  # noqa: E731
                    out[f"{backend}/{k}/{threads}"] = timings(run, repeats, warm)
                except Exception as e:  # noqa: BLE001
                    out[f"{backend}/error"] = f"{type(e).__name__}: {e}"
                    break
    out["rss"] = peak_rss_gb()
    return out


CHILDREN = {"build-ours": child_build_ours, "build-bm25s": child_build_bm25s,
            "search-ours": child_search_ours, "search-bm25s": child_search_bm25s}


def in_child(kind: str, *args: str, may_fail: bool = False) -> dict:
    env = os.environ | {"TQDM_DISABLE": "1", "PYTHONPATH": str(HERE.parent)}
    proc = subprocess.run([sys.executable, __file__, "--child", kind, *args], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        if may_fail:
            return {"error": (proc.stderr.strip().splitlines() or ["killed"])[-1][:200]}
        raise SystemExit(f"{kind} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- the table ----------------------------------------------------------------------------------

def qps(times: list[float], n: int) -> tuple[float, float, float]:
    rates = sorted(n / t for t in times)
    return statistics.median(rates), rates[0], rates[-1]


def fmt(rate: tuple[float, float, float]) -> str:
    med, lo, hi = rate
    return f"{med:,.0f} ({lo:,.0f}-{hi:,.0f})"


def best_bm25s(search: dict, k: int, n: int) -> tuple[tuple[float, float, float], str] | None:
    options = [(qps(v, n), key.split("/")[0] + f", {key.split('/')[2]} thr") for key, v in search.items()
               if key.count("/") == 2 and key.split("/")[1] == str(k)]
    return max(options, key=lambda o: o[0][0]) if options else None


def run_size(n: int, scratch: Path, repeats: int, rebuild: bool, backends: list[str], memory_gb: int) -> dict:
    corpus = scratch / f"synth-{n}"
    if not (corpus / "queries.jsonl").is_file():
        subprocess.run([sys.executable, str(TOOL), str(corpus), str(n), "1000"], check=True)
    index, model_dir = scratch / f"ours-{n}", scratch / f"bm25s-{n}"
    result = {"docs": n, "queries": len(read_queries(corpus)), "bm25s_backends": backends}
    builds = (("build_ours", "build-ours", index, ()),
              ("build_bm25s", "build-bm25s", model_dir, (str(memory_gb),)))
    for name, kind, target, extra in builds:
        record = target.with_name(target.name + ".build.json")  # reused while the index is there
        if not (record.is_file() and target.is_dir()) or rebuild:
            record.write_text(json.dumps(in_child(kind, str(corpus), str(target), *extra,
                                                  may_fail=kind == "build-bm25s")))
        else:
            result.setdefault("builds_reused", []).append(name)
        result[name] = json.loads(record.read_text())
    result["search_ours"] = in_child("search-ours", str(corpus), str(index), str(repeats))
    result["search_bm25s"] = ({} if "error" in result["build_bm25s"] else
                              in_child("search-bm25s", str(corpus), str(model_dir), str(repeats),
                                       ",".join(backends), may_fail=True))
    print(json.dumps(result), file=sys.stderr)
    (scratch / f"result-{n}.json").write_text(json.dumps(result))
    return result


def table(results: list[dict]) -> str:
    lines = ["| docs | measure | ours | bm25s (best setting) | ours / bm25s |", "|---:|---|---:|---:|---:|"]
    for r in results:
        n, q = r["docs"], r["queries"]
        bo, bb = r["build_ours"], r["build_bm25s"]
        if "error" in bb:
            lines.append(f"| {n:,} | build s (ours 1 process) | {bo['seconds']:,.1f} | did not build: "
                         f"{bb['error']} | |")
            lines.append(f"| {n:,} | build peak RSS GB | {bo['rss']:.2f} | | |")
        else:
            lines.append(f"| {n:,} | build s (ours 1 process; bm25s 1, own tokenizer) | "
                         f"{bo['seconds']:,.1f} | {bb['seconds']:,.1f} | {bb['seconds'] / bo['seconds']:.2f}x"
                         " (speed) |")
            lines.append(f"| {n:,} | build peak RSS GB | {bo['rss']:.2f} | {bb['rss']:.2f} | |")
        size = f"{bb['bytes'] / 1e9:.2f}" if "bytes" in bb else ""
        lines.append(f"| {n:,} | index size GB (ours: postings + impacts; with doc store "
                     f"{bo['total_bytes'] / 1e9:.2f}) | {bo['bytes'] / 1e9:.2f} | {size} | |")
        so, sb = r["search_ours"], r["search_bm25s"]
        for k in KS:
            for threads in THREADS:
                ours = qps(so[f"ours/{k}/{threads}"], q)
                best = best_bm25s(sb, k, q)
                peer = f"{fmt(best[0])} [{best[1]}]" if best else "n/a"
                ratio = f"{ours[0] / best[0][0]:.1f}x" if best else ""
                lines.append(f"| {n:,} | q/s top-{k}, {threads} thread(s) (ours: {so[f'method/{k}']}) | "
                             f"{fmt(ours)} | {peer} | {ratio} |")
        for method in ("maxscore", "exhaustive"):
            rate = fmt(qps(so[f"{method}/10/1"], q))
            lines.append(f"| {n:,} | q/s top-10, 1 thread, ours {method} | {rate} | | |")
        peer_rss = f"{sb['rss']:.2f}" if "rss" in sb else ""
        lines.append(f"| {n:,} | search peak RSS GB | {so['rss']:.2f} | {peer_rss} | |")
        errors = [f"{k}: {v}" for k, v in sb.items() if k.endswith("/error")]
        skipped = [b for b in ("numpy", "numba") if b not in r.get("bm25s_backends", ["numpy", "numba"])]
        if errors:
            lines.append(f"| {n:,} | bm25s backends that did not run | {'; '.join(errors)[:200]} | | |")
        if skipped:
            lines.append(f"| {n:,} | bm25s backends not tried (--bm25s-backends) | {', '.join(skipped)}"
                         " | | |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> str:
    """Log-log ms/query at top-10, 1 thread, against documents, drawn to `path`; returns the fitted slopes."""
    import numpy as np

    docs = np.array([r["docs"] for r in results], dtype=float)
    series = {
        f"ours {method}": [1e3 / qps(r["search_ours"][f"{method}/10/1"], r["queries"])[0] for r in results]
        for method in ("exhaustive", "maxscore")
    } | {
        "bm25s (best of backends, 1 thread)": [
            1e3 / best[0][0] if (best := best_bm25s({k: v for k, v in r["search_bm25s"].items()
                                                     if k.endswith("/1") or "/" not in k}, 10, r["queries"]))
            else float("nan") for r in results],
    }
    slopes = {name: (float(np.polyfit(np.log(docs), np.log(ms), 1)[0]) if len(docs) > 1 else float("nan"))
              for name, ms in series.items()}
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ", ".join(f"{k}: {v:.2f}" for k, v in slopes.items())
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for name, ms in series.items():
        ax.loglog(docs, ms, marker="o", label=f"{name} (slope {slopes[name]:.2f})")
    ax.loglog(docs, docs / docs[0] * series["ours exhaustive"][0], ":", color="grey",
              label="linear in documents")
    ax.set_xlabel("documents")
    ax.set_ylabel("ms per query (top-10, 1 thread)")
    ax.set_title("BM25 query cost against collection size")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return ", ".join(f"{k}: {v:.2f}" for k, v in slopes.items())


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        kind, args = sys.argv[2], sys.argv[3:]
        fn = CHILDREN[kind]
        conv = [Path(a) if i < 2 else a if i == 3 else int(a) for i, a in enumerate(args)]
        print(json.dumps(fn(*conv)))
        return
    sys.path[:0] = [str(HERE), str(HERE.parent)]
    from benchlib import machine_line, publish

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 8_800_000])
    p.add_argument("--scratch", type=Path, default=Path("/tmp/scale"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rebuild", action="store_true",
                   help="rebuild indexes that --scratch holds from an earlier run (with their timings)")
    p.add_argument("--reuse", type=int, nargs="*", default=[],
                   help="sizes measured by an earlier run (JSON in --scratch): tabulate them as they are")
    p.add_argument("--bm25s-backends", nargs="+", default=["numpy", "numba"], choices=["numpy", "numba"],
                   help="bm25s backends to time (numpy takes minutes per run at millions of documents)")
    p.add_argument("--bm25s-memory-gb", type=int, default=20,
                   help="address-space limit of bm25s's build; beyond it the row says it did not build")
    p.add_argument("--out", type=Path, default=RESULTS, help="the Markdown table (its plot beside it, .png)")
    args = p.parse_args()
    results = [json.loads((args.scratch / f"result-{n}.json").read_text()) if n in args.reuse
               else run_size(n, args.scratch, args.repeats, args.rebuild, args.bm25s_backends,
                             args.bm25s_memory_gb) for n in args.sizes]
    slopes = plot(results, args.out.with_suffix(".png"))
    reused = (f" Sizes {', '.join(f'{n:,}' for n in args.reuse)} were measured by an earlier invocation"
              " (recorded in --scratch) and tabulated with --reuse." if args.reuse else "")
    for side, name in (("our", "build_ours"), ("bm25s's", "build_bm25s")):
        kept = [f"{r['docs']:,}" for r in results if name in r.get("builds_reused", [])]
        reused += (f" The build rows of {side} index at {', '.join(kept)} documents are those recorded when"
                   " it was built by an earlier run and kept in --scratch (--rebuild remeasures them)."
                   if kept else "")
    out = (f"# BM25 at scale: this project vs bm25s on synthetic corpora\n\nScratch data (corpora, "
           f"indexes) in {args.scratch}, not committed.{reused}\n\nMachine: "
           f"{machine_line('numpy', 'numba', 'bm25s')}\n\nQueries/s: median (min-max) of {args.repeats} "
           "timed runs of all 1,000 queries after a warm-up, end to end (query text in, doc ids and "
           "scores out). Builds: one run each. bm25s's best setting is named per row (backend, "
           "threads). Ours is exact (same top k, scores and tie order as exhaustive scoring); bm25s "
           f"uses its own tokenizer, so its postings differ from ours.\n\n{table(results)}\n\n"
           f"Log-log slope of ms/query (top-10, 1 thread) against documents: {slopes} "
           f"(plot: results/{args.out.with_suffix('.png').name}; 1.0 = linear).\n")
    publish(args.out, out)


if __name__ == "__main__":
    main()
