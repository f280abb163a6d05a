"""On-disk index directories: atomic builds, the manifest, checksums.

An index is a directory holding `manifest.json`, the doc store and one
sub-directory per representation ("parts": `inverted/`, `dense/`, `late/`).
Every part is written into a temporary sibling and renamed into place when
complete; the manifest is rewritten atomically afterwards and lists each
part's files with their SHA-256, so a crash never leaves data that loads.
Nothing is pickled: arrays are `.npy` read with `allow_pickle=False`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

import numpy as np

from retrieval.errors import InputError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def now() -> str:
    """UTC timestamp for manifests."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb+") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(dirpath))


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_abandoned(target: Path) -> None:
    """Delete temporary siblings of `target` left by builds whose process was killed."""
    for kind in ("tmp", "old"):
        for leftover in target.parent.glob(f".{glob_escape(target.name)}.{kind}-*-*"):
            pid = leftover.name[len(f".{target.name}.{kind}-"):].split("-", 1)[0]
            if not pid.isdigit() or _process_alive(int(pid)):
                continue
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield a temporary directory that replaces `target` only if the block succeeds."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; indexes are shared like any file
    try:
        yield tmp
        _fsync_tree(tmp)
        if target.exists():
            _forget_part(target)
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-{os.getpid()}-", dir=target.parent))
            os.rename(target, old / "previous")
            os.rename(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, target)
        _fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _forget_part(target: Path) -> None:
    """Before a part directory (`<index>/dense`, ...) is replaced, drop it from the manifest.

    A crash between the rename and `add_part` then leaves an index without that
    part (which opens, verifies and says the part is missing) instead of one
    whose manifest lists the old part's checksums for the new part's files.
    """
    path = target.parent / MANIFEST
    try:
        manifest = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return
    parts = manifest.get("parts") if isinstance(manifest, dict) else None
    if isinstance(parts, dict) and target.name in parts:
        del parts[target.name]
        write_json_atomic(path, manifest)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write a file whole or not at all (temp file + fsync + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON (sorted keys, indented) atomically."""
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checksum_file(path: Path) -> dict[str, Any]:
    """{sha256, bytes} of one file, as the manifest records it."""
    return {"sha256": sha256_file(path), "bytes": Path(path).stat().st_size}


def checksum_tree(root: Path, prefix: str = "") -> dict[str, dict[str, Any]]:
    """{relative path: {sha256, bytes}} for every file under `root`."""
    files = sorted(p for p in Path(root).rglob("*") if p.is_file())
    return {prefix + p.relative_to(root).as_posix(): checksum_file(p) for p in files}


def verify_files(index_dir: Path, files: dict[str, dict[str, Any]]) -> None:
    """Raise InputError naming the first missing, truncated or altered file."""
    for rel, meta in files.items():
        path = Path(index_dir) / rel
        if not path.is_file():
            raise InputError("index file is missing; rebuild the index", path)
        if path.stat().st_size != meta["bytes"]:
            raise InputError(f"index file is truncated or altered (expected {meta['bytes']} bytes,"
                             f" found {path.stat().st_size}); rebuild the index", path)
        if sha256_file(path) != meta["sha256"]:
            raise InputError("index file is altered (checksum mismatch); rebuild the index", path)


def read_manifest(index_dir: Path) -> dict[str, Any]:
    """Load and check an index's manifest: it exists, parses, and has our format version."""
    path = Path(index_dir) / MANIFEST
    if not Path(index_dir).is_dir():
        raise InputError("no index here (directory does not exist); build it with `retrieval index`",
                         index_dir)
    if not path.is_file():
        raise InputError("not an index: manifest.json is missing; build it with `retrieval index`",
                         index_dir)
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"manifest is not valid JSON ({e})", path) from None
    if not isinstance(manifest, dict) or "format_version" not in manifest:
        raise InputError("manifest has no format_version; not an index of this tool", path)
    if manifest["format_version"] != FORMAT_VERSION:
        raise InputError(f"index format version {manifest['format_version']} is not supported"
                         f" (this version reads {FORMAT_VERSION}); rebuild the index", path)
    return manifest


def add_part(index_dir: Path, name: str, entry: dict[str, Any], built: Path) -> None:
    """Record a finished part (already renamed into `index_dir/name`) in the manifest."""
    manifest = read_manifest(index_dir)
    entry = dict(entry, built=now(), files=checksum_tree(built, prefix=f"{name}/"))
    manifest.setdefault("parts", {})[name] = entry
    write_json_atomic(Path(index_dir) / MANIFEST, manifest)


def save_array(path: Path, array: np.ndarray) -> None:
    """Store an array as .npy (never pickled)."""
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def load_array(path: Path, mmap: bool = True) -> np.ndarray:
    """Load a .npy array, memory-mapped by default, refusing pickled content."""
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise InputError(f"cannot read array ({e}); rebuild the index", path) from None
