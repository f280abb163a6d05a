"""Building and opening an index directory (see storage.py for the on-disk rules).

    index/
      manifest.json   format version, analyzer, statistics, parts, checksums
      docs.sqlite     doc store (id, title, text)
      docids.npy      doc id of each docno (the internal number 0..N-1); docnos
                      follow sorted doc id order, so ties broken by docno are
                      broken by doc id
      inverted/       postings packed in blocks, BM25 impacts (index/postings.py, blocks.py)
      field.NAME/     with `fields`: one inverted part per field (same docnos, the field's own
                      lengths and statistics), part "field.NAME" of the manifest
      dense/, late/   added by later stages via storage.add_part
"""

from __future__ import annotations

import itertools
import re
import shutil
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from retrieval import storage
from retrieval.analysis import Analyzer, available_cpus
from retrieval.errors import InputError
from retrieval.index.docstore import FILENAME as DOCSTORE_FILE
from retrieval.index.docstore import DocStore, DocStoreWriter
from retrieval.index.impacts import BM25Model, write_impacts
from retrieval.index.postings import InvertedIndex, InvertedIndexBuilder, pack_files
from retrieval.ownership import is_index_dir
from retrieval.pipeline.params import default
from retrieval.types import Document

DOCIDS_FILE = "docids.npy"
FIELD_PART = "field."  # part field.NAME (its directory too): the inverted part of field NAME
_FIELD_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
TEXT_BATCH = 256  # texts added at a time (InvertedIndexBuilder.add_texts: one compiled pass for them)
FOUND_BATCH = 1024  # texts at a time with one process (_add_here: fewer hand-overs between its threads)
FOUND_AHEAD = 2  # batches the token tables' thread may be ahead (_add_here)
SPILL_DIR = "spill"  # runs of postings while building (deleted before the index is complete)
ANY_KIND = ("any kind opens with retrieval.index.kinds.open_index(path), and "
            "retrieval.registry.build(name, index) builds a ranker for it")


