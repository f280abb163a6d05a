"""Filters on document metadata, compiled to a per-document allow mask (uint8 by docno).

The language (one line; docs/design/fields-and-filters.md):

    year >= 1990 and venue in ["CACM", "JACM"] and not tag = "retracted"
    (lang = "en" or lang = "de") and date < "2001-01-01"
    id in ["doc1", "doc7"]          # `id` is the document id

Comparisons are `= == != < <= > >=` and `in [...]`; values are numbers, "strings" (ISO dates
compare as strings), `true` and `false`. A metadata list (keywords) passes a comparison when
any of its elements does; `!=` is `not =`. A document without the field fails every comparison
on it (and passes its `not`). A field no document has is refused (most likely a typo).

A `Filter` is an expression and/or doc-id `include` / `exclude` lists; `allow_mask(filter,
index)` evaluates it over the whole collection at once (numpy, columns built once per index
from the doc store's metadata), giving the mask the sparse kernels test before a document can
enter the top k, and that dense search, fusion and reranking test the same way.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from retrieval.errors import InputError

_TOKEN = re.compile(r"""\s*(?:
    (?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
    |(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    |(?P<op>==|!=|<=|>=|=|<|>)
    |(?P<punct>[()\[\],])
    |(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*))""", re.X)
_KEYWORDS = ("and", "or", "not", "in", "true", "false")
Value = float | str


@dataclass(frozen=True)
class Compare:
    field: str
    op: str          # = != < <= > >= in
    values: tuple    # one value, or the list of `in`


@dataclass(frozen=True)
class Not:
    part: Any


@dataclass(frozen=True)
class Both:
    left: Any
    right: Any


@dataclass(frozen=True)
class Either:
    left: Any
    right: Any


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens: list[tuple[str, Any, int]] = []
        pos = 0
        while pos < len(text):
            if not text[pos:].strip():
                break
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                self.fail("unexpected character", len(text) - len(text[pos:].lstrip()))
            kind = m.lastgroup
            value: Any = m.group(kind)
            start = m.start(kind)
            if kind == "num":
                value = float(value)
            elif kind == "str":
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            elif kind == "name" and value.lower() in _KEYWORDS:
                kind, value = "kw", value.lower()
            self.tokens.append((kind, value, start))
            pos = m.end()
        self.i = 0

    def fail(self, message: str, column: int | None = None) -> None:
        if column is None:
            column = self.tokens[self.i][2] if self.i < len(self.tokens) else len(self.text)
        raise InputError(f"filter: {message} at column {column + 1}: {self.text}")

    def peek(self) -> tuple[str, Any, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, kind: str, value: Any = None) -> bool:
        t = self.peek()
        if t and t[0] == kind and (value is None or t[1] == value):
            self.i += 1
            return True
        return False

    def parse(self) -> Any:
        if not self.tokens:
            raise InputError("filter: empty expression; expected e.g. year >= 1990")
        node = self.either()
        if self.peek():
            self.fail(f"expected 'and', 'or' or the end, found {self.peek()[1]!r}")
        return node

    def either(self) -> Any:
        node = self.both()
        while self.take("kw", "or"):
            node = Either(node, self.both())
        return node

    def both(self) -> Any:
        node = self.negation()
        while self.take("kw", "and"):
            node = Both(node, self.negation())
        return node

    def negation(self) -> Any:
        if self.take("kw", "not"):
            return Not(self.negation())
        if self.take("punct", "("):
            node = self.either()
            if not self.take("punct", ")"):
                self.fail("expected ')'")
            return node
        return self.comparison()

    def comparison(self) -> Any:
        t = self.peek()
        if not t or t[0] != "name":
            self.fail("expected a field name" + (f", found {t[1]!r}" if t else ""))
        self.i += 1
        field = t[1]
        if self.take("kw", "in"):
            if not self.take("punct", "["):
                self.fail("expected '[' after 'in'")
            values = []
            while True:
                values.append(self.value())
                if self.take("punct", "]"):
                    break
                if not self.take("punct", ","):
                    self.fail("expected ',' or ']' in the list")
            return Compare(field, "in", tuple(values))
        op = self.peek()
        if not op or op[0] != "op":
            self.fail(f"expected a comparison (= != < <= > >= in) after {field!r}")
        self.i += 1
        return Compare(field, "=" if op[1] == "==" else op[1], (self.value(),))

    def value(self) -> Value:
        t = self.peek()
        if t and t[0] in ("num", "str"):
            self.i += 1
            return t[1]
        if t and t[0] == "kw" and t[1] in ("true", "false"):
            self.i += 1
            return 1.0 if t[1] == "true" else 0.0
        self.fail("expected a value (a number, a \"string\", true or false)")
        raise AssertionError  # unreachable


def parse_filter(text: str) -> Any:
    """The syntax tree of a filter expression; InputError (one line, with the column) if malformed."""
    if not isinstance(text, str):
        raise InputError(f"filter must be a string expression, got {type(text).__name__}")
    return _Parser(text).parse()


@dataclass(frozen=True)
class Filter:
    """What a search keeps: documents passing `expression` (the filter language), and among them
    those listed in `include` (when given) and not in `exclude`."""

    expression: str | None = None
    include: Sequence[str] | None = None
    exclude: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.expression is not None:
            parse_filter(self.expression)
        for name in ("include", "exclude"):
            ids = getattr(self, name)
            if ids is not None and (isinstance(ids, str) or not all(isinstance(d, str) for d in ids)):
                raise InputError(f"filter {name} must be a list of doc id strings")

    @property
    def empty(self) -> bool:
        return self.expression is None and self.include is None and not self.exclude

    def to_expression(self) -> str:
        """The same filter as one expression (`id in [...]` for the lists): how it travels as a
        ranker parameter (a string, like every other)."""
        parts = [f"({self.expression})"] if self.expression is not None else []
        quoted = lambda ids: ", ".join(json.dumps(d, ensure_ascii=False) for d in ids)  # noqa: E731
        if self.include is not None:
            parts.append(f"id in [{quoted(self.include)}]" if self.include else "id = \"\"")
        if self.exclude:
            parts.append(f"not id in [{quoted(self.exclude)}]")
        return " and ".join(parts)


def as_filter(value: Any) -> Filter | None:
    """A Filter from what a caller gives: None, an expression string, a Filter, or a mapping with
    `expression`/`include`/`exclude`."""
    if value is None or isinstance(value, Filter):
        return None if value is None or value.empty else value
    if isinstance(value, str):
        return Filter(value)
    if isinstance(value, dict):
        unknown = set(value) - {"expression", "include", "exclude"}
        if unknown:
            raise InputError(f"filter has unknown key(s) {sorted(unknown)}; expected expression,"
                             " include, exclude")
        return as_filter(Filter(**value))
    raise InputError(f"filter must be an expression string or a Filter, got {type(value).__name__}")


class Column:
    """One metadata field over the collection: its elements (a list field has several per document),
    each with the document it belongs to, its number (NaN if not one) and its string code (place in
    the sorted `vocab`, -1 if not a string)."""

    def __init__(self, docs: np.ndarray, numbers: np.ndarray, strings: list[str | None]):
        self.docs = docs
        self.numbers = numbers
        present = sorted({s for s in strings if s is not None})
        self.vocab = np.array(present, dtype=str) if present else np.zeros(0, dtype=str)
        lookup = {s: i for i, s in enumerate(present)}
        self.codes = np.array([lookup.get(s, -1) if s is not None else -1 for s in strings], dtype=np.int64)

    def elements(self, op: str, value: Value) -> np.ndarray:
        """Which elements satisfy `element op value` (op one of = < <= > >=)."""
        if isinstance(value, float):
            x = self.numbers
            return {"=": x == value, "<": x < value, "<=": x <= value, ">": x > value, ">=": x >= value}[op]
        left = int(np.searchsorted(self.vocab, value, "left"))
        right = int(np.searchsorted(self.vocab, value, "right"))
        c = self.codes
        has = c >= 0
        return {"=": (c >= left) & (c < right), "<": has & (c < left), "<=": has & (c < right),
                ">": c >= right, ">=": c >= left}[op]


def metadata_columns(doc_ids: Sequence[str], records: Iterable[tuple[str, dict]],
                     docno: dict[str, int]) -> dict[str, Column]:
    """Columns of every metadata field, from (doc id, metadata) records, plus `id`."""
    gathered: dict[str, tuple[list[int], list[float], list[str | None]]] = {}
    for doc_id, meta in records:
        d = docno[doc_id]
        for key, value in meta.items():
            docs, numbers, strings = gathered.setdefault(key, ([], [], []))
            for v in value if isinstance(value, list) else [value]:
                docs.append(d)
                if isinstance(v, str):
                    numbers.append(math.nan)
                    strings.append(v)
                else:
                    numbers.append(float(v))
                    strings.append(None)
    columns = {k: Column(np.array(d, dtype=np.int64), np.array(n, dtype=np.float64), s)
               for k, (d, n, s) in gathered.items()}
    n = len(doc_ids)
    ids = Column(np.arange(n, dtype=np.int64), np.full(n, math.nan), [])
    ids.vocab = np.asarray(doc_ids, dtype=str)  # sorted: docnos follow doc id order
    ids.codes = np.arange(n, dtype=np.int64)
    columns["id"] = ids
    return columns


def evaluate(node: Any, columns: dict[str, Column], n: int, strict: bool = True) -> np.ndarray:
    """The bool mask (by docno) of the documents passing a parsed filter. `strict`: a field no
    document has is an error (else no document has it: a shard may lack a field others have)."""
    if isinstance(node, Not):
        return ~evaluate(node.part, columns, n, strict)
    if isinstance(node, Both):
        return evaluate(node.left, columns, n, strict) & evaluate(node.right, columns, n, strict)
    if isinstance(node, Either):
        return evaluate(node.left, columns, n, strict) | evaluate(node.right, columns, n, strict)
    column = columns.get(node.field)
    if column is None and not strict:
        return np.zeros(n, dtype=bool) if node.op != "!=" else np.ones(n, dtype=bool)
    if column is None:
        known = ", ".join(sorted(columns)) or "none"
        raise InputError(f"filter: no document has the field {node.field!r} (fields: {known})")
    if node.op == "in":
        elements = np.zeros(len(column.docs), dtype=bool)
        for value in node.values:
            elements |= column.elements("=", value)
    else:
        elements = column.elements("=" if node.op == "!=" else node.op, node.values[0])
    mask = np.zeros(n, dtype=bool)
    mask[column.docs[elements]] = True
    return ~mask if node.op == "!=" else mask


def columns_of(index: Any) -> dict[str, Column]:
    """The metadata columns of a native index (built once, kept on the index object)."""
    cached = index.__dict__.get("_metadata_columns")
    if cached is None:
        cached = metadata_columns(index.doc_id_list, index.docstore.metadata(), index.docno)
        index.__dict__["_metadata_columns"] = cached
    return cached


def allow_mask(value: Any, index: Any, strict: bool = True) -> np.ndarray | None:
    """The uint8 allow mask (by docno) of a filter over a native index; None for no filter
    (`strict`: see evaluate)."""
    spec = as_filter(value)
    if spec is None:
        return None
    n = index.num_docs
    mask = np.ones(n, dtype=bool)
    if spec.expression is not None:
        mask &= evaluate(parse_filter(spec.expression), columns_of(index), n, strict)
    docno = index.docno
    if spec.include is not None:
        listed = np.zeros(n, dtype=bool)
        listed[[docno[d] for d in spec.include if d in docno]] = True
        mask &= listed
    if spec.exclude:
        mask[[docno[d] for d in spec.exclude if d in docno]] = False
    return mask.astype(np.uint8)


def passing_ids(value: Any, index: Any) -> frozenset[str] | None:
    """The doc ids a filter lets through on a native index (None for no filter)."""
    mask = allow_mask(value, index)
    if mask is None:
        return None
    return frozenset(np.asarray(index.doc_id_list, dtype=object)[mask != 0].tolist())


def keep_passing(run: Any, value: Any, index: Any) -> Any:
    """A Run without the hits a filter drops (order and scores kept): how a reranker given a
    filter treats its input run, so that no failing document comes out of it."""
    from retrieval.types import Run

    ids = passing_ids(value, index)
    if ids is None:
        return run
    return Run({q: [(d, s) for d, s in run[q] if d in ids] for q in run}, presorted=True)
