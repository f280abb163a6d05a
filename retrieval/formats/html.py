"""HTML documents, one per file (CACM as Anserini's HtmlCollection reads it).

The doc id is the file name without its extension; the text is what a browser
would show (tags dropped, entities decoded, white space collapsed). Files can
sit in a directory or in a .tar.gz archive; only .html/.htm files are read.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath

from retrieval.errors import InputError
from retrieval.formats.textfile import decode
from retrieval.types import Document

HTML_SUFFIXES = (".html", ".htm")


class _TextExtractor(HTMLParser):
    """Collects text content, skipping <script> and <style>, keeping <title> apart."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        self._in_title = self._in_title or tag == "title"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1
        if tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        (self.title if self._in_title else self.parts).append(data)


def html_to_document(doc_id: str, markup: str, raw: bool = False) -> Document:
    """A Document from an HTML page: `<title>` and the body's text. `raw` keeps the body's text
    with its line breaks as the field "raw" (for readers that split a page into parts)."""
    parser = _TextExtractor()
    parser.feed(markup)
    parser.close()
    body = "".join(parser.parts)
    return Document(doc_id, " ".join("".join(parser.title).split()), " ".join(body.split()),
                    {"raw": body} if raw else None)


def _doc_id(name: str) -> str:
    return PurePosixPath(name).stem


def _html_members(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The .html files of an open archive, in archive order."""
    for member in archive:
        if member.isfile() and member.name.lower().endswith(HTML_SUFFIXES):
            yield member


def _html_files(path: str | Path) -> list[Path]:
    """The .html files under a directory, in sorted path order (broken links included, for the reader
    to refuse; a directory named *.html is left out: rglob lists its files themselves)."""
    return sorted(p for p in Path(path).rglob("*") if p.suffix.lower() in HTML_SUFFIXES and not p.is_dir())


def read_html_tarball(path: str | Path, raw: bool = False) -> Iterator[Document]:
    """Documents from the .html files inside a .tar.gz archive, in archive order (`raw`: see
    html_to_document)."""
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in _html_members(archive):
                data = archive.extractfile(member).read()
                yield html_to_document(_doc_id(member.name), decode(data, f"{path}!{member.name}"), raw)
    except (tarfile.TarError, EOFError, OSError) as e:
        reason = " ".join(str(e).split())  # tarfile's messages span lines; errors are one line
        raise InputError(f"cannot read archive ({reason}); expected a .tar.gz of HTML files", path) from None


def read_html_directory(path: str | Path) -> Iterator[Document]:
    """Documents from the .html files under a directory, in sorted path order."""
    for file in _html_files(path):
        if file.is_symlink() and not file.exists():
            raise InputError("broken symbolic link in the collection; expected an .html file", file)
        yield read_html_file(file)


def html_directory_places(path: Path) -> Iterator[tuple[str, Path, None]]:
    """(document id, file, None) of every page under a directory (a page is one document)."""
    for file in _html_files(path):
        yield file.stem, file, None


def html_tarball_places(path: Path) -> Iterator[tuple[str, str, None]]:
    """(document id, archive!member, None) of every page in a .tar.gz (a page is one document)."""
    with tarfile.open(path, "r:*") as archive:
        for member in _html_members(archive):
            yield _doc_id(member.name), f"{path}!{member.name}", None


def read_html_file(file: Path) -> Document:
    """One HTML page as a document; its id is the file name without the extension."""
    try:
        data = file.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read ({e.strerror})", file) from None
    return html_to_document(file.stem, decode(data, file))
