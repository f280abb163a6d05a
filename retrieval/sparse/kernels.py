"""Compiled (numba) query evaluation over per-posting impacts: exhaustive and MaxScore top k.

Impacts come as a codebook (codebook.py): posting p of term t has impact
table[bases[t] + codes[p]], the same float64 as one stored per posting.

exhaustive_top_k scores every posting, term at a time within windows of
documents (window_for: the accumulators stay in the CPU's first- or second-level cache),
and selects the top k through a heap; exhaustive_top_k_kept scores the same
way and selects through a buffer, used from k = LARGE_K on, where it is
mostly faster (exhaustive_batch picks); skipping_top_k is exhaustive_top_k
passing windows that cannot hold a hit (bounds from window_maxima);
maxscore_top_k is document-at-a-time MaxScore. All are exact by
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

Filters: every kernel takes an optional `allow` (uint8 by docno, or None): a document whose
entry is 0 never enters the top k (MaxScore does not even score it), so a filtered top k is the
k best passing documents, exact, never a top k masked afterwards.

Both require weights >= 0 and impacts >= 0 (the searcher scores one query at
a time with numpy otherwise). Compiled on first use and cached on disk (numba's
`cache=True`, next to this module or in NUMBA_CACHE_DIR).
"""

from __future__ import annotations

import numpy as np
from numba import njit

BOUND_SLACK = 1.0 + 1e-9  # >> 2**-53 * terms for any query under 10^6 terms
WINDOW = 1024  # documents per window: 8 KiB of scores, within the first-level cache (the block kernels',
# the filtered searches' and small indexes' window)
LONG_WINDOW = 4096  # the window of exhaustive and skipping search on an index of LONG_WINDOW_FROM documents
# or more (window_for): 32 KiB of scores, in the second-level cache, but each list read in longer runs
# (fewer switches between lists). On the Wikipedia passages' validation queries x1.1-1.3 faster than
# 1,024 at k = 10 and k = 1,000 (8,192 and 16,384 no better); level or faster on 200,000 of them; on
# CACM and SciFact (one or two windows) 0.8-0.9x at k = 10 (docs/design/index-format.md, "Searching")
LONG_WINDOW_FROM = 16 * LONG_WINDOW
LARGE_K = 100  # from this k on, exhaustive scoring keeps candidates in a buffer, not a heap: below it the
# heap is as fast or faster on CACM and SciFact (eval/bench_topk.py times both, results/topk.md)
KEPT = 4  # the buffer of exhaustive_top_k_kept holds KEPT * k + a window of hits before it keeps the k best
# (2, 4, 8, 16 measured on the validation queries: 4 was x1.01 on the questions and x1.10 on the titles
# at k = 1,000 against 2, 8 and 16 no better; docs/design/index-format.md)
RADIX_BITS = 11  # bits a pass of _smallest's radix select (2,048 counters, within the first-level cache)
SMALL_SELECT = 64  # _smallest sorts the values left in its bucket once they are this few
CHUNK = 32  # slots whose largest score _keep_above (the block kernels' buffer) tests before it looks at each
# (32: 3% faster than 64 at k = 1,000 on held-out SQuAD questions, 1% on titles; not the benchmark queries)
ZERO_WALK = 16  # exhaustive_top_k_kept zeroes a window with fewer postings than 1/ZERO_WALK of its span of
# slots by walking its postings again rather than by clearing the span (16 and 64 level, 4 slower, on
# validation queries)
SKIP_SPARSE = 8  # skipping_top_k scans and zeroes a live window with fewer postings than 1/SKIP_SPARSE of
# its span by walking them (chosen on validation queries, not the benchmark's: docs/design/index-format.md)


def window_for(num_docs: int) -> int:
    """The window exhaustive and skipping search use on an index of num_docs documents."""
    return LONG_WINDOW if num_docs >= LONG_WINDOW_FROM else WINDOW


