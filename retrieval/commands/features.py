"""`retrieval features`: learning-to-rank features of a first stage's candidates, as a LETOR file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from retrieval import collections
from retrieval.commands.common import (
    naming_candidates,
    number,
    precision_flag,
    run_answering,
    threads_flag,
    topics_flags,
)
from retrieval.pipeline.params import PARAMS
from retrieval.registry import RANKERS


def add(sub: argparse._SubParsersAction) -> None:
    features = RANKERS["features"]
    p = sub.add_parser("features", help="learning-to-rank features of a first stage's candidates (LETOR)",
                       description="For each query, the first stage's top --depth documents (a "
                       "registered ranker's run, or --candidates) and every scorer's score of each: "
                       "first-stage score and rank, BM25, QLD, QLJM, RM3's expanded query, dense cosine "
                       "and late MaxSim (where the index has those parts), the candidates' hybrid, "
                       "document length, query length and idf. Written in the LETOR/SVMlight format "
                       "(`label qid:Q 1:v ... # docid = D`) that RankLib and `retrieval train ltr` "
                       "read; labels from --qrels (0 without).")
    p.add_argument("--index", required=True, type=Path, help="index directory")
    topics_flags(p)
    p.add_argument("--first", default="bm25", choices=[n for n, r in RANKERS.items() if not r.needs_run],
                   help="first stage (registered ranker, its defaults; default bm25)")
    p.add_argument("--candidates", type=Path, default=None, help="a run file as the first stage instead")
    p.add_argument("--depth", type=number(), default=features.default("depth"),
                   help=f"candidates per query (default {features.default('depth')})")
    p.add_argument("--feature-set", default="all", help=PARAMS["feature_set"].help)
    p.add_argument("--qrels", default=None, help="labels: collection name (NAME:train for another split)"
                   " or a qrels file")
    p.add_argument("--cache", default=None, help=PARAMS["cache"].help)
    p.add_argument("--late-checkpoint", default=None,
                   help="the late feature's checkpoint: zero-shot or a .safetensors (default: the committed"
                   " one)")
    p.add_argument("--output", required=True, help="LETOR file to write")
    threads_flag(p)
    precision_flag(p, "how the dense and late scorers encode queries")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> None:
    from retrieval.ltr.letor import write_letor
    from retrieval.registry import build

    queries = collections.load_topics(args.topics, args.topic_field)
    qrels = collections.load_qrels(args.qrels) if args.qrels else None
    stage = build("features", args.index, depth=args.depth, feature_set=args.feature_set, cache=args.cache,
                  threads=args.threads, precision=args.precision, checkpoint=args.late_checkpoint)
    if args.candidates is not None:
        first = run_answering(args.candidates, queries, "candidates")
        queries = type(queries)({q: t for q, t in queries.items() if q in first})
    else:
        first = build(args.first, args.index, threads=args.threads)(queries)
    with naming_candidates(args.candidates):
        features = stage(queries, first)
    write_letor(features, args.output, qrels)
    rows = sum(len(ids) for ids, _ in features.features.values())
    print(f"wrote {len(features.features)} queries, {rows} rows, {len(features.names)} features"
          f" ({', '.join(features.names)}) -> {args.output}", file=sys.stderr)
