"""What reading a query's postings costs at 1,000,000 synthetic documents, against issue 14's 10x target.

    python eval/studies/scale_floor.py [--scratch /tmp/scale] [--size 1000000] [--repeats 5]

Issue 14 asks for BM25 top-10 at >= 10x bm25s's best queries/s on 1,000,000
synthetic documents. On eval/bench_scale.py's corpus and indexes of --size
documents in --scratch (run it first), this times, round-robin in one
process (each round times everything once, so that load from the rest of the
machine falls on every loop alike):
- bm25s with its numba backend on 1 and on 2 threads, end to end as
  bench_scale.py times it; its faster setting sets the budget: 2 threads
  must answer 10x its queries/s, so each query may take (2 / (10 x its
  q/s)) seconds of one thread;
- on one thread, with the queries analysed beforehand (kernel time only,
  which flatters ours), these loops over exactly the postings of the query
  terms, each compiled with numba:
  1. the committed exhaustive top-10 kernel (what `retrieval search` runs);
  2. a bare scatter-add of every posting's impact into one accumulator of
     all documents, nothing selected (no windows: the accumulator, 8 bytes a
     document, leaves the caches that the kernel's windows stay in);
  3. the same, adding the codes themselves (no impact table);
  4. reading every posting's docno, code and impact into four independent
     sums: no accumulator at all, so less than any exact method that reads
     every posting must do in a scalar loop like these;
  5. streaming every posting's docno and code into two integer sums, a loop
     the compiler vectorises: the rate at which one thread of this machine
     fetches a query's postings from memory, the floor of any method that
     reads them all;
  6. for block-max pruning over blocks of B consecutive documents (B = 8,
     16, 32), only the step that every such method starts with: adding each
     query term's block maxima (precomputed, one entry per block that holds
     the term: block number and largest code) into one upper bound per block,
     weighted as the scores are. Nothing is selected or scored after it.
     eval/studies/scale_pruning_bound.py counts what the rest must still fetch;
     row 8 stores the frequent terms' maxima densely instead;
  7. the committed MaxScore kernel given, before it starts, a floor just
     under each query's final 10th score (an oracle no real method has), so
     it skips from the first document all it will ever skip: MaxScore at its
     best. Its top 10 is checked against the exhaustive kernel's;
  8. block-max over blocks of 8 documents, given the same floors
     (eval/studies/blockmax_oracle.py: a byte a block bounds a term's impacts, dense
     for frequent terms; bounds, then exact scoring of the blocks that reach
     the floor), also checked. Blocks of 8 were the fastest of 8, 16 and 32
     when it was written.
Each figure is the median (range) of --repeats rounds, each one pass over
all queries after a warm-up pass, in microseconds a query and nanoseconds a
posting.
eval/studies/scale_pruning_bound.py counts what pruning could skip on the same
corpus. Writes eval/studies/results/scale-floor.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from functools import partial
from pathlib import Path

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # eval/, for its benchmarks
import blockmax_oracle  # noqa: E402
from bench_scale import bm25s_searcher, load_bm25s, read_queries  # noqa: E402
from benchlib import machine_line, publish, round_robin  # noqa: E402

from retrieval.sparse import kernels  # noqa: E402
from retrieval.sparse.kernels import maxscore_top_k  # noqa: E402
from retrieval.sparse.searcher import flat_queries  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "scale-floor.md"
K = 10
TARGET = 10  # issue 14: >= 10x bm25s's best queries/s at k=10
THREADS = 2  # the threads ours may use for that (the machine's cores)
BLOCK_SIZES = (8, 16, 32)  # documents a block, for the block-max rows
ORACLE_SHIFT = 3  # blocks of 8 documents for the whole block-max method: of 8, 16 and 32 the fastest


@njit(nogil=True, cache=True)
def scatter_add(indptr, docnos, codes, table, bases, terms, weights, scores):
    """Add every posting's weighted impact into scores (one slot a document); then zero what was touched."""
    for i in range(len(terms)):
        t, w, base = terms[i], weights[i], bases[terms[i]]
        for p in range(indptr[t], indptr[t + 1]):
            scores[docnos[p]] += w * table[base + codes[p]]
    for i in range(len(terms)):
        for p in range(indptr[terms[i]], indptr[terms[i] + 1]):
            scores[docnos[p]] = 0.0


