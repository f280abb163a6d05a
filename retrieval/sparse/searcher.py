"""Scoring weighted queries against per-posting impacts; exact top-k.

One query: gather its terms' postings and `bincount` them into per-document
sums. A batch: one sparse product (queries x terms) @ (terms x docs) per
chunk of queries, then a row-wise partial sort. Either way the top k is
ordered by score, ties broken by docno ascending (= doc id ascending: the
index numbers documents in doc id order), so results never depend on chance.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from tqdm import tqdm

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

    @cached_property
    def matrix(self) -> sp.csr_matrix:
        """Impacts as a terms x documents sparse matrix (shares the postings layout)."""
        index = self.index
        return sp.csr_matrix((self.impacts, index.docnos, index.indptr),
                             shape=(index.num_terms, index.num_docs))

    def search_many(self, queries: list[WeightedQuery], k: int,
                    threads: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top k of every query, batched; identical to calling `search` on each."""
        if not self.always_positive or any(w <= 0 for q in queries for _, w in q):
            # Zero scores would hide which documents matched: score one query at a time.
            return [self.search(q, k) for q in tqdm(queries, desc="searching", disable=None)]
        self.matrix  # noqa: B018  (built once, before threads start)
        size = max(1, min(256, (1 << 22) // max(self.index.num_docs, 1),
                          -(-len(queries) // max(1, threads))))  # every thread gets a chunk
        chunks = [queries[i:i + size] for i in range(0, len(queries), size)]
        bar = tqdm(total=len(queries), desc="searching", unit=" queries", disable=None)

        def run(chunk: list[WeightedQuery]) -> list[tuple[np.ndarray, np.ndarray]]:
            result = self._search_chunk(chunk, k)
            bar.update(len(chunk))
            return result

        with ThreadPoolExecutor(max(1, threads)) as pool:
            results = [r for chunk in pool.map(run, chunks) for r in chunk]
        bar.close()
        return results

    def _search_chunk(self, queries: list[WeightedQuery], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        rows = np.repeat(np.arange(len(queries)), [len(q) for q in queries])
        terms = [t for q in queries for t, _ in q]
        weights = [w for q in queries for _, w in q]
        matrix = sp.csr_matrix((weights, (rows, terms)), shape=(len(queries), self.index.num_terms))
        scores = (matrix @ self.matrix).toarray()
        n = scores.shape[1]
        if k < n:
            candidates = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        else:
            candidates = np.broadcast_to(np.arange(n), scores.shape)
        return [self._top_of_row(row, cand, k) for row, cand in zip(scores, candidates)]

    @staticmethod
    def _top_of_row(row: np.ndarray, cand: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Order a row's partial-sort candidates, pulling in all ties at the cut."""
        top = row[cand]
        kth = top.min(initial=np.inf)
        if kth <= 0.0:  # fewer than k matching documents: keep the matching ones
            keep = top > 0.0
            cand, top = cand[keep], top[keep]
        elif np.count_nonzero(row == kth) > np.count_nonzero(top == kth):
            cand = np.flatnonzero(row >= kth)  # the partition split a tie: let docno decide
            top = row[cand]
        order = np.lexsort((cand, -top))[:k]
        return cand[order], top[order]

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
