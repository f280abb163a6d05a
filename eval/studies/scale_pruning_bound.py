"""How much of BM25 top-k scoring an exact pruning method could skip on a synthetic corpus, at best.

    python eval/studies/scale_pruning_bound.py [--scratch /tmp/scale] [--size 1000000] [--sample 300]

Counts, not timings: for each query of eval/bench_scale.py's corpus of
--size documents (its index in --scratch; run bench_scale.py first), the
exact top-10 is computed, and its 10th score is handed to each method as if
known in advance (an oracle no real method has). Then:
- MaxScore: the share of postings in the essential lists (those whose term
  bounds, summed from the lowest, exceed the threshold), and the documents in
  them whose score could still reach it (partial score + the other lists'
  bounds), which MaxScore must probe in the other lists;
- block-max over blocks of B consecutive documents: the blocks whose summed
  per-term block maxima exceed the threshold and the postings in them, and
  how many block maxima a query must read per posting to know that; and in
  bytes, what memory must deliver: the 64-byte lines of docnos and codes
  that hold a posting in those blocks (a line is fetched whole, so a skip
  saves memory traffic only where a whole line is skipped), and the block
  maxima at a byte each, per term in the cheaper of a dense layout (a byte
  for every block) and a sparse one (a byte for each block holding the term,
  its block number not counted), as shares of the bytes of all the queries'
  postings, which exhaustive scoring streams;
- the threshold that the two highest-bound terms alone give (an estimate a
  real method could start from), as a share of the final one.
The words of the synthetic documents are drawn independently, so no
document order makes block maxima tight. Writes eval/studies/results/pruning-bound.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # eval/, for its benchmarks
from bench_scale import read_queries  # noqa: E402
from benchlib import machine_line, publish  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "pruning-bound.md"
K = 10
BLOCKS = (8, 16, 32, 128, 512)
LINE = 64  # bytes a cache line: the unit memory is fetched in


def postings(searcher, term: int, weight: float) -> tuple[np.ndarray, np.ndarray]:
    """(docnos, weighted impacts) of a term's postings."""
    indptr = searcher.index.indptr
    start, stop = int(indptr[term]), int(indptr[term + 1])
    return np.asarray(searcher.index.docnos[start:stop]), weight * searcher.impacts.values(term, start, stop)


def maxscore_counts(searcher, query, threshold: float, bounds: np.ndarray) -> tuple[int, int, int]:
    """(postings, postings in essential lists, documents in them that must be probed)."""
    order = np.argsort(bounds, kind="stable")
    non_essential = int((np.cumsum(bounds[order]) <= threshold).sum())
    lengths = np.array([len(postings(searcher, t, w)[0]) for t, w in query])
    partial = np.zeros(searcher.index.num_docs)
    for i in order[non_essential:]:
        docs, values = postings(searcher, *query[i])
        partial[docs] += values
    rest = bounds[order[:non_essential]].sum()
    essential = lengths[order[non_essential:]].sum()
    return int(lengths.sum()), int(essential), int(((partial > 0) & (partial + rest > threshold)).sum())


