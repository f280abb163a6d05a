"""Flags and outputs several commands share."""

from __future__ import annotations

import argparse
import sys

from retrieval.formats.trec import format_run, write_run
from retrieval.precision import AUTO, TORCH_PRECISIONS
from retrieval.types import Run


def precision_flag(p: argparse.ArgumentParser, what: str,
                   choices: tuple[str, ...] = TORCH_PRECISIONS) -> None:
    """`--precision`: how the neural models compute on this machine (never stored in an index or model)."""
    p.add_argument("--precision", default=AUTO, choices=(AUTO, *choices),
                   help=f"{what}: {AUTO} (default; chosen for this CPU as retrieval/precision.py "
                   f"says) or one of {', '.join(choices)}")


def topics_flags(p: argparse.ArgumentParser, required: bool = True) -> None:
    """--topics and --topic-field."""
    p.add_argument("--topics", required=required,
                   help="collection name (test topics; NAME:train for another split) or a file")
    p.add_argument("--topic-field", default="title",
                   help="field of TREC <top> topics to use: title (default), desc, narr or e.g. "
                   "title+desc")


def threads_flag(p: argparse.ArgumentParser, what: str = "threads") -> None:
    p.add_argument("--threads", type=int, default=1, help=f"{what} (default 1)")


def write_run_output(run: Run, output: str, tag: str, verb: str = "wrote") -> None:
    """A run file whole (or to stdout for `-`), with a one-line note on stderr."""
    if output == "-":
        sys.stdout.write(format_run(run, tag))
        return
    write_run(run, output, tag)
    hits = sum(len(r) for r in run.values())
    print(f"{verb} {len(run)} queries, {hits} hits -> {output}", file=sys.stderr)
