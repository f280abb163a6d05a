"""Readers and writers for collection, topic, qrels and run files, chosen by sniffing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from retrieval.errors import InputError
from retrieval.formats.html import (
    HTML_SUFFIXES,
    html_directory_places,
    html_tarball_places,
    read_html_directory,
    read_html_file,
    read_html_tarball,
)
from retrieval.formats.jsonl import (
    is_jsonl,
    jsonl_places,
    read_beir_queries,
    read_jsonl_directory,
    read_jsonl_documents,
)
from retrieval.formats.smart import read_smart_documents, read_smart_queries, smart_places
from retrieval.formats.textfile import head_text
from retrieval.formats.trec import (
    only_text,
    read_qrels,
    read_run,
    read_trec_documents,
    read_trec_topics,
    read_tsv_topics,
    trec_places,
    write_run,
)
from retrieval.types import Document, Queries

__all__ = ["read_documents", "document_places", "read_topics", "read_qrels", "read_run", "write_run"]


def _head(path: Path) -> str:
    return head_text(path).lstrip()


def read_documents(path: str | Path) -> Iterator[Document]:
    """Documents from a file or directory in any supported format (sniffed)."""
    path = Path(path)
    return _DOCUMENT_READERS[_collection_format(path)][0](path)


def document_places(path: str | Path, doc_id: str) -> list[tuple[Path | str, int | None]]:
    """Where each record with this document id is, in what read_documents reads at `path`: (file,
    line; None where a file is one document). A second pass over the collection, made only to
    name a duplicate id's two places."""
    path = Path(path)
    places = _DOCUMENT_READERS[_collection_format(path)][1](path)
    return [(file, line) for found, file, line in places if found == doc_id]


def _collection_format(path: Path) -> str:
    """Which of _DOCUMENT_READERS reads the collection at `path` (sniffed), or InputError."""
    if path.is_dir():
        return _directory_format(path)
    if not path.exists():
        raise InputError("collection file not found", path)
    name = path.name.lower()
    if name.endswith((".tar.gz", ".tgz", ".tar")):
        return "html-tarball"
    if name.endswith((".html", ".htm")):
        return "html-file"
    head = _head(path)
    if is_jsonl(path) or head.startswith(("{", "[")):
        return "json"
    if head[:5].upper() == "<DOC>":
        return "trec"
    if head.startswith(".I"):
        return "smart"
    raise InputError("unknown collection format; expected JSON (BEIR or Anserini), TREC <DOC>, "
                     "SMART .I or HTML files (a directory or .tar.gz)", path)


def _directory_format(path: Path) -> str:
    """A directory of HTML pages (Anserini's HtmlCollection) or of JSON Lines files (pyserini's
    `--input`): whichever it holds, never both."""
    files = [p for p in path.rglob("*") if not p.is_dir()]
    html = any(p.suffix.lower() in HTML_SUFFIXES for p in files)
    jsonl = any(is_jsonl(p) for p in files)
    if html and jsonl:
        raise InputError("directory holds both .html and JSON Lines files; expected one kind", path)
    if html:
        return "html-directory"
    if jsonl:
        return "json-directory"
    raise InputError("directory holds no .html or .jsonl/.json files; pass a collection file instead", path)


# format: (reader of its documents, reader of (doc id, file, line) per record)
_DOCUMENT_READERS: dict[str, tuple[Callable, Callable]] = {
    "html-tarball": (read_html_tarball, html_tarball_places),
    "html-file": (lambda path: iter([read_html_file(path)]), lambda path: [(path.stem, path, None)]),
    "html-directory": (read_html_directory, html_directory_places),
    "json": (read_jsonl_documents, jsonl_places),
    "json-directory": (read_jsonl_directory, jsonl_places),
    "trec": (read_trec_documents, trec_places),
    "smart": (read_smart_documents, smart_places),
}


def read_topics(path: str | Path, field: str = "title") -> Queries:
    """Topics from a file in any supported format (sniffed)."""
    path = Path(path)
    head = _head(path)
    if path.name.lower().endswith((".jsonl", ".jsonl.gz")) or head.startswith("{"):
        only_text(field, "BEIR queries", path)
        return read_beir_queries(path)
    if head.startswith("<"):
        return read_trec_topics(path, field)
    if head.startswith(".I"):
        only_text(field, "SMART .I/.W queries", path)
        return read_smart_queries(path, renumber=False)
    if "\t" in head.split("\n", 1)[0]:
        only_text(field, "qid<TAB>text topics", path)
        return read_tsv_topics(path)
    raise InputError("unknown topic format; expected TREC <top> or <DOC> topics, BEIR "
                     "queries.jsonl, a qid<TAB>text file or SMART .I/.W", path)
