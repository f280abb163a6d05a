"""The on-disk layout of a sharded index, and opening one.

    index/
      manifest.json     "kind": "sharded", analyzer, collection statistics, the shards
                        (name, documents, SHA-256 of each shard's manifest), parts
      global/           the whole collection's vocabulary with df and cf (stats.py)
      shard-000/ ...    one ordinary index directory per shard (index/native.py), each with
                        a `global/` part: the collection statistics aligned with the
                        shard's own term ids, and optionally its own `dense/` part

Documents are dealt out round-robin in doc id order (the i-th smallest doc id
goes to shard i mod N), so shards are within one document of each other in
size. Each shard is complete on its own: it can be copied to another machine
and opened there. A live index (live.py) has the same layout with segments
for shards, plus `gen-NNNNNN/`: the statistics and deletions of its current
generation, which the manifest's `live` entry names.
"""

from __future__ import annotations

import fcntl
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from retrieval import storage
from retrieval.analysis import Analyzer
from retrieval.errors import InputError

KIND = "sharded"
GLOBAL_DIR = "global"


def shard_name(i: int) -> str:
    """The directory name of shard i."""
    return f"shard-{i:03d}"


def generation_name(g: int) -> str:
    """The directory name of a live index's generation g."""
    return f"gen-{g:06d}"


LEASE_FILE = "lease"  # in a generation directory: readers hold a shared flock on it


