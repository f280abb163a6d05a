"""Stages over a sharded index: sparse models, RM3 and dense, with the same Runs as one index.

The manager (this process) analyses or encodes the queries, fans the batch
out through a backend (local.py in-process, ray_backend.py on Ray), merges the
per-shard top k (merge.py) and, for RM3, computes the relevance model from
the merged feedback documents before fanning the expanded queries out again.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import numpy as np

from retrieval.errors import InputError, UnknownDocument
from retrieval.index.filters import parse_filter
from retrieval.index.impacts import sparse_model
from retrieval.pipeline.params import check as check_params
from retrieval.pipeline.params import check_run, default
from retrieval.pipeline.stage import Stage
from retrieval.shards.layout import ShardedIndex
from retrieval.shards.local import ShardBackend
from retrieval.shards.merge import Merged, merge
from retrieval.sparse.feedback import FeedbackVector, relevance_model
from retrieval.sparse.rankers import RM3
from retrieval.types import Columns, Queries, Ranking, Run


class ShardedRun(Run):
    """A Run from a sharded index; `missing_shards` names shards left out (allow_partial)."""

    def __init__(self, rankings: dict[str, Columns], missing_shards: tuple[str, ...] = ()):
        super().__init__(rankings)
        self.missing_shards = tuple(missing_shards)

    @property
    def complete(self) -> bool:
        """Whether every shard contributed."""
        return not self.missing_shards


class ShardedStage(Stage):
    """What the sharded stages share: the index, the backend and the Run they return."""

    name = "sharded"

    def __init__(self, index: ShardedIndex, hits: int, backend: ShardBackend | None, threads: int):
        check_params(hits=hits, threads=threads)
        self.index, self.hits, self.threads = index, hits, threads
        self.backend = backend or index.shard_backend()

    def to_run(self, qids: list[str], merged: list[Merged]) -> ShardedRun:
        return ShardedRun({q: Columns(m.ids, m.scores) for q, m in zip(qids, merged)},
                          tuple(sorted(self.backend.missing)))


class ShardedSparse(ShardedStage):
    """BM25 / query likelihood over the shards: the single index's Run, searched shard by shard."""

    def __init__(self, index: ShardedIndex, model: str = "bm25", hits: int = default("hits"),
                 backend: ShardBackend | None = None, threads: int = default("threads"),
                 filter: str | None = None, **params: float):
        super().__init__(index, hits, backend, threads)
        self.model = sparse_model(model, **params)
        if filter is not None:
            parse_filter(filter)  # a malformed filter is refused here, not by every shard
        self.filter = filter  # each shard applies it to its documents inside its top k
        self.name = model
        self._warned: set[str] = set()

    def analyse(self, text: str) -> Counter[str]:
        """Query term counts after analysis (the index's analyzer)."""
        return Counter(self.index.analyzer(text))

    def merged(self, bags: dict[str, dict[str, float]], k: int) -> list[Merged]:
        """Each query's merged top k (with the shard of every hit)."""
        qids, payload = list(bags), [dict(b) for b in bags.values()]
        results = self.backend.broadcast("search", self.model, payload, k, self.threads, self.filter)
        self.warn_unknown(qids, [r[1] for r in results.values()])
        return merge({n: r[0] for n, r in results.items()}, len(qids), k, len(self.index.shards))

    def warn_unknown(self, qids: list[str], known: list[list[int]]) -> None:
        """Warn (once per query) about queries none of whose terms any shard knows."""
        counts = np.sum(known, axis=0) if known else np.zeros(len(qids))
        for qid, count in zip(qids, np.atleast_1d(counts).tolist()):
            if count == 0 and qid not in self._warned:
                self._warned.add(qid)
                print(f"retrieval: warning: query {qid!r} has no indexed terms after analysis;"
                      " it gets no hits", file=sys.stderr)

    def search_many(self, bags: dict[str, dict[str, float]], k: int) -> ShardedRun:
        """Search many weighted term bags at once (query id -> {term: weight})."""
        return self.to_run(list(bags), self.merged(bags, k))

    def rescore(self, queries: Queries, run: Run) -> ShardedRun:
        """Every candidate of `run` scored on the shard holding it, ranked as the single index
        would rank them (score descending, doc id ascending)."""
        qids = list(queries)
        bags = [dict(self.analyse(queries[q])) for q in qids]
        candidates = [[d for d, _ in run.get(q, [])] for q in qids]
        results = self.backend.broadcast("rescore", self.model, bags, candidates, self.filter)
        rankings = {}
        for i, qid in enumerate(qids):
            parts = [results[n][i] for n in sorted(results)]
            ids = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=str)
            scores = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0)
            if len(ids) < len(candidates[i]) and not self.backend.missing and self.filter is None:
                found = set(ids.tolist())
                absent = next(d for d in candidates[i] if d not in found)
                raise UnknownDocument(absent, self.index.path)
            order = np.lexsort((ids, -scores))
            rankings[qid] = Columns(ids[order], scores[order])
        return ShardedRun(rankings, tuple(sorted(self.backend.missing)))

    def __call__(self, queries: Queries, run: Run | None = None) -> ShardedRun:
        if run is not None:
            check_run(run, queries)  # the policy for queries without text (pipeline/params.py)
            return self.rescore(queries, run)
        return self.search_many({q: self.analyse(t) for q, t in queries.items()}, self.hits)