@njit(nogil=True, cache=True, inline="always")
def _allowed(allow, doc):
    """Whether a filter lets the document in (always without one: numba prunes the branch)."""
    if allow is None:
        return True
    return allow[doc] != 0


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
                   out_docs, out_scores, floor=-np.inf, allow=None):
    """Top k of one query (terms, weights: parallel arrays in query order) into out_*; returns the count.

    `floor`, a score known to be below the k-th best, skips from the start the documents that cannot
    pass it (studies/scale_floor.py passes just under the final k-th score, to time MaxScore at its best)."""
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
    threshold = floor  # the k-th best score once the heap is full
    first_essential = 0  # lists below it cannot lift a document into the top k on their own
    while first_essential < m and cumulative[first_essential] <= threshold:
        first_essential += 1

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
        candidate = _allowed(allow, doc)  # a document the filter drops is not scored further
        for j in range(first_essential - 1 if candidate else -1, -1, -1):
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
            if size < k and score > floor:
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
                   num_docs, out_docs, out_scores, out_counts, allow=None):
    """maxscore_top_k of query q = [query_ptr[q], query_ptr[q + 1]) of the flat terms/weights, into row q."""
    for q in range(len(query_ptr) - 1):
        a, b = query_ptr[q], query_ptr[q + 1]
        out_counts[q] = maxscore_top_k(indptr, docnos, codes, table, bases, max_impacts, terms[a:b],
                                       weights[a:b], k, num_docs, out_docs[q], out_scores[q], -np.inf, allow)


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
def _add_postings(window_scores, docnos, codes, table, base, p, e, start, stop, w, floor, above):
    """Add w * impact of the postings [p, e) below docno stop into window_scores (slot = docno - start);
    returns the first position not added and whether `above` or a sum written is >= floor. Unsigned
    positions spare numba's negative-index checks (1.2x); an or of comparisons, not a running largest
    sum, keeps the loop free of a chain of dependent max operations, each waiting for the last."""
    q, end, one, run = np.uint64(p), np.uint64(e), np.uint64(1), np.uint64(base)
    while q < end and docnos[q] < stop:
        slot = np.uint64(docnos[q] - start)
        total = window_scores[slot] + w * table[run + codes[q]]
        window_scores[slot] = total
        above |= total >= floor
        q += one
    return np.int64(q), above


@njit(nogil=True, cache=True, inline="always")
def _window_start(docnos, cursor, end):
    """The smallest unread docno of any list (-1 when every list is read): where the next window opens."""
    start = -1
    for i in range(len(cursor)):
        if cursor[i] < end[i] and (start < 0 or docnos[cursor[i]] < start):
            start = docnos[cursor[i]]
    return start


@njit(nogil=True, cache=True, inline="always")
def _add_window(window_scores, docnos, codes, table, base, cursor, end, weights, start, stop, before, floor):
    """Add every list's postings below stop, in query order (each sum is then the exhaustive one, bit
    for bit), noting where each list's postings in the window begin in `before`; returns (slots
    [0, span) touched, whether a sum written is >= floor, the number of postings added). Sums only
    grow (no negative impact), so that is whether a final sum of the window is >= floor."""
    span = 0
    above = False
    added = 0
    for i in range(len(cursor)):
        first = cursor[i]
        before[i] = first
        cursor[i], above = _add_postings(window_scores, docnos, codes, table, base[i], first, end[i], start,
                                         stop, weights[i], floor, above)
        if cursor[i] > first:
            span = max(span, docnos[cursor[i] - 1] - start + 1)
            added += cursor[i] - first
    return span, above, added


@njit(nogil=True, cache=True, inline="always")
def _zero_walk(window_scores, docnos, before, cursor, start):
    """Zero the slots the window's postings (before[i] to cursor[i] of each list) touched."""
    for i in range(len(cursor)):
        for p in range(before[i], cursor[i]):
            window_scores[docnos[p] - start] = 0.0