def take_lease(generation: Path, exclusive: bool = False) -> Any:
    """An open file holding a (shared, or exclusive) non-blocking flock on a generation's lease
    file, or None if the generation is gone or (exclusive) someone holds a lease on it."""
    try:
        handle = open(generation / LEASE_FILE, "rb")  # noqa: SIM115 - the lease lives with the index
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(handle, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    if not (generation / LEASE_FILE).exists():  # removed while we waited for the flock
        handle.close()
        return None
    return handle


def inside(path: Path, what: str) -> Path:
    """`path` (a directory the manifest names) unless it is a symbolic link, which could lead out of
    the index."""
    if path.is_symlink():
        raise InputError(f"{what} is a symbolic link; refusing to follow it out of the index", path)
    return path


@dataclass(frozen=True)
class ShardInfo:
    """One shard as the top-level manifest records it."""

    number: int
    name: str
    path: Path
    documents: int
    manifest_sha256: str
    generation: Path | None = None  # a live segment's statistics directory


class ShardedIndex:
    """An opened sharded index: the top-level manifest and its shards (opened by searchers).

    `backend` (set by `use_backend`) is where its stages search the shards:
    None means in this process (shards.local); shards.ray_backend runs them on Ray.
    """

    kind = KIND

    def __init__(self, path: str | Path, verify: bool = True):
        self.path = Path(path)
        self.backend: Any = None
        self.verify = verify
        self.manifest, self.lease = self._read_manifest()
        if self.manifest.get("kind") != KIND:
            raise InputError("not a sharded index (build one with `retrieval index --shards N`)",
                             self.path)
        if verify:
            storage.verify_files(self.path, self.manifest.get("files", {}))
        self.shards  # noqa: B018 - checks the shard list's shape on open

    def _read_manifest(self, attempts: int = 20) -> tuple[dict[str, Any], Any]:
        """The manifest, and for a live index a shared lease on its generation (an open file
        holding a shared flock) that keeps updates from removing that generation and its
        segments while this object lives. An update may retire the generation between reading
        the manifest and taking the lease; then the manifest is read again."""
        for _ in range(attempts):
            manifest = storage.read_manifest(self.path)
            live = manifest.get("live")
            if not isinstance(live, dict) or not isinstance(live.get("generation"), int):
                return manifest, None
            lease = take_lease(self.path / generation_name(live["generation"]))
            if lease is not None:
                return manifest, lease
        raise InputError("the index kept changing while it was opened; try again", self.path)

    def close(self) -> None:
        """Give up the lease on a live index's generation (updates may then remove it)."""
        if self.lease is not None:
            self.lease.close()
            self.lease = None

    @classmethod
    def open(cls, path: str | Path, verify: bool = True) -> ShardedIndex:
        """Open a sharded index directory, checking its manifest and global statistics."""
        return cls(path, verify)

    def __repr__(self) -> str:
        return f"ShardedIndex({str(self.path)!r}, {len(self.shards)} shards, {self.num_docs} docs)"

    @cached_property
    def shards(self) -> list[ShardInfo]:
        """The shards, in shard number order."""
        shards = self.manifest.get("shards")
        where = self.path / storage.MANIFEST
        if not isinstance(shards, list) or not shards:
            raise InputError("manifest shards must be a non-empty list; rebuild the index", where)
        generation = self.generation_dir
        out: list[ShardInfo] = []
        for i, s in enumerate(shards):
            if not (isinstance(s, dict) and isinstance(s.get("documents"), int)
                    and isinstance(s.get("manifest_sha256"), str)):
                raise InputError(f"manifest shards[{i}] must be {{name, documents, manifest_sha256}};"
                                 " rebuild the index", where)
            name = storage.safe_name(s.get("name"), "shard", where)
            if any(name == seen.name for seen in out):
                raise InputError(f"manifest lists shard {name!r} twice; the index is damaged", where)
            inside(self.path / name, "shard directory")
            out.append(ShardInfo(i, name, self.path / name, s["documents"], s["manifest_sha256"],
                                 generation / name if generation else None))
        if generation is not None:
            self._check_next_segment(out, where)
        return out

    def _check_next_segment(self, shards: list[ShardInfo], where: Path) -> None:
        """A live index's next segment number: a whole number above every segment's (an update
        would otherwise build over a segment in use, or name one `shard--01`)."""
        numbers = [int(s.name.rsplit("-", 1)[1]) for s in shards
                   if s.name.startswith("shard-") and s.name[6:].isdigit()]
        next_segment = self.manifest["live"].get("next_segment")
        if (not isinstance(next_segment, int) or isinstance(next_segment, bool)
                or next_segment <= max(numbers, default=-1)):
            raise InputError(f"manifest live.next_segment must be a whole number above every segment's"
                             f" ({max(numbers, default=-1)}), got {next_segment!r}; the index is damaged",
                             where)

    @property
    def generation_dir(self) -> Path | None:
        """A live index's current statistics directory (None for a partitioned sharded index)."""
        live = self.manifest.get("live")
        if live is None:
            return None
        if (not isinstance(live, dict) or not isinstance(live.get("generation"), int)
                or isinstance(live["generation"], bool) or live["generation"] < 0):
            raise InputError("manifest live entry must hold a whole-number generation; the index is damaged",
                             self.path / storage.MANIFEST)
        return inside(self.path / generation_name(live["generation"]), "generation directory")

    def deleted_docnos(self, number: int, documents: int | None = None) -> np.ndarray:
        """Docnos of shard `number`'s deleted documents (none outside a live index), checked (each
        below `documents`, the shard's document count, when given)."""
        from retrieval.shards.stats import load_deleted

        shard = self.shards[number]
        if shard.generation is None:
            return np.zeros(0, dtype=np.int64)
        return load_deleted(shard.generation / "deleted.npy", documents)

    @property
    def num_docs(self) -> int:
        return int(self.manifest["stats"]["documents"])

    @property
    def statistics(self) -> dict[str, Any]:
        """Collection-wide statistics (documents, unique_terms, total_terms, ...)."""
        return self.manifest["stats"]

    def use_backend(self, backend: Any) -> ShardedIndex:
        """Search the shards through `backend` (a shards.local.ShardBackend); returns self."""
        self.backend = backend
        return self

    def shard_backend(self) -> Any:
        """Where the shards are searched: the chosen backend, else one in-process backend, made once."""
        if self.backend is None:
            from retrieval.shards.local import LocalBackend  # local imports this module

            self.backend = LocalBackend(self)
        return self.backend

    @cached_property
    def shard_indexes(self) -> list[Any]:
        """Every shard opened as an Index (checksummed once); InputError if one is missing."""
        from retrieval.index.native import Index

        missing = self.missing_shards()
        if missing:
            raise InputError(f"shard {missing[0]} is missing", self.path)
        return [Index.open(s.path, self.verify) for s in self.shards]

    @cached_property
    def shard_of(self) -> dict[str, int]:
        """Doc id -> the number of the shard holding it (deleted documents left out)."""
        out = {}
        for i, shard in enumerate(self.shard_indexes):
            live = np.ones(shard.num_docs, dtype=bool)
            live[self.deleted_docnos(i, shard.num_docs)] = False
            out.update(dict.fromkeys(shard.doc_ids[live].tolist(), i))
        return out

    def text(self, doc_id: str) -> str:
        """A document's indexed text, from the shard holding it."""
        return self._holder(doc_id).text(doc_id)

    def passage(self, doc_id: str) -> str:
        """A document's body without its title (what the question-answering reader reads)."""
        return self._holder(doc_id).passage(doc_id)

    def _holder(self, doc_id: str) -> Any:
        """The shard's Index holding a (not deleted) document."""
        if doc_id not in self.shard_of:
            raise InputError(f"document {doc_id!r} is not in the sharded index", self.path)
        return self.shard_indexes[self.shard_of[doc_id]]

    def late_store(self) -> Any:
        """The shards' late stores behind one `gather(doc_ids)` (shards.late)."""
        from retrieval.late.store import PART
        from retrieval.shards.late import ShardedLateStore

        return ShardedLateStore(self.parts[PART], self.shard_indexes, self.shard_of)

    @property
    def fields(self) -> list[str]:
        """The fields every shard (segment) indexes apart (`--fields`), [] for flat shards."""
        return list(self.manifest.get("fields", []))

    @property
    def parts(self) -> dict[str, Any]:
        return self.manifest.get("parts", {})

    def has(self, part: str) -> bool:
        """Whether every shard has this part (e.g. "dense")."""
        return part in self.parts

    @cached_property
    def analyzer(self) -> Analyzer:
        """The analyzer every shard was built with (queries must use the same)."""
        return Analyzer.from_settings(self.manifest["analyzer"])

    def missing_shards(self) -> list[str]:
        """Names of shards whose directory or manifest is absent (a quick check, no checksums)."""
        return [s.name for s in self.shards if not (s.path / storage.MANIFEST).is_file()]

    def describe(self) -> dict[str, Any]:
        """What `retrieval info` prints."""
        m = self.manifest
        missing = set(self.missing_shards())
        return {"path": str(self.path), "kind": self.kind, "source": m.get("source"),
                "created": m.get("created"), "analyzer": m.get("analyzer"), "stats": m.get("stats"),
                "partition": m.get("partition"), "parts": sorted(self.parts), "live": m.get("live"),
                "shards": [{"name": s.name, "documents": s.documents,
                            "status": "missing" if s.name in missing else "present"}
                           for s in self.shards]}