@njit(nogil=True, cache=True)
def scatter_codes(indptr, docnos, codes, terms, scores):
    """As scatter_add, adding each posting's code (no impact table, no weight)."""
    for i in range(len(terms)):
        t = terms[i]
        for p in range(indptr[t], indptr[t + 1]):
            scores[docnos[p]] += codes[p]
    for i in range(len(terms)):
        for p in range(indptr[terms[i]], indptr[terms[i] + 1]):
            scores[docnos[p]] = 0.0


@njit(nogil=True, cache=True)
def read_only(indptr, docnos, codes, table, bases, terms, weights):
    """Read every posting's docno, code and weighted impact into four independent sums: no accumulator."""
    a = b = c = d = 0.0
    for i in range(len(terms)):
        t, w, base = terms[i], weights[i], bases[terms[i]]
        start, stop = indptr[t], indptr[t + 1]
        p = start
        while p + 4 <= stop:
            a += w * table[base + codes[p]] + docnos[p]
            b += w * table[base + codes[p + 1]] + docnos[p + 1]
            c += w * table[base + codes[p + 2]] + docnos[p + 2]
            d += w * table[base + codes[p + 3]] + docnos[p + 3]
            p += 4
        while p < stop:
            a += w * table[base + codes[p]] + docnos[p]
            p += 1
    return a + b + c + d


@njit(nogil=True, cache=True)
def stream(indptr, docnos, codes, terms):
    """Sum every posting's docno and code (two independent integer sums, vectorised by the compiler)."""
    a = np.int64(0)
    c = np.int64(0)
    for i in range(len(terms)):
        for p in range(indptr[terms[i]], indptr[terms[i] + 1]):
            a += docnos[p]
        for p in range(indptr[terms[i]], indptr[terms[i] + 1]):
            c += codes[p]
    return a + c


@njit(nogil=True, cache=True)
def block_maxima(indptr, docnos, codes, term, size):
    """One term's (block numbers, largest code in each) over blocks of `size` documents: what a block-max
    index would store for it (codes ascend with impacts within a term, so the largest code is the largest
    impact)."""
    start, stop = indptr[term], indptr[term + 1]
    blocks = np.empty(stop - start, np.int32)
    most = np.empty(stop - start, np.uint16)
    n = -1
    for p in range(start, stop):
        block = docnos[p] // size
        if n < 0 or blocks[n] != block:
            n += 1
            blocks[n] = block
            most[n] = codes[p]
        elif codes[p] > most[n]:
            most[n] = codes[p]
    return blocks[:n + 1].copy(), most[:n + 1].copy()


@njit(nogil=True, cache=True)
def block_bounds(entry_ptr, blocks, most, table, bases, slots, terms, weights, bounds):
    """Add each query term's weighted block maxima (term i's are entries [entry_ptr[slots[i]],
    entry_ptr[slots[i] + 1])) into bounds, one per block; then zero what was touched."""
    for i in range(len(terms)):
        w, base = weights[i], bases[terms[i]]
        for e in range(entry_ptr[slots[i]], entry_ptr[slots[i] + 1]):
            bounds[blocks[e]] += w * table[base + most[e]]
    for i in range(len(terms)):
        for e in range(entry_ptr[slots[i]], entry_ptr[slots[i] + 1]):
            bounds[blocks[e]] = 0.0


