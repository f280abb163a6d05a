"""Document text store: SQLite, doc id -> (title, text), in indexing order.

Later stages (rerankers, readers, RM3 display) need the raw text; SQLite
gives random access without loading the collection into memory. Each
document's title and text are stored as one zstd frame (`packed`: the
title's length in UTF-8 bytes as 4 little-endian bytes, the title, the
text), compressed (zstd level LEVEL) with a dictionary trained on the first SAMPLE_DOCS
documents (kept in the `meta` table): passages of a few hundred bytes
compress about 2x with it, barely without. Doc stores written before
compression (a plain `title`, `text` table) still read. A document's
other named fields and its metadata (Document.fields, Document.metadata) go
into a second table, `extra` (docno, fields JSON, metadata JSON), created only
when some document has them; stores written before fields existed read as
before.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import sqlite3
import struct
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import zstandard

from retrieval.errors import InputError
from retrieval.types import Document

FILENAME = "docs.sqlite"
_SCHEMA = "CREATE TABLE docs (docno INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, packed BLOB NOT NULL)"
_META = "CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB)"
COMPRESSION = "zstd-1"  # meta "compression": the packing above
SAMPLE_DOCS = 2000      # documents the dictionary is trained on (the first ones)
DICTIONARY_BYTES = 64 * 1024
LEVEL = 1  # level 3 compressed 10% smaller and 1.6x slower (the build's time matters more)
BATCH = 1024  # documents inserted at a time
_EXTRA_SCHEMA = "CREATE TABLE extra (docno INTEGER PRIMARY KEY, fields TEXT, metadata TEXT)"


def _json(value: object) -> str | None:
    return None if not value else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _pack(doc: Document) -> bytes:
    title = doc.title.encode()
    return struct.pack("<I", len(title)) + title + doc.text.encode()


def _unpack(raw: bytes) -> tuple[str, str]:
    (size,) = struct.unpack_from("<I", raw)
    return raw[4:4 + size].decode(), raw[4 + size:].decode()


def _dictionary(sample: list[Document]) -> bytes:
    """A zstd dictionary trained on the sample ("" when it is too small to train one)."""
    if len(sample) < 100:
        return b""
    try:
        return zstandard.train_dictionary(DICTIONARY_BYTES, [_pack(d) for d in sample]).as_bytes()
    except zstandard.ZstdError:
        return b""


def _compressor(dictionary: bytes) -> zstandard.ZstdCompressor:
    if dictionary:
        return zstandard.ZstdCompressor(level=LEVEL, dict_data=zstandard.ZstdCompressionDict(dictionary))
    return zstandard.ZstdCompressor(level=LEVEL)


def _document(row: tuple) -> Document:
    """A Document from (id, title, text[, fields JSON, metadata JSON])."""
    if len(row) == 3 or (row[3] is None and row[4] is None):
        return Document(*row[:3])
    return Document(*row[:3], json.loads(row[3]) if row[3] else None, json.loads(row[4]) if row[4] else None)


def write_docstore(path: Path, documents: Iterable[Document]) -> Iterator[Document]:
    """Store documents while passing them through (so indexing reads the collection once); the first
    SAMPLE_DOCS pass once the dictionary is trained on them.

    Raises InputError on a duplicate doc id.
    """
    con = sqlite3.connect(path)
    try:
        con.execute(_SCHEMA)
        con.execute(_META)
        documents = iter(documents)
        sample = list(itertools.islice(documents, SAMPLE_DOCS))
        dictionary = _dictionary(sample)
        con.executemany("INSERT INTO meta VALUES (?, ?)", [("compression", COMPRESSION),
                                                            ("dictionary", dictionary)])
        compress = _compressor(dictionary).compress
        extra = False
        rows: list[tuple[int, str, bytes]] = []
        for docno, doc in enumerate(itertools.chain(sample, documents)):
            rows.append((docno, doc.id, compress(_pack(doc))))
            if len(rows) == BATCH:
                _insert(con, rows)
            if doc.fields or doc.metadata:
                if not extra:
                    con.execute(_EXTRA_SCHEMA)
                    extra = True
                con.execute("INSERT INTO extra VALUES (?, ?, ?)", (docno, _json(doc.fields),
                                                                   _json(doc.metadata)))
            yield doc
        _insert(con, rows)
        con.commit()
    except sqlite3.OperationalError as e:  # the system refused a write: an OSError, as numpy's would be
        raise _refused(e, path) from None
    finally:
        con.close()


def _insert(con: sqlite3.Connection, rows: list[tuple[int, str, bytes]]) -> None:
    """Insert a batch of (docno, id, packed) rows and empty the list; InputError naming the first
    document whose id is already stored."""
    try:
        con.executemany("INSERT INTO docs VALUES (?, ?, ?)", rows)
    except sqlite3.IntegrityError:
        docno, doc_id, _ = rows[con.execute("SELECT COUNT(*) FROM docs").fetchone()[0] - rows[0][0]]
        raise InputError(f"duplicate document id {doc_id!r} (document {docno + 1} "
                         "of the collection); doc ids must be unique") from None
    rows.clear()


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
                tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if "meta" in tables:
                    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
                    if (meta.get("compression") != COMPRESSION
                            or not isinstance(meta.get("dictionary"), bytes)):
                        raise sqlite3.DatabaseError(f"unknown compression {meta.get('compression')!r}")
                    con.execute("SELECT docno, id, packed FROM docs LIMIT 0")
                    dictionary = meta["dictionary"]
                    self._local.decompress = (zstandard.ZstdDecompressor(
                        dict_data=zstandard.ZstdCompressionDict(dictionary)) if dictionary
                        else zstandard.ZstdDecompressor()).decompress
                else:  # written before compression
                    con.execute("SELECT docno, id, title, text FROM docs LIMIT 0")
                    self._local.decompress = None
            except (sqlite3.DatabaseError, zstandard.ZstdError) as e:  # not a doc store this tool wrote
                con.close()
                raise InputError(f"not a doc store this tool wrote ({e}); rebuild the index",
                                 self.path) from None
            self._local.con = con
            self._local.extra = con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'"
                                            " AND name = 'extra'").fetchone() is not None
        return con

    def _select(self) -> str:
        """The columns of a Document (title and text packed in a compressed store), joined with the
        extra table when the store has one."""
        self._con()
        body = "d.packed" if self._local.decompress is not None else "d.title, d.text"
        if self._local.extra:
            return (f"SELECT d.id, {body}, e.fields, e.metadata FROM docs d"
                    " LEFT JOIN extra e ON e.docno = d.docno")
        return f"SELECT d.id, {body} FROM docs d"

    def _document(self, row: tuple) -> Document:
        """A Document from a row of `_select`."""
        decompress = self._local.decompress
        if decompress is not None:
            try:
                row = (row[0], *_unpack(decompress(row[1])), *row[2:])
            except (zstandard.ZstdError, struct.error, UnicodeDecodeError, TypeError):
                raise InputError(f"document {row[0]!r} is not stored as this tool writes it; rebuild the"
                                 " index", self.path) from None
        return _document(row)

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
        return self._document(row)

    def get_many(self, doc_ids: Iterable[str]) -> list[Document]:
        """Documents in the order of `doc_ids`."""
        return [self.get(d) for d in doc_ids]

    def __iter__(self) -> Iterator[Document]:
        """All documents in indexing order."""
        yield from (self._document(row) for row in
                    self._con().execute(self._select() + " ORDER BY d.docno"))

    def metadata(self) -> Iterator[tuple[str, dict]]:
        """(doc id, metadata) of every document with metadata, in indexing order."""
        if not self.has_extra:
            return
        for doc_id, meta in self._con().execute(
                "SELECT d.id, e.metadata FROM extra e JOIN docs d ON d.docno = e.docno"
                " WHERE e.metadata IS NOT NULL ORDER BY e.docno"):
            yield doc_id, json.loads(meta)
