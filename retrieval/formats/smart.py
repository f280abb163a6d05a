"""SMART format (Cranfield): records opened by `.I n`, fields `.T .A .B .W`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from retrieval.errors import InputError
from retrieval.formats.textfile import read_text
from retrieval.types import Document, Qrels, Queries

_FIELD = re.compile(r"^\.([A-Z])\s*(.*)$")
SMART_FIELDS = {"A": "author", "B": "source"}  # named fields beside title (.T) and text (.W)


def _records(text: str, path: str | Path) -> Iterator[tuple[int, str, dict[str, str]]]:
    """(line, id, {field letter: text}) per `.I` record."""
    record_id, record_line, fields, current = None, 0, {}, None
    for n, line in enumerate(text.splitlines(), 1):
        m = _FIELD.match(line)
        if m and m.group(1) == "I":
            if record_id is not None:
                yield record_line, record_id, fields
            record_id, record_line, fields, current = m.group(2).strip(), n, {}, None
            if not record_id:
                raise InputError("'.I' without an id; expected '.I <number>'", path, n)
        elif m and len(line.rstrip()) == 2:
            if record_id is None:
                raise InputError(f"field '.{m.group(1)}' before any '.I' record", path, n)
            current = m.group(1)
            fields.setdefault(current, "")
        elif line.strip():
            if current is None:
                raise InputError("text outside a field; expected '.I', '.T', '.A', '.B' or '.W'",
                                 path, n)
            fields[current] += " " + line.strip()
    if record_id is None:
        raise InputError("no '.I' records found; expected a SMART file", path)
    yield record_line, record_id, fields


def read_smart_documents(path: str | Path, text: str | None = None) -> Iterator[Document]:
    """Cranfield documents: title from `.T`, text from `.W` (which repeats the title), and the
    fields `author` (`.A`) and `source` (`.B`) when present. `text`, when given, is the file's
    content (e.g. read from an archive)."""
    for _, doc_id, fields in _records(read_text(path) if text is None else text, path):
        named = {name: " ".join(fields[letter].split()) for letter, name in SMART_FIELDS.items()
                 if letter in fields}
        yield Document(doc_id, " ".join(fields.get("T", "").split()),
                       " ".join(fields.get("W", "").split()), named or None)


def smart_places(path: Path) -> Iterator[tuple[str, Path, int]]:
    """(document id, file, line of its `.I`) of every record of a SMART file."""
    for line, doc_id, _ in _records(read_text(path), path):
        yield doc_id, path, line


def read_smart_queries(path: str | Path, renumber: bool = True, text: str | None = None) -> Queries:
    """Cranfield queries from `.W`. Cranfield's qrels number queries 1..225 by
    position, not by their `.I` numbers, so `renumber` (default) ids them by position."""
    queries = Queries()
    records = _records(read_text(path) if text is None else text, path)
    for position, (line, qid, fields) in enumerate(records, 1):
        text = " ".join(fields.get("W", "").split())
        if not text:
            raise InputError(f"query {qid!r} has no '.W' text", path, line)
        key = str(position) if renumber else str(int(qid)) if qid.isascii() and qid.isdigit() else qid
        if key in queries:
            raise InputError(f"duplicate query id {key!r}", path, line)
        queries[key] = text
    return queries


def cranfield_gain(code: int) -> int:
    """Cleverdon's codes (1 = complete answer .. 4 = minimum interest, -1 = not
    relevant) as TREC gains where higher is better: 5 - code, and -1 -> 0."""
    return 0 if code < 1 else 5 - code


def read_cranfield_qrels(path: str | Path, text: str | None = None) -> Qrels:
    """Cranfield's `cranqrel` (query doc code), codes mapped by `cranfield_gain`."""
    qrels = Qrels()
    lines = (read_text(path) if text is None else text).splitlines()
    for n, line in enumerate(lines, 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 3 or not all(re.fullmatch(r"-?[0-9]+", p) for p in parts):
            raise InputError("expected 3 integers 'query doc code'", path, n)
        code = int(parts[2])
        if code not in (-1, 1, 2, 3, 4, 5):
            raise InputError(f"relevance code {code} is not one of -1, 1..5", path, n)
        qrels.setdefault(parts[0], {})[parts[1]] = cranfield_gain(code)
    if not qrels:
        raise InputError("no judgements found", path)
    return qrels
