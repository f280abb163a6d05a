"""Scoring weighted queries against per-posting impacts; exact top-k.

Top k of a batch (`search_many`) runs in compiled kernels (kernels.py), one
query at a time, with no per-query Python: exhaustive scoring, term at a time
within cache-sized windows of documents, and document-at-a-time MaxScore,
which skips documents that cannot reach the top k. Which is faster depends on
the collection and k ("auto", measured by eval/bench_topk.py); on the
collections measured so far exhaustive scoring wins, because scores are flat
enough that MaxScore's skips cost more than reading the postings. Negative
weights or impacts (neither kernel's case) are scored one query at a time
with `accumulate`, the reference. Every path gives the same top k, the same
float64 scores, ordered by score, ties broken by docno ascending (= doc id
ascending: the index numbers documents in doc id order), so results never
depend on chance or on the path.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import cached_property

import numpy as np
from tqdm import tqdm

from retrieval.index.blocks import CodeBlocks, pack_codes
from retrieval.index.codebook import Impacts, PackedImpacts, from_values
from retrieval.index.postings import InvertedIndex, term_ranges
from retrieval.sparse import block_kernels, kernels, selective

WeightedQuery = list[tuple[int, float]]  # (term id, weight)
SKIP_TERMS = 8  # "skipping" skips windows (kernels.skipping_top_k) for a query of at most this many terms
# and k < LARGE_K, and scores the others exhaustively: chosen on validation queries sharing nothing with
# eval/bench_real.py's (docs/design/index-format.md, "Searching")
METHODS = ("auto", "maxscore", "exhaustive", "skipping", "blocks", "blockmax")
# "exhaustive" scores every posting with kernels.exhaustive_batch over flat arrays: a packed
# index's docnos and impact codes are decoded into memory once (6 bytes a posting, as the flat layout's
# memory maps held), because scoring straight from the blocks was 1.2-1.7x slower on the Wikipedia
# passages (eval/bench_real.py times both). "blocks" scores from the packed memory maps
# (block_kernels, nothing decoded ahead: compact in memory too); "blockmax" does so skipping windows
# whose block maxima cannot reach the k-th score (with an allow mask, both search as "exhaustive").
# MaxScore (document at a time over the flat arrays) stays selectable, exact and tested. "skipping" (what
# "auto" takes below LARGE_K) scores the same arrays, passing windows of documents that cannot reach the top
# k (kernels.skipping_top_k, with each long list's largest impact per window, window_rows). Every method
# gives the same top k, scores and tie order.


def flat_queries(queries: list[WeightedQuery]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernels' form of a batch: (query_ptr, terms, weights), query q's terms and weights at
    [query_ptr[q], query_ptr[q + 1])."""
    query_ptr = np.zeros(len(queries) + 1, dtype=np.int64)
    np.cumsum([len(q) for q in queries], out=query_ptr[1:])
    terms = np.array([t for q in queries for t, _ in q], dtype=np.int64)
    weights = np.array([w for q in queries for _, w in q], dtype=np.float64)
    return query_ptr, terms, weights


