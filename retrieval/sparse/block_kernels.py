"""Compiled exhaustive top k over packed postings (index/blocks.py), with block-max window skipping.

The same scoring as kernels.exhaustive_top_k / exhaustive_top_k_kept (term
at a time within windows of WINDOW documents, each document's sum taken over
the query terms in query order, float64, no fast-math), so the same top k,
scores and tie order, bit for bit. Each query term keeps a cursor in its
postings: its current block, decoded (docnos and impact codes, BLOCK at a
time), and a position in it.

Block-max skipping (`prune`): once the top k is full with a k-th score
above 0, a window whose upper bound -- the sum over query terms of weight *
the largest impact of the term's blocks that overlap the window -- is <=
the k-th score (inflated by kernels.BOUND_SLACK against rounding) cannot
hold a document that enters: windows come in docno order, so a later
document with a score equal to the k-th loses the tie. Its postings are
skipped: whole blocks whose last docno is below the window's end are passed
without decoding. Every bound is >= the score it bounds, so skipping never
changes the result.

A per-document filter (issue 56's allow mask) belongs where a window's slot
is offered or kept (`_offer`/`_keep_above` callers below): a document that is
not allowed is simply never offered.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from retrieval.index.blocks import BLOCK, decode_codes, decode_docs
from retrieval.sparse.kernels import (
    BOUND_SLACK,
    _drain,
    _keep_above,
    _keep_best,
    _offer,
    _ranked,
    _scan_window,
)

# Two tuples carry the arrays the helpers below share (numba passes a tuple of arrays as one argument):
# packed = (words, offsets, widths, lasts, cwords, coffsets, cwidths): the postings' and impact codes'
#          blocks (index/blocks.py), as block_batch receives them;
# cursor = (first, endb, dfs, base, blk, pos, cnt, docs, codes): per query term, its first and end
#          block, df, run base in the codebook table, current block, position and count in it, and
#          that block decoded (docs, codes; one row a term), as _open makes them.


@njit(nogil=True, cache=True, inline="always")
def _load(i, j, packed, cursor):
    """Decode block j of query term i into its rows of docs and codes; make it the term's current block."""
    words, offsets, widths, lasts, cwords, coffsets, cwidths = packed
    first, _, dfs, _, blk, pos, cnt, docs, codes = cursor
    n = min(BLOCK, dfs[i] - (j - first[i]) * BLOCK)
    decode_docs(words, offsets, widths, lasts, j, first[i], n, docs[i])
    decode_codes(cwords, coffsets, cwidths, j, n, codes[i])
    blk[i] = j
    pos[i] = 0
    cnt[i] = n


@njit(nogil=True, cache=True)
def _open(indptr, term_blocks, bases, terms, packed):
    """The cursor of the query terms (see above), each term's first block decoded."""
    m = len(terms)
    first = np.empty(m, np.int64)
    endb = np.empty(m, np.int64)
    dfs = np.empty(m, np.int64)
    base = np.empty(m, np.int64)
    blk = np.zeros(m, np.int64)
    pos = np.zeros(m, np.int64)
    cnt = np.zeros(m, np.int64)
    docs = np.empty((m, BLOCK), np.int64)
    codes = np.empty((m, BLOCK), np.int64)
    cursor = (first, endb, dfs, base, blk, pos, cnt, docs, codes)
    for i in range(m):
        t = terms[i]
        first[i] = term_blocks[t]
        endb[i] = term_blocks[t + 1]
        dfs[i] = indptr[t + 1] - indptr[t]
        base[i] = bases[t]
        if first[i] < endb[i]:
            _load(i, first[i], packed, cursor)
    return cursor


@njit(nogil=True, cache=True, inline="always")
def _start(cursor):
    """The smallest unread docno of any term (-1 when every term is read)."""
    pos, cnt, docs = cursor[5], cursor[6], cursor[7]
    start = -1
    for i in range(len(pos)):
        if pos[i] < cnt[i]:
            d = docs[i, pos[i]]
            if start < 0 or d < start:
                start = d
    return start


