"""Stages and how they compose, PyTerrier style.

    bm25 % 100 >> qld              # BM25 top 100, rescored by query likelihood
    (bm25 >> rm3) % 10             # any stage, then keep the top 10

Every ranker, reranker and fusion is a `Stage`: `stage(queries) -> Run`
searches, `stage(queries, run) -> Run` works on a given run (rescoring or
reranking it). The operators live on the base class, so any stage composes:
`a >> b` runs `a` then gives its Run to `b`; `s % k` cuts every ranking to its
top k. A Pipeline is itself a stage, so pipelines nest. `pipe(f)` wraps a
plain callable with the stage signature so it composes too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from retrieval.errors import InputError
from retrieval.types import Queries, Run


class Stage(ABC):
    """A pipeline stage: first stages search (run is None); rerankers rescore the run they get."""

    name = "stage"

    @abstractmethod
    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        """The stage's Run for these queries (given the previous stage's Run, if any)."""

    def __rshift__(self, other: Stage | Callable) -> Pipeline:
        """`a >> b`: a, then b on a's Run."""
        return Pipeline(self, other)

    def __rrshift__(self, other: Stage | Callable) -> Pipeline:
        return Pipeline(other, self)

    def __mod__(self, k: int) -> Pipeline:
        """`s % k`: rank cut-off."""
        return Pipeline(self, Cut(k))


class Cut(Stage):
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


class Pipeline(Stage):
    """Stages applied in order, each given the previous stage's Run (the first gets `run`)."""

    def __init__(self, *stages: Stage | Callable):
        if not stages:
            raise InputError("a pipeline needs at least one stage")
        flat: list[Stage | Callable] = []
        for stage in stages:
            if not callable(stage):
                raise InputError(f"a pipeline stage must be callable, got {type(stage).__name__}")
            flat.extend(stage.stages if isinstance(stage, Pipeline) else [stage])
        self.stages: tuple[Stage | Callable, ...] = tuple(flat)

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        for stage in self.stages:
            run = stage(queries, run)
            if not isinstance(run, Run):
                raise InputError(f"pipeline stage {_name(stage)} returned {type(run).__name__}, not a Run")
        return run

    def __repr__(self) -> str:
        return " >> ".join(repr(s) if isinstance(s, Cut) else _name(s) for s in self.stages)


def pipe(stage: Stage | Callable) -> Pipeline:
    """Wrap a stage or a plain callable `(queries, run=None) -> Run` so that `>>` and `%` compose it."""
    return stage if isinstance(stage, Pipeline) else Pipeline(stage)


def _name(stage: Stage | Callable) -> str:
    return str(getattr(stage, "name", getattr(stage, "__name__", type(stage).__name__)))