@njit(nogil=True, cache=True, inline="always")
def _add_window_listed(window_scores, window_seen, window_slots, docnos, codes, table, base, cursor, end,
                       weights, start, stop):
    """As _add_window, also listing each slot touched once in window_slots; returns how many."""
    hits = 0
    for i in range(len(cursor)):
        p, e, w, run = cursor[i], end[i], weights[i], base[i]
        while p < e and docnos[p] < stop:
            slot = docnos[p] - start
            window_slots[hits] = slot  # kept only if the slot is new: no branch to mispredict
            hits += 1 - window_seen[slot]
            window_seen[slot] = 1
            window_scores[slot] += w * table[run + codes[p]]
            p += 1
        cursor[i] = p
    return hits


@njit(nogil=True, cache=True, inline="always")
def _offer_listed(window_scores, window_seen, window_slots, hits, start, threshold, heap_scores, heap_docs,
                  size, k, allow):
    """Offer the window's `hits` listed documents (window_slots) to the heap, clearing their slots;
    the heap's (size, threshold) after."""
    for h in range(hits):
        slot = window_slots[h]
        score = window_scores[slot]
        window_scores[slot] = 0.0
        window_seen[slot] = 0
        if score >= threshold and _allowed(allow, start + slot):
            size = _offer(heap_scores, heap_docs, size, k, score, start + slot)
            if size == k:
                threshold = heap_scores[0]
    return size, threshold


@njit(nogil=True, cache=True)
def _scan_window(window_scores, span, start, heap_scores, heap_docs, k, allow):
    """Offer the full heap every slot of window_scores[:span] at or above its k-th score (that the
    filter allows), and zero the slots."""
    for slot in range(span):
        if window_scores[slot] >= heap_scores[0] and _allowed(allow, start + slot):
            _offer(heap_scores, heap_docs, k, k, window_scores[slot], start + slot)
    window_scores[:span] = 0.0


@njit(nogil=True, cache=True)
def _cursors(indptr, bases, terms):
    """Each query term's (first posting, end of its postings, start of its run of the table)."""
    m = len(terms)
    cursor = np.empty(m, np.int64)
    end = np.empty(m, np.int64)
    base = np.empty(m, np.int64)
    for i in range(m):
        cursor[i] = indptr[terms[i]]
        end[i] = indptr[terms[i] + 1]
        base[i] = bases[terms[i]]
    return cursor, end, base


@njit(nogil=True, cache=True, inline="always")
def _add_and_scan(window_scores, docnos, codes, table, base, cursor, end, weights, start, stop, before,
                  threshold, heap_scores, heap_docs, k, allow):
    """With the heap full: add the window's postings (_add_window), offer its slots to the heap only if
    a sum of it reaches the k-th score, and zero them; returns the heap's threshold after."""
    span, above, _ = _add_window(window_scores, docnos, codes, table, base, cursor, end, weights, start, stop,
                                 before, threshold)
    if above:
        _scan_window(window_scores, span, start, heap_scores, heap_docs, k, allow)
        return heap_scores[0]
    window_scores[:span] = 0.0
    return threshold


@njit(nogil=True, cache=True)
def _offer_walk(window_scores, docnos, before, cursor, start, heap_scores, heap_docs, k, allow):
    """Offer the full heap each slot the window's postings (before[i] to cursor[i] of each list)
    touched, at or above its k-th score (that the filter allows), zeroing it: a slot met again is 0.0
    by then and cannot enter. Returns the heap's threshold after."""
    for i in range(len(cursor)):
        for p in range(before[i], cursor[i]):
            slot = docnos[p] - start
            score = window_scores[slot]
            if score >= heap_scores[0] and _allowed(allow, start + slot):
                _offer(heap_scores, heap_docs, k, k, score, start + slot)
            window_scores[slot] = 0.0
    return heap_scores[0]


@njit(nogil=True, cache=True)
def _zero_walked(window_scores, docnos, before, cursor, start):
    """_zero_walk kept out of line, as _offer_walk is (inlining both timed the same in a scratch copy:
    titles x1.10 either way against the base)."""
    _zero_walk(window_scores, docnos, before, cursor, start)


