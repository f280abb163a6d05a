"""The one exception type for bad user input.

The CLI turns an `InputError` into a single line on stderr and exit status 2;
any other exception is a bug and may show a traceback.
"""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """Bad input from the user: a file, the line when known, and what was expected."""

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None):
        self.message = message
        self.path = str(path) if path is not None else None
        self.line = line
        super().__init__(str(self))

    def at(self, path: str | Path, line: int | None = None) -> InputError:
        """This error if it already names a file; else the same message placed at path:line."""
        return self if self.path is not None else InputError(self.message, path, line)

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = f"{self.path}:{self.line}: " if self.line is not None else f"{self.path}: "
        return where + self.message


class UnknownDocument(InputError):
    """A document id the index (or its `part`) lacks, e.g. named by a run given to rerank; the
    command that read the run re-raises it naming the run file (commands.common.naming_candidates)."""

    def __init__(self, doc_id: str, index: str | Path | None, part: str = "index"):
        self.doc_id, self.part = doc_id, part
        super().__init__(f"document {doc_id!r} is not in the {part}", index)
