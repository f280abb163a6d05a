"""The one table of model-parameter ranges, checked wherever a stage is built (CLI, YAML, API).

A value out of range would otherwise give NaN or infinite scores (e.g. `mu 0`),
silently wrong rankings (`b 2`) or a crash deep in a library; every entry
point calls `check` so all three ways in get the same one-line error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from retrieval.errors import InputError


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _at_least(low: float) -> Callable[[Any], bool]:
    return lambda v: _number(v) and v >= low


def _above(low: float) -> Callable[[Any], bool]:
    return lambda v: _number(v) and v > low


def _within(low: float, high: float) -> Callable[[Any], bool]:
    return lambda v: _number(v) and low <= v <= high


POSITIVE_COUNT = (_count, "a whole number >= 1")
UNIT_WEIGHT = (_within(0.0, 1.0), "a number in [0, 1]")

# name -> (test, what is expected)
RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "k1": (_at_least(0.0), "a finite number >= 0"),
    "b": UNIT_WEIGHT,
    "mu": (_above(0.0), "a finite number > 0"),
    "lam": (lambda v: _number(v) and 0.0 < v < 1.0, "a number in (0, 1)"),
    "original_weight": UNIT_WEIGHT,
    "weight": UNIT_WEIGHT,
    "interpolate": UNIT_WEIGHT,
    "temperature": (_above(0.0), "a finite number > 0"),
    "bm25_weight": (_at_least(0.0), "a finite number >= 0"),
    **{name: POSITIVE_COUNT for name in ("hits", "k", "depth", "fb_docs", "fb_terms", "threads",
                                          "ef_search", "nprobe", "top", "rrf_k")},
}


def check(**values: Any) -> None:
    """Raise InputError for the first value outside its range (None means "use the default")."""
    for name, value in values.items():
        if value is None or name not in RANGES:
            continue
        test, expected = RANGES[name]
        if not test(value):
            raise InputError(f"{name} must be {expected}, got {value!r}")


def check_run(run: Any) -> None:
    """A stage's input run: None (first stage) or a retrieval.types.Run."""
    from retrieval.types import Run

    if run is not None and not isinstance(run, Run):
        raise InputError(f"run must be a Run (e.g. from read_run or a first stage), got {type(run).__name__}")


def check_queries(queries: Any) -> None:
    """Queries are a mapping of query id -> text (retrieval.types.Queries or a dict)."""
    if not isinstance(queries, Mapping):
        raise InputError("queries must be a Queries or dict of {query id: text}, got"
                         f" {type(queries).__name__}")
    for qid, text in queries.items():
        if not isinstance(qid, str) or not isinstance(text, str):
            raise InputError(f"queries must map query id strings to text strings, got {qid!r}:"
                             f" {type(text).__name__}")