@njit(nogil=True, cache=True, inline="always")
def _add_and_walk(window_scores, docnos, codes, table, base, cursor, end, weights, start, stop, before,
                  threshold, heap_scores, heap_docs, k, allow):
    """_add_and_scan, but a window with fewer postings than 1/SKIP_SPARSE of its span of slots is
    scanned and zeroed by walking its postings again rather than by sweeping the span (a short
    query's live windows hold a few dozen postings across a thousand slots)."""
    span, above, added = _add_window(window_scores, docnos, codes, table, base, cursor, end, weights, start,
                                     stop, before, threshold)
    if added * SKIP_SPARSE < span:
        if above:
            return _offer_walk(window_scores, docnos, before, cursor, start, heap_scores, heap_docs, k, allow)
        _zero_walked(window_scores, docnos, before, cursor, start)
        return threshold
    if above:
        _scan_window(window_scores, span, start, heap_scores, heap_docs, k, allow)
        return heap_scores[0]
    window_scores[:span] = 0.0
    return threshold


@njit(nogil=True, cache=True)
def exhaustive_top_k(indptr, docnos, codes, table, bases, terms, weights, k, window_scores, window_seen,
                     window_slots, out_docs, out_scores, allow=None):
    """Top k of one query by scoring every posting, through a k-heap; returns the count.

    Term at a time within windows of len(window_scores) documents, so the
    accumulators stay in cache: per window, each list's postings there are
    added in query order, and the window's documents go past a k-heap that
    compares (score, docno) in full, so the visiting order does not matter.
    Until the heap holds k hits above 0, every document touched is offered (a
    document can score 0.0); after that an untouched slot (0.0) cannot enter,
    so a window only adds its postings, noting whether a sum it writes
    reaches the k-th score. With no negative term, sums only grow, so that
    tells whether the window's best score does: if not, its slots are just
    zeroed; otherwise (rare at small k) they are offered.
    """
    if len(terms) == 0 or k <= 0:
        return 0
    window = len(window_scores)
    cursor, end, base = _cursors(indptr, bases, terms)
    before = np.empty(len(terms), np.int64)
    heap_scores = np.empty(k)
    heap_docs = np.empty(k, np.int64)
    size = 0
    threshold = -np.inf  # the k-th best score once the heap is full; a lower score cannot enter
    while True:
        start = _window_start(docnos, cursor, end)
        if start < 0:
            break
        stop = start + window
        if threshold > 0.0:  # add only, then look for a slot that can enter
            threshold = _add_and_scan(window_scores, docnos, codes, table, base, cursor, end, weights, start,
                                      stop, before, threshold, heap_scores, heap_docs, k, allow)
            continue
        hits = _add_window_listed(window_scores, window_seen, window_slots, docnos, codes, table, base,
                                  cursor, end, weights, start, stop)
        size, threshold = _offer_listed(window_scores, window_seen, window_slots, hits, start, threshold,
                                        heap_scores, heap_docs, size, k, allow)
    return _drain(heap_scores, heap_docs, size, out_docs, out_scores)


@njit(nogil=True, cache=True)
def _smallest(values, t):
    """The t-th smallest (0-based) of values, all >= 0: a radix select on their bits (non-negative floats
    order as their bits do), counting RADIX_BITS of them a pass, so no comparison branch for the CPU to
    mispredict as in a quickselect or np.partition (about 2x faster on 3,000 scores)."""
    bits = values.view(np.int64)
    low, high = bits.min(), bits.max()
    counts = np.zeros(1 << RADIX_BITS, np.int64)
    while low < high:
        shift = 0
        while (high - low) >> shift >= 1 << RADIX_BITS:
            shift += 1
        counts[:] = 0
        for b in bits:
            if low <= b <= high:
                counts[(b - low) >> shift] += 1
        bucket = 0
        while counts[bucket] <= t:
            t -= counts[bucket]
            bucket += 1
        low += bucket << shift
        high = low + min(high - low, (1 << shift) - 1)  # the bucket's range (no overflow near the top)
        if counts[bucket] <= SMALL_SELECT:
            inside = np.empty(counts[bucket], np.int64)
            n = 0
            for b in bits:
                if low <= b <= high:
                    inside[n] = b
                    n += 1
            low = high = np.sort(inside)[t]
    return np.array([low]).view(np.float64)[0]


