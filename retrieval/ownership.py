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

import json
import os
import re
from pathlib import Path
from typing import Any

from retrieval import storage
from retrieval.errors import InputError

MAX_MANIFEST_BYTES = 64 << 20
SHARD_DIR = re.compile(r"shard-\d{3,}")
GENERATION_FILE = re.compile(r"gen-\d{6}/(lease|global/(cf|df|terms_offsets|terms_utf8)\.npy"
                             r"|shard-\d{3,}/((cf|df|deleted)\.npy|stats\.json))")
TEMPORARY = re.compile(r"\..+\.(tmp|old)-\d+-.+")


def manifest_of(path: Path) -> dict[str, Any] | None:
    """The parsed manifest.json of `path` if it is a regular file holding a JSON object, else None."""
    file = Path(path) / storage.MANIFEST
    try:
        if file.is_symlink() or not file.is_file() or file.stat().st_size > MAX_MANIFEST_BYTES:
            return None
        value = json.loads(file.read_bytes())
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def looks_like_index(path: Path) -> bool:
    """Whether `path` holds a manifest with a format version (an index, maybe damaged or foreign):
    never written into, nor nested inside."""
    manifest = manifest_of(path)
    return manifest is not None and "format_version" in manifest


def owned_index(path: Path, depth: int = 0) -> bool:
    """Whether `path` is an index this package wrote and nothing else: its manifest passes the schema
    check, and every file in it is one the manifest names, or belongs to a shard or segment (itself
    an owned index), a live index's generation, or a temporary container of a write in progress."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir() or depth > 1:
        return False
    manifest = manifest_of(path)
    if manifest is None or manifest.get("format_version") != storage.FORMAT_VERSION:
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


def index_holding(path: str | Path) -> Path | None:
    """The nearest directory above `path` (symbolic links resolved) that holds an index, if any."""
    real = Path(os.path.realpath(path))
    return next((p for p in real.parents if looks_like_index(p)), None)


def check_not_inside_index(path: str | Path, what: str = "an index") -> None:
    """Refuse to build or update `what` at a path inside an existing index (a shard or segment of it,
    or a new directory in it): the parent index would no longer match its own manifest."""
    holder = index_holding(path)
    if holder is not None:
        raise InputError(f"is inside the index {holder}; refusing to write {what} there (name the index"
                         f" itself, or a path outside it)", path)
