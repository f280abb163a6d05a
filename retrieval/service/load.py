"""A load generator for the search service: concurrent clients sending a seeded mix of requests.

Used by tests/test_service.py (bounded load: no 5xx, no lost or duplicated
documents) and eval/bench_service.py (latency percentiles). Each client owns
the ids it adds ("load-<client>-<n>") and a disjoint share of the original
doc ids it may delete, so the documents the index must hold at the end
follow from the successful writes alone.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

MALFORMED = [  # (method, path, body): each must get a 4xx
    ("POST", "/api/search", b"{not json"),
    ("POST", "/api/search", b'{"query": "x", "colour": "blue"}'),
    ("POST", "/api/search", b'{"query": "", "k": 10}'),
    ("POST", "/api/search", b'{"query": "parallel", "k": 0}'),
    ("POST", "/api/search", b'{"query": "parallel", "pipeline": "no-such-model"}'),
    ("POST", "/api/search", b'{"query": "parallel", "pipeline": {"model": "bm25", "k1": -1}}'),
    ("POST", "/api/search", b'["a", "list"]'),
    ("POST", "/api/rerank", b'{"query": "x", "candidates": ["no-such-doc"], "pipeline": "qld"}'),
    ("POST", "/api/documents", b'{"documents": [{"id": "has space", "text": "x"}]}'),
    ("POST", "/api/documents", b'{"documents": [{"id": "control\\u0001char", "text": "x"}]}'),
    ("POST", "/api/documents", b'{"documents": [{"id": "u1", "text": "x", "body": "y"}]}'),
    ("POST", "/api/documents/delete", b'{"ids": ["no-such-doc"]}'),
    ("GET", "/api/nothing-here", b""),
    ("GET", "/api/search", b""),
    ("POST", "/api/search", b'{"query": "' + b"x" * (2 << 20) + b'"}'),
    ("POST", "/api/search", b"[" * 50_000),
    ("POST", "/api/search", b'{"query": "sorting \\ud800"}'),
    ("POST", "/api/documents", b'{"documents": [{"id": "s1", "text": "lone \\udfff"}]}'),
    ("POST", "/api/search", b'{"query": "sorting", "k": NaN}'),
    ("POST", "/api/search", b'{"query": "sorting", "exclude": "CACM-0001"}'),
    ("POST", "/api/search", b'{"query": "sorting", "pipeline": [{"model": "late"}]}'),
    ("POST", "/api/search", b'{"query": "sorting", "pipeline": "dense"}'),
]
WORDS = ("parallel", "sorting", "algorithm", "compiler", "language", "memory", "system", "time", "data",
         "program", "network", "matrix", "computation", "storage", "retrieval", "list")


@dataclass
class Outcome:
    """What one load run saw: per request kind, statuses and latencies; the writes that succeeded."""

    statuses: dict[str, dict[int, int]] = field(default_factory=dict)
    latencies: dict[str, list[float]] = field(default_factory=dict)
    added: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def record(self, kind: str, status: int, seconds: float) -> None:
        self.statuses.setdefault(kind, {}).setdefault(status, 0)
        self.statuses[kind][status] += 1
        self.latencies.setdefault(kind, []).append(seconds)

    def count(self, test: Any) -> int:
        return sum(n for by in self.statuses.values() for status, n in by.items() if test(status))


def request(conn: http.client.HTTPConnection, method: str, path: str, body: Any) -> tuple[int, Any]:
    """(status, parsed JSON or None) of one request."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request(method, path, body=data if method == "POST" else None,
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    raw = response.read()
    try:
        return response.status, json.loads(raw)
    except ValueError:
        return response.status, None


def client(host: str, port: int, number: int, requests: int, deletable: list[str], seed: int,
           outcome: Outcome, lock: threading.Lock) -> None:
    """One client's share of the mixed requests."""
    rng = random.Random(f"{seed}:{number}")
    conn = http.client.HTTPConnection(host, port, timeout=120)
    mine: list[str] = []
    deletable = deletable[:]
    for n in range(requests):
        kind, method, path, body = next_request(rng, number, n, mine, deletable)
        start = time.perf_counter()
        try:
            status, reply = request(conn, method, path, body)
        except (OSError, http.client.HTTPException) as e:
            with lock:
                outcome.errors.append(f"{kind}: {e!r}")
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=120)
            continue
        with lock:
            outcome.record(kind, status, time.perf_counter() - start)
            if status == 200 and kind == "add":
                ids = [d["id"] for d in body["documents"]]
                outcome.added.update(ids)
                mine.extend(ids)
            elif status == 200 and kind == "delete":
                outcome.deleted.update(body["ids"])
    conn.close()


def next_request(rng: random.Random, number: int, n: int, mine: list[str],
                 deletable: list[str]) -> tuple[str, str, str, Any]:
    """(kind, method, path, body) of the next request in the mix."""
    query = " ".join(rng.sample(WORDS, rng.randint(1, 4)))
    roll = rng.random()
    if roll < 0.40:
        return "search bm25", "POST", "/api/search", {"query": query, "k": 10}
    if roll < 0.50:
        return "search qld", "POST", "/api/search", {"query": query, "pipeline": "qld", "k": 10}
    if roll < 0.55:
        rm3 = [{"model": "bm25", "rm3": True}]
        return "search rm3", "POST", "/api/search", {"query": query, "pipeline": rm3}
    if roll < 0.62:
        return "search filtered", "POST", "/api/search", {"query": query, "k": 10,
                                                          "exclude": rng.sample(deletable, 3)}
    if roll < 0.68:
        return "rerank", "POST", "/api/rerank", {"query": query, "pipeline": "qld",
                                                 "candidates": rng.sample(deletable, 20)}
    if roll < 0.72:
        return "info", "GET", "/api/info", b""
    if roll < 0.87:
        method, path, body = rng.choice(MALFORMED)
        return "malformed", method, path, body
    if roll < 0.95 or not (mine or deletable):
        docs = [{"id": f"load-{number}-{n}-{i}", "title": "", "text": f"{query} load {number} {n}"}
                for i in range(rng.randint(1, 3))]
        return "add", "POST", "/api/documents", {"documents": docs}
    pool = mine if mine and rng.random() < 0.5 else deletable
    victim = pool.pop(rng.randrange(len(pool)))
    return "delete", "POST", "/api/documents/delete", {"ids": [victim]}


def run_load(host: str, port: int, doc_ids: list[str], requests: int = 10_000, clients: int = 8,
             seed: int = 0) -> Outcome:
    """Send `requests` mixed requests from `clients` concurrent clients; what happened."""
    outcome, lock = Outcome(), threading.Lock()
    shares = [doc_ids[i::clients] for i in range(clients)]
    counts = [requests // clients + (i < requests % clients) for i in range(clients)]
    threads = [threading.Thread(target=client,
                                args=(host, port, i, counts[i], shares[i], seed, outcome, lock))
               for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outcome.seconds = time.perf_counter() - start
    return outcome


def percentiles(values: list[float], points: tuple[int, ...] = (50, 90, 99)) -> list[float]:
    """Latency percentiles in milliseconds (nearest rank)."""
    ordered = sorted(values)
    return [1000 * ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]
            for p in points] if ordered else [float("nan")] * len(points)