@njit(nogil=True, cache=True)
def _keep_best(kept_scores, kept_docs, count, k):
    """Keep the k best (score descending, docno ascending) of kept_*[:count] in kept_*[:k]; returns the
    k-th score."""
    kth = _smallest(kept_scores[:count], count - k)
    above = 0
    for i in range(count):
        above += kept_scores[i] > kth
    tied = np.empty(count - above, np.int64)
    n = 0
    for i in range(count):
        if kept_scores[i] == kth:
            tied[n] = kept_docs[i]
            n += 1
    last_tied = np.sort(tied[:n])[k - above - 1]  # the tied documents up to this docno stay
    kept = 0
    for i in range(count):  # each entry written, the count moved only for one kept: no branch to mispredict
        score, doc = kept_scores[i], kept_docs[i]
        kept_scores[kept] = score
        kept_docs[kept] = doc
        kept += (score > kth) | ((score == kth) & (doc <= last_tied))
    return kth


@njit(nogil=True, cache=True, inline="always")
def _keep_above(window_scores, span, start, threshold, threshold_bits, kept_scores, kept_docs, count, allow):
    """Append the slots of window_scores[:span] above threshold (>= 0) to kept_*[count:]; returns the
    new count. Scores >= 0 order as their bits do, so a chunk of CHUNK slots is first tested by its
    largest bits, a loop the compiler vectorises; the slots of a chunk that passes are appended without
    a branch (the count moves only for a slot above the threshold)."""
    bits = window_scores.view(np.int64)
    chunk, end = np.uint64(0), np.uint64(span)
    while chunk < end:
        stop = min(chunk + np.uint64(CHUNK), end)
        largest = np.int64(0)
        for slot in range(chunk, stop):
            largest = max(largest, bits[slot])
        if largest > threshold_bits:
            for slot in range(chunk, stop):
                score = window_scores[slot]
                kept_scores[count] = score
                kept_docs[count] = start + np.int64(slot)
                count += score > threshold and _allowed(allow, start + np.int64(slot))
        chunk = stop
    return count


@njit(nogil=True, cache=True)
def _ranked(kept_scores, kept_docs, count, out_docs, out_scores):
    """kept_*[:count] into out_*, score descending, docno ascending."""
    by_doc = np.argsort(kept_docs[:count])
    docs = kept_docs[:count][by_doc]
    scores = kept_scores[:count][by_doc]
    order = np.argsort(-scores, kind="mergesort")  # stable: equal scores stay in docno order
    for r in range(count):
        out_docs[r] = docs[order[r]]
        out_scores[r] = scores[order[r]]


@njit(nogil=True, cache=True)
def _add_postings_noting(window_scores, docnos, codes, table, base, p, e, start, stop, w, floor, noted, n):
    """_add_postings, noting in noted[n:] each slot whose sum reaches floor here for the first time (sums
    only grow, so a slot is noted once); returns the first position not added and the new n. The slot
    is written whatever the outcome and n moves only for a new one: no branch to mispredict. Kept out of
    line, with an unsigned count, so that the loop has registers of its own and no negative-index
    check on `noted` (at k = 1,000 on the validation sets x1.12 on the questions, x1.02 on the titles:
    docs/design/index-format.md)."""
    q, end, one, run = np.uint64(p), np.uint64(e), np.uint64(1), np.uint64(base)
    count = np.uint64(n)
    while q < end and docnos[q] < stop:
        slot = np.uint64(docnos[q] - start)
        prior = window_scores[slot]
        total = prior + w * table[run + codes[q]]
        window_scores[slot] = total
        noted[count] = slot
        count += np.uint64(total >= floor) & np.uint64(prior < floor)
        q += one
    return np.int64(q), np.int64(count)


