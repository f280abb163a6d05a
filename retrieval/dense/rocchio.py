"""Dense Rocchio (vector pseudo-relevance feedback): the query embedding moved towards the centroid of
the first ranking's top documents' stored embeddings, then searched again.

    q' = alpha * q + beta * mean(relevant vectors) - gamma * mean(non-relevant vectors)

Relevant and non-relevant documents are chosen as by the sparse Rocchio
(sparse/rocchio.py `feedback_split`: pseudo, or the judged ones among the top
`fb_docs` when qrels are given). With alpha=1 and beta=gamma=0 the query is the
original one and so is the run.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from retrieval.dense.retriever import DenseRetriever
from retrieval.errors import InputError, UnknownDocument
from retrieval.pipeline import params
from retrieval.pipeline.params import default
from retrieval.pipeline.stage import Stage
from retrieval.sparse.rocchio import feedback_split
from retrieval.types import Queries, Run


class DenseRocchio(Stage):
    """Rocchio feedback on a dense retriever's query vectors."""

    name = "dense_rocchio"

    def __init__(self, retriever: DenseRetriever, fb_docs: int = default("fb_docs"),
                 alpha: float = default("alpha"), beta: float = default("beta"),
                 gamma: float = default("gamma"), qrels: Mapping[str, Mapping[str, int]] | None = None,
                 hits: int | None = None):
        params.check(fb_docs=fb_docs, alpha=alpha, beta=beta, gamma=gamma, hits=hits)
        if not isinstance(retriever, DenseRetriever):
            raise InputError(f"dense Rocchio wraps a DenseRetriever, got {type(retriever).__name__}")
        self.retriever = retriever
        self.index = getattr(retriever, "index", None)
        self.fb_docs = fb_docs
        self.alpha, self.beta, self.gamma = float(alpha), float(beta), float(gamma)
        self.qrels = qrels
        self.hits = hits or retriever.hits
        self._rows: dict[str, int] | None = None

    def centroid(self, doc_ids: list[str]) -> np.ndarray | None:
        """The mean stored vector of the documents (None for none)."""
        if not doc_ids:
            return None
        if self._rows is None:
            self._rows = {str(d): i for i, d in enumerate(self.retriever.doc_ids)}
        try:
            rows = [self._rows[d] for d in doc_ids]
        except KeyError as e:
            raise UnknownDocument(e.args[0], self.retriever.index_dir, "dense part") from None
        return np.stack([self.retriever.faiss.reconstruct(r) for r in rows]).astype(np.float64).mean(axis=0)

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        params.check_queries(queries)
        params.check_run(run, queries)
        qids = list(queries)
        vectors = self.retriever.encode(queries).astype(np.float32)
        if run is None:
            negatives = self.gamma > 0 and self.qrels is None
            depth = self.hits if negatives else self.fb_docs
            saved, self.retriever.hits = self.retriever.hits, depth
            try:
                run = self.retriever.search_vectors(qids, vectors)
            finally:
                self.retriever.hits = saved
        moved = vectors.astype(np.float64) * self.alpha
        for i, q in enumerate(qids):
            judged = self.qrels.get(q, {}) if self.qrels is not None else None
            relevant, nonrelevant = feedback_split(run.get(q, []), self.fb_docs, judged, self.gamma > 0)
            for docs, weight in ((relevant, self.beta), (nonrelevant, -self.gamma)):
                centre = self.centroid(docs) if weight else None
                if centre is not None:
                    moved[i] += weight * centre
        saved, self.retriever.hits = self.retriever.hits, self.hits
        try:
            return self.retriever.search_vectors(qids, moved.astype(np.float32))
        finally:
            self.retriever.hits = saved
