"""What is this tool's to replace or update: an index directory holding only what its manifest names.

A build replaces what is at its target only when it is an index this package
wrote (or nothing, or an empty directory, or `--force`). A `manifest.json` with
the right format version is not enough: a user directory holding one beside
other files is not an index. `owned_index` accepts a directory only if its
manifest passes the schema check and every file in it is one the manifest
names (or a shard, segment or generation of a sharded or live index, or a
temporary container of a write in progress). `check_not_inside_index` refuses
a path inside an index (a segment of a live index named as an index of its
own would be replaced or updated behind the parent's back).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from retrieval import storage
from retrieval.errors import InputError

SHARD_DIR = re.compile(r"shard-\d{3,}")
GENERATION_FILE = re.compile(r"gen-\d{6}/(lease|global/(cf|df|terms_offsets|terms_utf8)\.npy"
                             r"|shard-\d{3,}/((cf|df|deleted)\.npy|stats\.json))")
TEMPORARY = re.compile(r"\..+\.(tmp|old)-\d+-.+")


def owned_index(path: Path, depth: int = 0) -> bool:
    """Whether `path` is an index this package wrote and nothing else: its manifest passes the schema
    check, and every file in it is one the manifest names, or belongs to a shard or segment (itself
    an owned index), a live index's generation, or a temporary container of a write in progress."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir() or depth > 1:
        return False
    manifest = storage.manifest_of(path)
    if manifest is None or manifest.get("format_version") not in storage.READABLE_VERSIONS:
        return False
    try:
        storage.check_manifest(manifest, path / storage.MANIFEST)
    except InputError:
        return False
    named = {storage.MANIFEST, *manifest["files"]}
    for part in manifest["parts"].values():
        named.update(part.get("files") or {})
    sharded = manifest.get("kind") == "sharded"
    return _only_named(path, path, named, sharded, depth)


def _only_named(root: Path, directory: Path, named: set[str], sharded: bool, depth: int) -> bool:
    """Whether every file under `directory` (inside the index at `root`) is accounted for."""
    for entry in os.scandir(directory):
        item = Path(entry.path)
        rel = item.relative_to(root).as_posix()
        if TEMPORARY.fullmatch(entry.name) and storage.is_temporary_container(item):
            continue
        if entry.is_symlink():
            return False
        if entry.is_dir():
            if sharded and directory == root and SHARD_DIR.fullmatch(entry.name):
                if not owned_index(item, depth + 1):
                    return False
            elif not _only_named(root, item, named, sharded, depth):
                return False
        elif rel not in named and not (sharded and GENERATION_FILE.fullmatch(rel)):
            return False
    return True


def check_not_inside_index(path: str | Path, what: str = "an index") -> None:
    """Refuse to build or update `what` at a path inside an existing index (a shard or segment of it,
    or a new directory in it): the parent index would no longer match its own manifest."""
    holder = storage.index_holding(path)
    if holder is not None:
        raise InputError(f"is inside the index {holder}; refusing to write {what} there (name the index"
                         f" itself, or a path outside it)", path)


def is_index_dir(path: Path) -> bool:
    """Whether `path` is an index this package wrote and holds nothing else (any index kind), so a
    build may replace it."""
    return owned_index(Path(path))
