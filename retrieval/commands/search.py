"""`retrieval search`: every topic through a registered ranker, to a TREC run file.

The ranker flags (--k1, --mu, --rm3, --weight, ...) are generated from the
ranker registry; a flag the chosen model does not take is refused, never
silently dropped. The index kind (native, sharded, Lucene) comes from the
index itself.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from retrieval import collections
from retrieval.commands.common import (
    naming_candidates,
    number,
    run_answering,
    run_tag,
    topics_flags,
    write_run_output,
)
from retrieval.errors import InputError
from retrieval.index.impacts import SPARSE_MODELS
from retrieval.pipeline.params import PARAMS
from retrieval.registry import RANKERS

EXCLUDED = {"checkpoint"}  # late's model is `retrieval rerank --model`
SHARD_RETRIES = 2  # restarts of a shard's Ray actor before the shard counts as unavailable


def ranker_flags(p: argparse.ArgumentParser) -> list[str]:
    """One flag per registered parameter (default None: the ranker's own default applies)."""
    names = [n for n in PARAMS if n not in EXCLUDED and any(n in r.params for r in RANKERS.values())]
    for name in names:
        param = PARAMS[name]
        takers = [r for r in RANKERS.values() if name in r.params]
        defaults = sorted({f"{r.default(name)}" for r in takers})
        if len(defaults) > 1:
            default = ", ".join(f"{r.name} {r.default(name)}" for r in takers)
        else:
            default = defaults[0]
        models = "" if len(takers) == len(RANKERS) else f"[{', '.join(r.name for r in takers)}] "
        text = f"{models}{param.help}" + ("" if default == "None" else f" (default {default})")
        if param.type is bool:
            p.add_argument(param.flag, action="store_true", default=None, help=text)
        else:
            p.add_argument(param.flag, type=param.type, default=None, choices=param.choices or None,
                           help=text)
    return names


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="run topics against an index and write a TREC run file",
                       description="Search every topic and write a TREC run file (byte-identical "
                       "for the same inputs). With --candidates, rescore that run's documents "
                       "instead of searching the whole index (e.g. BM25 -> QL cascade, or --model "
                       "late).")
    p.add_argument("--index", required=True, type=Path, help="index directory (native, sharded or "
                   "Lucene/Anserini)")
    topics_flags(p)
    p.add_argument("--model", default="bm25", choices=list(RANKERS),
                   help="; ".join(f"{r.name}: {r.help}" for r in RANKERS.values()) + " (default bm25)")
    p.add_argument("--backend", choices=["auto", "native", "lucene"], default="auto",
                   help="auto (default) follows the index; native or lucene insists on that kind")
    p.set_defaults(ranker_flags=ranker_flags(p))
    p.add_argument("--candidates", type=Path, help="rescore this run file's documents instead")
    p.add_argument("--ltr", type=Path, default=None, metavar="MODEL",
                   help="then rerank the run's top --ltr-depth by this learned ranker (`retrieval train"
                   " ltr`'s directory): the features it was trained on are computed for them and the"
                   " run keeps those documents, in the model's order")
    p.add_argument("--ltr-depth", type=number(), default=RANKERS["features"].default("depth"),
                   help="--ltr: candidates per query (default %(default)s)")
    p.add_argument("--late-checkpoint", default=None,
                   help="--ltr: the late feature's checkpoint, as the features were computed (zero-shot"
                   " or a .safetensors; default the committed checkpoint)")
    p.add_argument("--remove-query-ids", action=argparse.BooleanOptionalAction, default=None,
                   help="drop each query's own id from its hits (default: on for BEIR "
                   "collections such as scifact, off otherwise)")
    p.add_argument("--tag", type=run_tag, default=None,
                   help="run tag in the last column (default: the model)")
    p.add_argument("--output", default="-", help="run file to write (default: stdout)")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="sharded index: search the shards on Ray, one actor per shard; 'local' "
                   "starts a local Ray cluster, otherwise the address of a running one (shard "
                   "directories must be readable at the same path on its nodes). Default: search "
                   "the shards in this process")
    p.add_argument("--allow-partial", action="store_true",
                   help="sharded index: if a shard stays unavailable, write the run from the other "
                   "shards (with a warning naming the missing ones) instead of failing")
    p.add_argument("--shard-retries", type=number(int, 0), default=None,
                   help="sharded index on Ray: restarts of a shard's actor before the shard counts as "
                   f"unavailable (default {SHARD_RETRIES})")
    p.set_defaults(handler=run)


def given_params(args: argparse.Namespace) -> dict[str, Any]:
    """The ranker parameters the user set, checked against the chosen model."""
    given = {n: getattr(args, n) for n in args.ranker_flags if getattr(args, n) is not None}
    entry = RANKERS[args.model]
    for name in given:
        if name not in entry.params:
            raise InputError(f"{PARAMS[name].flag} does not apply to {args.model}; it takes "
                             + ", ".join(PARAMS[n].flag for n in entry.params if n not in EXCLUDED))
    entry.resolve(given)  # ranges, before any work
    return given


