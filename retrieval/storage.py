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
import errno
import hashlib
import io
import json
import mmap as mmap_module
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

import numpy as np

from retrieval.errors import InputError

FORMAT_VERSION = 2  # written; 2: postings packed in blocks (docs/design/index-format.md), 1: flat arrays
READABLE_VERSIONS = (1, 2)  # an index of version 1 still opens (its flat arrays are read as before)
MANIFEST = "manifest.json"


def now() -> str:
    """UTC timestamp for manifests."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


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


TEMPORARY_MARK = ".retrieval-temporary"  # an empty file in every temporary container made here


def temporary_container(target: Path, kind: str, pid: int | None = None) -> Path:
    """A new directory beside `target` for a write in progress, `.NAME.KIND-PID-RANDOM/` (kind "tmp":
    the new data is made inside it; "old": what it replaces is moved inside), marked as this
    package's by an empty TEMPORARY_MARK file. Only marked containers whose process is gone are ever
    removed (`remove_abandoned`): a user's file that happens to share the name pattern is kept."""
    target = Path(target)
    container = Path(tempfile.mkdtemp(prefix=f".{target.name}.{kind}-{pid or os.getpid()}-",
                                      dir=target.parent))
    try:
        with naming(target):
            (container / TEMPORARY_MARK).touch()
    except BaseException:
        shutil.rmtree(container, ignore_errors=True)
        raise
    return container


def is_temporary_container(path: Path) -> bool:
    """Whether `path` is a container `temporary_container` made (a directory holding its mark)."""
    mark = Path(path) / TEMPORARY_MARK
    return Path(path).is_dir() and not Path(path).is_symlink() and mark.is_file() and not mark.is_symlink()


def _abandoned(target: Path, kind: str) -> Iterator[Path]:
    """Temporary containers beside `target` of this kind ("tmp"/"old") whose process is gone."""
    for leftover in sorted(target.parent.glob(f".{glob_escape(target.name)}.{kind}-*-*")):
        pid = leftover.name[len(f".{target.name}.{kind}-"):].split("-", 1)[0]
        if pid.isdigit() and not _process_alive(int(pid)) and is_temporary_container(leftover):
            yield leftover


def recover_interrupted(target: Path) -> bool:
    """Put back the previous `target` if a replace was killed between its two renames.

    Replacing moves the old directory into `.NAME.old-PID-*/previous`, then the
    new one into place; a kill in between leaves no `target`. Returns whether
    the previous one was restored.
    """
    target = Path(target)
    if os.path.lexists(target):
        return False
    for leftover in _abandoned(target, "old"):
        previous = leftover / "previous"
        if os.path.lexists(previous):
            os.rename(previous, target)
            shutil.rmtree(leftover, ignore_errors=True)
            print(f"retrieval: note: restored {target} from an interrupted replace", file=sys.stderr)
            return True
    return False


def remove_abandoned(target: Path) -> None:
    """Delete the temporary containers beside `target` left by writes whose process was killed
    (after putting back a previous `target` such a write had moved aside)."""
    recover_interrupted(target)
    for kind in ("tmp", "old"):
        for leftover in _abandoned(target, kind):
            shutil.rmtree(leftover, ignore_errors=True)


def is_model_dir(path: Path) -> bool:
    """Whether `path` is a model directory this package trained (it records training.json)."""
    return (Path(path) / "training.json").is_file()


def check_keeps_input(target: Path, source: Path) -> None:
    """Refuse to replace `target` when it is, or holds, `source`, which the command reads (a build
    would delete the collection it indexes), --force or not."""
    real, read = Path(os.path.realpath(target)), Path(os.path.realpath(source))
    if read == real or real in read.parents:
        raise InputError(f"holds {source}, which this command reads; refusing to replace it (choose"
                         " another path)", target)


def check_replaceable(target: Path, ours: Callable[[Path], bool],
                      force: bool = False, remedy: str = "remove it, choose another path, or --force"
                      ) -> None:
    """Refuse to replace what is at `target` unless it is absent, an empty directory, ours or `force`d;
    `remedy` is what the error tells the user to do."""
    target = Path(target)
    if not os.path.lexists(target) or force:
        return
    if target.is_symlink():
        raise InputError(f"is a symbolic link; refusing to replace it ({remedy})", target)
    if not target.is_dir():
        raise InputError(f"exists and is not a directory; refusing to replace it ({remedy})", target)
    if any(target.iterdir()) and not ours(target):
        raise InputError(f"exists and is not what this tool writes here; refusing to replace it ({remedy})",
                         target)