@njit(nogil=True, cache=True, inline="always")
def _add_window_noting(window_scores, docnos, codes, table, base, cursor, end, weights, start, stop, before,
                       floor, noted):
    """_add_window, noting the slots whose final sum is >= floor in noted; returns (slots [0, span)
    touched, how many are noted, the number of postings added)."""
    span = 0
    noted_count = np.int64(0)
    added = 0
    for i in range(len(cursor)):
        first = cursor[i]
        before[i] = first
        cursor[i], noted_count = _add_postings_noting(window_scores, docnos, codes, table, base[i], first,
                                                      end[i], start, stop, weights[i], floor, noted,
                                                      noted_count)
        if cursor[i] > first:
            span = max(span, docnos[cursor[i] - 1] - start + 1)
            added += cursor[i] - first
    return span, noted_count, added


@njit(nogil=True, cache=True)
def exhaustive_top_k_kept(indptr, docnos, codes, table, bases, terms, weights, k, window_scores, window_seen,
                          window_slots, kept_scores, kept_docs, out_docs, out_scores, allow=None):
    """Top k of one query by scoring every posting, keeping candidates in a buffer; returns the count.

    The same windows and sums as exhaustive_top_k, for large k, where a heap
    costs more than the postings (at k = 1,000 most windows hold a top-k
    document). A window's hits go into kept_* (room for KEPT * k + a window);
    when it is full, the k best by (score, docno) stay and their k-th score
    becomes the threshold. Windows come in docno order, so a later document
    can only enter with a score strictly above it (an equal one loses the
    tie): from then on, adding a window's postings notes the slots whose
    sums pass the threshold (window_slots), only those are kept, and the
    window is cleared. Until then, every document touched is kept. At the
    end, the k best are ranked.
    """
    if len(terms) == 0 or k <= 0:
        return 0
    window = len(window_scores)
    cursor, end, base = _cursors(indptr, bases, terms)
    before = np.empty(len(terms), np.int64)
    count = 0
    threshold = -1.0  # below 0 until the buffer first fills: every document touched is kept
    floor = 0.0
    while True:
        start = _window_start(docnos, cursor, end)
        if start < 0:
            break
        stop = start + window
        if threshold >= 0.0:
            span, noted, added = _add_window_noting(window_scores, docnos, codes, table, base, cursor, end,
                                                    weights, start, stop, before, floor, window_slots)
            for h in range(noted):
                slot = window_slots[h]
                kept_scores[count] = window_scores[slot]
                kept_docs[count] = start + slot
                count += _allowed(allow, start + slot)
            if added * ZERO_WALK < span:
                _zero_walk(window_scores, docnos, before, cursor, start)
            else:
                window_scores[:span] = 0.0
        else:
            hits = _add_window_listed(window_scores, window_seen, window_slots, docnos, codes, table, base,
                                      cursor, end, weights, start, stop)
            for h in range(hits):
                slot = window_slots[h]
                kept_scores[count] = window_scores[slot]
                kept_docs[count] = start + slot
                count += _allowed(allow, start + slot)
                window_scores[slot] = 0.0
                window_seen[slot] = 0
        if count + window > len(kept_scores):
            threshold = _keep_best(kept_scores, kept_docs, count, k)
            floor = np.nextafter(threshold, np.inf)  # a sum >= floor is > threshold
            count = k
    if count > k:
        _keep_best(kept_scores, kept_docs, count, k)
        count = k
    _ranked(kept_scores, kept_docs, count, out_docs, out_scores)
    return count


@njit(nogil=True, cache=True)
def exhaustive_scratch(k, window, large_k):
    """The buffers exhaustive_query reuses across a batch's queries: the window's scores, seen marks
    and slots, and (from large_k on) the kept hits' scores and docnos."""
    kept_scores = np.empty(KEPT * k + window if k >= large_k else 0)
    return (np.zeros(window), np.zeros(window, np.int64), np.empty(window + 1, np.int64), kept_scores,
            np.empty(len(kept_scores), np.int64))


