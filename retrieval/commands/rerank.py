"""`retrieval rerank`: a run file reranked by the late-interaction model."""

from __future__ import annotations

import argparse
from pathlib import Path

from retrieval import collections
from retrieval.commands.common import (
    naming_candidates,
    precision_flag,
    run_answering,
    run_tag,
    threads_flag,
    topics_flags,
    write_run_output,
)
from retrieval.pipeline.params import FIRST_STAGES, LATE_DEFAULTS, PARAMS


def _shown(defaults: dict) -> str:
    """A first stage's late defaults, e.g. `interpolate 0.1, depth 100`."""
    fusion = "rrf" if defaults["fusion"] == "rrf" else f"interpolate {defaults['interpolate']}"
    return f"{fusion}, depth {defaults['depth']}"


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rerank", help="rerank a run file with the late-interaction model",
                       description="Rerank each query's top --depth hits of a TREC run by "
                       "late-interaction MaxSim, with the index's stored token embeddings when it "
                       "has a late/ part built by the same model, else encoding the doc store's "
                       "texts on the fly. Writes at most --depth hits per query.")
    p.add_argument("--index", required=True, type=Path,
                   help="index directory (doc store, late/ part; native or sharded)")
    topics_flags(p)
    p.add_argument("--run", dest="run_file", required=True, type=Path, help="run file to rerank")
    p.add_argument("--output", default="-", help="run file to write (default: stdout)")
    p.add_argument("--model", default=None, help=PARAMS["checkpoint"].help)
    p.add_argument("--interpolate", type=float, default=None, metavar="W",
                   help=PARAMS["interpolate"].help)
    p.add_argument("--fusion", choices=PARAMS["fusion"].choices, default=None,
                   help=f"fusion with the run's scores: {PARAMS['fusion'].help} (default: the first"
                   " stage's validated one)")
    p.add_argument("--depth", type=int, default=None,  # ranges: checked by the registry
                   help="hits reranked per query (default: the first stage's validated depth)")
    p.add_argument("--first-stage", choices=FIRST_STAGES, default=None,
                   help="the kind of first stage that made the run, whose validated defaults apply: "
                   + "; ".join(f"{k}: {_shown(v)}" for k, v in LATE_DEFAULTS.items()) + " (default bm25)")
    threads_flag(p, "torch threads")
    precision_flag(p, "how queries and on-the-fly documents are encoded")
    p.add_argument("--tag", type=run_tag, default="late", help="run tag (default: late)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> None:
    from retrieval.registry import build

    queries = collections.load_topics(args.topics, args.topic_field)
    stage = build("late", args.index, checkpoint=args.model, interpolate=args.interpolate,
                  depth=args.depth, threads=args.threads, precision=args.precision, fusion=args.fusion,
                  first_stage=args.first_stage)
    with naming_candidates(args.run_file):
        reranked = stage(queries, run_answering(args.run_file, queries))
    write_run_output(reranked, args.output, args.tag, "reranked")
