"""`retrieval info`: what an index holds."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="describe an index", description="Print an index's "
                       "manifest summary: kind, source, analyzer, statistics and parts (for a "
                       "sharded index also its shards and whether each is present).")
    p.add_argument("--index", required=True, type=Path, help="index directory")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> None:
    from retrieval.index.kinds import open_index

    print(json.dumps(open_index(args.index).describe(), indent=2))
