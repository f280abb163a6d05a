"""Train the late-interaction projections leave one collection out, and the shipped one on all of them.

    python eval/train_late_loo.py --output-dir DIR [--workdir /tmp/late_loo] [--cache-dir DIR]
        [--index-root DIR] [--only cacm cranfield ...] [--epochs 4] [--max-pairs 600]
        [--dense-root DIR --dense-negatives] [--teacher hybrid --distill 1.0] [--mlp-width 384]

Training sources (retrieval.late.sources): the judged topics of CACM,
Cranfield, Vaswani and SciFact *train*, and SQuAD 2.0 dev's answerable
questions -> the paragraph that answers them (every paragraph whose text is in
xquad-en left out with its questions; at most --squad-questions of them). For each X of
cacm, cranfield, vaswani, scifact, DIR/X/late.safetensors is trained on every
source except X's (for scifact: no SciFact topics at all, train or test), and
DIR/all/late.safetensors on all five sources (no SciFact test topic or
judgement). Each source's held-out share of its queries (TrainConfig.holdout,
seeded: train.heldout_queries) chooses the epoch (mean held-out nDCG@10 over
the sources, epoch 0 = zero-shot); X's topics are never read by X's model.
At most --max-pairs training pairs per source (a seeded sample) keep the
sources balanced and training cheap; hard negatives from each source's BM25
top `negative_depth`, and with --dense-negatives also from the dense first
stage's top `negative_depth` (each collection's index with its dense part in
--dense-root/X; SQuAD's paragraph index gets a dense part in --workdir,
encoded once). --teacher hybrid (or dense) distils that first stage's scores
(its top 100 for each training query) into the projection, with weight
--distill (train.py: KL divergence over each query's positive and hard
negatives). --mlp-width W trains a residual per-token MLP of width W on the
unit-normalised frozen states beside the projection (retrieval.late.model.Head;
its output layer starts at zero, so epoch 0 is still zero-shot).

Token states of the corpora are computed once (the index's zero-shot late
store if it has one, else the scratch cache in --cache-dir). Indexes come
from --index-root/X when it holds X's index, else are built (BM25 only) in
--workdir.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from retrieval.collections import load_documents  # noqa: E402
from retrieval.index.native import Index, build_index  # noqa: E402
from retrieval.late.config import TrainConfig  # noqa: E402
from retrieval.late.sources import Source  # noqa: E402
from retrieval.types import Queries  # noqa: E402

COLLECTIONS = ("cacm", "cranfield", "vaswani", "scifact")
TOPICS = {"cacm": "cacm", "cranfield": "cranfield", "vaswani": "vaswani", "scifact": "scifact:train"}
SQUAD = "squad2-dev"


def data_file(*parts: str) -> Path:
    """A file of the bundled data directory ($RETRIEVAL_DATA)."""
    from retrieval.collections import data_dir

    return Path(data_dir(), *parts)


def open_index(name: str, index_root: Path | None, workdir: Path) -> Index:
    """X's index: --index-root/X when complete, else a BM25-only index built once in `workdir`."""
    if index_root and (index_root / name / "manifest.json").is_file():
        return Index.open(index_root / name)
    path = workdir / name
    if not (path / "manifest.json").is_file():
        build_index(load_documents(name), path, source=f"collection:{name}", progress=False, force=True)
    return Index.open(path)


def dense_inputs(name: str, source: Source, root: Path, workdir: Path,
                 cfg: TrainConfig) -> tuple[Index, Queries, bool]:
    """The source's index with a dense part (root/NAME, or SQuAD's paragraph index in `workdir` with a
    dense part added once), its training queries, and whether runs drop self-hits."""
    from retrieval.collections import drops_self_hits, load_topics
    from retrieval.dense.faiss_index import add_dense
    from retrieval.late.sources import squad_questions

    if name == "squad":
        index = Index.open(workdir / f"{SQUAD}-paragraphs")
        if not index.has("dense"):
            add_dense(index)
            index = Index.open(index.path)
        queries = squad_questions(data_file(SQUAD, "dev-v2.0.json"), data_file("xquad-en", "xquad.en.json"),
                                  None, cfg.seed)[1]
        self_hits = False
    else:
        index, queries = Index.open(root / name), load_topics(TOPICS[name])
        self_hits = drops_self_hits(TOPICS[name])
    return index, Queries((q, t) for q, t in queries.items() if q in source.qindex), self_hits