class ShardedFielded(ShardedSparse):
    """A fielded ranker (multifield, multifield_qld, bm25f) over fielded shards or live segments:
    each scores its documents with the collection-wide statistics of every field, so the Run is
    the single fielded index's."""

    def __init__(self, index: ShardedIndex, name: str, hits: int = default("hits"),
                 backend: ShardBackend | None = None, threads: int = default("threads"),
                 filter: str | None = None, **params: Any):
        ShardedStage.__init__(self, index, hits, backend, threads)
        if not index.fields:
            raise InputError(f"{name} needs fields; build the sharded or live index with --fields"
                             " title,text", index.path)
        from retrieval.sparse.fielded import parse_field_values

        for key, high in (("field_weights", float("inf")), ("field_b", 1.0)):
            if params.get(key) is not None:
                parse_field_values(params[key], index.fields, key, 0.0, high)  # refused here, once
        if filter is not None:
            parse_filter(filter)
        self.filter, self.name = filter, name
        self.params = tuple(sorted((k, v) for k, v in params.items() if v is not None))
        self._warned = set()

    def merged(self, bags: dict[str, dict[str, float]], k: int) -> list[Merged]:
        qids, payload = list(bags), [dict(b) for b in bags.values()]
        results = self.backend.broadcast("search_fielded", self.name, self.params, payload, k, self.threads,
                                         self.filter)
        self.warn_unknown(qids, [r[1] for r in results.values()])
        return merge({n: r[0] for n, r in results.items()}, len(qids), k, len(self.index.shards))

    def rescore(self, queries: Queries, run: Run) -> ShardedRun:
        raise InputError(f"{self.name} on a sharded or live index is a first stage; it does not rescore"
                         " a run")


class ShardedRM3(RM3):
    """RM3 over shards: feedback from the merged top documents, their terms fetched from their shards.

    The relevance model, the interpolation and every tie-break are RM3's, so
    the Run equals RM3 on the single index.
    """

    ranker: ShardedSparse

    def __init__(self, ranker: ShardedSparse, fb_docs: int = default("fb_docs"),
                 fb_terms: int = default("fb_terms"), original_weight: float = default("original_weight"),
                 hits: int | None = None):
        super().__init__(ranker, fb_docs, fb_terms, original_weight, hits)  # type: ignore[arg-type]
        self._vectors: dict[str, FeedbackVector] = {}

    def fetch_vectors(self, merged: list[Merged]) -> dict[str, FeedbackVector]:
        """The feedback terms of every feedback document, each asked of the shard holding it."""
        wanted: dict[int, set[str]] = {}
        for m in merged:
            for doc_id, shard in zip(m.ids.tolist(), m.shards.tolist()):
                wanted.setdefault(shard, set()).add(doc_id)
        args = {s: (sorted(ids), self.fb_terms) for s, ids in sorted(wanted.items())}
        results = self.ranker.backend.run("feedback", args)
        return {d: v for s, vectors in results.items() for d, v in zip(args[s][0], vectors)}

    def relevance_model(self, feedback: Ranking) -> dict[str, float]:
        """RM3's pruned, L1-normalised relevance model, from the fetched feedback terms (a document
        whose shard became unavailable under allow_partial has none and is skipped)."""
        return relevance_model(((self._vectors[d], score) for d, score in feedback[: self.fb_docs]
                                if d in self._vectors), self.fb_terms)

    def __call__(self, queries: Queries, run: Run | None = None) -> ShardedRun:
        if run is not None:
            raise InputError("RM3 on a sharded index takes its feedback from the shards, not a run")
        ranker = self.ranker
        merged = ranker.merged({q: ranker.analyse(t) for q, t in queries.items()}, self.fb_docs)
        self._vectors = self.fetch_vectors(merged)
        feedback = ranker.to_run(list(queries), merged)
        expanded = {q: self.expand(t, feedback.get(q, [])) for q, t in queries.items()}
        return ranker.search_many(expanded, self.hits)


class ShardedDense(ShardedStage):
    """Dense retrieval over the shards' FAISS parts; the manager encodes the queries once."""

    name = "dense"

    def __init__(self, index: ShardedIndex, hits: int = default("hits"), backend: ShardBackend | None = None,
                 model: Any = None, precision: str | None = None, threads: int | None = None,
                 filter: str | None = None):
        from retrieval.dense.retriever import part_encoder

        super().__init__(index, hits, backend, threads or 1)
        if filter is not None:
            parse_filter(filter)  # a malformed filter is refused here, not by every shard
        self.filter = filter  # each shard searches only its passing vectors
        if not index.has("dense"):
            raise InputError("this index has no dense part; build it with one (`retrieval index"
                             " --collection ... --dense`, with --shards N for shards)", index.path)
        self.encoder = part_encoder(index.parts["dense"], index.path, model, precision=precision,
                                    threads=threads)

    def __call__(self, queries: Queries, run: Run | None = None) -> ShardedRun:
        """Retrieve for every query (a first stage: `run` is ignored)."""
        empty = [q for q, text in queries.items() if not str(text).strip()]
        if empty:
            raise InputError(f"empty query text for query id(s) {', '.join(empty[:5])}")
        vectors = self.encoder.encode(list(queries.values()), desc="encoding queries")
        results = self.backend.broadcast("dense_search", vectors, self.hits, self.encoder.threads,
                                         self.filter)
        return self.to_run(list(queries), merge(results, len(queries), self.hits, len(self.index.shards)))
