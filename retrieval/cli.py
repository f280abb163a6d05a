"""The `retrieval` command. Each subcommand (index, add, delete, optimize, search, eval, info,
run, rerank, train, ask, qa-eval, serve) lives in retrieval/commands/ with its own parser and handler;
this module only registers them and turns bad input into one line on stderr with exit status 2
(errors.py).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from retrieval.errors import InputError

EXAMPLES = """examples:
  retrieval index  --collection cacm --index indexes/cacm
  retrieval search --index indexes/cacm --topics cacm --model bm25 --output runs/cacm.bm25.txt
  retrieval search --index indexes/cacm --topics cacm --model qld --rm3 --output runs/cacm.qld-rm3.txt
  retrieval eval   --qrels cacm runs/cacm.bm25.txt --measures "MAP P@30 nDCG@10"
  retrieval run    configs/cacm.yaml
  retrieval index  --collection cacm --index indexes/cacm-4 --shards 4
  retrieval search --index indexes/cacm-4 --topics cacm --model bm25 --ray local --output runs/cacm.bm25.txt
  retrieval add    --index indexes/cacm new-docs.jsonl
  retrieval delete --index indexes/cacm --ids gone.txt
"""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the command (not the whole usage text)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    p = OneLineParser(prog="retrieval", epilog=EXAMPLES,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Index collections, search topics, evaluate runs.")
    _data_dir_flag(p, None)
    from retrieval.commands import COMMANDS  # the rankers' registry: numpy, numba (see main)

    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add(sub)
    _data_dir_everywhere(p)
    return p


def _data_dir_flag(p: argparse.ArgumentParser, default: object) -> None:
    p.add_argument("--data-dir", type=Path, default=default, help="where named collections live "
                   "(default: $RETRIEVAL_DATA, else ../shared/data beside the working directory or "
                   "this checkout)")


def _data_dir_everywhere(p: argparse.ArgumentParser) -> None:
    """Let --data-dir follow any subcommand too (`retrieval index --data-dir D ...`), not only come
    before it: each subparser takes it with no default, so one given earlier is not reset."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases name one parser twice
                _data_dir_flag(child, argparse.SUPPRESS)
                _data_dir_everywhere(child)


OUTPUT_FLAGS = {"output": "--output", "details": "--details"}


def _refuse_output_over_input(args: argparse.Namespace) -> None:
    """Refuse an output file (or model directory) that is also one of the command's inputs (e.g.
    --output topics.tsv, or train realm --reader R --output R): writing it would replace that input."""
    outputs = {flag: getattr(args, name, None) for name, flag in OUTPUT_FLAGS.items()}
    outputs = {flag: path for flag, path in outputs.items()
               if path is not None and str(path) != "-" and os.path.exists(path)}  # `-` is stdout
    if not outputs:  # the usual case: new files
        return
    inputs = [(name, path) for name, value in vars(args).items() if name not in OUTPUT_FLAGS
              for path in (value if isinstance(value, list) else [value])
              if isinstance(path, (str, Path)) and os.path.exists(path)]  # files, or model directories
    for flag, output in outputs.items():
        for name, path in inputs:
            if os.path.samefile(output, path):
                raise InputError(f"{flag} {output} is also an input (the {name.replace('_', ' ')}); "
                                 "writing it would replace that input: choose another file name")


def _parse(argv: list[str]) -> argparse.Namespace:
    """Parse argv; a command whose files are a list (`eval`'s runs, named by `files_dest`) also takes
    files after its options (`eval --qrels q a.txt --baseline a.txt b.txt`), which argparse alone
    would refuse."""
    p = parser()
    args, extra = p.parse_known_args(argv)
    dest = getattr(args, "files_dest", None)
    if extra and dest and not any(arg.startswith("-") for arg in extra):
        getattr(args, dest).extend(Path(arg) for arg in extra)
    elif extra:
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse, run, turn bad input into one line and exit status 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    for arg in argv:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:  # bytes the locale could not decode, kept as surrogates by Python
            print(f"retrieval: error: argument {arg!r} is not valid UTF-8", file=sys.stderr)
            return 2
    previous = signal.signal(signal.SIGTERM, _terminate)  # `kill`, `timeout`: clean up as Ctrl-C does
    try:
        args = _parse(argv)  # imports the commands, so Ctrl-C during start-up is caught here too
        from retrieval import collections
        from retrieval.runtime import precision

        collections.set_data_dir(args.data_dir)
        _refuse_output_over_input(args)
        precision.cpu_flags()  # a bad RETRIEVAL_EMULATE_CPU fails here, before any work
        args.handler(args)
    except InputError as e:
        print(f"retrieval: error: {e}", file=sys.stderr)
        return 2
    except Terminated:
        print("retrieval: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("retrieval: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except OSError as e:  # the system refused: disk full, permissions, a path that is not a directory
        where = f"{e.filename}: " if e.filename else ""
        print(f"retrieval: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so every atomic write and build cleans up as for Ctrl-C."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


if __name__ == "__main__":
    sys.exit(main())
