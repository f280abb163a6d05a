"""Readers and writers for collection, topic, qrels and run files, chosen by sniffing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from retrieval.errors import InputError
from retrieval.formats.html import HTML_SUFFIXES, read_html_directory, read_html_file, read_html_tarball
from retrieval.formats.jsonl import is_jsonl, read_beir_queries, read_jsonl_directory, read_jsonl_documents
from retrieval.formats.smart import read_smart_documents, read_smart_queries
from retrieval.formats.textfile import head_text
from retrieval.formats.trec import (
    read_qrels,
    read_run,
    read_trec_documents,
    read_trec_topics,
    read_tsv_topics,
    write_run,
)
from retrieval.types import Document, Queries

__all__ = ["read_documents", "read_topics", "read_qrels", "read_run", "write_run"]


def _head(path: Path) -> str:
    return head_text(path).lstrip()


def read_documents(path: str | Path) -> Iterator[Document]:
    """Documents from a file or directory in any supported format (sniffed)."""
    path = Path(path)
    if path.is_dir():
        return _read_directory(path)
    if not path.exists():
        raise InputError("collection file not found", path)
    name = path.name.lower()
    if name.endswith((".tar.gz", ".tgz", ".tar")):
        return read_html_tarball(path)
    if name.endswith((".html", ".htm")):
        return iter([read_html_file(path)])
    head = _head(path)
    if is_jsonl(path) or head.startswith(("{", "[")):
        return read_jsonl_documents(path)
    if head[:5].upper() == "<DOC>":
        return read_trec_documents(path)
    if head.startswith(".I"):
        return read_smart_documents(path)
    raise InputError("unknown collection format; expected JSON (BEIR or Anserini), TREC <DOC>, "
                     "SMART .I or HTML files (a directory or .tar.gz)", path)


def _read_directory(path: Path) -> Iterator[Document]:
    """A directory of HTML pages (Anserini's HtmlCollection) or of JSON Lines files (pyserini's
    `--input`): whichever it holds, never both."""
    files = [p for p in path.rglob("*") if not p.is_dir()]
    html = any(p.suffix.lower() in HTML_SUFFIXES for p in files)
    jsonl = any(is_jsonl(p) for p in files)
    if html and jsonl:
        raise InputError("directory holds both .html and JSON Lines files; expected one kind", path)
    if html:
        return read_html_directory(path)
    if jsonl:
        return read_jsonl_directory(path)
    raise InputError("directory holds no .html or .jsonl/.json files; pass a collection file instead", path)


def read_topics(path: str | Path, field: str = "title") -> Queries:
    """Topics from a file in any supported format (sniffed)."""
    path = Path(path)
    head = _head(path)
    if path.name.lower().endswith((".jsonl", ".jsonl.gz")) or head.startswith("{"):
        return read_beir_queries(path)
    if head.startswith("<"):
        return read_trec_topics(path, field)
    if head.startswith(".I"):
        return read_smart_queries(path, renumber=False)
    if "\t" in head.split("\n", 1)[0]:
        return read_tsv_topics(path)
    raise InputError("unknown topic format; expected TREC <top> or <DOC> topics, BEIR "
                     "queries.jsonl, a qid<TAB>text file or SMART .I/.W", path)
