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
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from retrieval.errors import InputError

_WORD = re.compile(r"[^\s\x00-\x1f\x7f-\x9f]+")
is_word = _WORD.fullmatch  # an id: no whitespace or control characters (C0, DEL, C1), not empty

Ranking = list[tuple[str, float]]


class Document(NamedTuple):
    """One document of a collection; `contents` (title and text) is what the flat index indexes.

    `fields` holds the format's other named text fields (TREC `head`, SMART `author`, a JSONL
    record's named strings; a name here overrides `title`/`text` for fielded indexing, as TREC's
    `<TITLE>` and `<TEXT>` do while `text` keeps the whole body); `metadata` holds values filters
    test (strings, numbers, ISO dates as strings, lists of keywords), given in JSONL. Both are
    None when the format has none, so a document of title and text stays a 3-tuple in value.
    """

    id: str
    title: str
    text: str
    fields: Mapping[str, str] | None = None
    metadata: Mapping[str, Any] | None = None

    @property
    def contents(self) -> str:
        """Title and text in one field (the BEIR/Anserini convention)."""
        return f"{self.title} {self.text}" if self.title else self.text

    def field(self, name: str) -> str:
        """The text of a named field ("" when the document has none): `fields` first, then
        title, text, and "contents" (title and text)."""
        if self.fields and name in self.fields:
            return self.fields[name]
        if name in ("title", "text"):
            return getattr(self, name)
        return self.contents if name == "contents" else ""

    def field_names(self) -> list[str]:
        """The names of the text fields this document has (non-empty title and text included)."""
        names = [n for n in ("title", "text") if getattr(self, n)]
        return names + [n for n in (self.fields or {}) if n not in names]


class Queries(dict[str, str]):
    """Query id -> query text, in topic-file order."""

    def to_df(self) -> Any:
        """A pandas DataFrame with PyTerrier's topic columns: qid, query."""
        pd = pandas()
        return pd.DataFrame({"qid": list(self), "query": list(self.values())}, columns=["qid", "query"])

    @classmethod
    def from_df(cls, df: Any) -> Queries:
        """Queries from a DataFrame with columns qid and query (PyTerrier's topics; a results frame
        with those columns too, each query once)."""
        _columns(df, ("qid", "query"), "topics")
        out = cls()
        for qid, text in zip(df["qid"].astype(str), df["query"]):
            if not isinstance(text, str):
                raise InputError(f"query {qid!r}: expected its text in the query column, got {text!r}")
            if out.setdefault(qid, text) != text:
                raise InputError(f"query {qid!r} has two texts in the DataFrame: {out[qid]!r} and {text!r}")
        return out


class Qrels(dict[str, dict[str, int]]):
    """Query id -> {doc id: relevance grade}."""

    def to_df(self) -> Any:
        """A pandas DataFrame with PyTerrier's qrels columns: qid, docno, label."""
        pd = pandas()
        rows = [(q, d, g) for q, judged in self.items() for d, g in judged.items()]
        return pd.DataFrame(rows, columns=["qid", "docno", "label"])

    @classmethod
    def from_df(cls, df: Any) -> Qrels:
        """Qrels from a DataFrame with columns qid, docno and label (whole-number grades)."""
        _columns(df, ("qid", "docno", "label"), "qrels")
        out = cls()
        for qid, doc, label in zip(df["qid"].astype(str), df["docno"].astype(str), df["label"]):
            whole = isinstance(label, numbers.Real) and math.isfinite(label) and label == int(label)
            if isinstance(label, bool) or not whole:
                raise InputError(f"qrels of query {qid!r}: label {label!r} of {doc!r} is not a whole number")
            out.setdefault(qid, {})[doc] = int(label)
        return out


def pandas() -> Any:
    """The pandas module; InputError naming the extra that installs it when it is missing."""
    try:
        import pandas as pd
    except ImportError:
        raise InputError("DataFrames need pandas: pip install 'retrieval[pandas]'") from None
    return pd


def _columns(df: Any, needed: tuple[str, ...], what: str) -> None:
    columns = getattr(df, "columns", None)
    if columns is None:
        raise InputError(f"expected a pandas DataFrame of {what}, got {type(df).__name__}")
    missing = [c for c in needed if c not in columns]
    if missing:
        raise InputError(f"the DataFrame of {what} lacks the column(s) {', '.join(missing)}; expected"
                         f" {', '.join(needed)} (PyTerrier's names), got {', '.join(map(str, columns))}")


@dataclass(frozen=True)
class Result:
    """One ranked document: its id, score, rank (from 1, as in run files) and text, where known."""

    id: str
    score: float
    rank: int
    text: str | None = None

    def __repr__(self) -> str:
        text = "" if self.text is None else f", text={_shorten(self.text, 60)!r}"
        return f"Result(rank={self.rank}, id={self.id!r}, score={self.score:.4f}{text})"


class Results(list):
    """One query's ranked `Result`s, best first; prints as a table (rank, score, id, text)."""

    def __repr__(self) -> str:
        if not self:
            return "Results([])"
        width = max(len(r.id) for r in self)
        head = f"{'rank':>4}  {'score':>9}  {'id':<{width}}"
        lines = [head + ("  text" if self[0].text is not None else "")]
        for r in self:
            text = "" if r.text is None else "  " + _shorten(r.text, 70)
            lines.append(f"{r.rank:>4}  {r.score:>9.4f}  {r.id:<{width}}{text}")
        return "\n".join(lines)

    __str__ = __repr__

    def ids(self) -> list[str]:
        """The document ids, best first."""
        return [r.id for r in self]


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


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

    def to_df(self, queries: Mapping[str, str] | None = None) -> Any:
        """A pandas DataFrame with PyTerrier's result columns: qid, docno, score, rank (from 0, as
        PyTerrier counts; run files count from 1), and with `queries` a query column after qid."""
        pd = pandas()
        qids, docs, scores, ranks = [], [], [], []
        for qid in self._rankings:
            hits = self[qid]
            qids += [qid] * len(hits)
            docs += [d for d, _ in hits]
            scores += [s for _, s in hits]
            ranks += range(len(hits))
        columns = {"qid": qids}
        if queries is not None:
            missing = next((q for q in self._rankings if q not in queries), None)
            if missing is not None:
                raise InputError(f"no text for query {missing!r} of the run")
            columns["query"] = [queries[q] for q in qids]
        frame = pd.DataFrame({**columns, "docno": docs, "score": scores, "rank": ranks})
        return frame.astype({"qid": str, "docno": str, "score": "float64", "rank": "int64"})

    @classmethod
    def from_df(cls, df: Any) -> Run:
        """A Run from a DataFrame with columns qid, docno and score (PyTerrier's results; other
        columns, rank included, are ignored: the order is by score, ties by doc id, as in every Run)."""
        _columns(df, ("qid", "docno", "score"), "results")
        rankings: dict[str, list[tuple[str, float]]] = {}
        for qid, doc, score in zip(df["qid"].astype(str), df["docno"].astype(str), df["score"]):
            rankings.setdefault(qid, []).append((doc, score))
        return cls(rankings)

    def without_query_ids(self) -> Run:
        """Drop each query's own id from its hits (BEIR convention, e.g. SciFact)."""
        return Run({q: [h for h in self[q] if h[0] != q] for q in self._rankings}, presorted=True)
