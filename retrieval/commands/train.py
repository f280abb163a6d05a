"""`retrieval train late|reader|realm`: train the late-interaction projection or the QA models."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from retrieval import collections, storage
from retrieval.commands.common import number, precision_flag, threads_flag
from retrieval.errors import InputError


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model: late, reader, realm or ltr",
                       description="Train a model. `train late`: the late-interaction projection; "
                       "`train reader`: the QA span reader; `train realm`: the QA question "
                       "encoder on REALM's marginal likelihood; `train ltr`: a learned ranker "
                       "(LambdaMART or linear) over features written by `retrieval features`.")
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND")
    _add_late(kinds)
    _add_reader(kinds)
    _add_realm(kinds)
    _add_ltr(kinds)


# ---------------------------------------------------------------- train late


LATE_FLAGS = {"dim": number(int, 1, 384), "epochs": number(), "batch_size": number(),
              "negatives": number(int, 0), "negative_depth": number(), "seed": int,
              "doc_length": number(int, 4, 512),
              "pairs_per_collection": number(),
              "lr": number(float, 0, above=True), "temperature": number(float, 0, above=True),
              "holdout": number(float, 0, 1, below=True), "anchor": number(float, 0)}
LATE_HELP = {
    "dim": "dimensions of the projected token embeddings (at most the encoder's 384)",
    "epochs": "training epochs (the best on the held-out queries is kept)",
    "batch_size": "training pairs per step (the other pairs' documents are in-batch negatives)",
    "negatives": "BM25 hard negatives per training query in a step",
    "negative_depth": "BM25 depth the hard negatives are drawn from",
    "seed": "random seed (pair order, negatives, held-out queries)",
    "doc_length": "word pieces of a document kept (4 to 512)",
    "pairs_per_collection": "unlabelled pairs made from each --pairs-from / --title-pairs-from corpus",
    "lr": "Adam learning rate",
    "temperature": "softmax temperature of the contrastive loss",
    "holdout": "share of the training queries held out to choose the epoch and weight",
    "anchor": "weight of ||W - W0||^2, keeping the projection near zero-shot",
    "titles": "add title -> abstract pairs from the corpus",
    "augment": "pad queries with [MASK] to 32 tokens",
    "markers": "query/document marker tokens",
}


def _add_late(kinds: argparse._SubParsersAction) -> None:
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
    threads_flag(p, "torch threads")
    precision_flag(p, "how the frozen encoder computes token states")
    for name, kind in LATE_FLAGS.items():
        p.add_argument("--" + name.replace("_", "-"), type=kind, default=getattr(d, name),
                       help=f"{LATE_HELP[name]} (default {getattr(d, name)})")
    for name in ("titles", "augment", "markers"):
        p.add_argument("--" + name, action=argparse.BooleanOptionalAction, default=getattr(d, name),
                       help=f"{LATE_HELP[name]} (default {'on' if getattr(d, name) else 'off'})")
    p.add_argument("--pairs-from", nargs="*", metavar="COLLECTION", default=list(d.pairs_from),
                   help="add unsupervised Inverse Cloze Task pairs (a span of a document -> the rest) "
                   "from these collections' corpora; their queries and qrels are never read (default: "
                   f"{' '.join(d.pairs_from) or 'none'})")
    p.add_argument("--title-pairs-from", nargs="*", metavar="COLLECTION", default=list(d.title_pairs_from),
                   help="add unsupervised title -> body pairs from these collections' documents (those "
                   "with a title field: scifact, cranfield); their queries and qrels are never read "
                   f"(default: {' '.join(d.title_pairs_from) or 'none'})")
    p.set_defaults(handler=train_late)


def train_late(args: argparse.Namespace) -> None:
    from retrieval.index.native import Index
    from retrieval.late.config import TrainConfig
    from retrieval.late.train import train, training_inputs

    storage.check_output_file(args.output)  # before any encoding, not after it
    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)
                         if hasattr(args, f.name)})
    cfg.pairs_from = tuple(cfg.pairs_from)
    cfg.title_pairs_from = tuple(cfg.title_pairs_from)
    docs, queries, qrels, run, name = training_inputs(Index.open(args.index), args.topics, args.qrels, cfg)
    info = train(docs, queries, qrels, run, args.output, cfg, cache_dir=args.cache_dir,
                 threads=args.threads, precision=args.precision, in_domain=name)
    print(json.dumps({k: v for k, v in info.items() if k != "history"}, indent=2))


# ---------------------------------------------------------------- train reader / realm


def _add_squad_flags(p: argparse.ArgumentParser, epochs: int, lr: float,
                     output_help: str = "checkpoint directory to write") -> None:
    p.add_argument("--output", required=True, type=Path, help=output_help)
    p.add_argument("--data", type=Path, help="SQuAD training file (default: squad2-dev)")
    p.add_argument("--exclude", type=Path, help="leave out paragraphs whose text occurs in this "
                   "SQuAD file (default: xquad-en, the evaluation set)")
    p.add_argument("--epochs", type=number(), default=epochs, help=f"training epochs (default {epochs})")
    p.add_argument("--lr", type=number(float, 0, above=True), default=lr,
                   help=f"AdamW learning rate (default {lr})")
    p.add_argument("--batch-size", type=number(), default=16, help="examples per step (default 16)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    threads_flag(p, "torch threads")


def _squad_files(args: argparse.Namespace) -> tuple[Path, Path]:
    """The training file and the evaluation file whose paragraphs are left out."""
    root = collections.data_dir()
    return (args.data or root / "squad2-dev" / "dev-v2.0.json",
            args.exclude or root / "xquad-en" / "xquad.en.json")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _add_reader(kinds: argparse._SubParsersAction) -> None:
    p = kinds.add_parser("reader", help="the QA span reader",
                         description="Fine-tune the extractive span reader (all layers) on SQuAD "
                         "data, leaving out every paragraph of the evaluation set.")
    _add_squad_flags(p, epochs=3, lr=1e-4, output_help="checkpoint directory to write (every epoch's is"
                     " also kept, in OUTPUT.epochs/epoch-N, for --validation-articles to choose from)")
    precision_flag(p, "training arithmetic (auto: bf16 autocast where the CPU has it)", ("fp32", "bf16"))
    p.add_argument("--base-model", default=None, help="encoder directory (default: MiniLM-L6)")
    p.add_argument("--impossible", type=number(float, 0, 1), default=1.0,
                   help="fraction of unanswerable questions kept (default 1.0)")
    p.add_argument("--max-length", type=number(int, 64, 512), default=384,
                   help="window length in word pieces, 64 to 512 (default 384)")
    p.add_argument("--stride", type=number(int, 0), default=128,
                   help="window overlap, at most half the window length (default 128)")
    p.add_argument("--validation-articles", type=number(int, 0), default=0, metavar="N",
                   help="hold out every question of N articles of the training file; the epoch with "
                   "the best held-out F1 becomes the checkpoint (default 0: the last epoch)")
    p.set_defaults(handler=train_reader)


def train_reader(args: argparse.Namespace) -> None:
    """Fine-tune the span reader; the checkpoint goes to --output."""
    from retrieval.qa.train import train_reader as train

    if args.stride > args.max_length // 2:  # the question shares the window with the passage
        raise InputError(f"--stride {args.stride} must be at most half of --max-length {args.max_length}")
    storage.check_model_output(args.output)
    data, exclude = _squad_files(args)
    info = train(data, args.output, exclude=exclude, base_model=args.base_model, epochs=args.epochs,
                 lr=args.lr, batch_size=args.batch_size, threads=args.threads, seed=args.seed,
                 impossible=args.impossible, precision=args.precision, max_length=args.max_length,
                 stride=args.stride, validation_articles=args.validation_articles, log=_log)
    print(json.dumps(info, indent=2))


def _add_realm(kinds: argparse._SubParsersAction) -> None:
    p = kinds.add_parser("realm", help="the QA question encoder (REALM)",
                         description="REALM: train the question encoder on the marginal likelihood "
                         "sum_z p(y|z,x) p(z|x) over --index's top passages, with the document "
                         "vectors and the reader fixed.")
    _add_squad_flags(p, epochs=2, lr=2e-5)
    precision_flag(p, "how the fixed reader reads passages")
    p.add_argument("--index", type=Path, required=True, help="passage index with a dense part")
    p.add_argument("--reader", type=Path, default=None, help="reader checkpoint (default: the "
                   "committed one, retrieval/models/reader, shipped in the package)")
    p.add_argument("--realm-k", type=number(), default=8, help="passages per question (default 8)")
    p.add_argument("--realm-questions", type=number(int, 0), default=600,
                   help="training questions, evenly sampled (default 600; 0 = all)")
    p.set_defaults(handler=train_realm)


def train_realm(args: argparse.Namespace) -> None:
    """REALM marginal-likelihood training of the query encoder (document side fixed)."""
    import torch

    from retrieval.dense.faiss_index import load_dense_part
    from retrieval.formats.squad import exclude_paragraphs, read_squad
    from retrieval.index.native import Index
    from retrieval.qa.reader import SpanReader
    from retrieval.qa.realm import train_query_side

    if args.realm_questions < 0:
        raise InputError("--realm-questions must be >= 0")
    storage.check_model_output(args.output)
    data, exclude = _squad_files(args)
    examples = [e for e in exclude_paragraphs(read_squad(data), read_squad(exclude)) if e.answers]
    if not examples:
        raise InputError("no answerable question to train on (REALM learns from questions with an answer)",
                         data)
    torch.set_num_threads(args.threads)  # the question encoder trains here, not only the reader
    if args.realm_questions and args.realm_questions < len(examples):
        examples = examples[::len(examples) // args.realm_questions][:args.realm_questions]
    faiss_index, doc_ids, _ = load_dense_part(Path(args.index))
    texts = {d.id: d.text for d in Index.open(args.index).docstore}
    reader = SpanReader(args.reader, precision=args.precision, threads=args.threads)
    info = train_query_side(examples, faiss_index.reconstruct_n(0, faiss_index.ntotal),
                            [str(d) for d in doc_ids], texts, reader, args.output, k=args.realm_k,
                            epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, seed=args.seed,
                            log=_log)
    print(json.dumps(info, indent=2))


# ---------------------------------------------------------------- train ltr


def _add_ltr(kinds: argparse._SubParsersAction) -> None:
    from retrieval.ltr.train import GRIDS

    p = kinds.add_parser("ltr", help="a learned ranker over LETOR features (LambdaMART or linear ones)",
                         description="Train LambdaMART (LightGBM: lambdarank, rank_xendcg or point-wise "
                         "regression), a linear pair-wise logistic ranker or coordinate ascent on "
                         "features written by "
                         "`retrieval features`, labelled by --topics' judgements (else the files' own "
                         "labels). Every setting of the grid is tried and the one with the best nDCG@10 "
                         "on the validation queries kept (LambdaMART's trees by early stopping there "
                         "too): --validation files, else every fifth training query held out. The model "
                         "directory holds JSON (features, normalisation, weights, settings, validation "
                         "figures, importances) and LightGBM's text model; no pickle.")
    p.add_argument("--features", nargs="+", required=True, type=Path, help="LETOR files to train on")
    p.add_argument("--topics", nargs="+", default=None,
                   help="the judgements of each --features file: collection name with split (e.g."
                   " cacm, scifact:train) or a qrels file (default: the labels in the files)")
    p.add_argument("--validation", nargs="+", type=Path, default=None,
                   help="LETOR files to choose settings on (default: every fifth training query)")
    p.add_argument("--validation-topics", nargs="+", default=None,
                   help="the judgements of each --validation file (default: the labels in the files)")
    p.add_argument("--kind", default="lambdamart", choices=("lambdamart", "linear", "coordascent"),
                   help="LambdaMART (LightGBM), linear pair-wise logistic, or coordinate ascent (a linear"
                   " model fitted to nDCG@10 or MAP; default lambdamart)")
    p.add_argument("--objective", default=None, choices=GRIDS["lambdamart"]["objective"],
                   help="LambdaMART's objective (default: chosen on validation)")
    p.add_argument("--fallback", action="store_true",
                   help="make the first stage a candidate too: a model whose validation nDCG@10 is not"
                   " strictly above the first stage's own ranking on the same queries is stored as a"
                   " fallback, which keeps the first stage's ranking")
    p.add_argument("--output", required=True, type=Path, help="model directory to write")
    p.set_defaults(handler=train_ltr)


def _labelled(files: list[Path], topics: list[str] | None, what: str) -> tuple[list, list]:
    from retrieval.ltr.letor import read_labels, read_letor

    if topics is not None and len(topics) != len(files):
        raise InputError(f"give one judgement set per {what} file: {len(files)} files, {len(topics)} sets")
    runs = [read_letor(f) for f in files]
    qrels = ([collections.load_qrels(t) for t in topics] if topics is not None
             else [read_labels(f) for f in files])
    return runs, qrels


def train_ltr(args: argparse.Namespace) -> None:
    """Train a learned ranker over features; settings chosen on validation queries."""
    from retrieval.ltr.train import GRIDS, split_queries, subset, train

    storage.check_model_output(args.output)
    runs, qrels = _labelled(args.features, args.topics, "--features")
    names = runs[0].names
    if any(r.names != names for r in runs):
        raise InputError("the --features files have different features; write them with the same"
                         " --feature-set and index parts")
    if args.validation is not None:
        valid, valid_qrels = _labelled(args.validation, args.validation_topics, "--validation")
    else:
        held = [split_queries(r) for r in runs]
        valid = [subset(r, v) for r, (_, v) in zip(runs, held)]
        valid_qrels = qrels
        runs = [subset(r, t) for r, (t, _) in zip(runs, held)]
    grid = dict(GRIDS[args.kind])
    if args.objective is not None:
        if args.kind != "lambdamart":
            raise InputError("--objective applies only with --kind lambdamart")
        grid["objective"] = (args.objective,)
    model = train(args.kind, names, runs, qrels, valid, valid_qrels, grid, fallback=args.fallback)
    model.save(args.output)
    validation = model.info["validation"]
    print(f"chosen on validation: {model.info['settings']} (nDCG@10 {validation['nDCG@10']:.4f} of"
          f" {len(validation['tried'])} settings tried; the first stage's {validation['first_stage']:.4f})")
    if model.fallback:
        print("not above the first stage on validation: the model is a fallback, it keeps the first"
              " stage's ranking")
    print("feature importances: " + ", ".join(f"{n} {w:.3f}" for n, w in
                                              sorted(model.importances().items(), key=lambda kv: -kv[1])))
    print(f"wrote {args.kind} model -> {args.output}", file=sys.stderr)
