"""BEIR layout: corpus.jsonl(.gz) with _id/title/text, queries.jsonl, qrels TSV."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from retrieval.errors import InputError
from retrieval.formats.textfile import check_id, check_utf8, streamed_lines
from retrieval.types import Document, Queries


def _records(path: str | Path) -> Iterator[tuple[int, dict]]:
    for n, line in streamed_lines(path):
        try:
            record = json.loads(line)
        except ValueError as e:
            raise InputError(f"invalid JSON ({e.args[0].split(':')[0]}); expected one JSON object"
                             " per line", path, n) from None
        except RecursionError:
            raise InputError("invalid JSON (nested too deeply); expected one JSON object per line",
                             path, n) from None
        if not isinstance(record, dict) or not isinstance(record.get("_id"), (str, int)):
            raise InputError("expected a JSON object with an \"_id\"", path, n)
        for field in ("title", "text"):
            if not isinstance(record.get(field, ""), str):
                raise InputError(f"field {field!r} must be a string", path, n)
            if "\\u" in line:  # an escape: it may be a lone surrogate
                check_utf8(record.get(field, ""), f"field {field!r}", path, n)
        yield n, record


def read_beir_corpus(path: str | Path) -> Iterator[Document]:
    """Documents of a BEIR corpus.jsonl(.gz); contents = title + " " + text."""
    for n, record in _records(path):
        yield Document(check_id(str(record["_id"]), "document _id", path, n),
                       record.get("title", "").strip(), record.get("text", "").strip())


def read_beir_queries(path: str | Path) -> Queries:
    """Queries of a BEIR queries.jsonl."""
    queries = Queries()
    for n, record in _records(path):
        qid, text = check_id(str(record["_id"]), "query _id", path, n), record.get("text", "")
        if qid in queries:
            raise InputError(f"duplicate query id {qid!r}", path, n)
        if not text.strip():
            raise InputError(f"query {qid!r} is empty", path, n)
        queries[qid] = text
    return queries
