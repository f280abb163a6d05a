"""TREC formats: <DOC> collections, topics, qrels and run files."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

from retrieval.errors import InputError
from retrieval.formats.textfile import check_id, is_word, numbered_lines, read_text
from retrieval.storage import write_output
from retrieval.types import Document, Qrels, Queries, Run

_DOC = re.compile(r"<DOC>(.*?)</DOC>", re.S | re.I)
_DOCNO = re.compile(r"<DOCNO>\s*(.*?)\s*</DOCNO>", re.S | re.I)
_TAG = re.compile(r"<[^>]*>")


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _check_balanced(text: str, path: Path, open_tag: str, close_tag: str) -> None:
    """Every opening tag must be closed before the next opens."""
    depth, pos = 0, 0
    pattern = re.compile(f"({open_tag})|({close_tag})", re.I)
    for m in pattern.finditer(text):
        depth += 1 if m.group(1) else -1
        if depth not in (0, 1):
            what = "unexpected " + (open_tag if m.group(1) else close_tag)
            raise InputError(f"{what}; expected {open_tag} ... {close_tag} blocks", path,
                             _line_of(text, m.start()))
        pos = m.start()
    if depth:
        raise InputError(f"{open_tag} is never closed; expected {close_tag}", path, _line_of(text, pos))


_BLOCK = re.compile(r"<([A-Za-z][A-Za-z0-9]*)\b[^>]*>(.*?)</\1\s*>", re.S | re.I)
_NOT_FIELDS = ("docno", "docid")


def trec_fields(body: str) -> dict[str, str] | None:
    """The named fields of a TREC document (`<TITLE>`, `<TEXT>`, `<HEAD>`, ...: each outermost tagged
    block but the DOCNO, lower-cased, tags inside dropped, repeated blocks joined), None for none."""
    fields: dict[str, str] = {}
    for m in _BLOCK.finditer(body):
        name = m.group(1).lower()
        if name in _NOT_FIELDS:
            continue
        text = " ".join(_TAG.sub(" ", m.group(2)).split())
        fields[name] = f"{fields[name]} {text}".strip() if name in fields else text
    return fields or None


def read_trec_documents(path: str | Path) -> Iterator[Document]:
    """Documents of a TREC <DOC><DOCNO>...</DOC> file; the text is the body with tags removed."""
    path = Path(path)
    text = read_text(path)
    _check_balanced(text, path, "<DOC>", "</DOC>")
    found = False
    for m in _DOC.finditer(text):
        found = True
        body = m.group(1)
        docno = _DOCNO.search(body)
        if not docno or not docno.group(1):
            raise InputError("document without <DOCNO>; expected <DOCNO>id</DOCNO>", path,
                             _line_of(text, m.start()))
        if _DOCNO.search(body, docno.end()):
            raise InputError("document with two <DOCNO> tags; expected one id per <DOC>", path,
                             _line_of(text, m.start()))
        contents = _TAG.sub(" ", body[: docno.start()] + body[docno.end():])
        check_id(docno.group(1), "<DOCNO>", path, _line_of(text, m.start()))
        yield Document(docno.group(1), "", " ".join(contents.split()), trec_fields(body))
    if not found:
        raise InputError("no <DOC> blocks found; expected a TREC document file", path)


def trec_places(path: Path) -> Iterator[tuple[str, Path, int]]:
    """(document id, file, line of its <DOC>) of every document of a TREC <DOC> file."""
    text = read_text(path)
    for m in _DOC.finditer(text):
        docno = _DOCNO.search(m.group(1))
        yield (docno.group(1) if docno else ""), path, _line_of(text, m.start())


_TOP = re.compile(r"<top>(.*?)</top>", re.S | re.I)
_FIELD = re.compile(r"<(num|title|desc|narr)>(.*?)(?=<(?:/?num|/?title|/?desc|/?narr|/top)>|\Z)",
                    re.S | re.I)
_FIELD_LABEL = re.compile(r"^\s*(Number:|Description:|Narrative:|Topic:)", re.I)


def _topic_fields(block: str) -> dict[str, str]:
    fields = {}
    for name, value in _FIELD.findall(block):
        fields[name.lower()] = " ".join(_FIELD_LABEL.sub("", value).split())
    return fields


TOPIC_FIELDS = ("title", "desc", "narr")


def check_topic_field(field: object) -> str:
    """A topic field choice: title, desc, narr or a "+"-joined combination such as title+desc."""
    if not isinstance(field, str) or not all(f in TOPIC_FIELDS for f in field.split("+")):
        raise InputError(f"unknown topic field {field!r}; expected title, desc, narr or a"
                         " combination such as title+desc")
    return field


def read_trec_topics(path: str | Path, field: str = "title") -> Queries:
    """Topics in TREC <top> form (e.g. Vaswani, Robust04) or CACM's <DOC><DOCNO> form.

    For <top> topics, `field` picks the query text: "title", "desc", "narr" or a
    "+"-joined combination. For <DOC> topics the whole text is the query.
    """
    check_topic_field(field)
    path = Path(path)
    text = read_text(path)
    queries = Queries()
    if re.search(r"<top>", text, re.I):
        _check_balanced(text, path, "<top>", "</top>")
        for m in _TOP.finditer(text):
            fields = _topic_fields(m.group(1))
            line = _line_of(text, m.start())
            if not fields.get("num"):
                raise InputError("topic without <num>; expected <num>id", path, line)
            query = " ".join(fields.get(f, "") for f in field.split("+")).strip()
            _add_query(queries, fields["num"], query, path, line)
    elif re.search(r"<DOC>", text, re.I):
        only_text(field, "<DOC> topics", path)
        for doc in read_trec_documents(path):
            _add_query(queries, doc.id, doc.text, path, None)
    else:
        raise InputError("unknown topic format; expected TREC <top> or <DOC> topics, "
                         "BEIR queries.jsonl, a qid<TAB>text file or SMART .I/.W", path)
    return queries


def only_text(field: str, form: str, where: str | Path) -> None:
    """Refuse a topic field other than the default for topics that have one text each (only TREC <top>
    topics have fields), rather than ignore it."""
    if field != "title":
        raise InputError(f"topic field {field!r} applies only to TREC <top> topics, which have"
                         f" fields; {form} have one text each", where)


def _add_query(queries: Queries, qid: str, text: str, path: Path, line: int | None) -> None:
    check_id(qid, "query id", path, line)
    if qid in queries:
        raise InputError(f"duplicate query id {qid!r}", path, line)
    if not text.strip():
        raise InputError(f"query {qid!r} is empty", path, line)
    queries[qid] = text


def read_tsv_topics(path: str | Path) -> Queries:
    """Topics as `qid<TAB>text` lines (MS MARCO style)."""
    queries = Queries()
    for n, line in numbered_lines(path):
        parts = line.split("\t")
        if len(parts) != 2:
            raise InputError(f"expected 'qid<TAB>text', found {len(parts)} tab-separated fields",
                             path, n)
        _add_query(queries, parts[0].strip(), parts[1].strip(), Path(path), n)
    return queries


def read_qrels(path: str | Path) -> Qrels:
    """TREC qrels (`qid iter docid rel`, whitespace) or BEIR TSV (`query-id corpus-id score` + header)."""
    qrels = Qrels()
    lines = numbered_lines(path)
    if lines and lines[0][1].split()[:2] == ["query-id", "corpus-id"]:
        lines = lines[1:]
        take = _beir_qrel
    else:
        take = _trec_qrel
    for n, line in lines:
        qid, docid, rel = take(line, path, n)
        judged = qrels.setdefault(qid, {})
        if judged.get(docid, rel) != rel:  # a repeated line is harmless; a second, other grade is not
            raise InputError(f"query {qid!r} judges document {docid!r} twice, {judged[docid]} and {rel};"
                             " expected one grade", path, n)
        judged[docid] = rel
    if not qrels:
        raise InputError("no judgements found; expected TREC qrels lines 'qid 0 docid rel'", path)
    return qrels


def _grade(value: str, path: str | Path, n: int) -> int:
    try:
        grade = int(value)
    except ValueError:
        raise InputError(f"relevance {value!r} is not an integer", path, n) from None
    if not -2**31 <= grade < 2**31:
        raise InputError(f"relevance {value} is out of range; expected a 32-bit integer", path, n)
    return grade


def _trec_qrel(line: str, path: str | Path, n: int) -> tuple[str, str, int]:
    parts = line.split()
    if len(parts) != 4:
        raise InputError(f"expected 4 fields 'qid iter docid rel', found {len(parts)}", path, n)
    return parts[0], parts[2], _grade(parts[3], path, n)


def _beir_qrel(line: str, path: str | Path, n: int) -> tuple[str, str, int]:
    parts = line.split("\t") if "\t" in line else line.split()
    if len(parts) != 3:
        raise InputError(f"expected 3 fields 'query-id corpus-id score', found {len(parts)}", path, n)
    return parts[0].strip(), parts[1].strip(), _grade(parts[2].strip(), path, n)


def format_score(score: float) -> str:
    """Shortest text that reads back as the same float: lossless and deterministic."""
    return repr(float(score))


def _check_ranking(qid: str, ranking: list[tuple[str, float]]) -> None:
    """What a run file needs of one query's hits: word ids, each doc once, finite scores (bulk checks
    first, so a valid ranking costs little)."""
    check_id(qid, "query id")
    ids = [d for d, _ in ranking]
    if len(set(ids)) != len(ids) or not all(map(is_word, ids)):
        seen: set[str] = set()
        for docid in ids:
            check_id(docid, f"query {qid!r}: doc id")
            if docid in seen:
                raise InputError(f"query {qid!r}: document {docid!r} appears twice in the run")
            seen.add(docid)
    if not all(map(math.isfinite, (s for _, s in ranking))):
        docid, score = next((d, s) for d, s in ranking if not math.isfinite(s))
        raise InputError(f"query {qid!r}: document {docid!r} has score {score}; expected a finite"
                         " number (check the model's parameters)")


def check_tag(tag: str) -> str:
    """A run tag: the last column of every line, so one non-empty word."""
    if not isinstance(tag, str):
        raise InputError(f"run tag must be a string, got {type(tag).__name__} {tag!r}")
    if not is_word(tag):
        raise InputError(f"run tag {tag!r} must be a non-empty word without spaces or control characters")
    return tag


def format_run(run: Run, tag: str = "retrieval") -> str:
    """A run in TREC format: `qid Q0 docid rank score tag`, ranks from 1."""
    check_tag(tag)
    if not isinstance(run, Run):
        raise InputError(f"expected a Run to write, got {type(run).__name__}")
    lines = []
    for qid, ranking in run.items():
        _check_ranking(qid, ranking)
        for i, (docid, score) in enumerate(ranking, 1):
            lines.append(f"{qid} Q0 {docid} {i} {format_score(score)} {tag}\n")
    return "".join(lines)


def write_run(run: Run, path: str | Path, tag: str = "retrieval") -> None:
    """Write a TREC run file whole or not at all (`-` is stdout; see storage.write_output)."""
    write_output(path, format_run(run, tag).encode())


def read_run(path: str | Path) -> Run:
    """Read a TREC run file (6 fields per line); order comes from the scores, ties by doc id."""
    rankings: dict[str, list[tuple[str, float]]] = {}
    seen: set[tuple[str, str]] = set()
    for n, line in numbered_lines(path):
        parts = line.split()
        if len(parts) != 6:
            raise InputError(f"expected 6 fields 'qid Q0 docid rank score tag', found {len(parts)}",
                             path, n)
        qid, docid = parts[0], parts[2]
        if not is_word(qid) or not is_word(docid):  # e.g. a control character: say where
            check_id(qid, "query id", path, n)
            check_id(docid, "doc id", path, n)
        try:
            score = float(parts[4])
        except ValueError:
            raise InputError(f"score {parts[4]!r} is not a number", path, n) from None
        if not math.isfinite(score):
            raise InputError(f"score {parts[4]!r} is not a finite number", path, n)
        if (qid, docid) in seen:
            raise InputError(f"document {docid!r} appears twice for query {qid!r}", path, n)
        seen.add((qid, docid))
        rankings.setdefault(qid, []).append((docid, score))
    return Run(rankings)
