"""Reading text files (plain or gzipped) with errors that name the file and line."""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path

from retrieval.errors import InputError

_WORD = re.compile(r"[^\s\x00-\x1f\x7f]+")
is_word = _WORD.fullmatch  # an id: no whitespace or control characters, not empty


def decode(data: bytes, path: str | Path) -> str:
    """UTF-8 text (a leading BOM dropped); bad bytes are an InputError naming their line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(f"invalid UTF-8 (byte {data[e.start]:#04x}); expected UTF-8 text",
                         path, line) from None


def read_text(path: str | Path) -> str:
    """The whole file as text; `.gz` files are decompressed."""
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found" if not path.exists() else "not a file", path)
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:  # zlib.error: corrupt gzip data
        raise InputError(f"cannot read ({e})", path) from None
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise InputError("NUL byte in text file; expected text", path, line)
    return decode(data, path)


def numbered_lines(path: str | Path) -> list[tuple[int, str]]:
    """(line number, line) for every non-blank line."""
    return [(i, line) for i, line in enumerate(read_text(path).splitlines(), 1) if line.strip()]


def check_id(value: object, what: str, where: str | Path | None = None, line: int | None = None) -> str:
    """A query or document id: a non-empty string without whitespace or control characters (a run
    file's column)."""
    if not isinstance(value, str) or not is_word(value):
        raise InputError(f"{what} {value!r} is not a valid id; expected a non-empty word without"
                         " whitespace", where, line)
    return value
