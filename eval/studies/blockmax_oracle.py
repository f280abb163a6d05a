"""Block-max top k over blocks of consecutive documents, given the final k-th score: scale_floor.py's
best case for block-max pruning, not a searcher (no real method knows that score in advance).

For each query term a byte per block bounds its impacts there: stored dense
(a byte for every block, and where each block's postings start) for terms in
at least 1/16 of the blocks, computed from the postings at query time for the
others. A query (1) adds its terms' weighted bytes into one float32 upper
bound per block, (2) visits, in docno order, the blocks whose bound reaches
the given floor and (3) scores their documents exactly (float64 sums in query
order, as the exhaustive kernel), offering each to a k-heap. The result is
checked against the exhaustive kernel's by the caller.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from retrieval.sparse.kernels import _drain, _offer, _seek
from retrieval.sparse.searcher import flat_queries

LEVELS = 255  # a block's largest impact, as a share of the term's largest, rounded up to 1/LEVELS
ROUNDING = 1e-5  # relative margin on float32 bounds: far above float32's 6e-8 a step, for up to 100 terms
DENSE_SHARE = 16  # a term in at least 1/DENSE_SHARE of the blocks has its block bytes stored dense


@njit(nogil=True, cache=True)
def dense_term(docnos, codes, table, base, start, stop, blocks, shift, largest, levels, offsets):
    """A term's byte per block (ceil(levels * block max / largest)) and, into offsets (blocks + 1), where
    each block's postings start, relative to `start`."""
    level = np.zeros(blocks, np.uint8)
    block = 0
    offsets[0] = 0
    for p in range(start, stop):
        b = docnos[p] >> shift
        while block < b:
            block += 1
            offsets[block] = p - start
        code = np.uint8(min(255, int(np.ceil(levels * table[base + codes[p]] / largest))))
        level[b] = max(level[b], code)
    while block < blocks:
        block += 1
        offsets[block] = stop - start
    return level


@njit(nogil=True, cache=True)
def _add_bounds(indptr, docnos, codes, table, bases, terms, weights, dense, levels, scales, shift, bounds):
    """Each term's weighted block maxima into bounds: dense rows for terms with one (dense[i] >= 0), the
    postings' running maximum per block for the others."""
    bounds[:] = 0.0
    for i in range(len(terms)):
        if dense[i] >= 0:
            row, scale = levels[dense[i]], scales[i]
            for b in range(len(bounds)):
                bounds[b] += scale * np.float32(row[b])
            continue
        t, w = terms[i], weights[i]
        last, most = -1, 0.0
        for p in range(indptr[t], indptr[t + 1]):
            b = docnos[p] >> shift
            value = w * table[bases[t] + codes[p]]
            if b != last:
                if last >= 0:
                    bounds[last] += np.float32(most * (1 + ROUNDING))
                last, most = b, value
            else:
                most = max(most, value)
        if last >= 0:
            bounds[last] += np.float32(most * (1 + ROUNDING))


@njit(nogil=True, cache=True)
def top_k(indptr, docnos, codes, table, bases, terms, weights, dense, levels, offsets, scales, k, floor,
          shift, bounds, out_docs, out_scores):
    """Top k of one query whose k-th score is above `floor`, into out_*; returns the count."""
    m = len(terms)
    _add_bounds(indptr, docnos, codes, table, bases, terms, weights, dense, levels, scales, shift, bounds)
    heap_scores, heap_docs, size = np.empty(k), np.empty(k, np.int64), 0
    width = 1 << shift
    sums, touched = np.zeros(width), np.zeros(width, np.bool_)
    cursor, end = np.empty(m, np.int64), np.empty(m, np.int64)
    for i in range(m):
        cursor[i], end[i] = indptr[terms[i]], indptr[terms[i] + 1]
    lowest = np.float32(floor * (1 - ROUNDING))
    for b in range(len(bounds)):
        if bounds[b] < lowest:
            continue
        start = b << shift
        for i in range(m):  # query order: each sum is the exhaustive one, bit for bit
            t, w = terms[i], weights[i]
            if dense[i] >= 0:
                p, e = indptr[t] + offsets[dense[i], b], indptr[t] + offsets[dense[i], b + 1]
            else:
                p, e = _seek(docnos, cursor[i], end[i], start), end[i]
            while p < e and docnos[p] < start + width:
                sums[docnos[p] - start] += w * table[bases[t] + codes[p]]
                touched[docnos[p] - start] = True
                p += 1
            if dense[i] < 0:
                cursor[i] = p
        for slot in range(width):
            if touched[slot]:
                if sums[slot] > floor:
                    size = _offer(heap_scores, heap_docs, size, k, sums[slot], start + slot)
                sums[slot], touched[slot] = 0.0, False
    return _drain(heap_scores, heap_docs, size, out_docs, out_scores)


@njit(nogil=True, cache=True)
def batch(indptr, docnos, codes, table, bases, query_ptr, terms, weights, dense, levels, offsets, scales, k,
          floors, shift, bounds, out_docs, out_scores):
    """top_k of query q ([query_ptr[q], query_ptr[q + 1]) of the flat arrays) with floors[q], into row q."""
    for q in range(len(query_ptr) - 1):
        a, b = query_ptr[q], query_ptr[q + 1]
        top_k(indptr, docnos, codes, table, bases, terms[a:b], weights[a:b], dense[a:b], levels, offsets,
              scales[a:b], k, floors[q], shift, bounds, out_docs[q], out_scores[q])


def prepare(arrays: tuple, maxima: np.ndarray, weighted: list, floors: np.ndarray, num_docs: int,
            shift: int, k: int):
    """The stored part (dense rows of the queries' frequent terms) and a pass over all queries; the pass
    returns its top k as (docs, scores) arrays."""
    indptr, docnos, codes, table, bases = arrays
    blocks = (num_docs >> shift) + 1
    frequent = sorted({t for q in weighted for t, _ in q
                       if indptr[t + 1] - indptr[t] >= blocks // DENSE_SHARE})
    row_of = {t: r for r, t in enumerate(frequent)}
    levels = np.zeros((len(frequent), blocks), np.uint8)
    offsets = np.zeros((len(frequent), blocks + 1), np.int32)
    for t, r in row_of.items():
        levels[r] = dense_term(docnos, codes, table, int(bases[t]), int(indptr[t]), int(indptr[t + 1]),
                               blocks, shift, maxima[t], LEVELS, offsets[r])
    query_ptr, terms, weights = flat_queries(weighted)
    dense = np.array([row_of.get(t, -1) for t in terms.tolist()], np.int64)
    scales = (weights * maxima[terms] / LEVELS * (1 + ROUNDING)).astype(np.float32)
    bounds = np.zeros(blocks, np.float32)
    docs, scores = np.empty((len(weighted), k), np.int64), np.empty((len(weighted), k))

    def run() -> tuple[np.ndarray, np.ndarray]:
        batch(indptr, docnos, codes, table, bases, query_ptr, terms, weights, dense, levels, offsets, scales,
              k, floors, shift, bounds, docs, scores)
        return docs, scores
    return run
