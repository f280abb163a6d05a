"""`retrieval eval`: measures of run files against qrels."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from retrieval import collections
from retrieval.errors import InputError


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate run files against qrels (with significance tests)",
                       description="Evaluate TREC run files with ir-measures (trec_eval's own "
                       "code). Means are over every judged query: one the run does not answer "
                       "scores 0 (trec_eval -c); --only-answered gives trec_eval's default. With "
                       "several runs, each is compared with the baseline (the first run, or "
                       "--baseline) by the paired t-test and the Wilcoxon signed-rank test over "
                       "the same queries, Holm-corrected across the runs.")
    p.add_argument("--qrels", required=True,
                   help="collection name (test qrels; NAME:train for another split) or a file")
    p.add_argument("runs", nargs="+", type=Path, help="run files")
    p.add_argument("--measures", default="MAP P@30 nDCG@10",
                   help='measures, e.g. "MAP P@30 nDCG@10 R@100 MRR" (default: MAP P@30 nDCG@10)')
    p.add_argument("--only-answered", action="store_true",
                   help="average over the judged queries the run answers (trec_eval without -c)")
    p.add_argument("--baseline", type=Path, default=None, metavar="RUN",
                   help="the run the others are compared with (default: the first)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="significance level of the Holm-adjusted p-values (default 0.05)")
    p.add_argument("--per-query", action="store_true", help="also print each query's values")
    p.add_argument("--index", default=None,
                   help="warn, with a count, when the qrels judge documents this index lacks")
    p.add_argument("--collection", default=None,
                   help="as --index, against a collection (name or file) instead of an index")
    p.add_argument("--json", action="store_true",
                   help="print JSON: {measure: value} for one run; for several, {\"baseline\": run,"
                   " \"runs\": {run: {measure: value}}, \"comparisons\": {run: {measure: {queries,"
                   " mean_difference, p, p_holm}}}} (p: raw and Holm-adjusted t / wilcoxon); with"
                   " --per-query, always the second form plus \"per_query\": {run: {query: {measure:"
                   " value}}}")
    p.set_defaults(handler=run, files_dest="runs")  # run files may also follow options (cli._parse)


def run(args: argparse.Namespace) -> None:
    from retrieval.evaluation.measures import evaluate, parse_measures, per_query
    from retrieval.evaluation.significance import compare
    from retrieval.experiments import checks
    from retrieval.formats import read_run

    if not 0 < args.alpha < 1:
        raise InputError(f"--alpha {args.alpha} is out of range; expected a level between 0 and 1")
    paths = [str(p) for p in args.runs]
    twice = next((p for p in paths if paths.count(p) > 1), None)
    if twice is not None:
        raise InputError("run file given twice; expected each run once", twice)
    baseline = paths[0] if args.baseline is None else str(args.baseline)
    if baseline not in paths:
        raise InputError("--baseline must be one of the run files given", baseline)
    if args.index and args.collection:
        raise InputError("give --index or --collection (the documents to check the qrels against), not both")
    qrels = collections.load_qrels(args.qrels)
    names = [n for n, _ in parse_measures(args.measures)]
    runs = {path: read_run(path) for path in paths}
    checks.warn(_warnings(qrels, runs, baseline, names, args.index, args.collection))
    results = {}
    for path, run in runs.items():
        try:
            results[path] = evaluate(run, qrels, names, args.only_answered)
        except InputError as e:  # e.g. a run that answers no judged query: name the run
            raise e.at(path) from None
    needed = len(paths) > 1 or args.per_query  # per-query values serve comparisons and --per-query only
    values = {path: per_query(run, qrels, names, args.only_answered) for path, run in runs.items() if needed}
    comparisons = compare(values, baseline, names) if len(paths) > 1 else {}
    if args.json:
        print(json.dumps(_json(results, comparisons, baseline, values if args.per_query else None)))
        return
    print(_table(results, names, comparisons, baseline, args.alpha))
    if args.per_query:
        for path, by_query in values.items():
            print(f"\n{path}\n{'query':<10}  " + "  ".join(f"{n:>9}" for n in names))
            for qid, row in by_query.items():
                print(f"{qid:<10}  " + "  ".join(f"{row[n]:>9.4f}" for n in names))


def _warnings(qrels: dict, runs: dict, baseline: str, names: list[str], index: str | None,
              collection: str | None) -> list[str]:
    """Judged documents the index or collection lacks (if one is given); runs of other depths."""
    from retrieval.evaluation.measures import run_depth
    from retrieval.experiments import checks
    from retrieval.index.kinds import open_index

    doc_ids = (checks.index_doc_ids(open_index(index)) if index
               else checks.collection_doc_ids(collection) if collection else None)
    if index and doc_ids is None:
        raise InputError("this kind of index does not list its documents; give --collection instead", index)
    depths = {path: run_depth(run) for path, run in runs.items()}
    return checks.judged_warnings(qrels, doc_ids) + checks.depth_warnings(depths, baseline, names)


def _json(results: dict[str, dict[str, float]], comparisons: dict, baseline: str,
          by_query: dict[str, dict[str, dict[str, float]]] | None = None) -> dict:
    """One run: its {measure: value}; several: the baseline, every run's means and the comparisons;
    with `by_query` (--per-query), always the second form plus {"per_query": {run: {query: {measure:
    value}}}}."""
    if not comparisons and by_query is None:
        return next(iter(results.values()))
    compared: dict[str, dict] = {}
    for (path, measure), c in comparisons.items():
        compared.setdefault(path, {})[measure] = {"queries": c.queries, "mean_difference": c.mean_difference,
                                                  "p": c.p, "p_holm": c.p_holm}
    out = {"baseline": baseline, "runs": results, "comparisons": compared}
    return out if by_query is None else out | {"per_query": by_query}


def _table(results: dict[str, dict[str, float]], names: list[str], comparisons: dict, baseline: str,
           alpha: float) -> str:
    """Means per run and measure; with several runs, significance marks, p-values and a legend."""
    from retrieval.experiments.report import TESTS, fmt_p

    width = max(len(p) for p in results) + (len(" (baseline)") if comparisons else 0)
    cells = {n: max(12 if comparisons else 9, len(n)) for n in names}  # a long measure name widens its column
    lines = [f"{'run':<{width}}  " + "  ".join(f"{n:>{cells[n]}}" for n in names)]
    for path, means in results.items():
        label = path + (" (baseline)" if comparisons and path == baseline else "")
        row = []
        for n in names:
            c = comparisons.get((path, n))
            mark = "".join(letter for test, letter, _ in TESTS if c and c.significant(test, alpha))
            row.append(f"{means[n]:.4f} {mark:<2}" if comparisons else f"{means[n]:.4f}")
        lines.append(f"{label:<{width}}  " + "  ".join(f"{c:>{cells[n]}}" for n, c in zip(names, row)))
    if not comparisons:
        return "\n".join(lines)
    queries = max(c.queries for c in comparisons.values())
    lines += ["", f"t / w: differs from the baseline by the paired t-test / Wilcoxon signed-rank test at "
              f"Holm-adjusted p < {alpha} ({len(results) - 1} run(s) compared, {queries} queries paired).",
              "", f"{'Holm-adjusted p (t / w)':<{width}}  "
              + "  ".join(f"{n:>{max(17, len(n))}}" for n in names)]
    for path in results:
        if path != baseline:
            held = [comparisons[path, n].p_holm for n in names]
            lines.append(f"{path:<{width}}  " + "  ".join(
                f"{fmt_p(p['t']) + ' / ' + fmt_p(p['wilcoxon']):>{max(17, len(n))}}"
                for n, p in zip(names, held)))
    return "\n".join(lines)
