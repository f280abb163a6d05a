"""JSON collections: BEIR (`_id`, `title`, `text`; also queries.jsonl) and Anserini's
JsonCollection (`id`, `contents`), one JSON object per line (JSON Lines, streamed) or a file
holding one JSON array of them (read whole), as pyserini indexes them."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import orjson

from retrieval.errors import InputError
from retrieval.formats.textfile import check_id, check_utf8, decode, head_text, read_text, streamed_raw_lines
from retrieval.types import Document, Queries

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz")
_PLAIN_KEYS = {"_id", "title", "text", "id", "contents"}  # records of only these: read by orjson alone
EXPECTED = "expected a JSON object with an \"_id\" (BEIR) or \"id\" and \"contents\" (Anserini)"


def _records(path: str | Path, expected: str = EXPECTED) -> Iterator[tuple[int, dict]]:
    """(line number, record) for each JSON object whose id is a string or number and whose text
    fields are strings: one object per line, or the elements of a JSON array (a file starting
    with `[`, which Anserini's JsonCollection also reads)."""
    for n, record, escaped in _parsed(path):
        key = "_id" if isinstance(record, dict) and "_id" in record else "id"
        if not isinstance(record, dict) or not isinstance(record.get(key), (str, int)):
            raise InputError(expected, path, n)
        fields = ("title", "text") if key == "_id" else ("contents",)
        for field in fields:
            if not isinstance(record.get(field, ""), str):
                raise InputError(f"field {field!r} must be a string", path, n)
            if escaped:  # an escape: it may be a lone surrogate
                check_utf8(record.get(field, ""), f"field {field!r}", path, n)
        yield n, record


def _parsed(path: str | Path) -> Iterator[tuple[int, object, bool]]:
    """(line, value, whether its text has a \\u escape) per line, or per element of an array."""
    if head_text(path).lstrip().startswith("["):
        for n, value in _array_elements(path):
            yield n, value, True
        return
    for n, raw in streamed_raw_lines(path):
        try:
            value = orjson.loads(raw)  # about 3x json's speed on BEIR passages
        except orjson.JSONDecodeError:  # what json reads and orjson does not (NaN, a BOM), else
            value = _json_line(raw, path, n)  # json's error, naming the line
        else:
            if not _plain(value):  # read again as json reads it (orjson makes huge integers floats)
                value = _json_line(raw, path, n)
        yield n, value, b"\\u" in raw


def _plain(value: object) -> bool:
    """Whether orjson's reading of a line is json's: a record of only id and text keys, no float."""
    return type(value) is dict and value.keys() <= _PLAIN_KEYS and float not in set(map(type, value.values()))


def _json_line(raw: bytes, path: str | Path, n: int) -> object:
    """A JSON line read by json (its values, its error messages), for what orjson refused."""
    line = decode(raw, path, n).rstrip("\r\n")
    try:
        return json.loads(line)
    except ValueError as e:
        raise InputError(f"invalid JSON ({e.args[0].split(':')[0]}); expected one JSON object"
                         " per line", path, n) from None
    except RecursionError:
        raise InputError("invalid JSON (nested too deeply); expected one JSON object per line",
                         path, n) from None


def _array_elements(path: str | Path) -> Iterator[tuple[int, object]]:
    """(line where it starts, value) of each element of a file holding one JSON array (read whole)."""
    text = read_text(path)
    decoder, line, seen = json.JSONDecoder(), 1, 0
    pos = _blank(text, text.index("[") + 1)
    if text.startswith("]", pos) and not text[pos + 1:].strip():
        return  # an empty array
    while pos < len(text):
        line += text.count("\n", seen, pos)
        seen = pos
        try:
            value, end = decoder.raw_decode(text, pos)
        except ValueError as e:
            raise InputError(f"invalid JSON ({e.args[0].split(':')[0]}); expected an array of JSON"
                             " objects", path, line + text.count("\n", pos, getattr(e, "pos", pos))) from None
        except RecursionError:
            raise InputError("invalid JSON (nested too deeply); expected an array of JSON objects",
                             path, line) from None
        yield line, value
        pos = _blank(text, end)
        if text.startswith(",", pos):
            pos = _blank(text, pos + 1)
            continue
        where = line + text.count("\n", seen, pos)
        if text.startswith("]", pos):
            if text[pos + 1:].strip():
                raise InputError("text after the JSON array; expected nothing after its closing ']'",
                                 path, where)
            return
        if pos >= len(text):
            raise InputError("the JSON array is not closed; expected ']'", path, line)
        raise InputError("expected ',' or ']' after an element of the JSON array", path, where)
    raise InputError("the JSON array is not closed; expected ']'", path, line)


def _blank(text: str, pos: int) -> int:
    """The position of the first non-blank character at or after `pos`."""
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def read_jsonl_documents(path: str | Path) -> Iterator[Document]:
    """Documents of a JSON Lines corpus: BEIR's contents = title + " " + text; Anserini's `contents`.

    The record's id key says which: `_id` (BEIR) or `id` (Anserini's JsonCollection, whose
    other fields are not indexed by the flat index, as in Anserini's default generator).
    The record's other keys are kept (record_extras): named strings as text fields a fielded
    index can index (`retrieval index --fields`), and, with numbers, booleans, lists of strings
    and the members of a `metadata` object, as metadata that filters test.
    """
    for n, record in _records(path):
        if "_id" in record and "text" not in record:  # e.g. an Anserini record with a stray _id
            raise InputError("expected a \"text\" string beside \"_id\" (BEIR); a record has one id"
                             " key, \"_id\" (BEIR) or \"id\" (Anserini)", path, n)
        if "_id" in record:
            fields, meta = record_extras(record, ("_id", "title", "text"), path, n)
            yield Document(check_id(str(record["_id"]), "document _id", path, n),
                           record.get("title", "").strip(), record.get("text", "").strip(), fields, meta)
        elif isinstance(record.get("contents"), str):
            fields, meta = record_extras(record, ("id", "contents"), path, n)
            yield Document(check_id(str(record["id"]), "document id", path, n), "",
                           record["contents"].strip(), fields, meta)
        else:
            raise InputError("expected a \"contents\" string beside \"id\" (Anserini JsonCollection)",
                             path, n)


def record_extras(record: dict, known: tuple[str, ...], path: str | Path | None = None,
                  line: int | None = None) -> tuple[dict[str, str] | None, dict[str, object] | None]:
    """(named text fields, metadata) of a record's keys beyond `known`: a string is both a text field
    and a metadata value; a number, a boolean or a list of strings is metadata; so is each member of
    a `metadata` object (BEIR's). Anything else (null, nested objects) is left out; a value that is
    not a finite number is refused. None for none."""
    if record.keys() <= set(known):
        return None, None
    fields: dict[str, str] = {}
    meta: dict[str, object] = {}
    nested = record.get("metadata")
    items = [(k, v, True) for k, v in record.items() if k not in known and k != "metadata"]
    if isinstance(nested, dict):
        items += [(k, v, False) for k, v in nested.items() if k not in record]
    for key, value, top in items:
        if isinstance(value, str):
            check_utf8(value, f"field {key!r}", path, line)
            if top:
                fields[key] = value.strip()
            meta[key] = value
        elif isinstance(value, bool) or (isinstance(value, (int, float)) and math.isfinite(value)):
            meta[key] = value
        elif isinstance(value, (int, float)):
            raise InputError(f"metadata {key!r} must be a finite number, got {value!r}", path, line)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            meta[key] = value
    return fields or None, meta or None


def jsonl_places(path: Path) -> Iterator[tuple[str, Path, int]]:
    """(document id, file, line) of every record of a JSON Lines file or directory."""
    for file in _jsonl_files(path) if path.is_dir() else [path]:
        for n, record in _records(file):
            yield str(record.get("_id", record.get("id"))), file, n


def read_jsonl_directory(path: str | Path) -> Iterator[Document]:
    """Documents of every JSON Lines file under a directory (pyserini's `--input` layout), in sorted
    path order."""
    for file in _jsonl_files(path):
        yield from read_jsonl_documents(file)


def _jsonl_files(path: str | Path) -> list[Path]:
    """The JSON Lines files under a directory, in sorted path order."""
    return sorted(p for p in Path(path).rglob("*") if is_jsonl(p))


def is_jsonl(path: Path) -> bool:
    """Whether a file's name marks it as JSON Lines (.jsonl, .json, either gzipped)."""
    return path.name.lower().endswith(JSONL_SUFFIXES) and not path.name.startswith(".")


def read_beir_queries(path: str | Path) -> Queries:
    """Queries of a BEIR queries.jsonl."""
    queries = Queries()
    for n, record in _records(path, "expected a JSON object with an \"_id\" (BEIR queries)"):
        if "_id" not in record:
            raise InputError("expected a JSON object with an \"_id\" (BEIR queries)", path, n)
        qid, text = check_id(str(record["_id"]), "query _id", path, n), record.get("text", "")
        if qid in queries:
            raise InputError(f"duplicate query id {qid!r}", path, n)
        if not text.strip():
            raise InputError(f"query {qid!r} is empty", path, n)
        queries[qid] = text
    return queries