def build_index(documents: Iterable[Document], path: str | Path, source: str = "",
                analyzer: Analyzer | None = None, progress: bool = True,
                workers: int = 1, force: bool = False,
                then: Callable[[Path], object] | None = None,
                fields: Sequence[str] = ()) -> dict[str, Any]:
    """Build doc store + inverted index at `path` atomically; returns the manifest.

    An existing index at `path` is replaced only once the new one is complete.
    The documents are analysed in this thread and stored beside it by a doc-store thread
    (docstore.DocStoreWriter), as tantivy's writer compresses its doc store in a thread of its own;
    with one process, the token tables' compiled pass over the texts runs in a third (_add_here).
    `workers` > 1 builds in that many processes (same index): this one reads the documents, stores
    them and writes the postings, the `workers` - 1 others tokenize and analyse the texts, each
    through the compiled token tables with a vocabulary of its own mapped to the index's
    (index/parallel.py).
    Anything else at `path` (a file, a directory that is not an index) is refused
    unless `force`. `then(directory)` adds to the complete index while it is
    still in its temporary directory (dense and late parts), so that a failure
    there leaves what was at `path` as it was. `fields` (e.g. ["title", "text"]) adds one inverted
    part per named field (Document.field), for fielded rankers (sparse/fielded.py); the flat
    `inverted/` part is built as without them.
    """
    analyzer = analyzer or Analyzer()
    path = Path(path)
    fields = check_field_names(fields)
    with storage.atomic_directory(path, is_index_dir, force) as tmp, \
            DocStoreWriter(tmp / DOCSTORE_FILE) as store:
        builder, doc_ids = InvertedIndexBuilder(spill_dir=tmp / SPILL_DIR, term_of=analyzer.analyse_token,
                                                terms_of=analyzer.analyse_tokens), []
        per_field = {f: InvertedIndexBuilder(spill_dir=tmp / SPILL_DIR / f"{FIELD_PART}{f}",
                                             term_of=analyzer.analyse_token) for f in fields}
        workers = min(workers, available_cpus())
        batches = _batches(store.passing(documents),  # stored in the doc-store thread
                           TEXT_BATCH if workers > 1 else FOUND_BATCH)
        if workers > 1:  # tokenized and analysed in workers - 1 processes beside this one
            from retrieval.index.parallel import add_in_workers

            added = add_in_workers(builder, ((batch, [doc.contents for doc in batch]) for batch in batches),
                                   analyzer, workers - 1)
        else:
            added = _add_here(builder, batches, analyzer)
        bar = tqdm(desc="indexing", unit=" docs", disable=not progress or None)
        for batch in added:
            doc_ids.extend(doc.id for doc in batch)
            for doc in batch:
                for name, field_builder in per_field.items():
                    field_builder.add_tokens(analyzer.tokens(doc.field(name)))
            bar.update(len(batch))
        bar.close()
        if not doc_ids:
            raise InputError("the collection has no documents")  # the caller names it
        ids = np.array(doc_ids, dtype=str)
        del doc_ids
        builder.drop_token_tables()  # every text added: what remains needs only the vocabulary
        by_id = np.argsort(ids, kind="stable")
        docno_of = np.empty(len(ids), dtype=np.int64)
        docno_of[by_id] = np.arange(len(ids))
        stats = builder.write(tmp / "inverted", docno_of)
        stored = store.finish()  # the doc store complete, while this thread inverted
        field_stats = {}
        for name, field_builder in per_field.items():
            field_stats[name] = field_builder.write(tmp / f"{FIELD_PART}{name}", docno_of)
            write_impacts(tmp / f"{FIELD_PART}{name}", BM25Model(k1=default("k1"), b=default("b")))
            pack_files(tmp / f"{FIELD_PART}{name}")
        shutil.rmtree(tmp / SPILL_DIR, ignore_errors=True)
        write_impacts(tmp / "inverted", BM25Model(k1=default("k1"), b=default("b")))
        pack_files(tmp / "inverted")
        storage.save_array(tmp / DOCIDS_FILE, ids[by_id])
        manifest = {
            "format_version": storage.FORMAT_VERSION,
            "created": storage.now(),
            "source": source,
            "analyzer": analyzer.settings,
            "stats": stats,
            "files": {DOCSTORE_FILE: stored, DOCIDS_FILE: storage.checksum_file(tmp / DOCIDS_FILE)},
            "parts": {"inverted": {"built": storage.now(), "stats": stats,
                                   "files": storage.checksum_tree(tmp / "inverted", "inverted/")}},
        }
        if fields:
            manifest["fields"] = fields  # in the order given (parts are stored sorted by name)
        for name, field_stat in field_stats.items():
            part = f"{FIELD_PART}{name}"
            manifest["parts"][part] = {"built": storage.now(), "stats": field_stat, "field": name,
                                       "files": storage.checksum_tree(tmp / part, f"{part}/")}
        storage.write_json_atomic(tmp / storage.MANIFEST, manifest)
        if then is not None:
            then(tmp)
            manifest = storage.read_manifest(tmp)
    return manifest


def _add_here(builder: InvertedIndexBuilder, batches: Iterator[list[Document]],
              analyzer: Analyzer) -> Iterator[list[Document]]:
    """Add each batch of documents' texts to `builder` in this process (each distinct token analysed
    and numbered once, no list of terms per text); yields each batch once added. The token tables'
    pass over a batch (`find_texts`: compiled, the GIL released for most of it) runs in a thread of
    its own, up to FOUND_AHEAD batches ahead of this one, which reads the documents and analyses
    the tables' new tokens (`add_found`): the two overlap on two cores."""
    pending: deque[tuple[list[Document], list[str], Future]] = deque()
    with ThreadPoolExecutor(1, thread_name_prefix="token tables") as tables:
        try:
            for batch in batches:
                texts = [doc.contents for doc in batch]
                pending.append((batch, texts, tables.submit(builder.find_texts, texts)))
                if len(pending) > FOUND_AHEAD:
                    yield _added(builder, *pending.popleft(), analyzer)
            while pending:
                yield _added(builder, *pending.popleft(), analyzer)
        finally:  # an error here or in the caller: the thread takes no more batches
            for *_, future in pending:
                future.cancel()


