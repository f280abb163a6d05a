"""PyTerrier interoperation (extra `pyterrier`): our stages in PyTerrier pipelines, theirs in ours.

    import pyterrier as pt
    from retrieval.pipeline.pyterrier import from_pyterrier, to_pyterrier

    to_pyterrier(bm25) % 100 >> pt.apply.doc_score(fn)     # a PyTerrier pipeline around our stage
    bm25 % 100 >> from_pyterrier(pt.apply.doc_score(fn))   # a PyTerrier transformer in our pipeline
    pt.Experiment([to_pyterrier(bm25)], topics_df, qrels_df, ["map"])

Frames cross with PyTerrier's columns (qid, query, docno, score, rank from 0;
types.Run.to_df / from_df). Our stage given a frame without docno searches its
queries; given results, it gets them as its input Run (a frame without scores,
as PyTerrier's `|` leaves, scores 0). A PyTerrier transformer in our pipeline
gets the topics (first stage) or the Run with its queries' text, as our stages
do, and must give results back (qid, docno, and score if any). pyterrier is
imported only when an adapter is made, so the package runs without it.
"""

from __future__ import annotations

from typing import Any

from retrieval.errors import InputError
from retrieval.pipeline import params
from retrieval.pipeline.stage import Stage
from retrieval.types import Queries, Run

_TRANSFORMER: type | None = None  # the pt.Transformer subclass, made when pyterrier is first needed


def _pyterrier() -> Any:
    try:
        import pyterrier as pt
    except ImportError:
        raise InputError("PyTerrier adapters need pyterrier: pip install 'retrieval[pyterrier]'") from None
    return pt


def to_pyterrier(stage: Stage) -> Any:
    """Our stage as a `pyterrier.Transformer` (composes with `>>`, `%`, `+`, ... in PyTerrier)."""
    global _TRANSFORMER
    if not callable(stage):
        raise InputError(f"expected a stage, got {type(stage).__name__}")
    if _TRANSFORMER is None:
        _TRANSFORMER = _transformer_class(_pyterrier())
    return _TRANSFORMER(stage)


def _transformer_class(pt: Any) -> type:
    class StageTransformer(pt.Transformer):
        """One of our stages: a topics frame in -> its results; a results frame in -> reranked."""

        def __init__(self, stage: Stage):
            self.stage = stage

        def transform(self, frame: Any) -> Any:
            queries = Queries.from_df(frame)
            run = _results(frame) if "docno" in frame.columns else None
            return self.stage(queries, run).to_df(queries)

        def __repr__(self) -> str:
            return f"to_pyterrier({self.stage!r})"

    return StageTransformer


class PyTerrierStage(Stage):
    """A PyTerrier transformer as one of our stages: it gets the topics (no run) or the run with its
    queries' text as a frame, and its results frame becomes the stage's Run."""

    def __init__(self, transformer: Any):
        if not callable(getattr(transformer, "transform", None)):
            raise InputError(f"expected a PyTerrier transformer, got {type(transformer).__name__}")
        self.transformer = transformer

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        params.check_queries(queries)
        params.check_run(run, queries)
        queries = Queries(queries)
        frame = queries.to_df() if run is None else run.to_df(queries)
        out = self.transformer.transform(frame)
        if "docno" not in getattr(out, "columns", ()):
            raise InputError(f"the PyTerrier transformer {self.transformer!r} returned no results (docno"
                             " column); a stage in a pipeline ranks documents")
        return _results(out)

    def __repr__(self) -> str:
        return f"from_pyterrier({self.transformer!r})"


def from_pyterrier(transformer: Any) -> PyTerrierStage:
    """A PyTerrier transformer as our stage (composes with `>>`, `%`, `+`, `*`, `|`)."""
    return PyTerrierStage(transformer)


def _results(frame: Any) -> Run:
    """A results frame as a Run; without a score column (PyTerrier's `|` drops it), every score 0."""
    if "score" not in frame.columns:
        frame = frame.assign(score=0.0)
    return Run.from_df(frame)
