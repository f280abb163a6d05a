"""Scoring weighted queries against per-posting impacts; exact top-k.

Top k of a batch (`search_many`): when k is small against the collection,
document-at-a-time MaxScore in a compiled kernel (kernels.py), whose cost
follows the postings it reads rather than the collection size. The exhaustive
paths are the reference, the faster choice when k is large against the
collection (e.g. k=1000 of CACM's 3,204 documents), and the fallback for
negative weights or impacts: one query gathers its terms'
postings and `bincount`s them into per-document sums; a batch does one sparse
product (queries x terms) @ (terms x docs) per chunk of queries, then one
vectorised partial sort of all rows (top_k_rows). Every path gives the same
top k, the same float64 scores, ordered by score, ties broken by docno
ascending (= doc id ascending: the index numbers documents in doc id order),
so results never depend on chance or on the path.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from tqdm import tqdm

from retrieval.sparse import kernels
from retrieval.sparse.inverted import InvertedIndex

WeightedQuery = list[tuple[int, float]]  # (term id, weight)
METHODS = ("auto", "maxscore", "exhaustive")
# "auto" prunes (MaxScore) when the collection holds at least this many documents per hit asked
# for; below it, scoring every match in one batched product is faster (measured by
# eval/bench_scale.py --crossover: CACM, SciFact, Vaswani and 100k synthetic documents, k 10-10,000).
PRUNE_DOCS_PER_HIT = 64


class ImpactSearcher:
    """Sums weighted impacts over postings; used by every sparse ranker.

    `max_impacts` (per term, as stored at build time) bounds each term's
    impacts for dynamic pruning; computed here when not given. `nonnegative`
    says that no impact is below 0 (every model's are not); checked here when not given.
    """

    def __init__(self, index: InvertedIndex, impacts: np.ndarray, max_impacts: np.ndarray | None = None,
                 nonnegative: bool | None = None):
        self.index = index
        self.impacts = impacts
        if max_impacts is None:
            from retrieval.sparse.models import max_impacts as compute_max

            max_impacts = compute_max(index, impacts)
        self.max_impacts = max_impacts
        if nonnegative is not None:
            self.nonnegative = nonnegative

    @cached_property
    def always_positive(self) -> bool:
        """Whether every impact is > 0 (a pass over all impacts; only the exhaustive paths ask)."""
        return bool(len(self.impacts)) and float(np.min(self.impacts)) > 0.0

    @cached_property
    def nonnegative(self) -> bool:
        """Whether every impact is >= 0, as MaxScore requires (a pass over all impacts, once)."""
        return not len(self.impacts) or float(np.min(self.impacts)) >= 0.0

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

    def search_many(self, queries: list[WeightedQuery], k: int, threads: int = 1,
                    method: str = "auto") -> list[tuple[np.ndarray, np.ndarray]]:
        """Top k of every query, batched; identical to calling `search` on each, whatever the method.

        "maxscore": the compiled MaxScore kernel (when weights and impacts are >= 0);
        "exhaustive": score every matching document (the reference);
        "auto": MaxScore when k is small against the collection (PRUNE_DOCS_PER_HIT), else exhaustive.
        """
        if method not in METHODS:
            raise ValueError(f"unknown search method {method!r}; expected one of {METHODS}")
        if method == "auto":
            method = self.auto_method(k)
        if (method == "maxscore" and k > 0 and self.nonnegative
                and all(w >= 0 for q in queries for _, w in q)):
            return self._maxscore_many(queries, k, threads)
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

    def auto_method(self, k: int) -> str:
        """What "auto" searches with for k hits: MaxScore when k is small against the collection."""
        return "maxscore" if self.index.num_docs >= PRUNE_DOCS_PER_HIT * k else "exhaustive"

    def _maxscore_many(self, queries: list[WeightedQuery], k: int,
                       threads: int) -> list[tuple[np.ndarray, np.ndarray]]:
        index = self.index
        arrays = [kernels.readonly(np.asarray(a)) for a in (index.indptr, index.docnos, self.impacts,
                                                             self.max_impacts)]
        k = min(k, max(index.num_docs, 1))
        size = max(1, min(64, -(-len(queries) // max(1, threads))))
        chunks = [queries[i:i + size] for i in range(0, len(queries), size)]
        bar = tqdm(total=len(queries), desc="searching", unit=" queries", disable=None)

        def run(chunk: list[WeightedQuery]) -> list[tuple[np.ndarray, np.ndarray]]:
            lengths = np.array([len(q) for q in chunk], dtype=np.int64)
            query_ptr = np.zeros(len(chunk) + 1, dtype=np.int64)
            np.cumsum(lengths, out=query_ptr[1:])
            terms = np.array([t for q in chunk for t, _ in q], dtype=np.int64)
            weights = np.array([w for q in chunk for _, w in q], dtype=np.float64)
            docs = np.empty((len(chunk), k), dtype=np.int64)
            scores = np.empty((len(chunk), k), dtype=np.float64)
            counts = np.empty(len(chunk), dtype=np.int64)
            kernels.maxscore_batch(*arrays, query_ptr, terms, weights, k, index.num_docs,
                                   docs, scores, counts)
            bar.update(len(chunk))
            return [(docs[r, :n].copy(), scores[r, :n].copy()) for r, n in enumerate(counts.tolist())]

        if threads > 1 and len(chunks) > 1:
            with ThreadPoolExecutor(threads) as pool:
                results = [r for chunk in pool.map(run, chunks) for r in chunk]
        else:
            results = [r for chunk in chunks for r in run(chunk)]
        bar.close()
        return results

    def _search_chunk(self, queries: list[WeightedQuery], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        rows = np.repeat(np.arange(len(queries)), [len(q) for q in queries])
        terms = [t for q in queries for t, _ in q]
        weights = [w for q in queries for _, w in q]
        matrix = sp.csr_matrix((weights, (rows, terms)), shape=(len(queries), self.index.num_terms))
        return top_k_rows((matrix @ self.matrix).toarray(), k)

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


def top_k_rows(scores: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per row of non-negative scores, the k best positive (column, score), ties by column.

    Vectorised over all rows: each score becomes one int64 key holding its
    high bits (inverted, so ascending keys = descending scores) and its column,
    so a partition and a sort of the keys give the exact order. Rows where the
    dropped low bits could matter (different scores, equal high bits) are redone exactly.
    """
    rows, n = scores.shape
    shift = max(1, (n - 1).bit_length())
    keys = packed_keys(scores, np.arange(n, dtype=np.int64), shift)
    straddles = np.zeros(rows, dtype=bool)
    if k < n:
        keys.partition(k - 1, axis=1)
        rest = np.right_shift(keys[:, k:], shift, out=keys[:, k:])
        straddles = np.any(rest == (keys[:, k - 1:k] >> shift), axis=1)
        keys = keys[:, :k]
    keys = np.sort(keys, axis=1)
    columns = keys & np.int64((1 << shift) - 1)
    top = np.take_along_axis(scores, columns, 1)
    inexact = dropped_bits_matter(keys, top, shift)
    for r in np.flatnonzero(straddles & ~inexact):
        inexact[r] = _differs_at_cut(scores[r], top[r, -1], shift)
    positive = np.count_nonzero(top > 0.0, axis=1)
    return [_exact_top_k(scores[r], k) if inexact[r] else (columns[r, :positive[r]], top[r, :positive[r]])
            for r in range(rows)]


def packed_keys(scores: np.ndarray, ties: np.ndarray, shift: int) -> np.ndarray:
    """int64 keys that sort non-negative `scores` descending, then `ties` (< 2**shift) ascending.

    A key is the score's bit pattern (which sorts like the value for non-negative
    floats) without its low `shift` bits, inverted, followed by the tie-breaker;
    built in place, since big fresh arrays are slow. See dropped_bits_matter.
    """
    keys = scores.view(np.int64) >> shift
    np.subtract(np.int64((1 << (63 - shift)) - 1), keys, out=keys)
    np.left_shift(keys, shift, out=keys)
    np.bitwise_or(keys, ties, out=keys)
    return keys


def dropped_bits_matter(sorted_keys: np.ndarray, sorted_scores: np.ndarray, shift: int) -> np.ndarray:
    """Along the last axis: whether neighbours in key order share their kept bits but not their score
    (then the order packed_keys gave may be wrong, and the caller redoes it exactly)."""
    high = sorted_keys >> shift
    return np.any((high[..., 1:] == high[..., :-1]) & (sorted_scores[..., 1:] != sorted_scores[..., :-1]),
                  axis=-1)


def _differs_at_cut(row: np.ndarray, kth: float, shift: int) -> bool:
    """Whether scores sharing the k-th score's high bits are not all equal to it."""
    high = row.view(np.int64) >> shift
    group = row[high == (np.float64(kth).view(np.int64) >> shift)]
    return bool(np.any(group != kth))


def _exact_top_k(row: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The slow, obviously right top k of one row (positive scores only)."""
    columns = np.flatnonzero(row > 0.0)
    order = np.lexsort((columns, -row[columns]))[:k]
    return columns[order], row[columns[order]]