def _checked_target(target: Path) -> Path:
    """`target` made absolute, refusing paths that name no directory entry (`/`, `.`-ish roots)."""
    absolute = Path(os.path.abspath(target))
    if absolute == absolute.parent:
        raise InputError("cannot build at the file system root; choose a directory path", target)
    if absolute == Path.cwd() or absolute in Path.cwd().parents:
        raise InputError("is the current directory or one of its parents; choose another path", target)
    check_creatable(absolute.parent, "a directory here", target)
    return absolute


def check_creatable(path: Path, what: str, shown: str | Path) -> None:
    """`path` can be created (or exists): its nearest existing ancestor is a directory."""
    parent = Path(path)
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"cannot create {what}: {parent} is not a directory", shown)


@contextlib.contextmanager
def atomic_directory(target: Path, ours: Callable[[Path], bool] | None = None,
                     force: bool = False) -> Iterator[Path]:
    """Yield a temporary directory that replaces `target` only if the block succeeds.

    With `ours` (a test for what this package writes at `target`), anything else
    already there is refused unless `force`d; without it, `target` is a part of
    an index the caller has opened.
    """
    target = _checked_target(Path(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(target)
    if ours is not None:
        check_replaceable(target, ours, force)
    container = temporary_container(target, "tmp")
    tmp = container / "new"
    try:
        tmp.mkdir()  # mode 0o777 less the umask: indexes are shared like any file
        yield tmp
        _fsync_tree(tmp)
        if os.path.lexists(target):
            _forget_part(target)
            old = temporary_container(target, "old")
            os.rename(target, old / "previous")
            os.rename(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
            if os.path.lexists(old):
                print(f"retrieval: warning: could not remove the replaced {target.name} at {old}; remove it"
                      " by hand", file=sys.stderr)
        else:
            os.rename(tmp, target)
        _fsync_dir(target.parent)
    finally:
        shutil.rmtree(container, ignore_errors=True)  # the new data on failure; only the mark on success


def link_tree(source: Path, target: Path) -> None:
    """Recreate `source`'s files under `target` as hard links (copies where links fail)."""
    for item in sorted(source.rglob("*")):
        dest = target / item.relative_to(source)
        if item.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(item, dest)
        except OSError:
            shutil.copy2(item, dest)


@contextlib.contextmanager
def linked_copy(index_dir: Path, ours: Callable[[Path], bool]) -> Iterator[Path]:
    """A copy of the index at `index_dir` made of hard links, that replaces the index as a whole
    only if the block succeeds. Change the copy only by renaming new files in (as atomic_directory
    and write_json_atomic do): writing into a linked file would change the original too. `ours` tells
    the index this package wrote (ownership.is_index_dir)."""
    with atomic_directory(Path(index_dir), ours=ours) as tmp:
        link_tree(Path(index_dir), tmp)
        yield tmp


def _forget_part(target: Path) -> None:
    """Before a part directory (`<index>/dense`, ...) is replaced, drop it from the manifest.

    A crash between the rename and `add_part` then leaves an index without that
    part (which opens, verifies and says the part is missing) instead of one
    whose manifest lists the old part's checksums for the new part's files.
    """
    path = target.parent / MANIFEST
    try:
        manifest = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError, RecursionError):
        return
    parts = manifest.get("parts") if isinstance(manifest, dict) else None
    if isinstance(parts, dict) and target.name in parts:
        del parts[target.name]
        write_json_atomic(path, manifest)


# what the system can refuse a write for; libraries (FAISS, safetensors) say it only in their message
_REFUSALS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS, errno.EACCES)


@contextlib.contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """Make a write to `path` the system refused an OSError naming `path`: Python's file writes
    leave the name out (a full disk would be a bare "No space left on device"), and FAISS and
    safetensors raise their own errors with the reason in the message."""
    try:
        yield
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from None
    except Exception as e:
        code = next((c for c in _REFUSALS if os.strerror(c) in str(e)), None)
        if code is None:
            raise
        raise OSError(code, os.strerror(code), str(path)) from None


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write a file whole or not at all (temp file + fsync + rename)."""
    write_files_atomic({Path(path): data})


def write_files_atomic(files: dict[Path, bytes]) -> None:
    """Write a set of files whole or not at all: every file is written and synced beside its
    target first, then all are renamed into place, so a failure while writing (a full disk)
    leaves every target as it was. Each is staged in a temporary container of this process
    (removed afterwards, whatever happens)."""
    staged: dict[Path, Path] = {}
    try:
        for path, data in files.items():
            staged[path] = _staged_copy(path, data)
        for path, container in staged.items():
            os.replace(container / "new", path)
        for parent in {path.parent for path in staged}:
            _fsync_dir(parent)
    finally:
        for container in staged.values():
            shutil.rmtree(container, ignore_errors=True)


def _staged_copy(path: Path, data: bytes) -> Path:
    """`data` written and synced to `new` in a temporary container beside `path`; the container."""
    if path.is_dir():
        raise InputError("is a directory; expected a file to write", path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(path)
    container = temporary_container(path, "tmp")
    try:
        # os.open applies the umask to 0o666, as a shell's `>` does
        with naming(path), os.fdopen(os.open(container / "new", os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                                             0o666), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        shutil.rmtree(container, ignore_errors=True)
        raise
    return container


MAX_MANIFEST_BYTES = 64 << 20


def manifest_of(path: Path) -> dict[str, Any] | None:
    """The parsed manifest.json of `path` if it is a regular file holding a JSON object, else None."""
    file = Path(path) / MANIFEST
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


def index_holding(path: str | Path) -> Path | None:
    """The nearest directory above `path` (symbolic links resolved) that holds an index, if any."""
    real = Path(os.path.realpath(path))
    return next((p for p in real.parents if looks_like_index(p)), None)


def check_outside_indexes(path: str | Path) -> None:
    """Refuse an output path inside an index directory (e.g. INDEX/manifest.json would break it)."""
    inside = index_holding(path)
    if inside is not None:
        raise InputError(f"is inside the index {inside}; refusing to write there (choose a path outside"
                         " it)", path)


def check_output_file(path: str | Path) -> None:
    """Refuse, before any work, a file output that write_output would refuse at the end (a directory,
    a path inside an index, one whose directory cannot be created)."""
    if str(path).endswith(os.sep) or os.path.isdir(path):
        raise InputError("is a directory; expected a file name to write", path)
    check_outside_indexes(path)
    check_creatable(Path(os.path.realpath(path)).parent, "the file", path)


def check_model_output(path: str | Path) -> None:
    """Refuse, before any training, a model directory output that cannot be written: inside an index,
    or something there that is not a model this package wrote (never replaced: there is no --force)."""
    check_outside_indexes(path)
    _checked_target(Path(path))
    check_replaceable(Path(path), is_model_dir, remedy="remove it or choose another path")


def write_output(path: str | Path, data: bytes) -> None:
    """Write a user-named output file: never replace what is not a regular file, nor write into an
    index directory.

    `-` is stdout; a character device or FIFO (/dev/null, a pipe) is written
    through; a symbolic link is followed, and its target replaced atomically as
    a shell's `>` would write it; a directory or other special file is refused.
    A regular or new file is written whole or not at all (write_bytes_atomic).
    """
    if str(path) == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    if str(path).endswith(os.sep):
        raise InputError("names a directory (it ends in a slash); expected a file name to write", path)
    path = Path(path)
    real = Path(os.path.realpath(path))
    check_outside_indexes(path)
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise InputError(f"cannot write here ({e.strerror})", path) from None
    if mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        try:
            with open(real, "wb") as f:
                f.write(data)
        except OSError as e:  # e.g. /dev/full
            raise InputError(f"cannot write ({e.strerror or e})", path) from None
        return
    if mode is not None and stat.S_ISDIR(mode):
        raise InputError("is a directory; expected a file name to write", path)
    if mode is None and path.is_symlink() and not real.parent.is_dir():  # as a shell's `>` fails
        raise InputError(f"is a symbolic link to {real}, whose directory does not exist", path)
    if mode is not None and not stat.S_ISREG(mode):
        raise InputError("is a special file (not a regular file, device or pipe); refusing to"
                         " replace it", path)
    check_creatable(real.parent, "the file", path)
    try:
        write_bytes_atomic(real, data)
    except PermissionError as e:
        raise InputError(f"cannot write ({e.strerror})", path) from None


def json_bytes(obj: Any) -> bytes:
    """JSON as the package writes it: sorted keys, indented, a final newline."""
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON (sorted keys, indented) atomically."""
    write_bytes_atomic(path, json_bytes(obj))


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


def safe_name(name: object, what: str, where: str | Path | None = None) -> str:
    """`name` if it is one plain path component (no `/`, not `.` or `..`, no NUL), else InputError."""
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name
            or "\0" in name):
        raise InputError(f"{what} {name!r} is not a plain file name (expected letters, digits, . _ -;"
                         " no / or ..)", where)
    return name