def run(args: argparse.Namespace) -> None:
    from retrieval.index.kinds import open_index
    from retrieval.registry import build

    params = given_params(args)
    entry = RANKERS[args.model]
    if args.late_checkpoint is not None and args.ltr is None:
        raise InputError("--late-checkpoint applies only with --ltr")
    if entry.needs_run and not args.candidates:
        raise InputError(f"{args.model} reranks a run: give --candidates RUN")
    if params.get("rm3") and args.candidates:
        raise InputError("--rm3 searches the whole index again, so it cannot rescore --candidates; search"
                         " without --candidates, or rescore without --rm3")
    queries = collections.load_topics(args.topics, args.topic_field)
    index = open_index(args.index)
    if args.backend != "auto" and index.kind != args.backend:
        raise InputError(f"this is a {index.kind} index, not {args.backend} (--backend auto follows the"
                         " index)", args.index)
    if args.ray and index.kind != "sharded":
        raise InputError("--ray searches a sharded index (build one with --shards N)", args.index)
    if args.allow_partial and index.kind != "sharded":
        raise InputError("--allow-partial applies only to a sharded index (build one with --shards N)",
                         args.index)
    if args.shard_retries is not None and not args.ray:
        raise InputError("--shard-retries applies only with --ray (in-process shards are not restarted)")
    rescores_on_shards = index.kind == "sharded" and args.model in SHARD_RESCORING
    if args.candidates and index.kind != "native" and not entry.needs_run and not rescores_on_shards:
        hint = f" ({', '.join(SHARD_RESCORING)} rescore there)" if index.kind == "sharded" else ""
        raise InputError(f"--candidates (rescoring) with {args.model} is not supported on a {index.kind}"
                         f" index{hint}", args.index)
    candidates = run_answering(args.candidates, queries, "candidates run") if args.candidates else None
    if index.kind == "sharded":
        index.use_backend(_shard_backend(index, args.ray, args.allow_partial, args.shard_retries))
    try:
        with naming_candidates(args.candidates):
            run = build(args.model, index, **params)(queries, candidates)
            if args.ltr is not None:
                run = _learned(index, queries, run, args)
        if candidates is not None:  # a stage rescores every candidate; the file keeps --hits
            run = run.cut(params.get("hits", entry.default("hits")))
    finally:
        if index.kind == "sharded":
            index.backend.close()
    if index.kind == "sharded":
        _warn_missing(index)
    remove = args.remove_query_ids
    if remove if remove is not None else collections.removes_query_ids(args.topics):
        run = run.without_query_ids()
    tag = args.tag if args.tag is not None else (args.model + ("-rm3" if params.get("rm3") else ""))
    write_run_output(run, args.output, tag)


def _learned(index: Any, queries: Any, run: Any, args: argparse.Namespace) -> Any:
    """The run's top --ltr-depth reranked by the --ltr model over the features it was trained on; a
    fallback model keeps the first stage's ranking of them, so no feature is computed."""
    from retrieval.ltr.features import top_candidates
    from retrieval.ltr.model import load_model
    from retrieval.registry import build, feature_set_for

    model = load_model(args.ltr)
    if model.fallback:
        return top_candidates(queries, run, args.ltr_depth)
    features = build("features", index, depth=args.ltr_depth, feature_set=feature_set_for(model.names),
                     checkpoint=args.late_checkpoint)
    return build("ltr", index, checkpoint=str(args.ltr))(queries, features(queries, run))


SHARD_RESCORING = tuple(SPARSE_MODELS)  # sparse models rescore a run on a sharded index


def _shard_backend(index: Any, ray: str | None, allow_partial: bool, retries: int | None) -> Any:
    """In-process shards, or Ray actors (`ray`: "local" or a cluster address)."""
    from retrieval.shards.local import LocalBackend

    if not ray:
        return LocalBackend(index, allow_partial)
    try:
        from retrieval.shards.ray_backend import RayBackend
    except ImportError:
        raise InputError("--ray needs the ray package: pip install 'retrieval[shards]'") from None
    retries = SHARD_RETRIES if retries is None else retries
    return RayBackend(index, ray, allow_partial=allow_partial, retries=retries)


def _warn_missing(index: Any) -> None:
    """Warn on stderr about shards left out (--allow-partial)."""
    backend = index.backend
    if backend.missing:
        print(f"retrieval: warning: PARTIAL RESULTS: {len(backend.missing)} of {len(index.shards)}"
              f" shards missing ({', '.join(sorted(backend.missing))}); the run leaves out their"
              " documents", file=sys.stderr)