def add_dense_signals(name: str, source: Source, root: Path, workdir: Path, cfg: TrainConfig, threads: int,
                      negatives: bool, teacher: str | None) -> None:
    """The dense retriever's top `negative_depth` joins the source's hard negatives (`negatives`), and
    `teacher` (dense or hybrid, the registry's defaults) scores its training queries' top 100 for
    distillation."""
    from retrieval.late.sources import with_negatives_from
    from retrieval.registry import build

    index, queries, self_hits = dense_inputs(name, source, root, workdir, cfg)
    if negatives:
        run = build("dense", index, hits=cfg.negative_depth + 1, threads=threads)(queries)
        with_negatives_from(source, run.without_query_ids() if self_hits else run)
    if teacher:
        run = build(teacher, index, hits=101, threads=threads)(queries)
        source.teacher = run.without_query_ids() if self_hits else run
    print(f"{name}: dense signals for {len(queries)} queries", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output-dir", type=Path, required=True)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/late_loo"))
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--index-root", type=Path, default=None)
    ap.add_argument("--only", nargs="*", default=[*COLLECTIONS, "all"],
                    help="the models to train: held-out collections, and `all`")
    ap.add_argument("--sources", nargs="*", default=list(COLLECTIONS),
                    help="the judged collections that train (default all four; SQuAD always)")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--max-pairs", type=int, default=600)
    ap.add_argument("--squad-questions", type=int, default=1500)
    ap.add_argument("--anchor", type=float, default=TrainConfig().anchor)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--holdout", type=float, default=0.3)
    ap.add_argument("--negatives", type=int, default=TrainConfig().negatives)
    ap.add_argument("--dense-root", type=Path, default=None, metavar="DIR",
                    help="DIR/X: collection X's index with its dense part (`retrieval index --dense`), for"
                    " --dense-negatives and --teacher")
    ap.add_argument("--dense-negatives", action="store_true",
                    help="hard negatives also from the dense retriever's top hits")
    ap.add_argument("--teacher", choices=["dense", "hybrid"], default=None,
                    help="distil this first stage's scores (its top 100) into the projection")
    ap.add_argument("--distill", type=float, default=1.0, help="weight of the distillation term")
    ap.add_argument("--mlp-width", type=int, default=0,
                    help="> 0: train a residual per-token MLP head of this width beside the projection")
    ap.add_argument("--subset", nargs="*", default=[],
                    help="collections whose corpus is encoded only where BM25's top 100 of its topics or its"
                    " judgements reach (sources.top_and_judged), to save encoding time")
    args = ap.parse_args()
    import torch

    from retrieval.late.encoder import TokenEncoder
    from retrieval.late.sources import collection_source, squad_source, top_and_judged
    from retrieval.late.train import train_sources

    torch.set_num_threads(args.threads)
    cfg = TrainConfig(epochs=args.epochs, anchor=args.anchor, holdout=args.holdout, negatives=args.negatives,
                      distill=args.distill if args.teacher else 0.0, mlp_width=args.mlp_width)
    if (args.dense_negatives or args.teacher) and not args.dense_root:
        ap.error("--dense-negatives and --teacher need --dense-root")
    encoder = TokenEncoder(None, query_length=cfg.query_length, doc_length=cfg.doc_length,
                           threads=args.threads,
                           progress=False)
    start = time.time()
    needed = {c for held in args.only for c in args.sources if c != held}
    sources = {}
    for c in COLLECTIONS:
        if c in needed:
            index = open_index(c, args.index_root, args.workdir)
            only = top_and_judged(index, [c]) if c in args.subset and "late" not in index.parts else None
            sources[c] = collection_source(TOPICS[c], index, encoder, cfg, args.cache_dir, only=only)
            print(f"{c}: {len(sources[c].qindex)} queries, {len(sources[c].held)} held out, "
                  f"{len(sources[c].dindex)} documents", flush=True)
    sources["squad"] = squad_source(data_file(SQUAD, "dev-v2.0.json"), encoder, cfg, args.workdir,
                                    args.cache_dir, exclude=data_file("xquad-en", "xquad.en.json"),
                                    limit=args.squad_questions, name=SQUAD)
    if args.dense_negatives or args.teacher:
        for name, source in sources.items():
            add_dense_signals(name, source, args.dense_root, args.workdir, cfg, args.threads,
                              args.dense_negatives, args.teacher)
    print(f"sources ready in {time.time() - start:.0f}s", flush=True)
    for held in args.only:
        use = [s for c, s in sources.items() if c != held]
        out = args.output_dir / held / "late.safetensors"
        out.parent.mkdir(parents=True, exist_ok=True)
        info = train_sources(use, out, encoder.settings(), cfg, threads=args.threads,
                             max_pairs=args.max_pairs,
                             extra_info={"held_out_collection": None if held == "all" else held,
                                         "squad_exclude": "xquad-en paragraphs"})
        brief = {k: v for k, v in info.items() if k not in ("history", "config")}
        print(json.dumps({held: brief}), flush=True)


if __name__ == "__main__":
    main()
