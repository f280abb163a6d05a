"""Flags and outputs several commands share."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from retrieval.errors import InputError, UnknownDocument
from retrieval.formats.trec import check_tag, format_run, write_run
from retrieval.runtime.precision import AUTO, TORCH_PRECISIONS
from retrieval.types import Run


def precision_flag(p: argparse.ArgumentParser, what: str,
                   choices: tuple[str, ...] = TORCH_PRECISIONS) -> None:
    """`--precision`: how the neural models compute on this machine (never stored in an index or model)."""
    p.add_argument("--precision", default=AUTO, choices=(AUTO, *choices),
                   help=f"{what}: {AUTO} (default; chosen for this CPU as retrieval/runtime/precision.py "
                   f"says) or one of {', '.join(choices)}")


def topics_flags(p: argparse.ArgumentParser, required: bool = True) -> None:
    """--topics and --topic-field."""
    p.add_argument("--topics", required=required,
                   help="collection name (test topics; NAME:train for another split) or a file")
    p.add_argument("--topic-field", default="title",
                   help="field of TREC <top> topics to use: title (default), desc, narr or e.g. "
                   "title+desc")


def number(kind: type = int, low: float = 1, high: float = math.inf, *, above: bool = False,
           below: bool = False) -> Callable[[str], float]:
    """An argparse type: an int or float in [low, high] (`above` / `below`: excluding that end)."""
    def parse(text: str) -> float:
        value = kind(text)  # ValueError: argparse says "invalid int value"
        if not (value > low if above else value >= low) or not (value < high if below else value <= high):
            ends = f"{'(' if above else '['}{low}, {high}{')' if below else ']'}"
            expected = (f"> {low}" if above else f">= {low}") if high == math.inf else f"in {ends}"
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def run_tag(text: str) -> str:
    """An argparse type: a run tag (checked before any work, not when the run is written)."""
    try:
        return check_tag(text)
    except InputError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def threads_flag(p: argparse.ArgumentParser, what: str = "threads") -> None:
    p.add_argument("--threads", type=number(), default=1, help=f"{what} (default 1)")


def write_run_output(run: Run, output: str, tag: str, verb: str = "wrote") -> None:
    """A run file whole (or to stdout for `-`), with a one-line note on stderr."""
    if output == "-":
        sys.stdout.write(format_run(run, tag))
        return
    write_run(run, output, tag)
    hits = sum(len(r) for r in run.values())
    print(f"{verb} {len(run)} queries, {hits} hits -> {output}", file=sys.stderr)


@contextmanager
def naming_candidates(path: Path | None) -> Iterator[None]:
    """An unknown document met while rescoring or reranking the run file at `path` is reported
    there: the file is what the user has to fix, not the index."""
    try:
        yield
    except UnknownDocument as e:
        if path is None:
            raise
        raise InputError(f"names document {e.doc_id!r}, which is not in the {e.part} {e.path}",
                         path) from None


def run_answering(path: Path, queries: dict[str, str], what: str = "run") -> Run:
    """A run file to rescore or rerank: it must answer some of the topics (else the output would be
    empty). Its queries the topics lack are left out, with a warning counting them: the file's
    topics are the queries asked for (stages refuse a run with queries they have no text for)."""
    from retrieval.formats import read_run

    run = read_run(path)
    if not run:
        raise InputError(f"the {what} is empty; expected lines 'qid Q0 docid rank score tag'", path)
    if not set(run) & set(queries):
        raise InputError(f"the {what} shares no query id with the topics (run: {next(iter(run))!r},"
                         f" ...; topics: {next(iter(queries))!r}, ...)", path)
    others = [q for q in run if q not in queries]
    if others:
        print(f"retrieval: warning: {path}: {len(others)} of the {what}'s {len(run)} queries are not in the"
              f" topics (e.g. {others[0]!r}); left out", file=sys.stderr)
        run = Run({q: run[q] for q in run if q in queries}, presorted=True)
    return run
