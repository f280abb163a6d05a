"""Document text store: SQLite, doc id -> (title, text), in indexing order.

Later stages (rerankers, readers, RM3 display) need the raw text; SQLite
gives random access without loading the collection into memory. A document's
other named fields and its metadata (Document.fields, Document.metadata) go
into a second table, `extra` (docno, fields JSON, metadata JSON), created only
when some document has them: a store of plain documents is the same file as
before fields existed, and stores written before then read as before.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from retrieval.errors import InputError
from retrieval.types import Document

FILENAME = "docs.sqlite"
_SCHEMA = "CREATE TABLE docs (docno INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, title TEXT, text TEXT)"
_EXTRA_SCHEMA = "CREATE TABLE extra (docno INTEGER PRIMARY KEY, fields TEXT, metadata TEXT)"


def _json(value: object) -> str | None:
    return None if not value else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _document(row: tuple) -> Document:
    """A Document from (id, title, text[, fields JSON, metadata JSON])."""
    if len(row) == 3 or (row[3] is None and row[4] is None):
        return Document(*row[:3])
    return Document(*row[:3], json.loads(row[3]) if row[3] else None, json.loads(row[4]) if row[4] else None)


def write_docstore(path: Path, documents: Iterable[Document]) -> Iterator[Document]:
    """Store documents while passing them through (so indexing reads the collection once).

    Raises InputError on a duplicate doc id.
    """
    con = sqlite3.connect(path)
    try:
        con.execute(_SCHEMA)
        extra = False
        for docno, doc in enumerate(documents):
            try:
                con.execute("INSERT INTO docs VALUES (?, ?, ?, ?)", (docno, doc.id, doc.title, doc.text))
            except sqlite3.IntegrityError:
                raise InputError(f"duplicate document id {doc.id!r} (document {docno + 1} "
                                 "of the collection); doc ids must be unique") from None
            if doc.fields or doc.metadata:
                if not extra:
                    con.execute(_EXTRA_SCHEMA)
                    extra = True
                con.execute("INSERT INTO extra VALUES (?, ?, ?)", (docno, _json(doc.fields),
                                                                   _json(doc.metadata)))
            yield doc
        con.commit()
    except sqlite3.OperationalError as e:  # the system refused a write: an OSError, as numpy's would be
        raise _refused(e, path) from None
    finally:
        con.close()


def _refused(error: sqlite3.OperationalError, path: Path) -> OSError:
    """SQLite's error for a write the system refused, as an OSError naming the file."""
    if getattr(error, "sqlite_errorcode", None) == getattr(sqlite3, "SQLITE_FULL", 13):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return OSError(errno.EIO, f"cannot write the doc store ({error})", str(path))


class DocStore:
    """Read-only access to a stored collection; safe to share between threads."""

    def __init__(self, path: Path):
        if not Path(path).is_file():
            raise InputError("doc store is missing; rebuild the index", path)
        self.path = Path(path)
        self._local = threading.local()

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            try:
                con.execute("SELECT docno, id, title, text FROM docs LIMIT 0")
            except sqlite3.DatabaseError as e:  # not a database, or not one with the docs table
                con.close()
                raise InputError(f"not a doc store this tool wrote ({e}); rebuild the index",
                                 self.path) from None
            self._local.con = con
            self._local.extra = con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'"
                                            " AND name = 'extra'").fetchone() is not None
        return con

    def _select(self) -> str:
        """The columns of a Document, joined with the extra table when the store has one."""
        self._con()
        if self._local.extra:
            return ("SELECT d.id, d.title, d.text, e.fields, e.metadata FROM docs d"
                    " LEFT JOIN extra e ON e.docno = d.docno")
        return "SELECT d.id, d.title, d.text FROM docs d"

    @property
    def has_extra(self) -> bool:
        """Whether some document has named fields or metadata."""
        self._con()
        return bool(self._local.extra)

    def check(self) -> None:
        """InputError naming the file unless it is a doc store this package wrote (its docs table)."""
        self._con()

    def __len__(self) -> int:
        return self._con().execute("SELECT COUNT(*) FROM docs").fetchone()[0]

    def get(self, doc_id: str) -> Document:
        """The document with this id; InputError if unknown."""
        row = self._con().execute(self._select() + " WHERE d.id = ?", (doc_id,)).fetchone()
        if row is None:
            raise InputError(f"unknown document id {doc_id!r}", self.path)
        return _document(row)

    def get_many(self, doc_ids: Iterable[str]) -> list[Document]:
        """Documents in the order of `doc_ids`."""
        return [self.get(d) for d in doc_ids]

    def __iter__(self) -> Iterator[Document]:
        """All documents in indexing order."""
        yield from (_document(row) for row in self._con().execute(self._select() + " ORDER BY d.docno"))

    def metadata(self) -> Iterator[tuple[str, dict]]:
        """(doc id, metadata) of every document with metadata, in indexing order."""
        if not self.has_extra:
            return
        for doc_id, meta in self._con().execute(
                "SELECT d.id, e.metadata FROM extra e JOIN docs d ON d.docno = e.docno"
                " WHERE e.metadata IS NOT NULL ORDER BY e.docno"):
            yield doc_id, json.loads(meta)
