"""Reranking with late interaction: the `LateReranker` stage and the `rerank` function.

The reranker rescores each query's top `depth` hits by MaxSim. It reads
document embeddings from the index's `late/` part when the part was built by
the same model, and otherwise encodes the documents' text (from the doc store,
or given directly to `rerank`) on the fly, each distinct document of a run
once per group of queries. With `interpolate=w` the score is
w * minmax(first-stage score) + (1 - w) * minmax(MaxSim) per query. Hits
below `depth` are dropped (the result has at most `depth` hits per query).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from retrieval.errors import InputError
from retrieval.index.kinds import AnyIndex
from retrieval.late.model import LateModel, maxsim
from retrieval.pipeline import params
from retrieval.pipeline.fusion import interpolate_ranking
from retrieval.pipeline.stage import Stage
from retrieval.types import Queries, Ranking, Run, rank

# Documents encoded together when reranking a run on the fly: a document among several queries' candidates
# is encoded once per group (SciFact's BM25 top 100: 5,012 distinct documents among 29,966 hits). The group
# bounds memory, since the embeddings of a whole group (one group at a time) are held at once.
GROUP_DOCS = 4096


def _as_model(model: LateModel | str | Path | None, threads: int | None,
              precision: str | None) -> LateModel:
    if isinstance(model, LateModel):
        return model
    return LateModel(model, threads=threads, precision=precision)


class LateReranker(Stage):
    """Rerank a Run's top `depth` hits per query by MaxSim (a stage that needs a run); keep `hits`.

    `precision` (default `auto`) is how queries and on-the-fly documents are encoded here.
    """

    def __init__(self, index: AnyIndex | str | Path | None = None,
                 model: LateModel | str | Path | None = None, *, interpolate: float | None = None,
                 depth: int | None = None, hits: int | None = None, use_store: bool | None = None,
                 threads: int | None = None, precision: str | None = None):
        from retrieval.index.kinds import open_index
        from retrieval.late.store import PART, LateStore

        params.check(depth=depth, hits=hits, interpolate=interpolate, threads=threads)
        self.index = None if index is None else open_index(index)
        self.model = _as_model(model, threads, precision)
        self.interpolate, self.hits = interpolate, hits
        self.depth = depth or params.RERANK_DEPTH
        self.store = None
        if self.index is not None and self.index.has(PART) and use_store is not False:
            store = LateStore(self.index) if self.index.kind == "native" else self.index.late_store()
            if store.compatible(self.model):
                self.store = store
            elif use_store:
                raise InputError("the index's late store was built with another model; rebuild it"
                                 " with `retrieval index --late` or rerank on the fly", self.index.path)
            else:
                print("retrieval: note: the index's late store was built with another model;"
                      " encoding documents on the fly", file=sys.stderr)
        elif use_store:
            raise InputError("no late store in this index; build it with `retrieval index --late`",
                             None if self.index is None else self.index.path)

    def score(self, query: str, doc_ids: Sequence[str], texts: Sequence[str] | None = None,
              encoded: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """MaxSim of `query` against each document (stored embeddings, else `encoded` ones, else
        encoded texts)."""
        if not doc_ids:
            return np.zeros(0, dtype=np.float32)
        q = self.model.queries([query])[0]
        if self.store is not None and texts is None:
            emb, offsets = self.store.gather(doc_ids)
        else:
            docs = self._embeddings(doc_ids, texts, encoded)
            offsets = np.concatenate([[0], np.cumsum([len(x) for x in docs])]).astype(np.int64)
            emb = np.concatenate(docs) if docs else np.zeros((0, self.model.dim), np.float32)
        return maxsim(q, emb, offsets)

    def _embeddings(self, doc_ids: Sequence[str], texts: Sequence[str] | None,
                    encoded: Mapping[str, np.ndarray] | None) -> list[np.ndarray]:
        """Token embeddings of documents with no stored ones: already `encoded`, else of their texts."""
        if texts is None and encoded is not None:
            return [encoded[d] for d in doc_ids]
        if texts is None:
            if self.index is None:
                raise InputError("reranking a run needs document texts: give an index (doc store)"
                                 " or pass texts")
            texts = [self._text(d) for d in doc_ids]
        return self.model.documents(texts)

    def _text(self, doc_id: str) -> str:
        return self.index.text(doc_id)  # InputError names an unknown id

    def rerank_hits(self, query: str, hits: Ranking, texts: Sequence[str] | None = None,
                    encoded: Mapping[str, np.ndarray] | None = None) -> Ranking:
        """One query's reranked top `depth` hits."""
        hits = hits[:self.depth]
        if not query.strip():
            raise InputError("empty query text")
        scores = self.score(query, [d for d, _ in hits], None if texts is None else texts[:self.depth],
                            encoded)
        late = rank(zip((d for d, _ in hits), scores.tolist()))
        ranked = late if self.interpolate is None else interpolate_ranking(hits, late, self.interpolate)
        return ranked[:self.hits] if self.hits else ranked

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        params.check_queries(queries)
        params.check_run(run)
        if run is None:
            raise InputError("the late-interaction reranker needs a run to rerank (a first stage's"
                             " output or a run file)")
        missing = [q for q in run if q not in queries]
        if missing:
            raise InputError(f"run has queries with no topic text, e.g. {missing[0]!r}")
        if self.store is not None or self.index is None:
            return Run({q: self.rerank_hits(queries[q], hits) for q, hits in run.items()}, presorted=True)
        ranked = {}
        for group, ids in self._groups(run):  # on the fly: each document encoded once per group
            encoded = dict(zip(ids, self.model.documents([self._text(d) for d in ids])))
            ranked.update({q: self.rerank_hits(queries[q], run[q], encoded=encoded) for q in group})
            del encoded  # before the next group is encoded: one group's embeddings held at a time
        return Run(ranked, presorted=True)

    def _groups(self, run: Run) -> Iterator[tuple[list[str], list[str]]]:
        """Queries in run order, grouped so that each group's distinct documents number at most
        GROUP_DOCS (which bounds the token states held at once); with each group, its distinct
        documents in order of first appearance."""
        group: list[str] = []
        ids: dict[str, None] = {}
        for q, hits in run.items():
            docs = dict.fromkeys(d for d, _ in hits[:self.depth])
            if group and len(ids) + sum(d not in ids for d in docs) > GROUP_DOCS:
                yield group, list(ids)
                group, ids = [], {}
            group.append(q)
            ids.update(docs)
        if group:
            yield group, list(ids)


def rerank(query: str, docs: Sequence[tuple[str, str]], model: LateModel | str | Path | None = None,
           *, first_scores: Sequence[float] | None = None, interpolate: float | None = None) -> Ranking:
    """Rerank [(doc_id, text), ...] for one query: [(doc_id, score)] best first.

    With `first_scores` and `interpolate=w`, fuse them as the stage does.
    `model`: None (the committed checkpoint), "zero-shot", a checkpoint path
    or a loaded LateModel (load once when calling repeatedly).
    """
    docs = list(docs)
    reranker = LateReranker(model=model, interpolate=interpolate, depth=max(len(docs), 1))
    if interpolate is not None and (first_scores is None or len(first_scores) != len(docs)):
        raise InputError("interpolation needs one first-stage score per document")
    scores = first_scores if first_scores is not None else [0.0] * len(docs)
    hits = [(str(d), float(s)) for (d, _), s in zip(docs, scores)]
    return reranker.rerank_hits(query, hits, [t for _, t in docs])
