"""`retrieval add|delete|optimize`: live updates of an index (retrieval.shards.live)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from retrieval import collections
from retrieval.commands.common import precision_flag
from retrieval.errors import InputError
from retrieval.formats.textfile import decode, read_text
from retrieval.runtime.precision import ENCODER_PRECISIONS

NOTE = ("The first update turns a native or sharded index into a live one (segments plus "
        "exact collection statistics; files are hard-linked). Every update is atomic: a search "
        "sees the index before it or after it.")


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("add", help="add documents to an index (a new segment)",
                       description="Add the documents of a collection file as a new segment, with "
                       "dense and late parts when the index has them (encoded with the index's "
                       "models). Doc ids must be new to the index. " + NOTE)
    p.add_argument("--index", required=True, type=Path, help="index to update")
    p.add_argument("collection", metavar="FILE",
                   help="JSON Lines or a JSON array (BEIR or Anserini's JsonCollection; a file or a "
                   "directory of them), a TREC <DOC> file, a SMART file, HTML pages (a directory or "
                   ".tar.gz), or a collection name")
    precision_flag(p, "how dense/late parts encode the new documents", ENCODER_PRECISIONS)
    p.add_argument("--late-model", default=None,
                   help="the checkpoint the index's late part was built with (default: the committed one)")
    p.set_defaults(handler=run_add)

    p = sub.add_parser("delete", help="delete documents from an index",
                       description="Mark documents deleted; searches never return them and the "
                       "collection statistics leave them out. " + NOTE)
    p.add_argument("--index", required=True, type=Path, help="index to update")
    p.add_argument("--ids", required=True, help="file of document ids, one per line (- for stdin)")
    p.set_defaults(handler=run_delete)

    p = sub.add_parser("optimize", help="merge an index's segments into one",
                       description="Merge every segment's live documents into one segment, dropping "
                       "deleted documents for good (dense and late parts are encoded again). " + NOTE)
    p.add_argument("--index", required=True, type=Path, help="index to update")
    precision_flag(p, "how dense/late parts encode", ENCODER_PRECISIONS)
    p.add_argument("--late-model", default=None,
                   help="the checkpoint the index's late part was built with (default: the committed one)")
    p.set_defaults(handler=run_optimize)


def run_add(args: argparse.Namespace) -> None:
    from retrieval.shards.live import add_documents

    docs = list(collections.load_documents(args.collection))
    manifest = add_documents(args.index, docs, source=args.collection,
                             precision=args.precision, late_model=args.late_model)
    _report("added", len(docs), manifest, args.index)


def run_delete(args: argparse.Namespace) -> None:
    from retrieval.shards.live import delete_documents

    ids = read_ids(args.ids)
    manifest = delete_documents(args.index, ids, source=args.ids)
    _report("deleted", len(set(ids)), manifest, args.index)  # an id listed twice is deleted once


def run_optimize(args: argparse.Namespace) -> None:
    from retrieval.shards.live import optimize

    manifest = optimize(args.index, precision=args.precision, late_model=args.late_model)
    _report("merged", manifest["stats"]["documents"], manifest, args.index)


def read_ids(source: str) -> list[str]:
    """Document ids, one per line (blank lines skipped), from a file or stdin (`-`)."""
    text = decode(sys.stdin.buffer.read(), "<stdin>") if source == "-" else read_text(source)
    ids = []
    for number, line in enumerate(text.splitlines(), 1):
        value = line.strip()
        if not value:
            continue
        if len(value.split()) != 1:
            raise InputError(f"expected one document id per line, got {line!r}", source, number)
        ids.append(value)
    return ids


def _report(verb: str, count: int, manifest: dict, path: Path) -> None:
    live = manifest["live"]
    print(f"{verb} {count} documents -> {path}: {manifest['stats']['documents']} documents in "
          f"{len(manifest['shards'])} segment(s), {live['deleted']} marked deleted, generation "
          f"{live['generation']}", file=sys.stderr)
