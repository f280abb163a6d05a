"""Building an index with the parts asked for, one way for every caller.

`retrieval index` (from flags) and `retrieval run` (from a config) both describe
what to build the same way: documents, analyzer, a layout (one index or N
shards) and optional dense and late parts (`dense_part`, `late_part`: model and
settings, checked when made). The functions here turn that into an index, so
the two commands cannot build differently.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from retrieval import storage
from retrieval.analysis import Analyzer
from retrieval.errors import InputError
from retrieval.types import Document


def dense_part(encoder: str | Path | None, precision: str | None, index_type: str = "flat",
               params: dict[str, int] | None = None) -> Any:
    """A dense part to build (a shards.dense.DenseSource): the encoder loaded and its FAISS settings
    checked, before anything is written."""
    from retrieval.dense import Encoder
    from retrieval.shards.dense import DenseSource

    return DenseSource(Encoder(encoder, precision=precision), index_type, params)


def late_part(model: str | Path | None, precision: str | None, compression: str = "fp16",
              threads: int | None = None) -> Any:
    """A late-interaction part to build (a shards.late.LateSource): the checkpoint loaded, and so
    checked, before anything is written."""
    from retrieval.late import LateModel
    from retrieval.runtime.precision import torch_path
    from retrieval.shards.late import LateSource

    return LateSource(LateModel(model, threads=threads, precision=torch_path(precision)), compression)


def build_with_parts(documents: Iterable[Document], path: Path, *, source: str, analyzer: Analyzer,
                     shards: int | None = None, workers: int = 1, force: bool = False,
                     dense: Any = None, late: Any = None, fields: list[str] | None = None
                     ) -> dict[str, Any]:
    """Build the index at `path` (`shards` shards if given) with the dense and late parts asked for
    and an inverted part per field of `fields`; returns its manifest. A path inside another index (a
    shard or segment of it) is refused."""
    from retrieval.ownership import check_not_inside_index

    check_not_inside_index(path)
    if shards is not None:
        from retrieval.shards.build import build_sharded_index

        return build_sharded_index(documents, path, shards, source=source, analyzer=analyzer,
                                   workers=workers, dense=dense, late=late, force=force, fields=fields)
    from retrieval.index.native import build_index

    return build_index(documents, path, source=source, analyzer=analyzer, workers=workers, force=force,
                       then=lambda built: add_parts(built, dense, late), fields=fields or ())


def replace_parts(path: Path, dense: Any = None, late: Any = None) -> dict[str, dict[str, Any]]:
    """Add (or replace) the dense and late parts of the single index at `path` as a whole: they are
    built into a copy of hard links that replaces the index only when every part is done, so a
    failure or a kill leaves the index as it was. Returns the parts' manifest entries."""
    from retrieval.index.kinds import index_kind
    from retrieval.index.native import linked_index
    from retrieval.ownership import check_not_inside_index

    check_not_inside_index(path, "parts")
    kind = index_kind(path)
    if kind != "native":
        live = kind == "sharded" and storage.read_manifest(path).get("live")
        what = ("documents were added to or deleted from this index (`retrieval add`/`delete`)" if live
                else f"this is a {kind} index")
        raise InputError(f"{what}; a dense or late part is added only to a single index never updated:"
                         " build one with it (--collection ... --dense/--late)", path)
    with linked_index(path) as copy:
        return add_parts(copy, dense, late)


def add_parts(index: Any, dense: Any = None, late: Any = None) -> dict[str, dict[str, Any]]:
    """Add (or replace) the dense and late parts of a single index (an Index or its path) in place:
    it is one nobody else uses yet (being built, or a copy that replaces an index whole). Returns
    their manifest entries by part name."""
    entries = {}
    if dense is not None:
        from retrieval.dense import add_dense

        entries["dense"] = add_dense(index, dense.encoder, dense.index_type, dense.params, in_place=True)
    if late is not None:
        from retrieval.late import build_late

        entries["late"] = build_late(index, late.model, compression=late.compression, in_place=True)
    return entries