@njit(nogil=True, cache=True)
def exhaustive_query(indptr, docnos, codes, table, bases, terms, weights, k, large_k, window_scores,
                     window_seen, window_slots, kept_scores, kept_docs, out_docs, out_scores, allow):
    """One query's top k, its count returned: exhaustive_top_k below large_k, exhaustive_top_k_kept
    from it on (the same results)."""
    if k >= large_k:
        return exhaustive_top_k_kept(indptr, docnos, codes, table, bases, terms, weights, k, window_scores,
                                     window_seen, window_slots, kept_scores, kept_docs, out_docs, out_scores,
                                     allow)
    return exhaustive_top_k(indptr, docnos, codes, table, bases, terms, weights, k, window_scores,
                            window_seen, window_slots, out_docs, out_scores, allow)


@njit(nogil=True, cache=True)
def exhaustive_batch(indptr, docnos, codes, table, bases, query_ptr, terms, weights, k, window, large_k,
                     out_docs, out_scores, out_counts, allow=None):
    """Top k of query q ([query_ptr[q], query_ptr[q + 1]) of terms/weights) into row q: exhaustive_top_k
    below large_k (the searcher passes LARGE_K), exhaustive_top_k_kept from it on (the same results)."""
    window_scores, window_seen, window_slots, kept_scores, kept_docs = exhaustive_scratch(k, window, large_k)
    for q in range(len(query_ptr) - 1):
        a, b = query_ptr[q], query_ptr[q + 1]
        out_counts[q] = exhaustive_query(indptr, docnos, codes, table, bases, terms[a:b], weights[a:b], k,
                                         large_k, window_scores, window_seen, window_slots, kept_scores,
                                         kept_docs, out_docs[q], out_scores[q], allow)


@njit(nogil=True, cache=True)
def window_maxima(indptr, docnos, codes, window, num_docs, shortest, like):
    """Each long list's largest impact code + 1 in every window of `window` documents (docno // window),
    0 where the list has no posting, and where its postings of each window begin: (where term t's row
    starts, -1 for a list under `shortest` postings; the rows, in like's dtype, wide enough for the
    largest code + 1; the rows of first postings, uint32 counted from the list's start, so a skipping
    search jumps to a window's postings without searching for them). Codes rise with impacts
    (codebook.py), so a row bounds the list's impacts window by window."""
    windows = (num_docs + window - 1) // window
    row = np.full(len(indptr) - 1, -1, np.int64)
    rows = 0
    for t in range(len(indptr) - 1):
        if indptr[t + 1] - indptr[t] >= shortest:
            row[t] = rows * windows
            rows += 1
    out = np.zeros(rows * windows, like.dtype)
    firsts = np.empty(rows * windows, np.uint32)
    for t in range(len(indptr) - 1):
        if row[t] >= 0:
            r = row[t]
            seen = 0  # windows whose first posting is set
            for p in range(indptr[t], indptr[t + 1]):
                w = docnos[p] // window
                while seen <= w:
                    firsts[r + seen] = p - indptr[t]
                    seen += 1
                out[r + w] = max(out[r + w], codes[p] + 1)
            while seen < windows:
                firsts[r + seen] = indptr[t + 1] - indptr[t]
                seen += 1
    return row, out, firsts


