"""Live updates: add documents as a new segment, mark documents deleted, merge segments.

    add_documents("indexes/cacm", docs)        # `retrieval add --index I FILE`
    delete_documents("indexes/cacm", ["12"])   # `retrieval delete --index I --ids FILE`
    optimize("indexes/cacm")                   # `retrieval optimize --index I`

A live index is a sharded index (layout.py) whose shards are segments: each
add builds its documents into a segment of their own (an ordinary index, with
dense and late parts when the index has them); a delete marks documents; past
MAX_SEGMENTS segments an add also merges the smallest (`merge_policy`). The
first update turns a native or sharded index into this layout: in a new
directory of hard links (nothing is copied) that replaces the old one together
with that update's commit (`changing`). Written files never change afterwards:
an update writes the new segment, then a generation directory `gen-NNNNNN/`
with the statistics of the live documents and each segment's deleted docnos
(stats.write_generation), and last replaces the manifest with one atomic
rename. A search therefore sees the old index or the new one, never a mix,
and BM25, query likelihood and RM3 score with exact collection statistics:
their runs equal a fresh build of the live documents byte for byte
(tests/test_live.py). A search holds a shared lease on the generation it
opened (layout.take_lease); an update removes older generations nobody
holds, and segments no remaining generation names. Updates of one index are
serialised by a lock file beside it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from retrieval import storage
from retrieval.errors import InputError
from retrieval.index.kinds import index_kind
from retrieval.index.native import Index, build_index
from retrieval.shards.layout import KIND, LEASE_FILE, ShardedIndex, generation_name, shard_name, take_lease
from retrieval.shards.stats import write_generation
from retrieval.types import Document

PARTITION = "segments: one per `retrieval add`, deletions marked per generation (live.py)"
UNCHANGED_PART_KEYS = ("files", "built")  # a native part's per-directory bookkeeping


@contextlib.contextmanager
def changing(path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Yield the live index to change (directory, manifest); the caller holds the update lock.

    A live index is changed in place: if the update fails, the segments and generation it wrote,
    which no manifest names yet, are removed. A native or sharded index (its first update) is
    converted into a copy of hard links that takes its place only when the whole update
    succeeds, so a failed first update leaves it as it was.
    """
    manifest = storage.read_manifest(path)
    if manifest.get("live") is None:
        with storage.atomic_directory(path) as tmp:
            convert(path, tmp, manifest, index_kind(path))
            yield tmp, storage.read_manifest(tmp)
        return
    try:
        yield path, manifest
    except BaseException:
        with contextlib.suppress(InputError, OSError):
            live = storage.read_manifest(path).get("live")
            if live is not None:
                remove_retired(path, generation_name(live["generation"]))
        raise


@contextlib.contextmanager
def update_lock(path: Path) -> Iterator[None]:
    """Hold the index's update lock (a file beside it) for the block; one writer at a time. An index
    inside another (a segment named on its own) is refused: updating it would break the parent."""
    from retrieval.ownership import check_not_inside_index

    check_not_inside_index(path, "an update")
    storage.read_manifest(Path(path))  # no lock file beside something that is not an index
    path = Path(os.path.abspath(path))
    lock = path.parent / f".{path.name}.update-lock"
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def add_documents(path: str | Path, documents: Iterable[Document], *, source: str = "",
                  progress: bool = True, precision: str | None = None,
                  late_model: Any = None) -> dict[str, Any]:
    """Add `documents` as a new segment of the index at `path`; returns the new manifest.

    Doc ids must be new to the index (delete a document first to replace it).
    Dense and late parts are encoded with the index's own models
    (`precision` as for `retrieval index`; `late_model` a checkpoint path).
    When there are more than MAX_SEGMENTS segments, the smallest are merged
    in the same update (`merge_policy`).
    """
    docs = list(documents)
    if not docs:
        raise InputError("no documents to add", source or None)
    with update_lock(Path(path)):
        check_late_model(Path(path), late_model)
        known = live_ids(Path(path))
        clashes = [d.id for d in docs if d.id in known]
        if clashes:
            raise InputError(f"{len(clashes)} document id(s) are already in the index (e.g."
                             f" {clashes[0]!r}); delete them first to replace them", source or None)
        with changing(Path(path)) as (root, manifest):
            writer = SegmentWriter(root, manifest, precision, late_model, progress)
            segments = current_segments(writer.index) + [writer.write(docs, source or "retrieval add")]
            segments = merge_policy(writer, segments)
            writer.index.close()
            return commit(root, manifest, segments)


