"""Every kind of index behind one face, and the one place that tells them apart.

Three kinds exist on disk: a native index (native.py: doc store, postings,
optional dense/late parts), a sharded one (shards/layout.py: a manifest over
native shard indexes) and a Lucene one (lucene/searcher.py: ours, or any
Anserini index directory). `open_index` looks at a directory once and returns
the matching object; everything downstream (the ranker registry, stages,
commands) works with the `AnyIndex` face and its `kind`, never sniffing files.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from retrieval import storage
from retrieval.analysis import Analyzer
from retrieval.errors import InputError

KINDS = ("native", "sharded", "lucene")  # OPENERS below: the class that opens each


@runtime_checkable
class AnyIndex(Protocol):
    """What every opened index offers, whatever its kind."""

    kind: str  # one of KINDS
    path: Path
    manifest: dict[str, Any] | None  # what this tool recorded when writing it (None: not written by it)

    @property
    def parts(self) -> dict[str, Any]:
        """Representations beyond the basics (inverted, dense, late, lucene), from the manifest."""

    @property
    def analyzer(self) -> Analyzer | None:
        """The analyzer queries must go through (None: the index analyses query text itself)."""

    @property
    def statistics(self) -> dict[str, Any]:
        """Collection statistics: documents, unique_terms, total_terms."""

    def has(self, part: str) -> bool:
        """Whether the index has this part."""

    def text(self, doc_id: str) -> str:
        """A document's indexed text (rerankers and readers read it)."""

    def describe(self) -> dict[str, Any]:
        """A summary for `retrieval info`."""


def index_kind(path: str | Path) -> str:
    """native, sharded or lucene, from the manifest (or Lucene's own segments file)."""
    path = Path(path)
    manifest = path / storage.MANIFEST
    if manifest.is_file():
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError, RecursionError):
            return "native"  # Index.open reports the damaged manifest
        if isinstance(data, dict) and data.get("kind") == "sharded":
            return "sharded"
        if isinstance(data, dict) and data.get("backend") == "lucene":
            return "lucene"
        return "native"
    return "lucene" if path.is_dir() and any(path.glob("segments_*")) else "native"


# The class that opens each kind, by module and name: the one table of index kinds. The sharded and
# Lucene kinds live in layers above this one (they are built from native indexes and stages), so they
# are loaded by name when first opened, never imported here.
OPENERS = {
    "native": ("retrieval.index.native", "Index"),
    "sharded": ("retrieval.shards.layout", "ShardedIndex"),
    "lucene": ("retrieval.lucene.searcher", "LuceneIndex"),
}


def open_index(index: AnyIndex | str | Path, verify: bool = True) -> AnyIndex:
    """Open any index directory (or pass an opened one through)."""
    if isinstance(index, AnyIndex) and not isinstance(index, (str, Path)):
        return index
    if not isinstance(index, (str, Path)):
        raise InputError(f"expected an index or the path of one, got {type(index).__name__}")
    kind = index_kind(index)
    module, name = OPENERS[kind]
    opener = getattr(importlib.import_module(module), name)
    return opener.open(index) if kind == "lucene" else opener.open(index, verify)
