"""Compiled (numba) query evaluation over per-posting impacts: exhaustive and MaxScore top k.

Impacts come as a codebook (codebook.py): posting p of term t has impact
table[bases[t] + codes[p]], the same float64 as one stored per posting.

exhaustive_top_k scores every posting, term at a time within windows of
WINDOW documents (the accumulators stay in the CPU's first-level cache);
maxscore_top_k is document-at-a-time MaxScore. Both are exact by
construction, not by tolerance. For MaxScore:

- a document that is scored at all gets the score the exhaustive searcher
  gives it: the sum over query terms, in query order, starting from 0.0, of
  weight * impact (float64, no fast-math, so no reassociation or fused
  multiply-add);
- documents are visited in ascending docno, so a document enters the top k
  only if its score is strictly above the k-th best so far (an equal score
  loses the tie to the earlier docno), and the heap evicts the lowest score,
  largest docno first: the result is ordered by score descending, docno
  ascending, as `ImpactSearcher.top_k`;
- a document is skipped only when an upper bound of its score is <= the
  current k-th score. Bounds are sums of weight * max impact per term, which
  round-to-nearest keeps >= the sum they bound up to a relative error of
  about (number of terms) * 2**-53; every bound is inflated by BOUND_SLACK to
  cover that, which costs a little pruning and nothing in exactness.

Both require weights >= 0 and impacts >= 0 (the searcher scores one query at
a time with numpy otherwise). Compiled on first use and cached on disk (numba's
`cache=True`, next to this module or in NUMBA_CACHE_DIR).
"""

from __future__ import annotations

import numpy as np
from numba import njit

BOUND_SLACK = 1.0 + 1e-9  # >> 2**-53 * terms for any query under 10^6 terms
WINDOW = 1024  # documents per window of exhaustive_top_k: 8 KiB of scores, within the first-level cache


@njit(nogil=True, cache=True, inline="always")
def _worse(score_a: float, doc_a: int, score_b: float, doc_b: int) -> bool:
    """Whether hit a ranks below hit b (lower score, or equal score and larger docno)."""
    return score_a < score_b or (score_a == score_b and doc_a > doc_b)


@njit(nogil=True, cache=True)
def _sift_down(scores, docs, size, i):
    """Restore the heap (worst hit at the root) below position i."""
    while True:
        left = 2 * i + 1
        if left >= size:
            return
        child = left
        right = left + 1
        if right < size and _worse(scores[right], docs[right], scores[left], docs[left]):
            child = right
        if _worse(scores[child], docs[child], scores[i], docs[i]):
            scores[i], scores[child] = scores[child], scores[i]
            docs[i], docs[child] = docs[child], docs[i]
            i = child
        else:
            return


@njit(nogil=True, cache=True)
def _sift_up(scores, docs, i):
    while i > 0:
        parent = (i - 1) // 2
        if _worse(scores[i], docs[i], scores[parent], docs[parent]):
            scores[i], scores[parent] = scores[parent], scores[i]
            docs[i], docs[parent] = docs[parent], docs[i]
            i = parent
        else:
            return


@njit(nogil=True, cache=True)
def _drain(heap_scores, heap_docs, size, out_docs, out_scores):
    """Empty the heap into out_*, best first (the worst hit goes to the back each time); returns the count."""
    n = size
    while size > 0:
        size -= 1
        out_scores[size] = heap_scores[0]
        out_docs[size] = heap_docs[0]
        heap_scores[0] = heap_scores[size]
        heap_docs[0] = heap_docs[size]
        _sift_down(heap_scores, heap_docs, size, 0)
    return n


