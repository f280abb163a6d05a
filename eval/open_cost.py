"""CPU cost of opening an index and its first query (issue 49: the checks at open must stay cheap).

    python eval/open_cost.py INDEX [INDEX ...]

For each index, the median over 15 rounds of the CPU time (time.process_time: time other
processes hold the cores is not counted) of Index.open (checksums verified), loading the
postings (InvertedIndex and its checks) and the first BM25 query (stored impacts loaded and
checked). Run it with PYTHONPATH at two checkouts to compare them.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH: another checkout given there is measured

from retrieval.index.native import Index  # noqa: E402
from retrieval.registry import build  # noqa: E402


def costs(path: str, rounds: int = 15) -> dict[str, float]:
    """Median CPU milliseconds of each step for the index at `path`."""
    rows: dict[str, list[float]] = {"open": [], "postings": [], "first bm25": []}
    for _ in range(rounds):
        start = time.process_time()
        index = Index.open(path)
        rows["open"].append(time.process_time() - start)
        start = time.process_time()
        index.inverted  # noqa: B018 - loads and checks the postings
        rows["postings"].append(time.process_time() - start)
        start = time.process_time()
        build("bm25", index)({"q": "cell protein"})
        rows["first bm25"].append(time.process_time() - start)
    return {k: 1000 * statistics.median(v) for k, v in rows.items()}


if __name__ == "__main__":
    for given in sys.argv[1:]:
        print(given, " ".join(f"{k} {v:.1f} ms" for k, v in costs(given).items()))
