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

import contextlib
import errno
import itertools
import json
import os
import queue
import sqlite3
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import zstandard

from retrieval.errors import InputError
from retrieval.storage import checksum_file
from retrieval.types import Document

FILENAME = "docs.sqlite"
_SCHEMA = "CREATE TABLE docs (docno INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, packed BLOB NOT NULL)"
_META = "CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB)"
COMPRESSION = "zstd-1"  # meta "compression": the packing above
SAMPLE_DOCS = 2000      # documents the dictionary is trained on (the first ones)
DICTIONARY_BYTES = 64 * 1024
LEVEL = 1  # level 3 compressed 10% smaller and 1.6x slower (the build's time matters more)
BATCH = 1024  # documents compressed and inserted at a time
QUEUED = 8  # batches waiting for the doc-store thread at most
INSERT_ROWS = 333  # rows an INSERT statement inserts (3 values each: within SQLite's smallest limit, 999)
_INSERT = "INSERT INTO docs VALUES {}"
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
    """Store documents while passing them through (so indexing reads the collection once), in the
    doc-store thread of a DocStoreWriter; the store is complete once the documents are.

    Raises InputError on a duplicate doc id.
    """
    with DocStoreWriter(path) as writer:
        yield from writer.passing(documents)
        writer.finish()


class DocStoreWriter:
    """Writes a doc store in a thread of its own while the caller's thread passes the documents
    through (`passing`), as tantivy's writer hands its doc store to a compressor thread: the
    dictionary is trained on the first SAMPLE_DOCS documents, each BATCH of documents is packed,
    compressed in one call (zstd releases the GIL for the whole batch) and inserted in a few
    statements (SQLite releases it for each), so the thread rarely waits for the GIL. At most QUEUED
    batches wait for it (bounded memory). `finish` waits for the store to be complete and returns
    its checksum (storage.checksum_file), raising the thread's error if it had one (a duplicate id,
    a full disk); leaving the `with` block without `finish` stops the thread and leaves the store
    unfinished (the build that owns it removes it). The store is byte for byte the one written in
    the caller's thread (the same rows, inserted in the same order)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._queue: queue.Queue[list[Document] | None] = queue.Queue(QUEUED)
        self._error: BaseException | None = None
        self._stopped = False  # close: store nothing more
        self._ended = False  # the end was handed over
        self._checksum: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._run, name="doc store", daemon=True)
        self._thread.start()

    def __enter__(self) -> DocStoreWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def passing(self, documents: Iterable[Document]) -> Iterator[Document]:
        """Each document, once handed to the thread (a batch at a time); the thread's error, if
        any, is raised here, at the next batch."""
        batch: list[Document] = []
        for doc in documents:
            batch.append(doc)
            if len(batch) == BATCH:
                self._put(batch)
                batch = []
            yield doc
        self._put(batch)
        self._put(None)  # the end: the thread commits

    def finish(self) -> dict[str, Any]:
        """Wait for the store to be complete (after `passing` has passed every document); its
        {sha256, bytes}. Raises the thread's error."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._checksum is None:
            raise RuntimeError("the doc store was not given all its documents")
        return self._checksum

    def close(self) -> None:
        """Stop the thread (what it has not stored is dropped) and wait for it."""
        if self._thread.is_alive():
            self._stopped = True
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(None)
            self._thread.join()

    def _put(self, batch: list[Document] | None) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(batch)

    def _batches(self) -> Iterator[list[Document]]:
        """The batches handed over, until the end (None) or `close`."""
        while not self._stopped:
            batch = self._queue.get()
            if batch is None:
                self._ended = True
                return
            yield batch

    def _run(self) -> None:
        con = None
        try:
            con = sqlite3.connect(self.path, check_same_thread=False)
            con.execute(_SCHEMA)
            con.execute(_META)
            batches = self._batches()
            first: list[list[Document]] = []
            for batch in batches:
                first.append(batch)
                if len(first) * BATCH >= SAMPLE_DOCS:
                    break
            dictionary = _dictionary([doc for batch in first for doc in batch][:SAMPLE_DOCS])
            con.executemany("INSERT INTO meta VALUES (?, ?)", [("compression", COMPRESSION),
                                                                ("dictionary", dictionary)])
            compress, extra, docno = _batch_compressor(_compressor(dictionary)), False, 0
            for batch in itertools.chain(first, batches):
                extra = _store(con, docno, batch, compress, extra)
                docno += len(batch)
            if self._ended:
                con.commit()
                con.close()
                self._checksum = checksum_file(self.path)
        except sqlite3.OperationalError as e:  # the system refused a write: an OSError, as numpy's would be
            self._error = _refused(e, self.path)
        except BaseException as e:  # raised in the caller's thread (passing, finish)
            self._error = e
        finally:
            if con is not None:
                con.close()
            while not (self._stopped or self._ended):  # what the caller still hands over, until its end
                self._ended = self._queue.get() is None