def top_k(docs: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best (docno, score), score descending then docno ascending.

    `docs` must be ascending: the stable sort then keeps ties in docno order.
    """
    if len(docs) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= kth
        docs, scores = docs[keep], scores[keep]
    order = np.argsort(-scores, kind="stable")[:k]
    return docs[order], scores[order]


class ImpactSearcher:
    """Sums weighted impacts over postings; used by every sparse ranker.

    `impacts` is a codebook (codebook.Impacts) or one float64 per posting
    (encoded here). `nonnegative` says that no impact is below 0 (every
    model's are not); checked here when not given.
    """

    large_k = kernels.LARGE_K  # from this k on, exhaustive top k selects through a buffer, not a heap

    def __init__(self, index: InvertedIndex, impacts: Impacts | np.ndarray, nonnegative: bool | None = None):
        self.index = index
        self.impacts = (impacts if isinstance(impacts, (Impacts, PackedImpacts))
                        else from_values(index.indptr, impacts))
        if nonnegative is not None:
            self.nonnegative = nonnegative

    @cached_property
    def max_impacts(self) -> np.ndarray:
        """Each term's largest impact: the bounds MaxScore prunes with (computed when first asked)."""
        return self.impacts.maxima()

    @cached_property
    def always_positive(self) -> bool:
        """Whether every impact is > 0 (only the numpy path asks)."""
        lowest = self.impacts.minimum()
        return lowest is not None and lowest > 0.0

    @cached_property
    def nonnegative(self) -> bool:
        """Whether every impact is >= 0, as the kernels require."""
        lowest = self.impacts.minimum()
        return lowest is None or lowest >= 0.0

    def accumulate(self, query: WeightedQuery) -> tuple[np.ndarray, np.ndarray]:
        """(docnos matching any query term, ascending; their scores)."""
        indptr, docnos, impacts = self.index.indptr, self.index.docnos, self.impacts
        spans = [(t, indptr[t], indptr[t + 1], w) for t, w in query]
        if not spans:
            return np.zeros(0, np.int32), np.zeros(0)
        docs = np.concatenate([docnos[s:e] for _, s, e, _ in spans])
        values = np.concatenate([impacts.values(t, s, e) * w for t, s, e, w in spans])
        n = self.index.num_docs
        if len(docs) * 8 > n:  # dense accumulator: cheaper than sorting the postings
            scores = np.bincount(docs, weights=values, minlength=n)
            # Positive impacts and weights: matched <=> non-zero score (saves a pass).
            positive = self.always_positive and all(w > 0 for *_, w in spans)
            matched = np.flatnonzero(scores if positive else np.bincount(docs, minlength=n))
            return matched, scores[matched]
        matched, inverse = np.unique(docs, return_inverse=True)
        return matched, np.bincount(inverse, weights=values, minlength=len(matched))

    def top_k(self, docs: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k best (docno, score), score descending then docno ascending (module's top_k)."""
        return top_k(docs, scores, k)

    def search_many(self, queries: list[WeightedQuery], k: int, threads: int = 1,
                    method: str = "auto", allow: np.ndarray | None = None
                    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top k of every query, batched; identical to calling `search` on each, whatever the method.

        "exhaustive": score every posting (compiled); "skipping": pass the windows
        that cannot hold a hit (queries of at most SKIP_TERMS terms, k < LARGE_K);
        "maxscore": the compiled MaxScore kernel; "auto": the one measured faster
        (auto_method). With a
        negative weight or impact, one query at a time with `search`. `allow` (uint8 by docno)
        keeps out the documents whose entry is 0, inside the top k (index/filters.py).
        """
        if method not in METHODS:
            raise ValueError(f"unknown search method {method!r}; expected one of {METHODS}")
        if method == "auto":
            method = self.auto_method(k)
        if k <= 0 or not self.nonnegative or any(w < 0 for q in queries for _, w in q):
            return [self.search(q, k, allow) for q in tqdm(queries, desc="searching", disable=None)]
        return self._kernel_many(queries, min(k, max(self.index.num_docs, 1)), threads, method, allow)

    def auto_method(self, k: int) -> str:
        """What "auto" searches with for k hits (eval/bench_topk.py and eval/bench_real.py measure it):
        "skipping" below large_k (window skipping for queries of at most SKIP_TERMS terms), else
        "exhaustive"."""
        return "skipping" if k < self.large_k else "exhaustive"

    @cached_property
    def window(self) -> int:
        """Documents per window of exhaustive and skipping search (kernels.window_for)."""
        return kernels.window_for(self.index.num_docs)

    @cached_property
    def window_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """kernels.window_maxima of the lists of at least one posting a window on average (their
        maxima, 2 bytes a window, 4 with codes past 65,535, and where each window's postings begin, 4
        bytes a window; at most 6 or 8 bytes a posting of those lists), computed when a skipping search
        first needs them."""
        index, windows = self.index, -(-self.index.num_docs // self.window)
        runs = np.diff(self.impacts.bases)
        like = np.empty(0, np.uint16 if len(runs) == 0 or runs.max() < 1 << 16 else np.uint32)  # code + 1
        return kernels.window_maxima(np.asarray(index.indptr), np.asarray(index.docnos),
                                     np.asarray(self.impacts.codes), self.window, index.num_docs,
                                     max(1, windows), like)

    @cached_property
    def code_blocks(self) -> CodeBlocks:
        """The impact codes in blocks beside the postings' (stored, or packed now from flat codes)."""
        if isinstance(self.impacts, PackedImpacts):
            return self.impacts.packed
        indptr = self.index.indptr
        return pack_codes(indptr, self.impacts.codes, term_ranges(indptr, 1 << 24))

    def _kernel_many(self, queries: list[WeightedQuery], k: int, threads: int,
                     method: str, allow: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        index = self.index
        impacts = self.impacts
        if method in ("blocks", "blockmax") and allow is None:
            return self._block_many(queries, k, threads, method)
        if method in ("blocks", "blockmax"):
            method = "exhaustive"  # the block kernels take no allow mask
        postings = [kernels.readonly(np.asarray(a))
                    for a in (index.indptr, index.docnos, impacts.codes, impacts.table, impacts.bases)]
        maxima = kernels.readonly(np.asarray(self.max_impacts)) if method == "maxscore" else None
        allowed = None if allow is None else kernels.readonly(np.ascontiguousarray(allow, dtype=np.uint8))
        passing = None if allow is None else kernels.readonly(np.flatnonzero(allowed).astype(np.int64))
        skipping = None
        if method == "skipping" and allow is None and k < self.large_k:
            skipping = [kernels.readonly(a) for a in self.window_rows]

        def kernel(query: tuple, out: tuple) -> None:
            """query: (query_ptr, terms, weights, k); out: (docs, scores, counts), filled in place."""
            if maxima is not None:
                kernels.maxscore_batch(*postings, maxima, *query, index.num_docs, *out, allowed)
            elif allowed is not None:  # the passing documents alone when few pass (selective.py)
                selective.filtered_batch(*postings, *query, kernels.WINDOW, self.large_k, allowed, passing,
                                         selective.SEEK_COST, *out)
            elif skipping is not None:
                skip = np.diff(query[0]) <= SKIP_TERMS
                kernels.skipping_batch(*postings, *skipping, *query[:3], skip, query[3], self.window,
                                       self.large_k, *out, allowed)
            else:
                kernels.exhaustive_batch(*postings, *query, self.window, self.large_k, *out, allowed)
        return self._batched(queries, k, threads, kernel)

    def _block_many(self, queries: list[WeightedQuery], k: int, threads: int,
                    method: str) -> list[tuple[np.ndarray, np.ndarray]]:
        """search_many straight from the packed blocks (block_kernels), "blockmax" skipping windows."""
        index, impacts = self.index, self.impacts
        blocks, codes = index.blocks, self.code_blocks
        postings = [kernels.readonly(np.asarray(a)) for a in (
            index.indptr, blocks.term_blocks, blocks.words, blocks.offsets, blocks.widths, blocks.lasts,
            codes.words, codes.offsets, codes.widths, codes.maxima, impacts.table, impacts.bases)]

        def kernel(query: tuple, out: tuple) -> None:
            prune = np.full(len(query[0]) - 1, method == "blockmax")
            block_kernels.block_batch(*postings, *query, prune, kernels.WINDOW, self.large_k, *out)

        return self._batched(queries, k, threads, kernel)

    def _batched(self, queries: list[WeightedQuery], k: int, threads: int,
                 kernel) -> list[tuple[np.ndarray, np.ndarray]]:
        """Run `kernel` over chunks of the batch (in `threads` threads), rows of results per query."""
        size = max(1, min(64, -(-len(queries) // max(1, threads))))
        chunks = [queries[i:i + size] for i in range(0, len(queries), size)]
        bar = tqdm(total=len(queries), desc="searching", unit=" queries", disable=None)

        def run(chunk: list[WeightedQuery]) -> list[tuple[np.ndarray, np.ndarray]]:
            query_ptr, terms, weights = flat_queries(chunk)
            docs = np.empty((len(chunk), k), dtype=np.int64)
            scores = np.empty((len(chunk), k), dtype=np.float64)
            counts = np.empty(len(chunk), dtype=np.int64)
            kernel((query_ptr, terms, weights, k), (docs, scores, counts))
            bar.update(len(chunk))
            return [(docs[r, :n].copy(), scores[r, :n].copy()) for r, n in enumerate(counts.tolist())]

        if threads > 1 and len(chunks) > 1:
            with ThreadPoolExecutor(threads) as pool:
                results = [r for chunk in pool.map(run, chunks) for r in chunk]
        else:
            results = [r for chunk in chunks for r in run(chunk)]
        bar.close()
        return results

    def search(self, query: WeightedQuery, k: int, allow: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top k documents over the whole index (those `allow` lets in)."""
        docs, scores = self.accumulate(query)
        if allow is not None:
            keep = np.asarray(allow)[docs] != 0
            docs, scores = docs[keep], scores[keep]
        return self.top_k(docs, scores, k)

    def score(self, query: WeightedQuery, docs: np.ndarray) -> np.ndarray:
        """Scores of the given docnos (0 for documents matching no query term)."""
        matched, scores = self.accumulate(query)
        out = np.zeros(len(docs))
        if len(matched):
            pos = np.searchsorted(matched, docs).clip(max=len(matched) - 1)
            hit = matched[pos] == docs
            out[hit] = scores[pos[hit]]
        return out