def delete_documents(path: str | Path, doc_ids: Iterable[str], source: str = "") -> dict[str, Any]:
    """Mark `doc_ids` deleted in the index at `path`; returns the new manifest.

    Every id must be a live document of the index; otherwise nothing is deleted.
    """
    wanted = list(dict.fromkeys(doc_ids))
    if not wanted:
        raise InputError("no document ids to delete", source or None)
    with update_lock(Path(path)):
        known = live_ids(Path(path))
        unknown = [d for d in wanted if d not in known]
        if unknown:
            raise InputError(f"{len(unknown)} id(s) are not documents of the index (e.g."
                             f" {unknown[0]!r}); nothing was deleted", source or None)
        if len(wanted) == len(known):
            raise InputError("these are all the index's documents, and an index keeps at least one;"
                             " nothing was deleted (build a new index instead)", source or None)
        with changing(Path(path)) as (root, manifest):
            return _mark_deleted(root, manifest, wanted)


def _mark_deleted(root: Path, manifest: dict[str, Any], wanted: list[str]) -> dict[str, Any]:
    """Commit a generation with `wanted` (live doc ids) marked deleted in their segments."""
    index = ShardedIndex.open(root, verify=False)  # only its doc ids are read
    segments = current_segments(index)
    marked: dict[int, list[int]] = {}
    for d in wanted:
        number = index.shard_of[d]
        marked.setdefault(number, []).append(index.shard_indexes[number].docno[d])
    segments = [(name, np.union1d(deleted, marked.get(i, [])).astype(np.int64))
                for i, (name, deleted) in enumerate(segments)]
    index.close()
    return commit(root, manifest, segments)


def optimize(path: str | Path, progress: bool = True, precision: str | None = None,
             late_model: Any = None) -> dict[str, Any]:
    """Merge every segment's live documents into one segment (deleted ones dropped); the manifest."""
    with update_lock(Path(path)):
        check_late_model(Path(path), late_model)
        with changing(Path(path)) as (root, manifest):
            writer = SegmentWriter(root, manifest, precision, late_model, progress)
            docs = writer.live_documents(current_segments(writer.index))
            if not docs:
                raise InputError("every document is deleted; nothing to merge (build a new index)", path)
            merged = writer.write(docs, "retrieval optimize")
            writer.index.close()
            return commit(root, manifest, [merged])


def check_late_model(path: Path, late_model: Any) -> None:
    """Refuse a late-interaction model for an index without a late part, rather than ignore it."""
    if late_model is not None and "late" not in storage.read_manifest(path).get("parts", {}):
        raise InputError("this index has no late part, so a late-interaction model (--late-model) does not"
                         " apply to it", path)


MAX_SEGMENTS = 10   # more after an add: the smallest MERGE_FACTOR are merged into one
MERGE_FACTOR = 5


