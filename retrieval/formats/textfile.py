"""Reading text files (plain or gzipped) with errors that name the file and line."""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

from retrieval.errors import InputError
from retrieval.types import is_word


def decode(data: bytes, path: str | Path, first_line: int = 1) -> str:
    """UTF-8 text (a leading BOM dropped); bad bytes are an InputError naming their line
    (`data` starts at line `first_line` of `path`)."""
    try:
        return data.decode("utf-8-sig" if first_line == 1 else "utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + first_line
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


def _open_binary(path: Path):
    """The file's bytes as a stream, decompressed if it is `.gz`."""
    if not path.is_file():
        raise InputError("file not found" if not path.exists() else "not a file", path)
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def head_text(path: str | Path, size: int = 4096) -> str:
    """The first `size` bytes as text (for sniffing a format; a cut character is dropped)."""
    path = Path(path)
    try:
        with _open_binary(path) as f:
            data = f.read(size)
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"cannot read ({e})", path) from None
    return data.decode("utf-8-sig", errors="ignore")


def streamed_raw_lines(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """(line number, line's bytes, its end kept) for every non-blank line, read one line at a time, so a
    collection of any size streams through in constant memory. Lines end at "\n" (JSON Lines'
    separator); not decoded, for a parser that takes UTF-8 bytes itself (jsonl's, which decodes a
    line it cannot read with `decode`, naming the line)."""
    path = Path(path)
    try:
        with _open_binary(path) as f:
            for n, raw in enumerate(f, 1):
                if b"\x00" in raw:
                    raise InputError("NUL byte in text file; expected text", path, n)
                if not raw.isspace():
                    yield n, raw
    except (OSError, EOFError, zlib.error) as e:  # zlib.error: corrupt gzip data
        raise InputError(f"cannot read ({e})", path) from None


def numbered_lines(path: str | Path) -> list[tuple[int, str]]:
    """(line number, line) for every non-blank line. Lines end at "\n", "\r\n" or "\r" only, as
    editors count them (str.splitlines would also split at U+2028, form feeds and other separators,
    and the numbers in error messages would drift)."""
    lines = re.split(r"\r\n|\r|\n", read_text(path))
    return [(i, line) for i, line in enumerate(lines, 1) if line.strip()]


def check_utf8(text: str, what: str, where: str | Path | None = None, line: int | None = None) -> str:
    """Refuse text JSON allows but UTF-8 cannot hold (lone surrogates such as "\\ud800")."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{what} holds a lone surrogate (\\ud800-\\udfff), which is not text", where,
                         line) from None
    return text


MAX_ID_CHARS = 1000


def check_id(value: object, what: str, where: str | Path | None = None, line: int | None = None) -> str:
    """A query or document id: a non-empty string without whitespace or control characters (a run
    file's column), of at most MAX_ID_CHARS (an index holds ids in fixed-width arrays: one huge id
    would widen every one)."""
    if isinstance(value, str) and value.isascii() and len(value) <= MAX_ID_CHARS and is_word(value):
        return value  # most ids: ASCII (no lone surrogate), short, one word
    if isinstance(value, str) and len(value) > MAX_ID_CHARS:
        raise InputError(f"{what} {value[:20]!r}... has {len(value):,} characters; expected at most"
                         f" {MAX_ID_CHARS:,}", where, line)
    if not isinstance(value, str) or not is_word(value):
        raise InputError(f"{what} {value!r} is not a valid id; expected a non-empty word without"
                         " whitespace or control characters", where, line)
    return check_utf8(value, f"{what} {value!r}", where, line)
