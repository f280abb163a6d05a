"""Building a sharded index: partition by document, build the shards in parallel, share statistics.

The whole sharded index is written atomically (storage.atomic_directory): an
existing index at the target is replaced only when every shard, the global
statistics and the top-level manifest are complete.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from tqdm import tqdm

from retrieval import storage
from retrieval.analysis import (
    Analyzer,
    available_cpus,
    ignore_interrupts,
    worker_context,
    workers_ignore_interrupts,
)
from retrieval.errors import InputError
from retrieval.index.native import build_index
from retrieval.ownership import is_index_dir
from retrieval.shards.layout import GLOBAL_DIR, KIND, shard_name
from retrieval.shards.stats import write_global_statistics
from retrieval.types import Document

PARTITION = "round-robin over sorted doc ids: the i-th smallest doc id goes to shard i mod N"


def partition(documents: list[Document], shards: int, source: str = "") -> list[list[Document]]:
    """Deal documents out to `shards` shards in doc id order; each keeps collection order."""
    if shards < 1:
        raise InputError(f"--shards must be at least 1, got {shards}")
    if not documents:
        raise InputError("the collection has no documents")  # the caller names it
    if shards > len(documents):
        raise InputError(f"cannot split {len(documents)} documents into {shards} shards"
                         " (every shard needs at least one document)", source or None)
    order = sorted(range(len(documents)), key=lambda i: documents[i].id)
    shard_of = [0] * len(documents)
    for rank, i in enumerate(order):
        if rank and documents[order[rank - 1]].id == documents[i].id:
            raise InputError(f"duplicate document id {documents[i].id!r}; doc ids must be unique",
                             source or None)
        shard_of[i] = rank % shards
    parts: list[list[Document]] = [[] for _ in range(shards)]
    for doc, s in zip(documents, shard_of):
        parts[s].append(doc)
    return parts


def _build_one(docs: list[Document], path: Path, source: str, settings: dict[str, Any],
               fields: list[str] | None = None) -> dict[str, Any]:
    """Build one shard (runs in a worker process); `fields`: one inverted part per field too."""
    return build_index(docs, path, source=source, analyzer=Analyzer.from_settings(settings), progress=False,
                       fields=fields)


def build_shards(parts: list[list[Document]], root: Path, source: str, analyzer: Analyzer,
                 workers: int, progress: bool, fields: list[str] | None = None) -> list[Path]:
    """Build every shard under `root`, `workers` at a time in separate processes."""
    dirs = [root / shard_name(i) for i in range(len(parts))]
    bar = tqdm(total=len(parts), desc="building shards", unit=" shards", disable=not progress or None)
    if workers <= 1:
        for docs, path in zip(parts, dirs):
            _build_one(docs, path, f"{source} {path.name}", analyzer.settings, fields)
            bar.update()
    else:
        context = worker_context()  # not plain fork: other threads (Ray, ONNX Runtime) may hold locks
        with ProcessPoolExecutor(min(workers, len(parts), available_cpus()), mp_context=context,
                                 initializer=ignore_interrupts) as pool:
            with workers_ignore_interrupts():  # the processes start as jobs are submitted
                jobs = [pool.submit(_build_one, docs, path, f"{source} {path.name}", analyzer.settings,
                                    fields)
                        for docs, path in zip(parts, dirs)]
            for job in jobs:
                job.result()
                bar.update()
    bar.close()
    return dirs


def build_sharded_index(documents: Iterable[Document], path: str | Path, shards: int, source: str = "",
                        analyzer: Analyzer | None = None, workers: int = 1, progress: bool = True,
                        dense: Any = None, late: Any = None, force: bool = False,
                        fields: list[str] | None = None) -> dict[str, Any]:
    """Build a sharded index of `shards` shards at `path` atomically; returns the top-level manifest.

    `workers` shards are built at a time, each in its own process. `dense`, a
    `retrieval.shards.dense.DenseSource`, also gives every shard a dense part;
    `late`, a `retrieval.shards.late.LateSource`, a late-interaction part. `fields`: every
    shard indexes these fields apart too, with their collection-wide statistics (stats.py).
    """
    analyzer = analyzer or Analyzer()
    docs = list(documents)
    parts = partition(docs, shards, source)
    path = Path(path)
    with storage.atomic_directory(path, is_index_dir, force) as tmp:
        dirs = build_shards(parts, tmp, source, analyzer, workers, progress, fields)
        stats = write_global_statistics(tmp, dirs, fields or ())
        manifest_parts: dict[str, Any] = {"inverted": {"built": storage.now(), "stats": stats}}
        if dense is not None:
            manifest_parts["dense"] = dense.write(docs, parts, dirs)
        if late is not None:
            manifest_parts["late"] = late.write(docs, parts, dirs, progress)
        manifest = {
            "format_version": storage.FORMAT_VERSION, "kind": KIND, "created": storage.now(),
            "source": source, "analyzer": analyzer.settings, "stats": stats, "partition": PARTITION,
            "shards": [{"name": d.name, "documents": len(p),
                        "manifest_sha256": storage.sha256_file(d / storage.MANIFEST)}
                       for d, p in zip(dirs, parts)],
            "files": storage.checksum_tree(tmp / GLOBAL_DIR, f"{GLOBAL_DIR}/"),
            "parts": manifest_parts,
        }
        if fields:
            manifest["fields"] = list(fields)
        storage.write_json_atomic(tmp / storage.MANIFEST, manifest)
    return manifest
