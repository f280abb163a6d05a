"""Composing stages into pipelines, PyTerrier style.

    pipe(bm25) % 100 >> qld        # BM25 top 100, rescored by query likelihood
    (pipe(bm25) >> rm3) % 10       # any stage, then keep the top 10

`pipe(stage)` wraps any stage (an object with `__call__(queries, run=None) ->
Run`); `a >> b` runs `a` then gives its Run to `b`; `p % k` cuts every
ranking to its top k. A Pipeline is itself a stage, so pipelines nest and can
be handed to anything that takes a stage (fusion, experiments, rerankers).
"""

from __future__ import annotations

from retrieval.errors import InputError
from retrieval.types import Queries, Run, Stage


class Cut:
    """A stage that keeps the top `k` hits of every query of the run it is given."""

    def __init__(self, k: int):
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise InputError(f"rank cut-off must be a positive integer, got {k!r}")
        self.k = k

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        if run is None:
            raise InputError("a rank cut-off needs a run to cut; put it after a first stage")
        return run.cut(self.k)

    def __repr__(self) -> str:
        return f"Cut({self.k})"


class Pipeline:
    """Stages applied in order, each given the previous stage's Run (the first gets `run`)."""

    def __init__(self, *stages: Stage):
        if not stages:
            raise InputError("a pipeline needs at least one stage")
        flat: list[Stage] = []
        for stage in stages:
            flat.extend(stage.stages if isinstance(stage, Pipeline) else [stage])
        self.stages: tuple[Stage, ...] = tuple(flat)

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        for stage in self.stages:
            run = stage(queries, run)
        return run

    def __rshift__(self, other: Stage) -> Pipeline:
        """`a >> b`: then."""
        return Pipeline(self, other)

    def __rrshift__(self, other: Stage) -> Pipeline:
        return Pipeline(other, self)

    def __mod__(self, k: int) -> Pipeline:
        """`p % k`: rank cut-off."""
        return Pipeline(self, Cut(k))

    def __repr__(self) -> str:
        return " >> ".join(repr(s) if isinstance(s, Cut) else _name(s) for s in self.stages)


def pipe(stage: Stage) -> Pipeline:
    """Wrap a stage so that `>>` and `%` compose it."""
    return stage if isinstance(stage, Pipeline) else Pipeline(stage)


def _name(stage: Stage) -> str:
    return str(getattr(stage, "name", type(stage).__name__))