@njit(nogil=True, cache=True)
def skipping_top_k(indptr, docnos, codes, table, bases, row, row_codes, row_firsts, terms, weights, k,
                   window_scores, window_seen, window_slots, out_docs, out_scores, allow=None):
    """exhaustive_top_k (the same sums, heap and result) passing the windows that cannot hold a hit.

    Windows are aligned to multiples of len(window_scores) (the window of
    `row_codes`, window_maxima's). Until the heap holds k hits above 0, every
    window with a posting is scored as exhaustive_top_k does. From then on
    windows are taken in turn, and one whose bound -- the sum over the lists
    with a posting in it of weight * the list's largest impact there (from
    its row of window maxima for a long list; its largest overall for a short
    one, whose cursor says whether it has a posting there) -- is <= the k-th
    score, inflated by BOUND_SLACK against rounding, is passed without
    reading a long list's postings: windows come in docno order, so a later
    document with a score equal to the k-th loses the tie. A window that may
    hold a hit has every list's postings added in query order (the
    exhaustive sums, bit for bit), each long list's cursor first set to the
    window's first posting (row_firsts, window_maxima's); a window whose
    postings are few beside its span of slots is then scanned and cleared by
    walking them (_add_and_walk).
    """
    m = len(terms)
    if m == 0 or k <= 0:
        return 0
    window = len(window_scores)
    cursor, end, base = _cursors(indptr, bases, terms)
    before = np.empty(m, np.int64)
    rows = np.empty(m, np.int64)
    bound = np.empty(m)  # a short list's largest impact, weighted (the last of its run of the table)
    last = 0  # one past the last window holding a posting of any list
    for i in range(m):
        rows[i] = row[terms[i]]
        run_end = bases[terms[i] + 1]
        bound[i] = weights[i] * table[run_end - 1] if run_end > base[i] else 0.0  # runs ascend
        if end[i] > cursor[i]:
            last = max(last, docnos[end[i] - 1] // window + 1)
    heap_scores = np.empty(k)
    heap_docs = np.empty(k, np.int64)
    size = 0
    threshold = -np.inf
    w = 0  # the next window
    while threshold <= 0.0:  # the heap is filling: every document touched is offered
        lowest = _window_start(docnos, cursor, end)
        if lowest < 0:
            return _drain(heap_scores, heap_docs, size, out_docs, out_scores)
        w = lowest // window
        start = w * window
        hits = _add_window_listed(window_scores, window_seen, window_slots, docnos, codes, table, base,
                                  cursor, end, weights, start, start + window)
        w += 1
        size, threshold = _offer_listed(window_scores, window_seen, window_slots, hits, start, threshold,
                                        heap_scores, heap_docs, size, k, allow)
    while w < last:
        start = w * window
        stop = start + window
        ceiling = 0.0
        for i in range(m):
            if rows[i] >= 0:
                code = row_codes[rows[i] + w]
                if code > 0:
                    ceiling += weights[i] * table[base[i] + code - 1]
            else:
                p = cursor[i]
                while p < end[i] and docnos[p] < start:  # a short list: passed windows' postings
                    p += 1
                cursor[i] = p
                if p < end[i] and docnos[p] < stop:
                    ceiling += bound[i]
        if ceiling * BOUND_SLACK <= threshold:
            w += 1
            continue
        for i in range(m):
            if rows[i] >= 0:  # to the window's first posting (the cursor is never past it)
                cursor[i] = max(cursor[i], indptr[terms[i]] + np.int64(row_firsts[rows[i] + w]))
        w += 1
        threshold = _add_and_walk(window_scores, docnos, codes, table, base, cursor, end, weights, start,
                                  stop, before, threshold, heap_scores, heap_docs, k, allow)
    return _drain(heap_scores, heap_docs, size, out_docs, out_scores)


@njit(nogil=True, cache=True)
def skipping_batch(indptr, docnos, codes, table, bases, row, row_codes, row_firsts, query_ptr, terms, weights,
                   skip, k, window, large_k, out_docs, out_scores, out_counts, allow=None):
    """exhaustive_batch, query q through skipping_top_k where skip[q] (and k < large_k)."""
    window_scores, window_seen, window_slots, kept_scores, kept_docs = exhaustive_scratch(k, window, large_k)
    for q in range(len(query_ptr) - 1):
        a, b = query_ptr[q], query_ptr[q + 1]
        if skip[q] and k < large_k:
            out_counts[q] = skipping_top_k(indptr, docnos, codes, table, bases, row, row_codes, row_firsts,
                                           terms[a:b], weights[a:b], k, window_scores, window_seen,
                                           window_slots, out_docs[q], out_scores[q], allow)
        else:
            out_counts[q] = exhaustive_query(indptr, docnos, codes, table, bases, terms[a:b], weights[a:b], k,
                                             large_k, window_scores, window_seen, window_slots, kept_scores,
                                             kept_docs, out_docs[q], out_scores[q], allow)