class SegmentWriter:
    """Writes new segments of a live index: postings and doc store, plus its dense and late parts."""

    def __init__(self, path: Path, manifest: dict[str, Any], precision: str | None, late_model: Any,
                 progress: bool):
        self.path, self.progress = path, progress
        self.index = ShardedIndex.open(path)
        parts = manifest.get("parts", {})
        self.dense = dense_source(parts, path, precision)
        self.late = late_source(parts, late_model, precision)
        self.next = manifest["live"]["next_segment"]

    def write(self, docs: list[Document], source: str) -> tuple[str, np.ndarray]:
        """Build `docs` into the next segment; (its name, no deleted docnos)."""
        name = shard_name(self.next)
        self.next += 1
        build_index(docs, self.path / name, source=source, analyzer=self.index.analyzer,
                    progress=self.progress, then=lambda built: self._add_parts(docs, built),
                    fields=self.index.fields)
        return name, np.zeros(0, dtype=np.int64)  # duplicate ids within `docs` were refused above

    def _add_parts(self, docs: list[Document], segment: Path) -> None:
        """Encode the segment's dense and late parts (into the segment before it is in place)."""
        if self.dense is not None:
            self.dense.write(docs, [docs], [segment])
        if self.late is not None:
            self.late.write(docs, [docs], [segment], self.progress)

    def live_documents(self, segments: list[tuple[str, np.ndarray]]) -> list[Document]:
        """The documents of `segments` that are not deleted, in doc id order."""
        docs = []
        for name, deleted in segments:
            segment = Index.open(self.path / name, verify=False)
            gone = set(deleted.tolist())
            docs += [segment.docstore.get(d) for i, d in enumerate(segment.doc_id_list) if i not in gone]
        return sorted(docs, key=lambda d: d.id)


Segments = list[tuple[str, np.ndarray]]  # (segment name, its deleted docnos)


def merge_policy(writer: SegmentWriter, segments: Segments) -> Segments:
    """Past MAX_SEGMENTS segments, the MERGE_FACTOR with the fewest live documents become one, so
    searches fan out to a bounded number of segments and merging costs follow the small ones."""
    if len(segments) <= MAX_SEGMENTS:
        return segments
    sizes = {name: Index.open(writer.path / name, verify=False).num_docs - len(deleted)
             for name, deleted in segments}
    small = sorted(segments, key=lambda s: (sizes[s[0]], s[0]))[:MERGE_FACTOR]
    docs = writer.live_documents(small)
    kept = [s for s in segments if s[0] not in {name for name, _ in small}]
    return kept + [writer.write(docs, "merge of small segments")] if docs else kept


# ---------------------------------------------------------------- the layout and commits


def live_ids(path: Path) -> Any:
    """The doc ids of the index's live documents (any kind but Lucene), checked before changing it."""
    if index_kind(path) == "lucene":
        raise InputError("live updates need a native or sharded index, not a Lucene one", path)
    if index_kind(path) == "native":
        return Index.open(path).docno
    index = ShardedIndex.open(path, verify=False)  # only its doc ids are read
    try:
        return index.shard_of
    finally:
        index.close()


def convert(path: Path, target: Path, manifest: dict[str, Any], kind: str) -> None:
    """Write into the empty directory `target` the live index of the native or sharded index at
    `path` (its files hard-linked: nothing is copied where links work)."""
    if kind == "native":
        Index.open(path)  # verify before linking
        names, parts = [shard_name(0)], {name: {k: v for k, v in entry.items()
                                                 if k not in UNCHANGED_PART_KEYS}
                                          for name, entry in manifest.get("parts", {}).items()}
        storage.link_tree(path, target / names[0])
    else:
        names, parts = [s.name for s in ShardedIndex.open(path).shards], manifest.get("parts", {})
        for name in names:
            storage.link_tree(path / name, target / name)
    base = {"format_version": storage.FORMAT_VERSION, "kind": KIND, "created": storage.now(),
            "source": manifest.get("source"), "analyzer": manifest["analyzer"],
            "partition": PARTITION, "parts": parts,
            "live": {"generation": 0, "next_segment": len(names)}}
    if manifest.get("fields"):
        base["fields"] = list(manifest["fields"])  # every segment indexes them apart (stats.py)
    opened = [(name, Index.open(target / name, verify=False)) for name in names]
    write_commit(target, base, [(n, i, np.zeros(0, dtype=np.int64)) for n, i in opened])


def current_segments(index: ShardedIndex) -> list[tuple[str, np.ndarray]]:
    """(name, deleted docnos) of each segment of an opened live index."""
    return [(s.name, index.deleted_docnos(s.number)) for s in index.shards]


def commit(path: Path, manifest: dict[str, Any], segments: list[tuple[str, np.ndarray]]) -> dict[str, Any]:
    """Write the next generation for `segments` and switch the manifest to it; returns it."""
    opened = [(name, Index.open(path / name, verify=False), deleted) for name, deleted in segments]
    new = write_commit(path, manifest, opened)
    remove_retired(path, generation_name(new["live"]["generation"]))
    return new


