"""The currency between stages: Queries in, a Run out, Qrels to judge it.

A Run maps each query id to a ranked list of (doc id, score). Rankings are
always ordered by score descending, ties broken by doc id ascending, so the
same scores give the same order everywhere (run files, metrics, rerankers).
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

import numpy as np

from retrieval.errors import InputError

_WORD = re.compile(r"[^\s\x00-\x1f\x7f]+")
is_word = _WORD.fullmatch  # an id: no whitespace or control characters, not empty

Ranking = list[tuple[str, float]]


class Document(NamedTuple):
    """One document of a collection; `contents` is what gets indexed."""

    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """Title and text in one field (the BEIR/Anserini convention)."""
        return f"{self.title} {self.text}" if self.title else self.text


class Queries(dict[str, str]):
    """Query id -> query text, in topic-file order."""


class Qrels(dict[str, dict[str, int]]):
    """Query id -> {doc id: relevance grade}."""


def natural_key(qid: str) -> tuple:
    """Sort key putting numeric ids in numeric order (2 < 10), then the others by text."""
    return (0, int(qid), "") if qid.isascii() and qid.isdigit() else (1, 0, qid)


def rank(hits: Iterable[tuple[str, float]]) -> Ranking:
    """Sort hits by score descending, then doc id ascending (deterministic ties).

    A ranking holds each document once, by an id a run file can hold, with a finite number
    as its score; anything else is refused here (nothing coerced: None is not the id 'None'),
    where a Run is built from hits someone gave, not only when it is written.
    """
    try:
        pairs = [(d, s) for d, s in hits]
    except (TypeError, ValueError):
        raise InputError("expected hits as (doc id, score) pairs") from None
    _check_hits(pairs)
    ranked = sorted(((str(d), float(s)) for d, s in pairs), key=lambda h: (-h[1], h[0]))  # np.str_ too
    if len({d for d, _ in ranked}) != len(ranked):
        raise InputError("a ranking names a document twice; expected each doc id once per query")
    if not all(math.isfinite(s) for _, s in ranked):
        raise InputError("a ranking has a NaN or infinite score; expected finite scores")
    return ranked


def _check_hits(pairs: list[tuple[object, object]]) -> None:
    """InputError naming the first hit whose doc id is not a word (a string without whitespace)
    or whose score is not a number; checked in bulk, as every reranker's output passes here."""
    ids_ok = all(isinstance(d, str) and d for d, _ in pairs) and is_word("".join(d for d, _ in pairs) or "x")
    scores_ok = all(type(s) is float or type(s) is int or (isinstance(s, numbers.Real)
                                                          and not isinstance(s, bool)) for _, s in pairs)
    if ids_ok and scores_ok:
        return
    for d, s in pairs:
        if not isinstance(d, str) or not is_word(d):
            raise InputError(f"doc id {d!r} is not a valid id; expected a non-empty string without"
                             " whitespace")
        if not isinstance(s, numbers.Real) or isinstance(s, bool):
            raise InputError(f"score {s!r} of {d!r} is not a number")


class Columns(NamedTuple):
    """A ranking held as two aligned arrays (doc ids, scores), already in rank order.

    Searchers produce these; a Run turns one into (doc id, score) tuples only
    when someone asks for them, so batch search does not pay for Python objects
    that a run-file writer or evaluator would build again anyway.
    """

    ids: np.ndarray
    scores: np.ndarray

    def hits(self) -> Ranking:
        return list(zip(self.ids.tolist(), self.scores.tolist()))


class Run(Mapping[str, Ranking]):
    """Per query, a ranked list of (doc id, score); immutable once built (`run[q]` is a copy)."""

    def __init__(self, rankings: Mapping[str, Iterable[tuple[str, float]] | Columns] | None = None,
                 *, presorted: bool = False):
        self._rankings: dict[str, Ranking | Columns] = {}
        if not isinstance(rankings or {}, Mapping):
            raise InputError(f"a Run is built from {{query id: hits}}, got {type(rankings).__name__}")
        for qid, hits in (rankings or {}).items():
            if not isinstance(qid, str) or qid in self._rankings:
                raise InputError(f"query id {qid!r} is not a string, or is given twice")
            if isinstance(hits, Columns):
                self._rankings[qid] = hits  # searchers' output is already ranked
            else:
                self._rankings[qid] = list(hits) if presorted else rank(hits)

    def __getitem__(self, qid: str) -> Ranking:
        ranking = self._rankings[qid]
        if isinstance(ranking, Columns):
            ranking = self._rankings[qid] = ranking.hits()
        return list(ranking)  # a copy: changing it cannot change the Run

    def __iter__(self) -> Iterator[str]:
        return iter(self._rankings)

    def __len__(self) -> int:
        return len(self._rankings)

    def __repr__(self) -> str:
        hits = sum(len(r) if not isinstance(r, Columns) else len(r.ids)
                   for r in self._rankings.values())
        return f"Run({len(self)} queries, {hits} hits)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Run) and list(self.items()) == list(other.items())

    def cut(self, k: int) -> Run:
        """The top k hits of every query (k >= 1: a slice would take k=-1 as all but the last)."""
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise InputError(f"a cut keeps k >= 1 hits, got {k!r}")
        return Run({q: Columns(r.ids[:k], r.scores[:k]) if isinstance(r, Columns) else r[:k]
                    for q, r in self._rankings.items()}, presorted=True)

    def scores(self) -> dict[str, dict[str, float]]:
        """As nested dicts {qid: {doc id: score}}, the shape ir-measures reads."""
        return {q: dict(zip(r.ids.tolist(), r.scores.tolist())) if isinstance(r, Columns) else dict(r)
                for q, r in self._rankings.items()}

    def without_query_ids(self) -> Run:
        """Drop each query's own id from its hits (BEIR convention, e.g. SciFact)."""
        return Run({q: [h for h in self[q] if h[0] != q] for q in self._rankings}, presorted=True)
