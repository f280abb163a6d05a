"""Coordinate ascent (Metzler and Croft, 2007; RankLib's `-ranker 4`): a linear ranker whose weights
directly optimise a list measure (nDCG@10 or MAP) of the training queries.

    weights = coordinate_ascent(lists, "nDCG@10", restarts=3)

One weight at a time, every feature in a (seeded) random order per pass: steps
of growing size (`STEP` times 2^k, k < `STEPS`) in both directions are tried
and the best kept if it raises the training measure; the weights are then
scaled to unit L1 norm (a ranking does not change under positive scaling). A
pass that gains less than `TOLERANCE` ends a restart. The first restart starts
from the first stage alone (all weight on `first_score` when it is a feature,
so training can only improve on the first stage's training figure), the next
from uniform weights, the rest from seeded random ones; the best restart wins.
Features constant within every query (the query features) cannot change a
ranking and keep weight 0. numpy only, deterministic for a seed.

The measures are computed as trec_eval does on the candidates: nDCG@10 with
linear gains over the ideal of all the query's judgements (given as `ideal`),
AP over its number of relevant documents; rows of a query that tie keep their
order (doc id order, as the reranked run breaks ties).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from retrieval.errors import InputError

MEASURES = ("nDCG@10", "MAP")
STEP = 0.01
STEPS = 12
TOLERANCE = 1e-4
MAX_PASSES = 20


@dataclass
class Lists:
    """Training queries padded to one array: features (queries, rows, features), grades (queries,
    rows; -1 padding), each query's ideal DCG@10 and number of relevant documents over its judgements."""

    x: np.ndarray
    grades: np.ndarray
    ideal_dcg: np.ndarray
    relevant: np.ndarray

    @classmethod
    def build(cls, x: np.ndarray, y: np.ndarray, groups: Sequence[int],
              judged: Sequence[Sequence[int]]) -> Lists:
        """From design() rows (X, grades, group sizes) and each query's judged grades (all of them)."""
        width, n = max(groups, default=0), len(groups)
        xs = np.zeros((n, width, x.shape[1]))
        grades = np.full((n, width), -1.0)
        start = 0
        for i, size in enumerate(groups):
            xs[i, :size] = x[start:start + size]
            grades[i, :size] = y[start:start + size]
            start += size
        disc = 1.0 / np.log2(np.arange(2, 12))
        ideal = np.array([float(np.sum(np.sort(np.maximum(g, 0))[::-1][:10] * disc[:len(g[:10])]))
                          for g in (np.asarray(j, dtype=np.float64) for j in judged)])
        relevant = np.array([float(np.sum(np.asarray(j) > 0)) for j in judged])
        return cls(xs, grades, ideal, relevant)

    def measure(self, scores: np.ndarray, which: str) -> float:
        """The mean measure over the queries of these (queries, rows) scores (padding never ranks)."""
        scores = np.where(self.grades < 0, -np.inf, scores)
        if which == "nDCG@10" and scores.shape[1] > 10:
            order = _top_order(scores, 10)
        else:
            order = np.argsort(-scores, axis=1, kind="stable")
        ranked = np.take_along_axis(self.grades, order, axis=1)
        gains = np.maximum(ranked, 0.0)
        if which == "nDCG@10":
            top = gains[:, :10]
            dcg = (top / np.log2(np.arange(2, top.shape[1] + 2))).sum(axis=1)
            values = np.divide(dcg, self.ideal_dcg, out=np.zeros_like(dcg), where=self.ideal_dcg > 0)
        else:
            hit = (gains > 0).astype(np.float64)
            precision = np.cumsum(hit, axis=1) / np.arange(1, hit.shape[1] + 1)
            values = np.divide((precision * hit).sum(axis=1), self.relevant,
                               out=np.zeros(len(hit)), where=self.relevant > 0)
        return float(values.mean()) if len(values) else 0.0


def _top_order(scores: np.ndarray, k: int) -> np.ndarray:
    """Each row's first `k` positions of the stable descending order (ties by position), without
    sorting the whole row: the k-th highest value found by partition, the rows above it and the first
    of those equal to it kept, then those k sorted stably."""
    kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1:k]
    above = scores > kth
    equal = scores == kth
    need = k - above.sum(axis=1, keepdims=True)
    keep = above | equal
    crowded = np.flatnonzero(equal.sum(axis=1) > need[:, 0])  # more ties at the k-th than places
    if len(crowded):
        ties = equal[crowded]
        keep[crowded] = above[crowded] | (ties & (np.cumsum(ties, axis=1) <= need[crowded]))
    rows = np.nonzero(keep)[1].reshape(len(scores), k)  # row order is position order
    inner = np.argsort(-np.take_along_axis(scores, rows, axis=1), axis=1, kind="stable")
    return np.take_along_axis(rows, inner, axis=1)


def _starts(names: Sequence[str], movable: np.ndarray, restarts: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    starts = []
    if "first_score" in names:
        w = np.zeros(len(names))
        w[list(names).index("first_score")] = 1.0
        starts.append(w)
    starts.append(movable / max(movable.sum(), 1.0))
    while len(starts) < restarts:
        w = rng.random(len(names)) * movable
        starts.append(w / max(w.sum(), 1e-12))
    return starts[:max(restarts, 1)]


def _ascend(lists: Lists, w: np.ndarray, movable: np.ndarray, which: str,
            rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """One restart: passes of one-weight line searches until a pass gains less than TOLERANCE."""
    scores = lists.x @ w
    best = lists.measure(scores, which)
    steps = STEP * 2.0 ** np.arange(STEPS)
    for _ in range(MAX_PASSES):
        start = best
        for j in rng.permutation(np.flatnonzero(movable)):
            column = lists.x[:, :, j]
            chosen = 0.0
            for delta in np.concatenate([steps, -steps]):
                value = lists.measure(scores + delta * column, which)
                if value > best + 1e-12:
                    best, chosen = value, float(delta)
            if chosen:
                w[j] += chosen
                scores = scores + chosen * column
                norm = np.abs(w).sum()
                if norm > 0:
                    w, scores = w / norm, scores / norm
        if best - start < TOLERANCE:
            break
    return w, best


def coordinate_ascent(lists: Lists, names: Sequence[str], which: str = "nDCG@10", restarts: int = 3,
                      seed: int = 0) -> tuple[np.ndarray, float]:
    """(weights, training measure) of the best restart; see the module docstring."""
    if which not in MEASURES:
        raise InputError(f"coordinate ascent optimises one of {', '.join(MEASURES)}, not {which!r}")
    if not len(lists.x):
        raise InputError("no judged query in the training features; wrong qrels for them?")
    pad = lists.grades[:, :, None] < 0
    spread = np.where(pad, -np.inf, lists.x).max(axis=1) - np.where(pad, np.inf, lists.x).min(axis=1)
    movable = (spread > 0).any(axis=0).astype(np.float64)
    rng = np.random.default_rng(seed)
    best: tuple[np.ndarray, float] | None = None
    for start in _starts(names, movable, restarts, seed):
        w, value = _ascend(lists, start.copy(), movable, which, rng)
        if best is None or value > best[1]:
            best = (w, value)
    return best