@njit(nogil=True, cache=True, inline="always")
def _bound(cursor, lasts, maxima, table, weights, stop):
    """Sum over terms of weight * the largest impact of its blocks overlapping [current doc, stop)."""
    _, endb, _, base, blk, pos, cnt, docs, _ = cursor
    total = 0.0
    for i in range(len(pos)):
        if pos[i] >= cnt[i]:
            continue
        j = blk[i]
        top = maxima[j]
        if docs[i, cnt[i] - 1] < stop:
            j += 1
            while j < endb[i]:
                top = max(top, maxima[j])
                if lasts[j] >= stop:
                    break
                j += 1
        total += weights[i] * table[base[i] + top]
    return total


@njit(nogil=True, cache=True, inline="always")
def _skip(stop, packed, cursor):
    """Move every term's cursor to its first docno >= stop, passing whole blocks undecoded."""
    lasts = packed[3]
    _, endb, _, _, blk, pos, cnt, docs, _ = cursor
    for i in range(len(pos)):
        if pos[i] >= cnt[i]:
            continue
        if docs[i, cnt[i] - 1] < stop:
            j = blk[i] + 1
            while j < endb[i] and lasts[j] < stop:
                j += 1
            if j == endb[i]:
                pos[i] = cnt[i]
                continue
            _load(i, j, packed, cursor)
        p = pos[i]
        while docs[i, p] < stop:
            p += 1
        pos[i] = p


@njit(nogil=True, cache=True, inline="always")
def _add(window_scores, window_seen, window_slots, listed, start, stop, weights, table, packed, cursor):
    """Add every term's postings below stop, in query order; returns (slots [0, span) touched, largest
    sum written, slots listed in window_slots when `listed`)."""
    _, endb, _, base, blk, pos, cnt, docs, codes = cursor
    span = 0
    top = 0.0
    hits = 0
    for i in range(len(pos)):
        p, c = pos[i], cnt[i]
        if p >= c:
            continue
        w = weights[i]
        run = base[i]
        row_docs = docs[i]
        row_codes = codes[i]
        last = start - 1  # the last docno added
        while True:
            if listed:
                while p < c:  # the decoded block, up to the window's end
                    d = row_docs[p]
                    if d >= stop:
                        break
                    last = d
                    slot = d - start
                    window_slots[hits] = slot
                    hits += 1 - window_seen[slot]
                    window_seen[slot] = 1
                    window_scores[slot] += w * table[run + row_codes[p]]
                    p += 1
            else:  # unsigned positions spare numba's negative-index checks (as kernels._add_postings)
                q, qc, one, urun = np.uint64(p), np.uint64(c), np.uint64(1), np.uint64(run)
                while q < qc and row_docs[q] < stop:
                    slot_u = np.uint64(row_docs[q] - start)
                    total = window_scores[slot_u] + w * table[urun + np.uint64(row_codes[q])]
                    window_scores[slot_u] = total
                    top = max(top, total)
                    q += one
                p = np.int64(q)
                if p > 0:
                    last = max(last, row_docs[p - 1])
            if p < c or blk[i] + 1 >= endb[i]:
                break
            _load(i, blk[i] + 1, packed, cursor)
            p, c = 0, cnt[i]
        span = max(span, last - start + 1)
        pos[i] = p
    return span, top, hits


