"""Building an index with the parts asked for, one way for every caller.

`retrieval index` (from flags) and `retrieval run` (from a config) both describe
what to build the same way: documents, analyzer, a layout (one index or N
shards) and optional dense and late parts (a shards.dense.DenseSource, a
shards.late.LateSource: model and settings, checked when made). The functions
here turn that into an index, so the two commands cannot build differently.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from retrieval.analysis import Analyzer
from retrieval.types import Document


def build_with_parts(documents: Iterable[Document], path: Path, *, source: str, analyzer: Analyzer,
                     shards: int | None = None, workers: int = 1, force: bool = False,
                     dense: Any = None, late: Any = None) -> dict[str, Any]:
    """Build the index at `path` (`shards` shards if given) with the dense and late parts asked for;
    returns its manifest."""
    if shards is not None:
        from retrieval.shards.build import build_sharded_index

        return build_sharded_index(documents, path, shards, source=source, analyzer=analyzer,
                                   workers=workers, dense=dense, late=late, force=force)
    from retrieval.index import Index, build_index

    build_index(documents, path, source=source, analyzer=analyzer, workers=workers, force=force)
    add_parts(path, dense, late)
    return Index.open(path, verify=False).manifest


def add_parts(index: Any, dense: Any = None, late: Any = None) -> dict[str, dict[str, Any]]:
    """Add (or replace) the dense and late parts of a single index (an Index or its path); returns
    their manifest entries by part name."""
    entries = {}
    if dense is not None:
        from retrieval.dense import add_dense

        entries["dense"] = add_dense(index, dense.encoder, dense.index_type, dense.params)
    if late is not None:
        from retrieval.late import build_late

        entries["late"] = build_late(index, late.model, compression=late.compression)
    return entries
