"""The sets a filter selects: our numpy allow mask against pyroaring's compressed bitmaps.

    python eval/bench_filter_sets.py [--docs 1000000] [--rounds 15]

Issue 56 asked to consider compressed bitmaps (pyroaring) for the sets a filter selects. This
times, at --docs documents with bench_filters.py's synthetic metadata (seed 56: year 1970-2019,
category of 20, tags), for its three filters (passing about 50%, 5% and 0.1%):

- ours: compiling the filter from the metadata columns (index/filters.py `evaluate`) into the
  bool mask, by docno, that the kernels test;
- roaring: the same filter as set algebra over one bitmap per metadata value (an inverted
  index of the metadata, built beforehand and not timed), then what the kernels need from it:
  the mask (`to mask`), or, for the selective path, the passing docnos (`to docnos`), which
  the mask gives by np.flatnonzero;
- the bytes each form takes (the mask; the bitmap serialised).

Times are medians of --rounds round-robin rounds (benchlib.round_robin), one thread. Both forms
are checked to select the same documents. Writes eval/results/filter_sets.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
from bench_filters import FILTERS, metadata
from benchlib import machine_line, publish, round_robin

from retrieval.index.filters import evaluate, metadata_columns, parse_filter

RESULTS = Path(__file__).parent / "results" / "filter_sets.md"


def value_bitmaps(meta: list[dict]) -> dict[tuple[str, object], object]:
    """One roaring bitmap per (field, value): the documents holding that value."""
    from pyroaring import BitMap

    docs: dict[tuple[str, object], list[int]] = {}
    for d, m in enumerate(meta):
        for key, value in m.items():
            for v in value if isinstance(value, list) else [value]:
                docs.setdefault((key, v), []).append(d)
    return {key: BitMap(np.asarray(ds, dtype=np.uint32)) for key, ds in docs.items()}


def roaring_filter(name: str, bitmaps: dict, n: int) -> object:
    """bench_filters.FILTERS as set algebra over the value bitmaps."""
    from pyroaring import BitMap

    if name == "50%":  # year >= 1995
        return BitMap.union(*(bitmaps[("year", y)] for y in range(1995, 2020)))
    if name == "5%":  # category = "c07"
        return bitmaps[("category", "c07")]
    return bitmaps[("year", 1990)] & bitmaps[("category", "c03")]  # year = 1990 and category = "c03"


def to_mask(bitmap: object, n: int) -> np.ndarray:
    """The uint8 allow mask (by docno) of a bitmap: what the kernels test."""
    mask = np.zeros(n, dtype=np.uint8)
    mask[np.asarray(bitmap.to_array(), dtype=np.int64)] = 1
    return mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    try:
        import pyroaring  # noqa: F401
    except ImportError:
        sys.exit("bench_filter_sets: needs pyroaring (pip install pyroaring)")
    n = args.docs
    meta = metadata(n)
    ids = [f"d{i:08d}" for i in range(n)]
    columns = metadata_columns(ids, zip(ids, meta), {d: i for i, d in enumerate(ids)})
    bitmaps = value_bitmaps(meta)
    fns = {}
    for name, expression in FILTERS.items():
        tree = parse_filter(expression)
        fns[f"{name}/ours"] = lambda t=tree: evaluate(t, columns, n).astype(np.uint8)
        fns[f"{name}/ours docnos"] = lambda t=tree: np.flatnonzero(evaluate(t, columns, n))
        fns[f"{name}/roaring"] = lambda f=name: roaring_filter(f, bitmaps, n)
        fns[f"{name}/roaring to mask"] = lambda f=name: to_mask(roaring_filter(f, bitmaps, n), n)
        fns[f"{name}/roaring to docnos"] = lambda f=name: np.asarray(roaring_filter(f, bitmaps, n).to_array())
    times = {k: statistics.median(v) * 1000 for k, v in round_robin(fns, args.rounds).items()}
    rows = ["| filter | passing | ours: mask ms | ours: docnos ms | roaring: set ms | roaring: to mask ms"
            " | roaring: to docnos ms | mask bytes | roaring bytes |", "|---" * 9 + "|"]
    for name, expression in FILTERS.items():
        mask = fns[f"{name}/ours"]()
        bitmap = roaring_filter(name, bitmaps, n)
        assert np.array_equal(np.flatnonzero(mask), np.asarray(bitmap.to_array())), name
        t = {k.split("/", 1)[1]: v for k, v in times.items() if k.startswith(f"{name}/")}
        rows.append(f"| `{expression}` | {len(bitmap):,} | {t['ours']:.2f} | {t['ours docnos']:.2f}"
                    f" | {t['roaring']:.3f} | {t['roaring to mask']:.2f} | {t['roaring to docnos']:.2f}"
                    f" | {mask.nbytes:,} | {len(bitmap.serialize()):,} |")
    index_bytes = sum(len(b.serialize()) for b in bitmaps.values())
    out = (f"# The sets a filter selects at {n:,} documents: numpy mask against roaring bitmaps\n\n"
           f"Machine: {machine_line('numpy', 'pyroaring')}.\n\n"
           "Synthetic metadata as eval/bench_filters.py (seed 56). Medians of"
           f" {args.rounds} round-robin rounds, one thread, milliseconds. Ours compiles the filter from the"
           " metadata columns; roaring combines one bitmap per metadata value (built beforehand, not"
           f" timed: {len(bitmaps):,} bitmaps, {index_bytes:,} bytes serialised), then converts to what the"
           " kernels read (the mask, or the passing docnos for the selective path). Both select the same"
           " documents (checked).\n\n" + "\n".join(rows) + "\n")
    publish(RESULTS, out)


if __name__ == "__main__":
    main()