@njit(nogil=True, cache=True)
def block_top_k(indptr, term_blocks, packed, maxima, table, bases, terms, weights, k, prune,
                window_scores, window_seen, window_slots, out_docs, out_scores):
    """Top k of one query through a k-heap (kernels.exhaustive_top_k's algorithm); returns the count."""
    if len(terms) == 0 or k <= 0:
        return 0
    window = len(window_scores)
    lasts = packed[3]
    cursor = _open(indptr, term_blocks, bases, terms, packed)
    heap_scores = np.empty(k)
    heap_docs = np.empty(k, np.int64)
    size = 0
    threshold = -np.inf
    while True:
        start = _start(cursor)
        if start < 0:
            break
        stop = start + window
        if threshold > 0.0:
            if prune and _bound(cursor, lasts, maxima, table, weights, stop) * BOUND_SLACK <= threshold:
                _skip(stop, packed, cursor)
                continue
            span, top, _ = _add(window_scores, window_seen, window_slots, False, start, stop, weights, table,
                                packed, cursor)
            if top >= threshold:
                _scan_window(window_scores, span, start, heap_scores, heap_docs, k, None)  # no filter here
                threshold = heap_scores[0]
            else:
                window_scores[:span] = 0.0
            continue
        _, _, hits = _add(window_scores, window_seen, window_slots, True, start, stop, weights, table,
                          packed, cursor)
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
def block_top_k_kept(indptr, term_blocks, packed, maxima, table, bases, terms, weights, k, prune,
                     window_scores, window_seen, window_slots, kept_scores, kept_docs, out_docs, out_scores):
    """Top k of one query through a buffer (kernels.exhaustive_top_k_kept's algorithm); returns the count."""
    if len(terms) == 0 or k <= 0:
        return 0
    window = len(window_scores)
    lasts = packed[3]
    cursor = _open(indptr, term_blocks, bases, terms, packed)
    count = 0
    threshold = -1.0
    threshold_bits = np.int64(0)
    while True:
        start = _start(cursor)
        if start < 0:
            break
        stop = start + window
        if threshold >= 0.0:
            if prune and _bound(cursor, lasts, maxima, table, weights, stop) * BOUND_SLACK <= threshold:
                _skip(stop, packed, cursor)
                continue
            span, top, _ = _add(window_scores, window_seen, window_slots, False, start, stop, weights, table,
                                packed, cursor)
            if top > threshold:
                count = _keep_above(
                    window_scores, span, start, threshold, threshold_bits, kept_scores, kept_docs, count, None
                )
            window_scores[:span] = 0.0
        else:
            _, _, hits = _add(window_scores, window_seen, window_slots, True, start, stop, weights, table,
                              packed, cursor)
            for h in range(hits):
                slot = window_slots[h]
                kept_scores[count] = window_scores[slot]
                kept_docs[count] = start + slot
                count += 1
                window_scores[slot] = 0.0
                window_seen[slot] = 0
        if count + window > len(kept_scores):
            threshold = _keep_best(kept_scores, kept_docs, count, k)
            threshold_bits = np.array([threshold]).view(np.int64)[0]
            count = k
    if count > k:
        _keep_best(kept_scores, kept_docs, count, k)
        count = k
    _ranked(kept_scores, kept_docs, count, out_docs, out_scores)
    return count


@njit(nogil=True, cache=True)
def block_batch(indptr, term_blocks, words, offsets, widths, lasts, cwords, coffsets, cwidths, maxima,
                table, bases, query_ptr, terms, weights, k, prune, window, large_k, out_docs, out_scores,
                out_counts):
    """Top k of query q ([query_ptr[q], query_ptr[q + 1]) of terms/weights) into row q: block_top_k
    below large_k, block_top_k_kept from it on (the same results). prune[q]: whether query q skips
    windows."""
    packed = (words, offsets, widths, lasts, cwords, coffsets, cwidths)
    window_scores = np.zeros(window)
    window_seen = np.zeros(window, np.int64)
    window_slots = np.empty(window + 1, np.int64)
    kept_scores = np.empty(2 * k + window if k >= large_k else 0)
    kept_docs = np.empty(len(kept_scores), np.int64)
    for q in range(len(query_ptr) - 1):
        a, b = query_ptr[q], query_ptr[q + 1]
        if k >= large_k:
            out_counts[q] = block_top_k_kept(indptr, term_blocks, packed, maxima, table, bases, terms[a:b],
                                             weights[a:b], k, prune[q], window_scores, window_seen,
                                             window_slots, kept_scores, kept_docs, out_docs[q], out_scores[q])
        else:
            out_counts[q] = block_top_k(indptr, term_blocks, packed, maxima, table, bases, terms[a:b],
                                        weights[a:b], k, prune[q], window_scores, window_seen, window_slots,
                                        out_docs[q], out_scores[q])
