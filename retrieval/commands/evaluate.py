"""`retrieval eval`: measures of run files against qrels."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from retrieval import collections


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate run files against qrels",
                       description="Evaluate TREC run files with ir-measures (trec_eval's own "
                       "code). Means are over every judged query: one the run does not answer "
                       "scores 0 (trec_eval -c); --only-answered gives trec_eval's default.")
    p.add_argument("--qrels", required=True,
                   help="collection name (test qrels; NAME:train for another split) or a file")
    p.add_argument("runs", nargs="+", type=Path, help="run files")
    p.add_argument("--measures", default="MAP P@30 nDCG@10",
                   help='measures, e.g. "MAP P@30 nDCG@10 R@100 MRR" (default: MAP P@30 nDCG@10)')
    p.add_argument("--only-answered", action="store_true",
                   help="average over the judged queries the run answers (trec_eval without -c)")
    p.add_argument("--per-query", action="store_true", help="also print each query's values")
    p.add_argument("--json", action="store_true", help="print {measure: value} as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> None:
    from retrieval.evaluation import evaluate, parse_measures, per_query
    from retrieval.formats import read_run

    qrels = collections.load_qrels(args.qrels)
    names = [n for n, _ in parse_measures(args.measures)]
    results = {str(path): evaluate(read_run(path), qrels, names, args.only_answered) for path in args.runs}
    if args.json:
        out = next(iter(results.values())) if len(results) == 1 else results
        print(json.dumps(out, sort_keys=False))
        return
    width = max(len(str(p)) for p in args.runs)
    print(f"{'run':<{width}}  " + "  ".join(f"{n:>9}" for n in names))
    for path, values in results.items():
        print(f"{path:<{width}}  " + "  ".join(f"{values[n]:>9.4f}" for n in names))
    if args.per_query:
        for path in args.runs:
            print(f"\n{path}\n{'query':<10}  " + "  ".join(f"{n:>9}" for n in names))
            for qid, values in per_query(read_run(path), qrels, names, args.only_answered).items():
                print(f"{qid:<10}  " + "  ".join(f"{values[n]:>9.4f}" for n in names))
