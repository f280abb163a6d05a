"""Merging per-shard top-k lists into one ranking per query.

Every shard returns its top k by (score descending, doc id ascending); the
global top k is contained in their union, and sorting the union by the same
key reproduces the single index's order exactly — it breaks ties by docno,
and docnos follow doc id order.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from retrieval.shards.shard import Hits


class Merged(NamedTuple):
    """One query's merged ranking: doc ids, scores, and the shard number of each hit."""

    ids: np.ndarray
    scores: np.ndarray
    shards: np.ndarray


def merge_one(parts: dict[int, Hits], k: int) -> Merged:
    """The top k of one query over the shards' lists {shard number: (ids, scores)}."""
    numbers = sorted(parts)
    if not numbers:
        return Merged(np.zeros(0, dtype=str), np.zeros(0), np.zeros(0, dtype=np.int32))
    ids = np.concatenate([parts[n][0] for n in numbers])
    scores = np.concatenate([parts[n][1] for n in numbers])
    shards = np.concatenate([np.full(len(parts[n][0]), n, dtype=np.int32) for n in numbers])
    order = np.lexsort((ids, -scores))[:k]
    return Merged(ids[order], scores[order], shards[order])


def merge(results: dict[int, list[Hits]], queries: int, k: int) -> list[Merged]:
    """Merge each query's lists from every shard that answered ({shard: one Hits per query})."""
    return [merge_one({n: hits[q] for n, hits in results.items()}, k) for q in range(queries)]