def _added(builder: InvertedIndexBuilder, batch: list[Document], texts: list[str], found: Future,
           analyzer: Analyzer) -> list[Document]:
    """`batch` once its texts, found in the tables' thread, are added (its error raised here)."""
    builder.add_found(texts, found.result(), analyzer.tokens)
    return batch


def _batches(items: Iterator, size: int) -> Iterator[list]:
    """Lists of `size` consecutive items (the last one shorter)."""
    while batch := list(itertools.islice(items, size)):
        yield batch


def check_field_names(fields: Sequence[str] | None) -> list[str]:
    """Field names to index: distinct, lower-case identifiers (`title`, `text`, `head`...)."""
    names = list(fields or ())
    for name in names:
        if not isinstance(name, str) or not _FIELD_NAME.fullmatch(name):
            raise InputError(f"field name {name!r}: expected a lower-case name of letters, digits and _"
                             " (e.g. title, text)")
    if len(set(names)) != len(names):
        raise InputError(f"fields {', '.join(names)}: a field is named twice")
    return names


class Index:
    """An opened native index: manifest, doc ids, doc store, and parts loaded on first use."""

    kind = "native"

    def __init__(self, path: str | Path, verify: bool = True):
        if not isinstance(path, (str, Path)):
            raise InputError(f"expected the path of an index, got {type(path).__name__}")
        self.path = Path(path)
        self.manifest = storage.read_manifest(self.path)
        if self.manifest.get("kind") == "sharded":
            why = "documents were added or deleted" if self.manifest.get("live") else "built with --shards"
            shards = len(self.manifest.get("shards", []))
            raise InputError(f"this is a sharded index ({shards} shards: {why}), and this needs a single one"
                             f" (in Python, {ANY_KIND})", self.path)
        missing = {DOCSTORE_FILE, DOCIDS_FILE} - set(self.manifest["files"])
        if missing:
            raise InputError(f"manifest files must list {', '.join(sorted(missing))}; rebuild the index",
                             self.path / storage.MANIFEST)
        if verify:
            storage.verify_files(self.path, self.manifest["files"])
            for part in self.manifest["parts"].values():
                storage.verify_files(self.path, part["files"])
        ids, stored = self.doc_ids, self._stored_documents()
        if len(ids) != stored or ids.dtype.kind != "U" or ids.ndim != 1 or not (ids[:-1] < ids[1:]).all():
            raise InputError(f"expected {stored} distinct sorted doc ids (strings), found {len(ids)} of"
                             f" {ids.dtype}; rebuild the index", self.path / DOCIDS_FILE)
        if verify:
            self.docstore.check()

    def _stored_documents(self) -> object:
        """How many documents the doc store holds: the index's count, except in a Lucene index,
        whose count leaves out the empty documents Anserini skips (the doc store keeps them)."""
        build = self.manifest.get("build")
        if self.manifest.get("backend") == "lucene" and isinstance(build, dict) and "documents" in build:
            return build["documents"]
        return self.manifest["stats"]["documents"]

    @classmethod
    def open(cls, path: str | Path, verify: bool = True) -> Index:
        """Open an index directory, checking format version and file checksums."""
        return cls(path, verify)

    def __repr__(self) -> str:
        return f"Index({str(self.path)!r}, {self.num_docs} docs, parts={sorted(self.parts)})"

    @property
    def parts(self) -> dict[str, Any]:
        return self.manifest.get("parts", {})

    @property
    def statistics(self) -> dict[str, Any]:
        """Collection statistics (documents, unique_terms, total_terms, ...)."""
        return self.manifest["stats"]

    def text(self, doc_id: str) -> str:
        """A document's indexed text (title and body); InputError for an unknown id."""
        return self.docstore.get(doc_id).contents

    def passage(self, doc_id: str) -> str:
        """A document's body without its title: what the question-answering reader reads."""
        return self.docstore.get(doc_id).text

    def describe(self) -> dict[str, Any]:
        """What `retrieval info` prints."""
        m = self.manifest
        return {"path": str(self.path), "kind": self.kind, "source": m.get("source"),
                "created": m.get("created"), "analyzer": m.get("analyzer"), "stats": m.get("stats"),
                "parts": sorted(self.parts)}

    def has(self, part: str) -> bool:
        """Whether the index has a representation (e.g. "inverted", "dense")."""
        return part in self.parts

    def require(self, part: str) -> Path:
        """The directory of a part; InputError if the index lacks it."""
        if not self.has(part):
            raise InputError(f"index has no {part!r} part (has: {', '.join(sorted(self.parts))});"
                             f" build it with `retrieval index`", self.path)
        return self.path / part

    @cached_property
    def doc_ids(self) -> np.ndarray:
        """Doc id of each docno."""
        return storage.load_array(self.path / DOCIDS_FILE, mmap=False)

    @cached_property
    def doc_id_list(self) -> list[str]:
        """Doc ids as a Python list (fast per-item access when building rankings)."""
        return self.doc_ids.tolist()

    @cached_property
    def doc_id_objects(self) -> np.ndarray:
        """Doc ids as an object array: indexing it reuses the same str objects (fast)."""
        return np.array(self.doc_id_list, dtype=object)

    @property
    def num_docs(self) -> int:
        return len(self.doc_ids)

    @cached_property
    def docno(self) -> dict[str, int]:
        """Doc id -> docno."""
        return {d: i for i, d in enumerate(self.doc_id_list)}

    @cached_property
    def docstore(self) -> DocStore:
        return DocStore(self.path / DOCSTORE_FILE)

    @cached_property
    def analyzer(self) -> Analyzer:
        """The analyzer the index was built with (queries must use the same)."""
        return Analyzer.from_settings(self.manifest["analyzer"])

    @cached_property
    def inverted(self) -> InvertedIndex:
        return InvertedIndex(self.require("inverted"))

    @property
    def fields(self) -> list[str]:
        """The fields indexed apart (`retrieval index --fields`), in build order; [] for a flat index."""
        fields = self.manifest.get("fields", [])
        if not isinstance(fields, list) or sorted(f"{FIELD_PART}{f}" for f in fields) != sorted(
                p for p in self.parts if p.startswith(FIELD_PART)):
            raise InputError("the manifest's fields do not match its field parts; rebuild the index",
                             self.path / storage.MANIFEST)
        return list(fields)

    def field_index(self, name: str) -> InvertedIndex:
        """The inverted part of one field (same docnos as the flat part); InputError naming the
        fields there are when the index lacks it."""
        cache = self.__dict__.setdefault("_field_indexes", {})
        if name not in cache:
            if name not in self.fields:
                have = ", ".join(self.fields) or "none: build it with `retrieval index --fields title,text`"
                raise InputError(f"index has no field {name!r} (fields: {have})", self.path)
            cache[name] = InvertedIndex(self.path / f"{FIELD_PART}{name}")
        return cache[name]


