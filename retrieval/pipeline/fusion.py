"""Combining Runs: reciprocal-rank fusion, normalised linear interpolation, weighted sums.

Pure functions work on Runs (`rrf`, `interpolate`) or on one query's rankings
(`interpolate_ranking`, `with_tail`); the stage classes (`RRF`, `Interpolate`,
`WeightedSum`) compose stages, e.g. `Interpolate(bm25, dense, weight=0.3)(queries)`,
and `Rescore(stage, depth)` rescores a given run's top `depth`, the rest after.
A document missing from one run contributes nothing from that run (RRF) or
that run's normalised minimum, 0 (interpolation). Ties are broken by doc id
like every Run. Min-max normalisation is written once, in `minmax_scores`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from retrieval.errors import InputError
from retrieval.pipeline import params
from retrieval.pipeline.stage import Stage
from retrieval.types import Queries, Ranking, Run, rank

RRF_K = 60


def _cut(run: Run, k: int | None) -> Run:
    return run.cut(k) if k else run


def rrf(runs: Sequence[Run], rrf_k: int = RRF_K, depth: int | None = None) -> Run:
    """Reciprocal-rank fusion: score(d) = sum over runs of 1 / (rrf_k + rank of d), rank from 1.

    `depth` limits each input run to its top hits before fusing; queries in
    any run appear in the result.
    """
    if not runs:
        raise InputError("rrf needs at least one run")
    fused: dict[str, dict[str, float]] = {}
    for run in runs:
        for qid, hits in _cut(run, depth).items():
            scores = fused.setdefault(qid, {})
            for position, (doc, _) in enumerate(hits, start=1):
                scores[doc] = scores.get(doc, 0.0) + 1.0 / (rrf_k + position)
    return Run({q: s.items() for q, s in fused.items()})


def minmax_scores(scores: Sequence[float]) -> list[float]:
    """Scores scaled to [0, 1]: (s - min) / (max - min), all 1.0 when every score is equal.

    Plain float64 arithmetic, element by element, so the result is the same
    float as numpy's `(x - x.min()) / (x.max() - x.min())` on a float64 array.
    """
    if not scores:
        return []
    low, high = min(scores), max(scores)
    span = high - low
    return [(s - low) / span if span > 0 else 1.0 for s in scores]


def minmax(hits: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Scores of one ranking scaled to [0, 1] (all 1.0 when every score is equal)."""
    return dict(zip((d for d, _ in hits), minmax_scores([s for _, s in hits])))


def with_tail(head: Ranking, hits: Sequence[tuple[str, float]]) -> Ranking:
    """`head` (a reranking of the top of `hits`), then the rest of `hits` in their order.

    The rest score below `head`'s lowest score: the i-th of them (from 1) gets that score minus i,
    which keeps their order exactly as the first stage ranked them (ties included). How every
    reranker keeps what the first stage knew below its depth: a cascade's result is never shorter
    than its first stage's.
    """
    seen = {d for d, _ in head}
    tail = [d for d, _ in hits if d not in seen]
    if not tail:
        return list(head)
    floor = min((s for _, s in head), default=0.0)
    return [*head, *((d, floor - i) for i, d in enumerate(tail, 1))]


def interpolate_ranking(first: Ranking, second: Ranking, weight: float) -> Ranking:
    """weight * minmax(first) + (1 - weight) * minmax(second) over the documents of `first`.

    A document of `first` missing from `second` gets `second`'s lowest score
    before normalisation. (The late-interaction reranker's fusion of a first
    stage with MaxSim.)
    """
    if not 0.0 <= weight <= 1.0:
        raise InputError(f"interpolation weight must be in [0, 1], got {weight}")
    second_scores = dict(second)
    floor = min(second_scores.values(), default=0.0)
    docs = [d for d, _ in first]
    a = minmax_scores([float(s) for _, s in first])
    b = minmax_scores([float(second_scores.get(d, floor)) for d in docs])
    return rank(zip(docs, (weight * x + (1 - weight) * y for x, y in zip(a, b))))


def rrf_ranking(first: Ranking, second: Ranking, rrf_k: int = RRF_K) -> Ranking:
    """1 / (rrf_k + rank in first) + 1 / (rrf_k + rank in second) over the documents of `first`, ranks
    from 1 in each ranking's score order (ties in its given order). A document of `first` missing from
    `second` ranks just below all of `second`. (The late-interaction reranker's reciprocal-rank fusion.)
    """
    if rrf_k < 1:
        raise InputError(f"rrf_k must be a whole number >= 1, got {rrf_k}")
    ranks = [{d: r for r, (d, _) in enumerate(rank(hits), 1)} for hits in (first, second)]
    below = len(ranks[1]) + 1
    docs = [d for d, _ in first]
    return rank(zip(docs, (1.0 / (rrf_k + ranks[0][d]) + 1.0 / (rrf_k + ranks[1].get(d, below))
                           for d in docs)))


def interpolate(run_a: Run, run_b: Run, weight: float = 0.5, depth: int | None = None) -> Run:
    """weight * minmax(a) + (1 - weight) * minmax(b) per query, over the union of hits."""
    if not 0.0 <= weight <= 1.0:
        raise InputError(f"interpolation weight must be in [0, 1], got {weight}")
    run_a, run_b = _cut(run_a, depth), _cut(run_b, depth)
    out = {}
    for qid in list(run_a) + [q for q in run_b if q not in run_a]:
        a = minmax(run_a.get(qid, []))
        b = minmax(run_b.get(qid, []))
        out[qid] = [(d, weight * a.get(d, 0.0) + (1.0 - weight) * b.get(d, 0.0))
                    for d in a.keys() | b.keys()]
    return Run(out)