def line_count(positions: np.ndarray, width: int) -> int:
    """How many 64-byte lines of an array of `width`-byte items hold the items at these positions."""
    return len(np.unique(positions * width // LINE))


def posting_bytes(first: int, positions: np.ndarray) -> int:
    """Bytes of the 64-byte lines of docnos (4 bytes each) and codes (2) holding these postings of a term
    whose postings start at `first` (absolute positions, as in the index files)."""
    absolute = first + positions
    return LINE * (line_count(absolute, 4) + line_count(absolute, 2))


def block_counts(searcher, query, threshold: float, size: int) -> tuple[float, ...]:
    """(share of blocks above the threshold, share of postings in them, block maxima read per posting,
    bytes of all the query's postings, bytes of the lines that hold those above the threshold, bytes of
    the block maxima at one byte each in the cheaper per term of a dense layout (every block) and a
    sparse one (blocks holding the term; their block numbers not counted))."""
    blocks = -(-searcher.index.num_docs // size)
    upper = np.zeros(blocks)
    lists = [postings(searcher, t, w) for t, w in query]
    for docs, values in lists:
        most = np.zeros(blocks)
        np.maximum.at(most, docs // size, values)
        upper += most
    live = upper > threshold
    total = sum(len(docs) for docs, _ in lists)
    kept = sum(int(live[docs // size].sum()) for docs, _ in lists)
    held = [len(np.unique(docs // size)) for docs, _ in lists]
    indptr = searcher.index.indptr
    firsts = [int(indptr[t]) for t, _ in query]
    everything = sum(posting_bytes(f, np.arange(len(docs))) for f, (docs, _) in zip(firsts, lists))
    fetched = sum(posting_bytes(f, np.flatnonzero(live[docs // size])) for f, (docs, _) in zip(firsts, lists))
    maxima = sum(min(blocks, h) for h in held)
    return live.mean(), kept / total, sum(held) / total, everything, fetched, maxima


def main() -> None:
    from retrieval.index.native import Index
    from retrieval.sparse.rankers import BM25

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/scale"))
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--sample", type=int, default=300, help="queries for the per-document counts")
    args = ap.parse_args()
    queries = read_queries(args.scratch / f"synth-{args.size}")
    ranker = BM25(Index.open(args.scratch / f"ours-{args.size}", verify=False), k1=0.9, b=0.4, hits=K)
    weighted = [ranker.weighted(ranker.analyse(text)) for text in queries.values()]
    searcher = ranker.searcher
    tops = searcher.search_many(weighted, K)
    maxima = searcher.max_impacts
    rows, blocks, estimate = [], {size: [] for size in BLOCKS}, []
    for query, (_, scores) in list(zip(weighted, tops))[:args.sample]:
        if len(scores) < K:
            continue
        bounds = np.array([w * maxima[t] for t, w in query])
        rows.append(maxscore_counts(searcher, query, scores[-1], bounds))
        for size in BLOCKS:
            blocks[size].append(block_counts(searcher, query, scores[-1], size))
        top_two = np.zeros(searcher.index.num_docs)
        for i in np.argsort(bounds, kind="stable")[-2:]:
            docs, values = postings(searcher, *query[i])
            top_two[docs] += values
        estimate.append(np.partition(top_two, -K)[-K] / scores[-1])
    counted = np.array(rows, dtype=float)
    essential, probes = counted[:, 1].sum() / counted[:, 0].sum(), counted[:, 2]
    lines = [f"# Exact pruning on {args.size:,} synthetic documents: what an oracle threshold leaves",
             "", machine_line("numpy"), "",
             f"{len(counted)} queries with {K} hits (the first {args.sample} of {len(queries)}), BM25 k1=0.9"
             f" b=0.4, top {K}; the final {K}th score is given to every method in advance.", "",
             "| quantity (per query) | value |", "|---|---:|",
             f"| postings of the query terms, mean | {counted[:, 0].mean():,.0f} |",
             f"| MaxScore: postings in the essential lists | {essential:.1%} |",
             f"| MaxScore: documents to probe in the other lists, mean (median) | {probes.mean():,.0f}"
             f" ({np.median(probes):,.0f}) |"]
    for size in BLOCKS:
        live, kept, read = np.array(blocks[size])[:, :3].mean(axis=0)
        everything, fetched, maxima = np.array(blocks[size])[:, 3:].sum(axis=0)
        lines.append(f"| block-max, blocks of {size}: blocks above the threshold / postings in them /"
                     f" block maxima read per posting | {live:.1%} / {kept:.1%} / {read:.2f} |")
        lines.append(f"| block-max, blocks of {size}: bytes to fetch, as a share of those exhaustive scoring"
                     f" streams (all queries): lines holding the postings above / block maxima at a byte each"
                     f" / both | {fetched / everything:.1%} / {maxima / everything:.1%} /"
                     f" {(fetched + maxima) / everything:.1%} |")
    lines.append(f"| threshold from the two highest-bound terms, share of the final one, median |"
                 f" {np.median(estimate):.2f} |")
    publish(RESULTS, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
