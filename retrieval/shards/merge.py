"""Merging per-shard top-k lists into one ranking per query.

Every shard returns its top k by (score descending, doc id ascending); the
global top k is contained in their union, and sorting the union by the same
key reproduces the single index's order exactly — it breaks ties by docno,
and docnos follow doc id order. Sparse shards also return their local
docnos: documents are dealt round-robin in doc id order, so docno * shards +
shard is the document's doc id rank, an integer that sorts much faster.
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


def merge_one(parts: dict[int, Hits], k: int, shard_count: int) -> Merged:
    """The top k of one query over the shards' lists {shard number: (ids, scores[, docnos])}."""
    numbers = sorted(parts)
    if not numbers:
        return Merged(np.zeros(0, dtype=str), np.zeros(0), np.zeros(0, dtype=np.int32))
    ids = np.concatenate([parts[n][0] for n in numbers])
    scores = np.concatenate([parts[n][1] for n in numbers])
    shards = np.concatenate([np.full(len(parts[n][0]), n, dtype=np.int32) for n in numbers])
    if all(len(parts[n]) == 3 for n in numbers):  # local docnos: doc id order as integers
        ranks = np.concatenate([parts[n][2].astype(np.int64) * shard_count + n for n in numbers])
        order = order_by_score(scores, ranks)[:k]
    else:
        order = np.lexsort((ids, -scores))[:k]
    return Merged(ids[order], scores[order], shards[order])


def order_by_score(scores: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Positions ordering scores descending, ties by (unique, non-negative) rank ascending.

    One argsort of int64 keys packing each score's high bits with its rank;
    redone with lexsort when that could be wrong: negative scores, or two
    different scores sharing their high bits.
    """
    if not len(scores) or np.signbit(scores).any():
        return np.lexsort((ranks, -scores))
    shift = max(1, int(ranks.max()).bit_length())
    keys = packed_keys(scores, ranks, shift)
    order = np.argsort(keys)
    if dropped_bits_matter(keys[order], scores[order], shift):
        return np.lexsort((ranks, -scores))
    return order


def merge(results: dict[int, list[Hits]], queries: int, k: int, shard_count: int) -> list[Merged]:
    """Merge each query's lists from every shard that answered ({shard: one Hits per query})."""
    return [merge_one({n: hits[q] for n, hits in results.items()}, k, shard_count) for q in range(queries)]


def packed_keys(scores: np.ndarray, ties: np.ndarray, shift: int) -> np.ndarray:
    """int64 keys that sort non-negative `scores` descending, then `ties` (< 2**shift) ascending.

    A key is the score's bit pattern (which sorts like the value for non-negative
    floats) without its low `shift` bits, inverted, followed by the tie-breaker;
    built in place, since big fresh arrays are slow. See dropped_bits_matter.
    """
    keys = scores.view(np.int64) >> shift
    np.subtract(np.int64((1 << (63 - shift)) - 1), keys, out=keys)
    np.left_shift(keys, shift, out=keys)
    np.bitwise_or(keys, ties, out=keys)
    return keys


def dropped_bits_matter(sorted_keys: np.ndarray, sorted_scores: np.ndarray, shift: int) -> np.ndarray:
    """Along the last axis: whether neighbours in key order share their kept bits but not their score
    (then the order packed_keys gave may be wrong, and the caller redoes it exactly)."""
    high = sorted_keys >> shift
    return np.any((high[..., 1:] == high[..., :-1]) & (sorted_scores[..., 1:] != sorted_scores[..., :-1]),
                  axis=-1)