class RRF(Stage):
    """A stage fusing the Runs of several stages by reciprocal rank."""

    fused = True  # a fused first stage: a late reranker after it takes the hybrid defaults

    def __init__(self, *stages: Stage, rrf_k: int = RRF_K, depth: int | None = None,
                 hits: int | None = None):
        if len(stages) < 2:
            raise InputError("RRF fuses at least two stages")
        self.stages, self.rrf_k, self.depth, self.hits = stages, rrf_k, depth, hits

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        """Run every stage on the queries and fuse their Runs."""
        fused = rrf([stage(queries, run) for stage in self.stages], self.rrf_k, self.depth)
        return _cut(fused, self.hits)


class Interpolate(Stage):
    """A stage: weight * normalised first + (1 - weight) * normalised second."""

    fused = True  # a fused first stage: a late reranker after it takes the hybrid defaults

    def __init__(self, first: Stage, second: Stage, weight: float = 0.5,
                 depth: int | None = None, hits: int | None = None):
        if not 0.0 <= weight <= 1.0:
            raise InputError(f"interpolation weight must be in [0, 1], got {weight}")
        self.first, self.second = first, second
        self.weight, self.depth, self.hits = weight, depth, hits

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        """Run both stages on the queries and interpolate their normalised scores."""
        fused = interpolate(self.first(queries, run), self.second(queries, run),
                            self.weight, self.depth)
        return _cut(fused, self.hits)


class WeightedSum(Stage):
    """A stage: score = sum_i weights[i] * score_i over the union of every stage's top `depth`.

    Per query, the candidates are the union of each stage's top `depth` hits;
    every stage then rescores every candidate (`stage(queries, union)`, so each
    stage must rescore a given run, as the sparse rankers and DenseRetriever do)
    and the scores are summed with the weights, unnormalised. A candidate a
    stage leaves out of its rescored run counts 0 from that stage. `hits` cuts
    the result. E.g. `WeightedSum(dense, bm25, weights=(1.0, 0.05))` is
    cos + 0.05 * BM25.
    """

    def __init__(self, *stages: Stage, weights: Sequence[float], depth: int = 20,
                 hits: int | None = None):
        if not stages:
            raise InputError("a weighted sum needs at least one stage")
        if len(weights) != len(stages):
            raise InputError(f"a weighted sum needs one weight per stage: {len(stages)} stages,"
                             f" {len(weights)} weights")
        params.check(depth=depth, hits=hits)
        if not all(isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w)
                   for w in weights):
            raise InputError(f"weights must be finite numbers, got {tuple(weights)!r}")
        self.stages, self.weights = stages, tuple(weights)
        self.depth, self.hits = depth, hits

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        """Search with every stage, rescore the union with every stage, and sum the weighted scores."""
        tops = [stage(queries, run).cut(self.depth) for stage in self.stages]
        union = Run({q: [(d, 0.0) for d in dict.fromkeys(d for top in tops for d, _ in top.get(q, []))]
                     for q in queries})
        rescored = [stage(queries, union) for stage in self.stages]
        out = {}
        for q in queries:
            scores = [dict(r.get(q, [])) for r in rescored]
            fused = []
            for d, _ in union[q]:
                total = 0.0
                for weight, score in zip(self.weights, scores):
                    total += weight * score.get(d, 0.0)
                fused.append((d, total))
            out[q] = fused
        return _cut(Run(out), self.hits)


class Rescore(Stage):
    """A stage rescoring only the top `depth` hits of the run it is given, the rest kept after them.

    Given a run, `stage` rescores each query's top `depth` (`stage(queries, run.cut(depth))`) and the
    hits below follow in their order (`with_tail`), so the result is as long as the run: e.g.
    `bm25 >> Rescore(qld, depth=100)` is query likelihood over BM25's top 100, then BM25's 101st to
    1000th. Without a run, the stage searches as it would alone.
    """

    def __init__(self, stage: Stage, depth: int):
        params.check(depth=depth)
        if depth is None:
            raise InputError("Rescore needs a depth")
        self.stage, self.depth = stage, depth

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        if run is None:
            return self.stage(queries)
        params.check_run(run, queries)
        top = self.stage(queries, run.cut(self.depth))
        return Run({q: with_tail(top.get(q, []), hits) for q, hits in run.items()})


def tune_weight(run_a: Run, run_b: Run, qrels: dict[str, dict[str, int]],
                measure: str = "nDCG@10", grid: Sequence[float] | None = None,
                depth: int | None = None) -> tuple[float, dict[float, float]]:
    """The interpolation weight maximising `measure` on (training!) qrels, and every score.

    Ties go to the smaller weight, so the choice is deterministic.
    """
    import ir_measures

    parsed = ir_measures.parse_measure(measure)
    grid = grid if grid is not None else [round(i / 20, 2) for i in range(21)]
    scores = {w: ir_measures.calc_aggregate([parsed], qrels,
                                            interpolate(run_a, run_b, w, depth).scores())[parsed]
              for w in grid}
    best = max(grid, key=lambda w: (scores[w], -w))
    return best, scores