def index_file(index_dir: Path, rel: object) -> Path:
    """The file `rel` (a manifest key) inside `index_dir`: never outside it, never through a symlink."""
    manifest = Path(index_dir) / MANIFEST
    if not isinstance(rel, str):
        raise InputError(f"manifest lists a file name that is not a string ({rel!r})", manifest)
    for part in rel.split("/"):
        safe_name(part, "manifest file", manifest)
    path = Path(index_dir)
    for part in rel.split("/"):
        path = path / part
        if path.is_symlink():
            raise InputError("is a symbolic link inside the index; refusing to follow it", path)
    return path


def verify_files(index_dir: Path, files: dict[str, dict[str, Any]]) -> None:
    """Raise InputError naming the first missing, truncated or altered file."""
    for rel, meta in files.items():
        path = index_file(index_dir, rel)
        if not path.is_file():
            raise InputError("index file is missing; rebuild the index", path)
        if path.stat().st_size != meta["bytes"]:
            raise InputError(f"index file is truncated or altered (expected {meta['bytes']} bytes,"
                             f" found {path.stat().st_size}); rebuild the index", path)
        if sha256_file(path) != meta["sha256"]:
            raise InputError("index file is altered (checksum mismatch); rebuild the index", path)


def _checksums(value: object, where: str, path: Path) -> None:
    """A manifest's checksum list: {relative path: {sha256: 64 hex digits, bytes: integer >= 0}}."""
    if not isinstance(value, dict) or not value:
        raise InputError(f"manifest {where} must list files with checksums (a non-empty object);"
                         " rebuild the index", path)
    for rel, meta in value.items():
        ok = (isinstance(meta, dict) and isinstance(meta.get("sha256"), str)
              and len(meta["sha256"]) == 64 and isinstance(meta.get("bytes"), int)
              and not isinstance(meta["bytes"], bool) and meta["bytes"] >= 0)
        if not ok:
            raise InputError(f"manifest {where}[{rel!r}] must be {{sha256, bytes}}; rebuild the index", path)


