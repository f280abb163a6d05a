"""Rocchio relevance feedback on the inverted index, as Anserini's RocchioReranker (SMART's weights).

The new query is

    alpha * q + beta * centroid(relevant) - gamma * centroid(non-relevant)

where q is the query's own term weights (its term counts, as the ranker
searches them, so alpha=1, beta=0 searches exactly the original query) and each
feedback document is its tf vector over the terms eligible for feedback (as
RM3's: 2-20 characters of [a-z0-9], in at most 10% of documents), L2-normalised.
The feedback part keeps its `fb_terms` heaviest terms; terms whose weight ends up
at or below 0 are dropped (an impact index scores non-negative weights).

Pseudo-relevance feedback (no qrels): the relevant documents are the first
ranking's top `fb_docs` and the non-relevant ones (used only when gamma > 0) its
last `fb_docs` of `hits`. Explicit feedback (`qrels`): the judged documents among
the first ranking's top `fb_docs`, relevant (grade > 0) and not; the user marks
what they were shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

import numpy as np

from retrieval.errors import InputError
from retrieval.pipeline import params
from retrieval.pipeline.params import default
from retrieval.pipeline.stage import Stage
from retrieval.sparse.feedback import eligible_terms
from retrieval.types import Queries, Ranking, Run


def feedback_split(ranking: Ranking, fb_docs: int, judged: Mapping[str, int] | None,
                   negatives: bool) -> tuple[list[str], list[str]]:
    """(relevant, non-relevant) feedback doc ids from a first ranking (see the module's docstring)."""
    top = [d for d, _ in ranking[:fb_docs]]
    if judged is not None:
        return [d for d in top if judged.get(d, 0) > 0], [d for d in top if judged.get(d, 1) <= 0]
    bottom = [d for d, _ in ranking[fb_docs:]][-fb_docs:] if negatives else []
    return top, bottom


def rocchio_vector(query: Mapping[str, float], relevant: list[dict[str, float]],
                   nonrelevant: list[dict[str, float]], alpha: float, beta: float, gamma: float,
                   fb_terms: int) -> dict[str, float]:
    """alpha * query + (the fb_terms heaviest terms of beta * mean(relevant) - gamma * mean(non-relevant)),
    positive weights only, in sorted term order."""
    feedback: dict[str, float] = {}
    for docs, weight in ((relevant, beta), (nonrelevant, -gamma)):
        if not docs or weight == 0:
            continue
        for vector in docs:
            for term, w in vector.items():
                feedback[term] = feedback.get(term, 0.0) + weight * w / len(docs)
    kept = sorted(((t, w) for t, w in feedback.items() if w > 0), key=lambda kv: (-kv[1], kv[0]))[:fb_terms]
    out = {t: alpha * w for t, w in query.items()}
    for term, w in kept:
        out[term] = out.get(term, 0.0) + w
    if gamma > 0:  # the negative centroid lowers query terms too
        for term, w in feedback.items():
            if w < 0 and term in out:
                out[term] += w
    return {t: w for t, w in sorted(out.items()) if w > 0}


class Rocchio(Stage):
    """Rocchio feedback around a sparse ranker (BM25, QueryLikelihood): search, build the feedback
    query from the first ranking (or the run given), search again."""

    def __init__(self, ranker: Stage, fb_docs: int = default("fb_docs"), fb_terms: int = default("fb_terms"),
                 alpha: float = default("alpha"), beta: float = default("beta"),
                 gamma: float = default("gamma"), qrels: Mapping[str, Mapping[str, int]] | None = None,
                 hits: int | None = None):
        params.check(fb_docs=fb_docs, fb_terms=fb_terms, alpha=alpha, beta=beta, gamma=gamma, hits=hits)
        if not hasattr(ranker, "search_many"):
            raise InputError("Rocchio wraps a sparse ranker (BM25, QueryLikelihood), got"
                             f" {type(ranker).__name__}")
        self.ranker = ranker
        self.fb_docs, self.fb_terms = fb_docs, fb_terms
        self.alpha, self.beta, self.gamma = float(alpha), float(beta), float(gamma)
        self.qrels = qrels
        self.hits = hits or ranker.hits
        self.name = f"{ranker.name}+rocchio"

    @cached_property
    def eligible(self) -> np.ndarray:
        inverted = self.ranker.index.inverted
        return eligible_terms(inverted.terms, inverted.df, inverted.num_docs)

    def doc_vector(self, doc_id: str) -> dict[str, float]:
        """The document's eligible terms' tfs, L2-normalised."""
        index = self.ranker.index
        inverted = index.inverted
        indptr, terms, tfs = inverted.forward
        d = index.docno[doc_id]
        t, f = terms[indptr[d]:indptr[d + 1]], tfs[indptr[d]:indptr[d + 1]].astype(np.float64)
        keep = self.eligible[t]
        t, f = t[keep], f[keep]
        norm = float(np.sqrt((f * f).sum()))
        names = inverted.terms
        return {names[i]: w / norm for i, w in zip(t.tolist(), f.tolist())} if norm > 0 else {}

    def expand(self, qid: str, text: str, first: Ranking) -> dict[str, float]:
        """The Rocchio query of one query: term -> weight."""
        judged = self.qrels.get(qid, {}) if self.qrels is not None else None
        relevant, nonrelevant = feedback_split(first, self.fb_docs, judged, self.gamma > 0)
        query = dict(self.ranker.analyse(text))
        return rocchio_vector(query, [self.doc_vector(d) for d in relevant],
                              [self.doc_vector(d) for d in nonrelevant], self.alpha, self.beta,
                              self.gamma, self.fb_terms)

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        params.check_queries(queries)
        params.check_run(run, queries)
        ranker = self.ranker
        if run is None:
            depth = self.hits if self.gamma > 0 and self.qrels is None else self.fb_docs
            run = ranker.search_many({q: ranker.analyse(t) for q, t in queries.items()}, depth)
        expanded = {q: self.expand(q, t, run.get(q, [])) for q, t in queries.items()}
        return ranker.search_many(expanded, self.hits)