def _batch_compressor(compressor: zstandard.ZstdCompressor) -> Callable[[list[bytes]], list[Any]]:
    """compressor.compress of each of a list of inputs, in one call where the backend has one (the
    same frames; the C backend's multi_compress_to_buffer, which holds no GIL while it runs)."""
    def compress_all(data: list[bytes]) -> list[Any]:
        try:
            return list(compressor.multi_compress_to_buffer(data, threads=1))
        except (AttributeError, NotImplementedError):
            return list(map(compressor.compress, data))
    return compress_all


def _store(con: sqlite3.Connection, docno: int, batch: list[Document],
           compress: Callable[[list[bytes]], list[Any]], extra: bool) -> bool:
    """Insert a batch of documents (the first numbered `docno`) and their `extra` rows, in the order
    a loop inserting each BATCH of rows once it is full, and each document's extra row right after it,
    takes (the same file); returns whether the extra table exists now."""
    if not batch:
        return extra
    rows = list(zip(range(docno, docno + len(batch)), (doc.id for doc in batch),
                    compress([_pack(doc) for doc in batch])))
    extras = [(docno + i, doc) for i, doc in enumerate(batch) if doc.fields or doc.metadata]
    full = len(batch) == BATCH  # inserted when its last document came, before that one's extra row
    before = [e for e in extras if not full or e[0] < rows[-1][0]]
    extra = _insert_extras(con, before, extra)
    _insert(con, rows)
    return _insert_extras(con, extras[len(before):], extra)


def _insert_extras(con: sqlite3.Connection, extras: list[tuple[int, Document]], extra: bool) -> bool:
    """Insert the extra rows (docno, document), creating the table first if `extra` is False;
    whether the table exists now."""
    for docno, doc in extras:
        if not extra:
            con.execute(_EXTRA_SCHEMA)
            extra = True
        con.execute("INSERT INTO extra VALUES (?, ?, ?)", (docno, _json(doc.fields), _json(doc.metadata)))
    return extra


def _insert(con: sqlite3.Connection, rows: list[tuple[int, str, Any]]) -> None:
    """Insert (docno, id, packed) rows, INSERT_ROWS a statement (what executemany inserts, with one
    statement, and one release of the GIL, for many rows); InputError naming the first document
    whose id is already stored."""
    for start in range(0, len(rows), INSERT_ROWS):
        part = rows[start:start + INSERT_ROWS]
        try:
            con.execute(_INSERT.format(",".join(["(?, ?, ?)"] * len(part))),
                        [value for row in part for value in row])
        except sqlite3.IntegrityError:  # the statement inserted none of its rows: find the first repeat
            seen: set[str] = set()
            for docno, doc_id, _ in part:
                if doc_id in seen or con.execute("SELECT 1 FROM docs WHERE id = ?", (doc_id,)).fetchone():
                    raise InputError(f"duplicate document id {doc_id!r} (document {docno + 1} "
                                     "of the collection); doc ids must be unique") from None
                seen.add(doc_id)
            raise


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