def check_manifest(manifest: dict[str, Any], path: Path) -> None:
    """The manifest's shape: checksums for its files and every part's files, stats, analyzer."""
    _checksums(manifest.get("files"), "files", path)
    parts = manifest.get("parts")
    if not isinstance(parts, dict) or not parts:
        raise InputError("manifest parts must be a non-empty object; rebuild the index", path)
    for name, part in parts.items():
        safe_name(name, "manifest part", path)
        if not isinstance(part, dict):
            raise InputError(f"manifest part {name!r} must be an object; rebuild the index", path)
        if manifest.get("kind") != "sharded":
            _checksums(part.get("files"), f"parts[{name!r}].files", path)
    stats = manifest.get("stats")
    documents = stats.get("documents") if isinstance(stats, dict) else None
    if not isinstance(documents, int) or isinstance(documents, bool) or documents < 1:
        raise InputError("manifest stats.documents must be a positive integer; rebuild the index", path)
    from retrieval.analysis import settings_problem

    problem = settings_problem(manifest.get("analyzer"))
    if problem:
        raise InputError(f"manifest analyzer {problem}; rebuild the index", path)


def read_manifest(index_dir: Path) -> dict[str, Any]:
    """Load and check an index's manifest: it exists, parses, and has our format version."""
    path = Path(index_dir) / MANIFEST
    if not os.path.lexists(index_dir):
        recover_interrupted(Path(os.path.abspath(index_dir)))
    if os.path.lexists(index_dir) and not Path(index_dir).is_dir():
        raise InputError("is a file, not an index directory", index_dir)
    if not Path(index_dir).is_dir():
        raise InputError("no index here (directory does not exist); build it with `retrieval index`",
                         index_dir)
    if path.is_symlink():
        raise InputError("is a symbolic link; an index's manifest is a file of its own (refusing to"
                         " follow it)", path)
    if not path.is_file():
        raise InputError("not an index: manifest.json is missing; build it with `retrieval index`",
                         index_dir)
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"manifest is not valid JSON ({e})", path) from None
    except RecursionError:
        raise InputError("manifest nests too deeply to be one this tool wrote", path) from None
    if not isinstance(manifest, dict) or "format_version" not in manifest:
        raise InputError("manifest has no format_version; not an index of this tool", path)
    version = manifest["format_version"]
    if type(version) is not int or version not in READABLE_VERSIONS:
        newer = type(version) is int and version > FORMAT_VERSION
        why = ("it was written by a newer version of this package: upgrade the package, or rebuild the"
               " index with this one" if newer else "rebuild the index")
        if type(version) is not int:
            why = f"format_version must be an integer; {why}"
        raise InputError(f"index format version {version!r} is not supported (this version reads"
                         f" {', '.join(map(str, READABLE_VERSIONS))}); {why}", path)
    check_manifest(manifest, path)
    return manifest


