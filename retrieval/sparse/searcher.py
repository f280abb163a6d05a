"""Scoring one weighted query against per-posting impacts; exact top-k.

Accumulation is vectorised with numpy (gather the query terms' postings,
`bincount` them into per-document sums); the top k comes from a partial sort,
with ties broken by docno ascending (= doc id ascending: the index numbers
documents in doc id order) so results never depend on chance.
"""

from __future__ import annotations

import numpy as np

from retrieval.sparse.inverted import InvertedIndex

WeightedQuery = list[tuple[int, float]]  # (term id, weight)


class ImpactSearcher:
    """Sums weighted impacts over postings; used by every sparse ranker."""

    def __init__(self, index: InvertedIndex, impacts: np.ndarray):
        self.index = index
        self.impacts = impacts
        self.always_positive = bool(len(impacts)) and float(np.min(impacts)) > 0.0

    def accumulate(self, query: WeightedQuery) -> tuple[np.ndarray, np.ndarray]:
        """(docnos matching any query term, ascending; their scores)."""
        indptr, docnos, impacts = self.index.indptr, self.index.docnos, self.impacts
        spans = [(indptr[t], indptr[t + 1], w) for t, w in query]
        if not spans:
            return np.zeros(0, np.int32), np.zeros(0)
        docs = np.concatenate([docnos[s:e] for s, e, _ in spans])
        values = np.concatenate([impacts[s:e] * w for s, e, w in spans])
        n = self.index.num_docs
        if len(docs) * 8 > n:  # dense accumulator: cheaper than sorting the postings
            scores = np.bincount(docs, weights=values, minlength=n)
            # Positive impacts and weights: matched <=> non-zero score (saves a pass).
            positive = self.always_positive and all(w > 0 for _, _, w in spans)
            matched = np.flatnonzero(scores if positive else np.bincount(docs, minlength=n))
            return matched, scores[matched]
        matched, inverse = np.unique(docs, return_inverse=True)
        return matched, np.bincount(inverse, weights=values, minlength=len(matched))

    def top_k(self, docs: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k best (docno, score), score descending then docno ascending.

        `docs` must be ascending: the stable sort then keeps ties in docno order.
        """
        if len(docs) > k:
            kth = np.partition(scores, len(scores) - k)[len(scores) - k]
            keep = scores >= kth
            docs, scores = docs[keep], scores[keep]
        order = np.argsort(-scores, kind="stable")[:k]
        return docs[order], scores[order]

    def search(self, query: WeightedQuery, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top k documents over the whole index."""
        return self.top_k(*self.accumulate(query), k)

    def score(self, query: WeightedQuery, docs: np.ndarray) -> np.ndarray:
        """Scores of the given docnos (0 for documents matching no query term)."""
        matched, scores = self.accumulate(query)
        out = np.zeros(len(docs))
        if len(matched):
            pos = np.searchsorted(matched, docs).clip(max=len(matched) - 1)
            hit = matched[pos] == docs
            out[hit] = scores[pos[hit]]
        return out
