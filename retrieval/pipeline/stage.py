"""Stages and how they compose, PyTerrier style.

    bm25 % 100 >> qld              # BM25 top 100, rescored by query likelihood
    (bm25 >> rm3) % 10             # any stage, then keep the top 10

    0.7 * bm25 + 0.3 * dense       # linear fusion: weighted sum of raw scores
    (bm25 | dense) >> late         # the union of both rankings, reranked

Every ranker, reranker and fusion is a `Stage`: `stage(queries) -> Run`
searches, `stage(queries, run) -> Run` works on a given run (rescoring or
reranking it), `stage.search("text", k)` searches one query. The operators live
on the base class, so any stage composes, as in PyTerrier: `a >> b` runs `a`
then gives its Run to `b`; `s % k` cuts every ranking to its top k; `a + b`
adds the two stages' scores per document, `w * s` multiplies a stage's scores
by a number, `a | b` is the union of the documents both rank. A Pipeline is
itself a stage, so pipelines nest. `pipe(f)` wraps a plain callable with the
stage signature so it composes too. A stage's repr shows its settings and a
pipeline's its stages (`BM25(k1=0.9, b=0.4) % 100 >> LateReranker(interpolate=0.1, depth=100)`). A
stage with a `following(previous)` method is replaced, in a pipeline, by what it returns for the stage
before it (cuts skipped): the late reranker takes the defaults validated for that kind of first stage.

Queries without text, one policy for every stage: a stage given a run works
only on queries it has the text of, and a run naming a query that `queries`
lacks is refused with an InputError naming those query ids
(`params.check_run(run, queries)`, which every stage that uses a given run
calls first): no stage drops such a query in silence or passes it on unranked.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable

from retrieval.errors import InputError
from retrieval.types import Queries, Result, Results, Run

# constructor parameters a repr leaves out: what the stage works on or how it runs, not what it computes
_UNSHOWN = {"index", "threads", "precision", "progress", "batch_size", "use_store", "backend",
            "query_encoder"}
_SEARCH_ID = "1"  # the query id `search` gives its one query


class Stage(ABC):
    """A pipeline stage: first stages search (run is None); rerankers rescore the run they get."""

    name = "stage"

    @abstractmethod
    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        """The stage's Run for these queries (given the previous stage's Run, if any)."""

    def search(self, query: str, k: int = 10) -> Results:
        """One query's top `k` results, best first, with each document's text where an index of the
        stage keeps it (`bm25.search("black holes", 5)`)."""
        if not isinstance(query, str) or not query.strip():
            raise InputError(f"search takes one query text, got {query!r}")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise InputError(f"k must be a whole number >= 1, got {k!r}")
        hits = self(Queries({_SEARCH_ID: query})).get(_SEARCH_ID, [])[:k]
        source = document_index(self)
        return Results(Result(d, s, i, source.text(d) if source is not None else None)
                       for i, (d, s) in enumerate(hits, 1))

    def __rshift__(self, other: Stage | Callable) -> Pipeline:
        """`a >> b`: a, then b on a's Run."""
        return Pipeline(self, other)

    def __rrshift__(self, other: Stage | Callable) -> Pipeline:
        return Pipeline(other, self)

    def __mod__(self, k: int) -> Pipeline:
        """`s % k`: rank cut-off."""
        return Pipeline(self, Cut(k))

    def __add__(self, other: Stage) -> Stage:
        """`a + b`: each document's scores from both stages added (linear fusion, PyTerrier's `+`)."""
        return ScoreSum(self, other) if isinstance(other, Stage) else NotImplemented

    def __mul__(self, weight: float) -> Stage:
        """`s * w` (or `w * s`): the stage's scores times the number w."""
        return Scaled(self, weight) if _is_number(weight) else NotImplemented

    __rmul__ = __mul__

    def __or__(self, other: Stage) -> Stage:
        """`a | b`: the documents either stage ranks (scores dropped), for a later stage to rescore."""
        return Union(self, other) if isinstance(other, Stage) else NotImplemented

    def settings(self) -> dict[str, object]:
        """The constructor's parameters as this stage holds them (what its repr shows): values read
        back from the stage (or its model), leaving out None, `hits` at its default and how it runs
        (threads, precision, the index)."""
        from retrieval.pipeline.params import PARAMS

        shown: dict[str, object] = {}
        for name, p in inspect.signature(type(self).__init__).parameters.items():
            if p.kind == p.VAR_KEYWORD:  # e.g. a model's parameters (k1=, b=): its dataclass fields
                model = vars(self).get("model")
                shown |= dataclasses.asdict(model) if dataclasses.is_dataclass(model) else {}
            if name == "self" or name in _UNSHOWN or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            value = _held(self, name)
            if value is None or (name == "hits" and value == PARAMS["hits"].default):
                continue
            if isinstance(value, (Stage, str, int, float, bool)):
                shown[name] = value
        return shown

    def __repr__(self) -> str:
        stages = getattr(self, "stages", ()) if _takes_stages(self) else ()
        args = [repr(s) for s in stages] + [f"{k}={v!r}" for k, v in self.settings().items()]
        return f"{type(self).__name__}({', '.join(args)})"


def is_pyterrier(obj: object) -> bool:
    """Whether `obj` is a PyTerrier transformer (pyterrier is not imported here: an object can be one
    only once it has been)."""
    pt = sys.modules.get("pyterrier")
    return pt is not None and isinstance(obj, getattr(pt, "Transformer", ()))


def _held(stage: Stage, name: str) -> object:
    """A constructor parameter's value as the stage holds it: its attribute, or its model's."""
    if name in vars(stage):
        return vars(stage)[name]
    model = vars(stage).get("model")
    return getattr(model, name, None) if model is not None and not isinstance(model, (str, Stage)) else None