def block_entries(indptr, docnos, codes, queries: list, size: int) -> tuple:
    """The block maxima of every query term over blocks of `size` documents, as a block-max index would
    store them: (entry_ptr, blocks, most) by slot, and each query's slots."""
    slot_of: dict[int, int] = {}
    parts = []
    for terms, _ in queries:
        for t in terms.tolist():
            if t not in slot_of:
                slot_of[t] = len(parts)
                parts.append(block_maxima(indptr, docnos, codes, t, size))
    entry_ptr = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([len(b) for b, _ in parts], out=entry_ptr[1:])
    slots = [np.array([slot_of[t] for t in terms.tolist()], np.int64) for terms, _ in queries]
    return entry_ptr, np.concatenate([b for b, _ in parts]), np.concatenate([m for _, m in parts]), slots


@njit(nogil=True, cache=True)
def maxscore_oracle(indptr, docnos, codes, table, bases, maxima, query_ptr, terms, weights, floors, num_docs,
                    out_docs, out_scores):
    """The MaxScore kernel on every query, each given its floor in advance."""
    for q in range(len(query_ptr) - 1):
        a, b = query_ptr[q], query_ptr[q + 1]
        maxscore_top_k(indptr, docnos, codes, table, bases, maxima, terms[a:b], weights[a:b], K, num_docs,
                       out_docs[q], out_scores[q], floors[q])


def oracle_floors(searcher, weighted: list) -> tuple[list, np.ndarray]:
    """The exhaustive kernel's top 10 of every query, and floors just under their 10th scores (-inf for a
    query with fewer hits)."""
    exact = searcher.search_many(weighted, K, 1, method="exhaustive")
    return exact, np.array([np.nextafter(scores[-1], -np.inf) if len(scores) == K else -np.inf
                            for _, scores in exact])


def checked(run, exact: list, label: str):
    """run, after checking that one pass gives the exhaustive top 10 of every query."""
    docs, scores = run()
    for q, (want_docs, want_scores) in enumerate(exact):
        if not (np.array_equal(docs[q, :len(want_docs)], want_docs)
                and np.array_equal(scores[q, :len(want_docs)], want_scores)):
            raise SystemExit(f"{label} differs from exhaustive scoring on query {q}")
    return run


def oracle_maxscore(searcher, weighted: list, arrays: tuple, exact: list, floors: np.ndarray):
    """A pass of maxscore_oracle over all queries, each given its floor."""
    query_ptr, terms, weights = flat_queries(weighted)
    docs, scores = np.empty((len(weighted), K), np.int64), np.empty((len(weighted), K))
    maxima = kernels.readonly(np.asarray(searcher.max_impacts))

    def run() -> tuple[np.ndarray, np.ndarray]:
        maxscore_oracle(*arrays, maxima, query_ptr, terms, weights, floors, searcher.index.num_docs, docs,
                        scores)
        return docs, scores
    return checked(run, exact, "the oracle MaxScore")


