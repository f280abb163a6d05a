"""Benchmark: batch BM25 over 1, 2 and 4 shards on a local Ray cluster, against the single index.

    python eval/bench_shards.py [--repeats 5] [--collections cacm scifact] [--shards 1 2 4]

Every system searches the collection's whole topic batch at once (k=1000, BM25
k1=0.9 b=0.4) end to end: query text in, a Run of doc ids and scores out. The
peer in the same run is the plain single index searched in this process;
the sharded index is also searched in-process (shards one after another).
On Ray each shard is an actor; the manager analyses the queries, sends the
batch to every actor, and merges the per-shard top 1000. Every run is checked
byte-identical to the single index's before it is timed. Prints one Markdown
table and writes it to eval/results/shards.md. Quote the ratios: absolute
times vary between runs, and this machine has only two cores, so more shards
than cores cannot run faster here — the table shows the cost of the fan-out
and merge, not the scaling of a cluster (see docs/design/sharded-indexes.md's model of 100M docs).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from benchlib import machine_line, median_time, publish  # noqa: E402

from retrieval.collections import load_documents, load_topics  # noqa: E402
from retrieval.formats.trec import format_run  # noqa: E402
from retrieval.index.native import Index, build_index  # noqa: E402
from retrieval.shards import LocalBackend, ShardedIndex, ShardedSparse, build_sharded_index  # noqa: E402
from retrieval.shards.ray_backend import RayBackend, connect  # noqa: E402
from retrieval.sparse.rankers import BM25  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "shards.md"


def bench_collection(name: str, shard_counts: list[int], repeats: int, workdir: Path) -> list[dict]:
    docs = list(load_documents(name))
    queries = load_topics(name)
    build_index(docs, workdir / name, progress=False)
    single = BM25(Index.open(workdir / name), hits=1000)
    reference = format_run(single(queries))
    rows = [{"collection": name, "system": "single index, in-process", "shards": 1,
             "qps": len(queries) / median_time(lambda: single(queries), repeats)}]
    for n in shard_counts:
        path = workdir / f"{name}-{n}"
        build_sharded_index(docs, path, n, workers=2, progress=False)
        index = ShardedIndex.open(path)
        for label, backend in (("sharded, in-process", LocalBackend(index)),
                               ("sharded, Ray actors", RayBackend(index))):
            stage = ShardedSparse(index, "bm25", hits=1000, backend=backend)
            assert format_run(stage(queries)) == reference, f"{name} {n} shards {label}: run differs"
            qps = len(queries) / median_time(lambda stage=stage: stage(queries), repeats)
            rows.append({"collection": name, "system": label, "shards": n, "qps": qps})
            backend.close()
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| collection | system | shards | BM25 queries/s (k=1000) | vs single index |",
             "|---|---|---:|---:|---:|"]
    for r in rows:
        base = next(x["qps"] for x in rows if x["collection"] == r["collection"] and x["shards"] == 1
                    and x["system"].startswith("single"))
        lines.append(f"| {r['collection']} | {r['system']} | {r['shards']} | {r['qps']:,.0f} | "
                     f"{r['qps'] / base:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--collections", nargs="+", default=["cacm", "scifact"])
    p.add_argument("--shards", nargs="+", type=int, default=[1, 2, 4])
    args = p.parse_args()
    connect("local", num_cpus=len(os.sched_getaffinity(0)))
    with tempfile.TemporaryDirectory() as tmp:
        rows = [r for c in args.collections
                for r in bench_collection(c, args.shards, args.repeats, Path(tmp))]
    queries = ", ".join(f"{c} {len(load_topics(c))}" for c in args.collections)
    out = (f"# Sharded BM25 search: 1, 2, 4 shards on a local Ray cluster vs the single index\n\n"
           f"Machine: {machine_line('numpy', 'scipy', 'ray')}\n\nMedian of {args.repeats} runs of the "
           f"whole topic batch ({queries} queries) after a warm-up; every sharded run byte-identical "
           f"to the single index's.\n\n{table(rows)}\n")
    publish(RESULTS, out)


if __name__ == "__main__":
    main()