def _takes_stages(stage: Stage) -> bool:
    parameters = inspect.signature(type(stage).__init__).parameters.values()
    return any(p.kind == p.VAR_POSITIONAL for p in parameters)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def document_index(stage: object) -> object | None:
    """The first index with a doc store (`text(doc id)`) among the stage's own and its inner stages'
    (None if none has one): where `search` finds texts and an experiment the collection's doc ids."""
    index = getattr(stage, "index", None)
    if index is not None and callable(getattr(index, "text", None)):
        return index
    inner = [getattr(stage, name, None) for name in ("ranker", "first", "stage")]
    for candidate in [*inner, *getattr(stage, "stages", ())]:
        if isinstance(candidate, Stage):
            found = document_index(candidate)
            if found is not None:
                return found
    return None


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
            if is_pyterrier(stage):
                raise InputError(f"{stage!r} is a PyTerrier transformer; wrap it for our pipelines with"
                                 " retrieval.pipeline.pyterrier.from_pyterrier(...)")
            flat.extend(stage.stages if isinstance(stage, Pipeline) else [stage])
        previous = None  # a stage with `following` (the late reranker) settles its defaults by the one before
        for i, stage in enumerate(flat):
            if previous is not None and callable(getattr(stage, "following", None)):
                flat[i] = stage.following(previous)
            previous = previous if isinstance(stage, Cut) else flat[i]
        self.stages: tuple[Stage | Callable, ...] = tuple(flat)

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        for stage in self.stages:
            run = stage(queries, run)
            if not isinstance(run, Run):
                raise InputError(f"pipeline stage {_name(stage)} returned {type(run).__name__}, not a Run")
        return run

    def __repr__(self) -> str:
        shown = ""
        for stage in self.stages:
            if isinstance(stage, Cut):
                shown += f" % {stage.k}" if shown else repr(stage)
            else:
                text = repr(stage) if isinstance(stage, Stage) else _name(stage)
                text = f"({text})" if isinstance(stage, (ScoreSum, Union)) else text
                shown += (" >> " if shown else "") + text
        return shown


def pipe(stage: Stage | Callable) -> Pipeline:
    """Wrap a stage or a plain callable `(queries, run=None) -> Run` so that `>>` and `%` compose it."""
    return stage if isinstance(stage, Pipeline) else Pipeline(stage)


def _name(stage: Stage | Callable) -> str:
    return str(getattr(stage, "name", getattr(stage, "__name__", type(stage).__name__)))


class ScoreSum(Stage):
    """`a + b + ...`: per query, each document's scores from every stage added, a stage that does not
    rank a document giving it 0 (PyTerrier's `+`), over the union of their rankings. The scores are
    summed as they are: weigh stages on other scales with `*` (`0.8 * bm25 + 0.2 * dense`), or use
    fusion.Interpolate for min-max normalised scores."""

    def __init__(self, *stages: Stage):
        if len(stages) < 2 or not all(isinstance(s, Stage) for s in stages):
            raise InputError("a score sum adds the scores of two or more stages")
        self.stages = tuple(t for s in stages for t in (s.stages if isinstance(s, ScoreSum) else (s,)))

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        runs = [stage(queries, run) for stage in self.stages]
        summed: dict[str, dict[str, float]] = {}
        for each in runs:
            for qid, hits in each.items():
                scores = summed.setdefault(qid, {})
                for doc, score in hits:
                    scores[doc] = scores.get(doc, 0.0) + score
        return Run({q: scores.items() for q, scores in summed.items()})

    def __repr__(self) -> str:
        return " + ".join(f"({s!r})" if isinstance(s, (Pipeline, Union)) else repr(s) for s in self.stages)


class Scaled(Stage):
    """`w * s`: the stage's Run with every score multiplied by w (a finite number; w < 0 reverses
    the ranking, ties still by doc id)."""

    def __init__(self, stage: Stage, weight: float):
        if not _is_number(weight):
            raise InputError(f"a stage's scores are scaled by a finite number, got {weight!r}")
        self.stage, self.weight = stage, float(weight)

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        scaled = self.stage(queries, run)
        return Run({q: [(d, self.weight * s) for d, s in hits] for q, hits in scaled.items()})

    def __repr__(self) -> str:
        inner = repr(self.stage)
        return f"{self.weight!r} * " + (f"({inner})" if isinstance(self.stage, (Pipeline, ScoreSum, Union))
                                         else inner)


class Union(Stage):
    """`a | b | ...`: per query, every document any stage ranks, each once, all scored 0 (so in doc
    id order, PyTerrier's `|` drops the scores too): a candidate set for a later stage that rescores
    it, e.g. `(bm25 % 100 | dense % 100) >> late`."""

    def __init__(self, *stages: Stage):
        if len(stages) < 2 or not all(isinstance(s, Stage) for s in stages):
            raise InputError("a union joins the rankings of two or more stages")
        self.stages = tuple(t for s in stages for t in (s.stages if isinstance(s, Union) else (s,)))

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        docs: dict[str, dict[str, None]] = {}
        for each in [stage(queries, run) for stage in self.stages]:
            for qid, hits in each.items():
                docs.setdefault(qid, {}).update(dict.fromkeys(d for d, _ in hits))
        return Run({q: [(d, 0.0) for d in ids] for q, ids in docs.items()})

    def __repr__(self) -> str:
        return " | ".join(f"({s!r})" if isinstance(s, (Pipeline, ScoreSum)) else repr(s) for s in self.stages)