@njit(nogil=True, cache=True)
def _seek(docnos, p, end, target):
    """First position in [p, end) whose docno is >= target (end if none): galloping search."""
    if p >= end or docnos[p] >= target:
        return p
    lo = p  # docnos[lo] < target throughout
    step = 1
    while lo + step < end and docnos[lo + step] < target:
        lo += step
        step *= 2
    hi = min(lo + step, end)
    lo += 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if docnos[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(nogil=True, cache=True)
def maxscore_top_k(indptr, docnos, codes, table, bases, max_impacts, terms, weights, k, num_docs,
                   out_docs, out_scores):
    """Top k of one query (terms, weights: parallel arrays in query order) into out_*; returns the count."""
    m = len(terms)
    if m == 0 or k <= 0:
        return 0
    bound = np.empty(m)
    for i in range(m):
        bound[i] = weights[i] * max_impacts[terms[i]]
    order = np.argsort(bound, kind="mergesort")  # position j -> query term; bounds ascending
    cursor = np.empty(m, np.int64)
    end = np.empty(m, np.int64)
    base = np.empty(m, np.int64)
    weight = np.empty(m)
    cumulative = np.empty(m)  # cumulative[j]: bound of a document found only in lists 0..j
    total = 0.0
    for j in range(m):
        t = terms[order[j]]
        cursor[j] = indptr[t]
        end[j] = indptr[t + 1]
        base[j] = bases[t]
        weight[j] = weights[order[j]]
        total += bound[order[j]]
        cumulative[j] = total * BOUND_SLACK
    contribution = np.zeros(m)  # by query position
    present = np.zeros(m, np.bool_)
    heap_scores = np.empty(k)
    heap_docs = np.empty(k, np.int64)
    size = 0
    threshold = -np.inf  # the k-th best score once the heap is full
    first_essential = 0  # lists below it cannot lift a document into the top k on their own

    doc = num_docs
    for j in range(m):
        if cursor[j] < end[j] and docnos[cursor[j]] < doc:
            doc = docnos[cursor[j]]
    while doc < num_docs:
        following = num_docs
        partial = 0.0
        for j in range(first_essential, m):
            p = cursor[j]
            if p < end[j] and docnos[p] == doc:
                c = weight[j] * table[base[j] + codes[p]]
                contribution[order[j]] = c
                present[order[j]] = True
                partial += c
                p += 1
                cursor[j] = p
            if p < end[j] and docnos[p] < following:
                following = docnos[p]
        candidate = True
        for j in range(first_essential - 1, -1, -1):
            if (partial * BOUND_SLACK + cumulative[j]) <= threshold:
                candidate = False
                break
            p = _seek(docnos, cursor[j], end[j], doc)
            cursor[j] = p
            if p < end[j] and docnos[p] == doc:
                c = weight[j] * table[base[j] + codes[p]]
                contribution[order[j]] = c
                present[order[j]] = True
                partial += c
        if candidate:
            score = 0.0
            for i in range(m):  # query order, as the exhaustive sum
                if present[i]:
                    score += contribution[i]
            if size < k:
                heap_scores[size] = score
                heap_docs[size] = doc
                _sift_up(heap_scores, heap_docs, size)
                size += 1
                if size == k:
                    threshold = heap_scores[0]
            elif score > threshold:
                heap_scores[0] = score
                heap_docs[0] = doc
                _sift_down(heap_scores, heap_docs, size, 0)
                threshold = heap_scores[0]
            if size == k:
                while first_essential < m and cumulative[first_essential] <= threshold:
                    first_essential += 1
                if first_essential == m:
                    break
        for i in range(m):
            present[i] = False
        doc = following

    return _drain(heap_scores, heap_docs, size, out_docs, out_scores)


@njit(nogil=True, cache=True)
def maxscore_batch(indptr, docnos, codes, table, bases, max_impacts, query_ptr, terms, weights, k,
                   num_docs, out_docs, out_scores, out_counts):
    """maxscore_top_k of query q = [query_ptr[q], query_ptr[q + 1]) of the flat terms/weights, into row q."""
    for q in range(len(query_ptr) - 1):
        a, b = query_ptr[q], query_ptr[q + 1]
        out_counts[q] = maxscore_top_k(indptr, docnos, codes, table, bases, max_impacts, terms[a:b],
                                       weights[a:b], k, num_docs, out_docs[q], out_scores[q])


def readonly(array: np.ndarray) -> np.ndarray:
    """A read-only view: numba compiles one version per writability, so every caller passes read-only
    arrays (memory-mapped index files are; impacts computed on load are not) and one compilation serves."""
    view = array.view()
    view.flags.writeable = False
    return view


@njit(nogil=True, cache=True, inline="always")
def _offer(heap_scores, heap_docs, size, k, score, doc):
    """Offer a hit to the k-heap (worst hit at the root); returns the heap's new size."""
    if size < k:
        heap_scores[size] = score
        heap_docs[size] = doc
        _sift_up(heap_scores, heap_docs, size)
        return size + 1
    if _worse(heap_scores[0], heap_docs[0], score, doc):
        heap_scores[0] = score
        heap_docs[0] = doc
        _sift_down(heap_scores, heap_docs, size, 0)
    return size


@njit(nogil=True, cache=True, inline="always")
def _add_postings(window_scores, docnos, codes, table, base, p, e, start, stop, w, top):
    """Add w * impact of the postings [p, e) below docno stop into window_scores (slot = docno - start);
    returns the first position not added and the largest of `top` and the sums written. Unsigned
    positions spare numba's negative-index checks (1.2x)."""
    q, end, one, run = np.uint64(p), np.uint64(e), np.uint64(1), np.uint64(base)
    while q < end and docnos[q] < stop:
        slot = np.uint64(docnos[q] - start)
        total = window_scores[slot] + w * table[run + codes[q]]
        window_scores[slot] = total
        top = max(top, total)
        q += one
    return np.int64(q), top


@njit(nogil=True, cache=True)
def _scan_window(window_scores, span, start, heap_scores, heap_docs, k):
    """Offer the full heap every slot of window_scores[:span] at or above its k-th score, and zero the
    slots."""
    for slot in range(span):
        if window_scores[slot] >= heap_scores[0]:
            _offer(heap_scores, heap_docs, k, k, window_scores[slot], start + slot)
    window_scores[:span] = 0.0


@njit(nogil=True, cache=True)
def exhaustive_top_k(indptr, docnos, codes, table, bases, terms, weights, k, window_scores, window_seen,
                     window_slots, out_docs, out_scores):
    """Top k of one query by scoring every posting; returns the count.

    Term at a time within windows of len(window_scores) documents, so the
    accumulators stay in cache: per window, each list's postings there are
    added in query order (each sum is then the exhaustive one, bit for bit),
    and the window's documents go past a k-heap that compares (score, docno)
    in full, so the visiting order does not matter. Until the heap holds k
    hits above 0, every document touched is offered (a document can score
    0.0); after that an untouched slot (0.0) cannot enter, so a window only
    adds its postings, keeping the largest sum it writes. With no negative
    term, that is the window's best score: below the k-th, its slots are just
    zeroed; otherwise (rare: a top k fills early and rises) they are offered.
    """
    m = len(terms)
    if m == 0 or k <= 0:
        return 0
    window = len(window_scores)
    cursor = np.empty(m, np.int64)
    end = np.empty(m, np.int64)
    base = np.empty(m, np.int64)  # each term's run of the table
    for i in range(m):
        cursor[i] = indptr[terms[i]]
        end[i] = indptr[terms[i] + 1]
        base[i] = bases[terms[i]]
    heap_scores = np.empty(k)
    heap_docs = np.empty(k, np.int64)
    size = 0
    threshold = -np.inf  # the k-th best score once the heap is full; a lower score cannot enter
    while True:
        start = -1  # the window opens at the smallest unread docno
        for i in range(m):
            if cursor[i] < end[i] and (start < 0 or docnos[cursor[i]] < start):
                start = docnos[cursor[i]]
        if start < 0:
            break
        stop = start + window
        if threshold > 0.0:  # add only, then look for a slot that can enter
            span = 0  # slots [0, span) were touched
            top = 0.0  # the largest sum written: with nothing negative, the window's best score
            for i in range(m):
                first = cursor[i]
                cursor[i], top = _add_postings(window_scores, docnos, codes, table, base[i], first, end[i],
                                               start, stop, weights[i], top)
                if cursor[i] > first:
                    span = max(span, docnos[cursor[i] - 1] - start + 1)
            if top >= threshold:  # rare: offer the window's slots
                _scan_window(window_scores, span, start, heap_scores, heap_docs, k)
                threshold = heap_scores[0]
            else:
                window_scores[:span] = 0.0
            continue
        hits = 0  # record each document touched once
        for i in range(m):
            p, e, w, run = cursor[i], end[i], weights[i], base[i]
            while p < e and docnos[p] < stop:
                slot = docnos[p] - start
                window_slots[hits] = slot  # kept only if the slot is new: no branch to mispredict
                hits += 1 - window_seen[slot]
                window_seen[slot] = 1
                window_scores[slot] += w * table[run + codes[p]]
                p += 1
            cursor[i] = p
        for h in range(hits):
            slot = window_slots[h]
            score = window_scores[slot]
            window_scores[slot] = 0.0
            window_seen[slot] = 0
            if score >= threshold:
                size = _offer(heap_scores, heap_docs, size, k, score, start + slot)
                if size == k:
                    threshold = heap_scores[0]
    return _drain(heap_scores, heap_docs, size, out_docs, out_scores)


@njit(nogil=True, cache=True)
def exhaustive_batch(indptr, docnos, codes, table, bases, query_ptr, terms, weights, k, window,
                     out_docs, out_scores, out_counts):
    """exhaustive_top_k of query q ([query_ptr[q], query_ptr[q + 1]) of terms/weights) into row q."""
    window_scores = np.zeros(window)
    window_seen = np.zeros(window, np.int64)
    window_slots = np.empty(window + 1, np.int64)
    for q in range(len(query_ptr) - 1):
        a, b = query_ptr[q], query_ptr[q + 1]
        out_counts[q] = exhaustive_top_k(indptr, docnos, codes, table, bases, terms[a:b], weights[a:b], k,
                                         window_scores, window_seen, window_slots, out_docs[q], out_scores[q])