def add_part(index_dir: Path, name: str, entry: dict[str, Any], built: Path) -> None:
    """Record a finished part (already renamed into `index_dir/name`) in the manifest."""
    manifest = read_manifest(index_dir)
    entry = dict(entry, built=now(), files=checksum_tree(built, prefix=f"{name}/"))
    manifest.setdefault("parts", {})[name] = entry
    write_json_atomic(Path(index_dir) / MANIFEST, manifest)


def reserve(file: Any, size: int, path: Path) -> None:
    """Claim `size` bytes of disk for the open `file` (at `path`) now, so that a full disk is an
    OSError naming the file here, not a bus error (SIGBUS) in a memory-mapped write or numpy's
    errno-less "N requested and M written" later. Where the file system cannot reserve, nothing is
    claimed."""
    if size <= 0 or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(file.fileno(), 0, size)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
            raise OSError(e.errno, e.strerror, str(path)) from None


def npy_header(dtype: Any, shape: tuple[int, ...]) -> bytes:
    """The header np.save writes before a C-ordered array of this type and shape."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                  "fortran_order": False, "shape": tuple(shape)})
    return header.getvalue()


def new_array(path: Path, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A new .npy file, memory-mapped for writing, its disk space claimed up front (reserve)."""
    with naming(path):  # open_memmap writes the header and the last byte
        array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
        with open(path, "r+b") as f:
            reserve(f, array.offset + array.nbytes, path)
    return array


def save_array(path: Path, array: np.ndarray) -> None:
    """Store an array as .npy (never pickled), its disk space claimed first (reserve)."""
    array = np.ascontiguousarray(array)
    # "r+b" on a created file, not "wb": truncating would give the claimed space back
    with naming(path), os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o666), "r+b") as f:
        reserve(f, len(npy_header(array.dtype, array.shape)) + array.nbytes, path)
        np.save(f, array, allow_pickle=False)
        f.truncate()


def load_array(path: Path, mmap: bool = True) -> np.ndarray:
    """Load a .npy array, memory-mapped by default, refusing pickled content."""
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise InputError(f"cannot read array ({e}); rebuild the index", path) from None


def release_pages(*arrays: np.ndarray, write_back: bool = True) -> None:
    """Write back and drop the resident pages of memory-mapped arrays (no-op for others).

    A pass over a mapped file otherwise keeps every page it touched counted in the
    process's resident memory; the data stays in the file (and the page cache), so a
    build over billions of postings holds only the chunk it is working on. Not
    `write_back` (a scratch file, read back and deleted soon): on Linux, changed pages are
    not written to the disk first (dropping them from a shared file mapping leaves them in
    the page cache, where reading the file finds them; the kernel writes them later, or
    never if the file is deleted first); elsewhere they are.
    """
    for array in arrays:
        base = array
        while base is not None and not isinstance(base, np.memmap):
            base = base.base
        mapping = getattr(base, "_mmap", None)
        if mapping is None:
            continue
        if base.flags.writeable and (write_back or not sys.platform.startswith("linux")):
            mapping.flush()
        if hasattr(mmap_module, "MADV_DONTNEED"):
            mapping.madvise(mmap_module.MADV_DONTNEED)