def loops(searcher, weighted: list, num_docs: int) -> dict[str, object]:
    """The loops of the docstring, each a pass over every query, by row label."""
    index, impacts = searcher.index, searcher.impacts
    indptr, docnos = np.asarray(index.indptr), np.asarray(index.docnos)
    codes, table, bases = np.asarray(impacts.codes), np.asarray(impacts.table), np.asarray(impacts.bases)
    queries = [(np.array([t for t, _ in q], np.int64), np.array([w for _, w in q], np.float64))
               for q in weighted]
    scores = np.zeros(num_docs)
    arrays = tuple(kernels.readonly(a) for a in (indptr, docnos, codes, table, bases))
    exact, floors = oracle_floors(searcher, weighted)
    block_max = blockmax_oracle.prepare(arrays, np.asarray(searcher.max_impacts), weighted, floors, num_docs,
                                        ORACLE_SHIFT, K)
    return {
        "the committed exhaustive top-10 kernel": lambda: searcher.search_many(weighted, K, 1,
                                                                               method="exhaustive"),
        "scatter-add into one accumulator of all documents, nothing selected": lambda: [
            scatter_add(indptr, docnos, codes, table, bases, t, w, scores) for t, w in queries],
        "the same, adding the codes (no impact table)": lambda: [
            scatter_codes(indptr, docnos, codes, t, scores) for t, _ in queries],
        "reading every posting into 4 sums, no accumulator": lambda: [
            read_only(indptr, docnos, codes, table, bases, t, w) for t, w in queries],
        "streaming every posting's docno and code into 2 sums (vectorised)": lambda: [
            stream(indptr, docnos, codes, t) for t, _ in queries]} | {
        f"block-max, blocks of {size} documents: the block upper bounds alone": partial(
            bounds_pass, block_entries(indptr, docnos, codes, queries, size), queries, table, bases,
            np.zeros(-(-num_docs // size))) for size in BLOCK_SIZES} | {
        "MaxScore (committed kernel), the final 10th score given in advance": oracle_maxscore(
            searcher, weighted, arrays, exact, floors),
        f"block-max over blocks of {1 << ORACLE_SHIFT} documents (blockmax_oracle.py), the final 10th score"
        " given in advance": checked(block_max, exact, "the oracle block-max")}


def bounds_pass(entries: tuple, queries: list, table, bases, bounds) -> None:
    """block_bounds for every query."""
    entry_ptr, blocks, most, slots = entries
    for query_slots, (terms, weights) in zip(slots, queries):
        block_bounds(entry_ptr, blocks, most, table, bases, query_slots, terms, weights, bounds)


def main() -> None:
    from retrieval.index.native import Index
    from retrieval.sparse.rankers import BM25

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/scale"))
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    corpus, model_dir = args.scratch / f"synth-{args.size}", args.scratch / f"bm25s-{args.size}"
    if not (args.scratch / f"ours-{args.size}").is_dir() or not model_dir.is_dir():
        raise SystemExit(f"no indexes of {args.size:,} documents in {args.scratch}: run "
                         f"python eval/bench_scale.py --sizes {args.size} --bm25s-backends numba first")
    queries = read_queries(corpus)
    texts = list(queries.values())
    ranker = BM25(Index.open(args.scratch / f"ours-{args.size}", verify=False), k1=0.9, b=0.4, hits=K)
    weighted = [ranker.weighted(ranker.analyse(text)) for text in texts]
    indptr = np.asarray(ranker.searcher.index.indptr)
    postings = sum(int(indptr[t + 1] - indptr[t]) for q in weighted for t, _ in q)
    bm25s = bm25s_searcher(load_bm25s(model_dir, "numba"))
    peers = {f"bm25s numba, {threads} thread(s)": lambda threads=threads: bm25s(texts, K, threads)
             for threads in (1, THREADS)}
    ours = loops(ranker.searcher, weighted, ranker.searcher.index.num_docs)
    seconds = round_robin(peers | ours, args.repeats)
    setting = max(peers, key=lambda name: len(texts) / statistics.median(seconds[name]))
    rate = len(texts) / statistics.median(seconds[setting])
    budget = THREADS / (TARGET * rate)  # seconds of one thread a query may take
    lines = [f"# BM25 at {args.size:,} synthetic documents: what reading the postings costs, against the"
             f" {TARGET}x target", "", machine_line("numpy", "numba", "bm25s"), "",
             f"{len(texts):,} queries, {postings / len(texts):,.0f} postings a query on average, BM25"
             f" k1=0.9 b=0.4, top {K}, {args.repeats} rounds. bm25s's best at k={K}: {rate:,.0f} q/s"
             f" ({setting}, end to end), so {TARGET}x on {THREADS} threads leaves each query"
             f" {budget * 1e6:.0f} µs of one thread, {budget / (postings / len(texts)) * 1e9:.2f} ns a"
             " posting.", "",
             "| one thread, queries analysed beforehand | µs a query, median (range) | ns a posting |"
             " within the budget |", "|---|---:|---:|---|"]
    for label in ours:
        per_query = [t / len(texts) for t in seconds[label]]
        median = statistics.median(per_query)
        lines.append(f"| {label} | {median * 1e6:.0f} ({min(per_query) * 1e6:.0f}-{max(per_query) * 1e6:.0f})"
                     f" | {median / (postings / len(texts)) * 1e9:.2f} |"
                     f" {'yes' if median <= budget else 'no'} |")
    publish(RESULTS, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
