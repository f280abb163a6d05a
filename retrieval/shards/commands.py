"""The CLI's sharded paths: `index --shards N`, `search` and `info` on a sharded index."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from retrieval import collections
from retrieval.errors import InputError
from retrieval.shards.layout import ShardedIndex
from retrieval.shards.local import LocalBackend, ShardBackend
from retrieval.shards.rankers import make_sharded_ranker


def make_backend(index: ShardedIndex, ray: str | None, allow_partial: bool, retries: int) -> ShardBackend:
    """In-process shards, or Ray actors (`ray`: "local" or a cluster address)."""
    if not ray:
        return LocalBackend(index, allow_partial)
    try:
        from retrieval.shards.ray_backend import RayBackend
    except ImportError:
        raise InputError("--ray needs the ray package: pip install 'retrieval[shards]'") from None
    return RayBackend(index, ray, allow_partial=allow_partial, retries=retries)


def search(args: argparse.Namespace, queries: dict[str, str], params: dict[str, Any]) -> Any:
    """Search a sharded index as `retrieval search` asked; warns on stderr about missing shards."""
    if args.candidates:
        raise InputError("--candidates (rescoring) is not supported on a sharded index")
    if args.backend == "lucene":
        raise InputError("a sharded index is searched by the native backend, not lucene")
    index = ShardedIndex.open(args.index)
    backend = make_backend(index, args.ray, args.allow_partial, args.shard_retries)
    try:
        stage = make_sharded_ranker(args.model, index, backend, **params)
        run = stage(queries)
    finally:
        backend.close()
    if backend.missing:
        print(f"retrieval: warning: PARTIAL RESULTS: {len(backend.missing)} of {len(index.shards)}"
              f" shards missing ({', '.join(sorted(backend.missing))}); the run leaves out their"
              " documents", file=sys.stderr)
    return run


def index(args: argparse.Namespace, dense_params: dict[str, int]) -> None:
    """`retrieval index --shards N`: build a sharded index (with --dense, dense parts too)."""
    from retrieval.analysis import Analyzer
    from retrieval.shards.build import build_sharded_index
    from retrieval.shards.dense import DenseSource

    if args.collection is None:
        raise InputError("--collection is required with --shards")
    if args.backend == "lucene":
        raise InputError("--shards needs the native backend")
    late = None
    if getattr(args, "late", False):
        from retrieval.late import LateModel
        from retrieval.precision import torch_path
        from retrieval.shards.late import LateSource

        model = LateModel(args.late_model, threads=args.threads, precision=torch_path(args.precision))
        late = LateSource(model, args.late_compression)
    dense = None
    if args.dense_from:
        dense = DenseSource(None, args.dense_index, dense_params, reuse=args.dense_from)
    elif args.dense:
        from retrieval.dense import Encoder

        encoder = Encoder(args.encoder, precision=args.precision)
        dense = DenseSource(encoder, args.dense_index, dense_params)
    analyzer = Analyzer(stopwords=not args.no_stopwords, stemmer=None if args.no_stem else "porter")
    manifest = build_sharded_index(collections.load_documents(args.collection), args.index, args.shards,
                                   force=args.force,
                                   source=collections.describe(args.collection), analyzer=analyzer,
                                   workers=args.threads, dense=dense, late=late)
    stats = manifest["stats"]
    print(f"indexed {stats['documents']} documents in {args.shards} shards, {stats['unique_terms']}"
          f" unique terms, {stats['total_terms']} terms -> {args.index}", file=sys.stderr)


def info(path: Any) -> None:
    """`retrieval info` on a sharded index."""
    print(json.dumps(ShardedIndex.open(path).describe(), indent=2))