@contextmanager
def changing_part(index: Index | str | Path, part: str, in_place: bool = False) -> Iterator[Index]:
    """The index to write part `part` (dense, late) into. Without that part, the index itself: a new
    part appears whole, its directory first and then its manifest entry. With it, a copy of hard
    links that replaces the index as a whole when the block succeeds, so that a failure or a kill
    while replacing the part never leaves the index without it. `in_place` is for callers already
    writing into such a copy (or into an index still being built)."""
    index = native_index(index)
    if in_place or not index.has(part):
        yield index
        return
    with linked_index(index) as copy:
        yield copy


@contextmanager
def linked_index(index: Index | str | Path) -> Iterator[Index]:
    """The native index (opened, so verified, if given as a path) as a copy of hard links to change:
    it replaces the index as a whole only if the block succeeds (storage.linked_copy)."""
    index = native_index(index)
    with storage.linked_copy(index.path, is_index_dir) as copy:
        yield Index.open(copy, verify=False)  # links of the files of the index opened above


def native_index(index: Index | str | Path) -> Index:
    """Accept a native Index or the path of one (stages that need postings or a doc store)."""
    if isinstance(index, Index):
        return index
    if not isinstance(index, (str, Path)):
        raise InputError(f"expected a native Index or the path of one, got {type(index).__name__};"
                         f" {ANY_KIND}")
    return Index.open(index)
