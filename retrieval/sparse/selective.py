"""Filtered top k when few documents pass: score only the passing documents (numba, exact).

With a selective filter (say 0.1% of the documents), the exhaustive kernel still reads every
posting of the query's terms and, since the k-th passing score stays low, offers most of what it
touches to the filter. Visiting the passing documents instead, in docno order, each query
term's cursor galloping to the document (kernels._seek), costs about passing x terms seeks. A
document's score is the sum, in query order from 0.0, of weight x impact over the terms it has:
the sum the exhaustive kernel forms, bit for bit, so the top k (ties by docno) is the same.
`filtered_batch` picks per query: the passing documents when they cost less than reading the
postings (SEEK_COST seeks per posting read), else the exhaustive kernels with the allow mask.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from retrieval.sparse.kernels import _cursors, _drain, _offer, _seek, exhaustive_query, exhaustive_scratch

SEEK_COST = 8.0  # a galloping seek costs about this many sequential postings (tests set 0 and inf)


@njit(nogil=True, cache=True)
def passing_top_k(indptr, docnos, codes, table, bases, terms, weights, k, passing, out_docs, out_scores):
    """Top k of one query over the documents `passing` (ascending docnos) only; returns the count."""
    m = len(terms)
    if m == 0 or k <= 0:
        return 0
    cursor, end, base = _cursors(indptr, bases, terms)
    heap_scores = np.empty(k)
    heap_docs = np.empty(k, np.int64)
    size = 0
    for doc in passing:
        score = 0.0
        matched = False
        for i in range(m):
            p = _seek(docnos, cursor[i], end[i], doc)
            cursor[i] = p
            if p < end[i] and docnos[p] == doc:
                score += weights[i] * table[base[i] + codes[p]]
                matched = True
        if matched:
            size = _offer(heap_scores, heap_docs, size, k, score, doc)
    return _drain(heap_scores, heap_docs, size, out_docs, out_scores)


@njit(nogil=True, cache=True)
def filtered_batch(indptr, docnos, codes, table, bases, query_ptr, terms, weights, k, window, large_k,
                   allow, passing, seek_cost, out_docs, out_scores, out_counts):
    """Top k of query q into row q, over the documents `allow` lets in (`passing`: their docnos)."""
    window_scores, window_seen, window_slots, kept_scores, kept_docs = exhaustive_scratch(k, window, large_k)
    for q in range(len(query_ptr) - 1):
        a, b = query_ptr[q], query_ptr[q + 1]
        postings = 0
        for i in range(a, b):
            postings += indptr[terms[i] + 1] - indptr[terms[i]]
        if len(passing) * (b - a) * seek_cost < postings:
            out_counts[q] = passing_top_k(indptr, docnos, codes, table, bases, terms[a:b], weights[a:b], k,
                                          passing, out_docs[q], out_scores[q])
        else:
            out_counts[q] = exhaustive_query(indptr, docnos, codes, table, bases, terms[a:b], weights[a:b], k,
                                             large_k, window_scores, window_seen, window_slots, kept_scores,
                                             kept_docs, out_docs[q], out_scores[q], allow)
