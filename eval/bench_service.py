"""Load test of `retrieval serve`: latency percentiles under concurrent mixed requests with updates.

    python eval/bench_service.py [--requests 10000] [--clients 8] [--workdir /tmp/bench_service]

Builds CACM (3,204 documents) afresh in --workdir, starts `retrieval serve` on
a loopback port in its own process, and sends --requests requests from
--clients concurrent clients in this one (retrieval.service.load: 40% BM25,
10% QLD, 5% BM25+RM3, 7% filtered BM25, 6% QLD rerank of 20 posted
candidates, 4% info, 15% malformed, 8% adds of 1-3 documents, 5% deletes).
Before the load, 200 BM25 searches from one client give the uncontended
latency. Afterwards it checks that the index holds exactly the documents the
successful writes imply. Prints one Markdown table; writes
eval/results/service.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import machine_line, publish  # noqa: E402

from retrieval.collections import load_documents  # noqa: E402
from retrieval.index.kinds import open_index  # noqa: E402
from retrieval.index.native import build_index  # noqa: E402
from retrieval.service.load import percentiles, request, run_load  # noqa: E402

RESULTS = ROOT / "eval" / "results" / "service.md"


def start_server(index: Path, port: int) -> subprocess.Popen:
    """`retrieval serve` in its own process, returned once it answers."""
    server = subprocess.Popen([sys.executable, "-m", "retrieval.cli", "serve", "--index", str(index),
                               "--port", str(port)], stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            if request(conn, "GET", "/api/info", b"")[0] == 200:
                return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("the server did not start")


def uncontended(port: int, n: int = 200) -> list[float]:
    """Seconds of n sequential BM25 searches from one client."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    words = ["parallel sorting", "compiler optimization", "memory allocation", "matrix computation"]
    times = []
    for i in range(n):
        start = time.perf_counter()
        status, _ = request(conn, "POST", "/api/search", {"query": words[i % len(words)], "k": 10})
        times.append(time.perf_counter() - start)
        assert status == 200
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--port", type=int, default=8791)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench_service"))
    args = ap.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    docs = list(load_documents("cacm"))
    index = args.workdir / "cacm"
    build_index(docs, index, progress=False)
    server = start_server(index, args.port)
    try:
        alone = uncontended(args.port)
        outcome = run_load("127.0.0.1", args.port, [d.id for d in docs], args.requests, args.clients)
    finally:
        server.terminate()
        server.wait(timeout=60)
    live = open_index(index)
    expected = ({d.id for d in docs} | outcome.added) - outcome.deleted
    intact = set(live.shard_of) == expected and live.statistics["documents"] == len(expected)
    rows = ["| requests | n | statuses | p50 ms | p90 ms | p99 ms |", "|---|---:|---|---:|---:|---:|"]
    p = percentiles(alone)
    rows.append(f"| BM25 search, one client alone | {len(alone)} | 200: {len(alone)} | "
                f"{p[0]:.1f} | {p[1]:.1f} | {p[2]:.1f} |")
    for kind in sorted(outcome.statuses):
        by = outcome.statuses[kind]
        p = percentiles(outcome.latencies[kind])
        statuses = ", ".join(f"{s}: {n}" for s, n in sorted(by.items()))
        rows.append(f"| {kind} | {sum(by.values())} | {statuses} | {p[0]:.1f} | {p[1]:.1f} | {p[2]:.1f} |")
    every = [t for values in outcome.latencies.values() for t in values]
    p = percentiles(every)
    rows.append(f"| all, {args.clients} clients | {len(every)} | | {p[0]:.1f} | {p[1]:.1f} | {p[2]:.1f} |")
    server_errors = outcome.count(lambda s: s >= 500)
    text = "\n".join([
        "# The search service under load",
        "",
        f"Machine: {machine_line('fastapi', 'uvicorn')}.",
        "",
        f"CACM ({len(docs):,} documents), `retrieval serve` in its own process on the loopback address;"
        f" {args.clients} clients in one process sending {args.requests:,} requests (the mix is in"
        " `retrieval/service/load.py`). The service answers one request at a time (its engine lock);"
        " adds and deletes commit a new generation, and the searches after one reopen the index.",
        "",
        *rows,
        "",
        f"Throughput: {len(every) / outcome.seconds:.1f} requests/s over {outcome.seconds:.0f} s. "
        f"5xx responses: {server_errors}. Transport errors: {len(outcome.errors)}. "
        f"Documents: {len(outcome.added)} added and {len(outcome.deleted)} deleted by successful writes; "
        f"the index holds {live.statistics['documents']:,}, expected {len(expected):,}: "
        f"{'none lost or duplicated' if intact else 'MISMATCH'}; {len(live.shards)} segments at the end.",
    ])
    publish(RESULTS, text)
    summary = {"5xx": server_errors, "errors": len(outcome.errors), "intact": intact}
    print(json.dumps(summary), file=sys.stderr)


if __name__ == "__main__":
    main()