def write_commit(root: Path, manifest: dict[str, Any],
                 segments: list[tuple[str, Index, np.ndarray]]) -> dict[str, Any]:
    """Write generation directory and then the manifest of `segments` under `root`."""
    live = manifest["live"]
    g = live["generation"] + 1
    gen = generation_name(g)
    with storage.atomic_directory(root / gen) as tmp:
        stats = write_generation(tmp, [(n, i, d) for n, i, d in segments], manifest.get("fields", []))
    numbers = [int(n.rsplit("-", 1)[1]) for n, _, _ in segments]
    deleted = sum(len(d) for _, _, d in segments)
    new = dict(manifest, stats=stats, partition=PARTITION,
               live={"generation": g, "next_segment": max([live["next_segment"], *[n + 1 for n in numbers]]),
                     "deleted": deleted},
               shards=[{"name": n, "documents": i.num_docs - len(d), "deleted": len(d),
                        "manifest_sha256": storage.sha256_file(i.path / storage.MANIFEST)}
                       for n, i, d in segments],
               files=storage.checksum_tree(root / gen, f"{gen}/"))
    new["parts"] = {name: dict(entry, **count_of(name, stats["documents"]))
                    for name, entry in manifest.get("parts", {}).items()}
    new["parts"]["inverted"] = {"built": storage.now(), "stats": stats}
    storage.write_json_atomic(root / storage.MANIFEST, new)
    return new


def count_of(part: str, documents: int) -> dict[str, int]:
    """The document count a part's top-level entry records."""
    return {"dense": {"count": documents}, "late": {"documents": documents}}.get(part, {})


def remove_retired(path: Path, current: str) -> None:
    """Delete the generations before `current` that no reader holds a lease on, then the
    segments no remaining generation names (a generation directory names its segments)."""
    kept = {current}
    for gen in sorted(p for p in path.glob("gen-*") if p.name != current):
        lease = take_lease(gen, exclusive=True)
        if lease is None and (gen / LEASE_FILE).exists():
            kept.add(gen.name)  # a search still reads it; removed by a later update
            continue
        try:
            shutil.rmtree(gen, ignore_errors=True)
        finally:
            if lease is not None:
                lease.close()
    used = {s.name for name in kept for s in (path / name).iterdir() if s.is_dir()}
    for item in path.iterdir():
        if re.fullmatch(r"shard-\d{3,}", item.name) and item.name not in used:
            shutil.rmtree(item, ignore_errors=True)


# ---------------------------------------------------------------- dense and late parts kept in step


def dense_source(parts: dict[str, Any], path: str | Path, precision: str | None) -> Any:
    """What encodes new documents for the index's dense part (its own model), or None."""
    entry = parts.get("dense")
    if entry is None:
        return None
    if entry.get("index_type") not in ("flat", "hnsw"):
        raise InputError(f"live updates need a flat or hnsw dense part, not {entry.get('index_type')}"
                         " (it must be trained); rebuild the index", path)
    from retrieval.dense.retriever import part_encoder
    from retrieval.shards.dense import DenseSource

    encoder = part_encoder(entry, Path(path), precision=precision)
    params = {k: v for k, v in (entry.get("params") or {}).items() if k != "ef_search"} or None
    return DenseSource(encoder, entry["index_type"], params)


def late_source(parts: dict[str, Any], model: Any, precision: str | None) -> Any:
    """What encodes new documents for the index's late part (its own model), or None."""
    entry = parts.get("late")
    if entry is None:
        return None
    from retrieval.late.model import LateModel
    from retrieval.shards.late import LateSource

    late = model if isinstance(model, LateModel) else LateModel(model, precision=precision)
    if any(entry.get(k) != v for k, v in late.identity().items()):
        raise InputError(f"the index's late part was built with {entry.get('model')!r}, not"
                         f" {late.name!r}; pass its checkpoint with --late-model")
    return LateSource(late, entry.get("compression", "fp16"))
