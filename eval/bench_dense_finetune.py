"""Does fine-tuning the dense encoder on the judged pairs help? Leave one collection out (issue 51 item 4).

    python eval/bench_dense_finetune.py --workdir /work/cache/issue-51b [--index-root DIR]
        [--only cranfield ...] [--max-pairs 300] [--threads 1]

For each held-out collection X (of cacm, cranfield, vaswani, scifact):

1. Training pairs, as the late stage's LOO training takes them (retrieval.late.sources): the
   judged topics of every other collection (SciFact: its *train* topics) and SQuAD 2.0 dev's
   answerable questions -> their paragraph (xquad-en's paragraphs left out; at most
   --squad-questions), minus each source's held-out share (train.heldout_queries, holdout 0.3,
   seed 13: the split of eval/train_late_loo.py). Per source at most --max-pairs queries (seeded),
   each with one judged-relevant document (seeded) and one hard negative, a seeded pick from
   BM25's top 30 that is not judged relevant.
2. Fine-tune all-MiniLM-L6-v2 on them (retrieval.dense.train: in-batch + hard negatives,
   MultipleNegativesRanking loss, scale 20, 1 epoch, batch 16, lr 2e-5; all fixed a priori) into
   WORKDIR/models/X (safetensors).
3. Choose between the fine-tuned and the original encoder on the held-out queries of the
   *training* sources only (at most VAL_QUERIES per source, seeded): mean over sources of nDCG@10
   of the dense score reranking each query's BM25 top VAL_DEPTH (both encoders encode the same
   pool). The choice and its figures are written to WORKDIR/choices.json before any test topic of
   X is read.
4. Test on X's own topics (SciFact: test): dense alone and hybrid (the registry's defaults), the
   original encoder over X's index as --index-root holds it, the fine-tuned one over a copy whose
   dense part it encodes (precision auto, as the index's was built), with nDCG@10, MAP and a
   paired t-test against the original encoder.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).parent))

import numpy as np  # noqa: E402
from benchlib import machine_line, publish  # noqa: E402

from retrieval.collections import data_dir, drops_self_hits, load_qrels, load_topics  # noqa: E402
from retrieval.evaluation.measures import per_query  # noqa: E402
from retrieval.evaluation.significance import p_values  # noqa: E402
from retrieval.index.native import Index  # noqa: E402
from retrieval.late.config import TrainConfig  # noqa: E402
from retrieval.types import Qrels, Queries, Run  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "dense_finetune.md"
COLLECTIONS = ("cacm", "cranfield", "vaswani", "scifact")
TRAIN_TOPICS = {"cacm": "cacm", "cranfield": "cranfield", "vaswani": "vaswani", "scifact": "scifact:train"}
TEST_TOPICS = {"cacm": "cacm", "cranfield": "cranfield", "vaswani": "vaswani", "scifact": "scifact"}
SPLIT = TrainConfig(holdout=0.3)  # the held-out split of eval/train_late_loo.py's runs (seed 13)
NEGATIVE_DEPTH = 30
VAL_QUERIES = 20
VAL_DEPTH = 20
MEASURES = ["nDCG@10", "MAP"]
ALPHA = 0.05


class Pairs:
    """One training source: queries, qrels, BM25 run, a doc text lookup, and its held-out split."""

    def __init__(self, name: str, queries: Queries, qrels: Qrels, index: Index, drop_self: bool = False):
        from retrieval.late.sources import judged_in
        from retrieval.late.train import heldout_queries
        from retrieval.sparse.rankers import BM25

        qids, self.qrels = judged_in(queries, qrels, set(index.docno))
        self.name, self.index = name, index
        self.queries = Queries((q, queries[q]) for q in qids)
        run = BM25(index, hits=max(NEGATIVE_DEPTH, VAL_DEPTH))(self.queries)
        self.run = run.without_query_ids() if drop_self else run
        self.held = heldout_queries(qids, SPLIT)
        self.training = [q for q in qids if q not in self.held]

    def text(self, doc_id: str) -> str:
        return self.index.docstore.get(doc_id).contents

    def triples(self, limit: int, seed: int) -> list[tuple[str, str, str | None]]:
        """At most `limit` (query, relevant doc, BM25 hard negative) triples of the training queries."""
        rng = random.Random(f"{seed}:{self.name}")
        qids = self.training if len(self.training) <= limit else sorted(rng.sample(self.training, limit))
        out = []
        for q in qids:
            relevant = sorted(d for d, g in self.qrels[q].items() if g > 0)
            negatives = [d for d, _ in self.run.get(q, [])[:NEGATIVE_DEPTH] if self.qrels[q].get(d, 0) <= 0]
            negative = self.text(rng.choice(negatives)) if negatives else None
            out.append((self.queries[q], self.text(rng.choice(relevant)), negative))
        return out

    def validation_queries(self) -> list[str]:
        held = sorted(self.held)
        if len(held) <= VAL_QUERIES:
            return held
        return sorted(random.Random(f"val:{self.name}").sample(held, VAL_QUERIES))


def squad_pairs(workdir: Path, limit: int) -> Pairs:
    """SQuAD 2.0 dev answerable questions -> their paragraph, xquad-en's paragraphs left out."""
    from retrieval.late.sources import squad_paragraph_index, squad_questions

    base = Path(data_dir())
    passages, queries, qrels = squad_questions(base / "squad2-dev" / "dev-v2.0.json",
                                               base / "xquad-en" / "xquad.en.json", limit, SPLIT.seed)
    _, index = squad_paragraph_index(passages, workdir, "squad2-dev")
    return Pairs("squad", queries, qrels, index)


def validate(sources: list[Pairs], encoders: dict[str, object]) -> dict[str, dict[str, float]]:
    """Mean nDCG@10 of each encoder's dense reranking of BM25's top VAL_DEPTH, per source's held-out
    queries, and the mean over sources."""
    out: dict[str, dict[str, float]] = {}
    for s in sources:
        qids = s.validation_queries()
        pool = sorted({d for q in qids for d, _ in s.run.get(q, [])[:VAL_DEPTH]})
        texts = [s.text(d) for d in pool]
        row = {d: i for i, d in enumerate(pool)}
        qrels = Qrels((q, s.qrels[q]) for q in qids)
        for name, enc in encoders.items():
            dv, qv = enc.encode(texts), enc.encode([s.queries[q] for q in qids])
            run = Run({q: sorted(((d, float(dv[row[d]] @ qv[i])) for d, _ in s.run.get(q, [])[:VAL_DEPTH]),
                                 key=lambda h: (-h[1], h[0])) for i, q in enumerate(qids)}, presorted=False)
            scores = per_query(run, qrels, ["nDCG@10"])
            out.setdefault(name, {})[f"{s.name} ({len(qids)})"] = float(np.mean([v["nDCG@10"]
                                                                               for v in scores.values()]))
    for values in out.values():
        values["mean"] = float(np.mean(list(values.values())))
    return out


def dense_copy(source: Path, target: Path, encoder: object) -> Index:
    """A copy of the index `source` (never modified) whose dense part `encoder` encodes."""
    from retrieval.dense.faiss_index import add_dense

    if not (target / "manifest.json").is_file():
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("late"))
        add_dense(Index.open(tmp), encoder, in_place=True)
        os.replace(tmp, target)
    return Index.open(target)


def test_rows(x: str, indexes: dict[str, tuple[Index, str | None]], threads: int) -> tuple[list[str], dict]:
    """Dense and hybrid on X's test topics under each encoder, paired t against the original."""
    from retrieval.registry import build

    queries, qrels = load_topics(TEST_TOPICS[x]), load_qrels(TEST_TOPICS[x])
    measured: dict[tuple[str, str], dict] = {}
    for enc, (index, model) in indexes.items():
        for system in ("dense", "hybrid"):
            run = build(system, index, threads=threads, encoder=model)(queries)
            if drops_self_hits(TEST_TOPICS[x]):
                run = run.without_query_ids()
            measured[system, enc] = per_query(run, qrels, MEASURES)
    rows, figures = [], {}
    for system in ("dense", "hybrid"):
        cells = [f"{TEST_TOPICS[x]} ({len(measured[system, 'original'])} queries)", system]
        for m in MEASURES:
            qids = sorted(measured[system, "original"])
            a = np.array([measured[system, "finetuned"][q][m] for q in qids])
            b = np.array([measured[system, "original"][q][m] for q in qids])
            p = p_values(a, b)["t"]
            cells += [f"{b.mean():.4f}", f"{a.mean():.4f}", f"{a.mean() - b.mean():+.4f}",
                      f"{p:.3f}{'*' if p < ALPHA else ''}"]
            figures[f"{system} {m}"] = {"original": float(b.mean()), "finetuned": float(a.mean()), "p": p}
        rows.append("| " + " | ".join(cells) + " |")
    return rows, figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--index-root", type=Path, default=Path("/work/cache/shared/indexes"),
                    help="X/ holds collection X's index (read only; copied for each encoder)")
    ap.add_argument("--only", nargs="*", default=list(COLLECTIONS))
    ap.add_argument("--max-pairs", type=int, default=48)
    ap.add_argument("--squad-questions", type=int, default=1500)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    from retrieval.dense.encoder import Encoder
    from retrieval.dense.train import FinetuneConfig, finetune

    torch.set_num_threads(args.threads)
    cfg = FinetuneConfig()
    start = time.time()
    sources = {c: Pairs(c, load_topics(TRAIN_TOPICS[c]), load_qrels(TRAIN_TOPICS[c]),
                        Index.open(args.index_root / c), drop_self=drops_self_hits(TRAIN_TOPICS[c]))
               for c in COLLECTIONS if any(c != x for x in args.only)}
    sources["squad"] = squad_pairs(args.workdir, args.squad_questions)
    original = Encoder(None, threads=args.threads, progress=False)
    choices_file = args.workdir / "choices.json"
    choices = json.loads(choices_file.read_text()) if choices_file.is_file() else {}
    rows: list[str] = []
    validation_rows: list[str] = []
    for x in args.only:
        use = [s for c, s in sources.items() if c != x]
        model_dir = args.workdir / "models" / f"minilm-loo-{x}"
        if not (model_dir / "training.json").is_file():
            triples = [t for s in use for t in s.triples(args.max_pairs, cfg.seed)]
            finetune(triples, model_dir, cfg=cfg, threads=args.threads,
                     extra_info={"held_out_collection": x, "sources": [s.name for s in use],
                                 "heldout_queries": {s.name: len(s.held) for s in use}}, progress=True)
        info = json.loads((model_dir / "training.json").read_text())
        tuned = Encoder(model_dir, threads=args.threads, progress=False)
        if x not in choices:
            val = validate(use, {"original": original, "finetuned": tuned})
            pick = "finetuned" if val["finetuned"]["mean"] > val["original"]["mean"] else "original"
            choices[x] = {"choice": pick, "validation_nDCG@10": val,
                          "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            choices_file.write_text(json.dumps(choices, indent=1, sort_keys=True) + "\n")
            print(json.dumps({x: choices[x]}), flush=True)
        val = choices[x]["validation_nDCG@10"]
        for name in sorted(val["original"], key=lambda n: n == "mean"):  # the mean last
            validation_rows.append(f"| {x} | {name} | {val['original'][name]:.4f} |"
                                   f" {val['finetuned'][name]:.4f} |")
        validation_rows.append(f"| {x} | **choice** | {choices[x]['choice']} | {info['pairs']} pairs, "
                               f"{info['steps']} steps, loss {info['losses'][0]:.3f} -> "
                               f"{np.mean(info['losses'][-5:]):.3f} (last 5) |")
        indexes = {"original": (Index.open(args.index_root / x), None),
                   "finetuned": (dense_copy(args.index_root / x, args.workdir / "indexes" / f"{x}-finetuned",
                                            tuned), str(model_dir))}
        new_rows, _ = test_rows(x, indexes, args.threads)
        rows += new_rows
        print(f"{x} done at {time.time() - start:.0f}s", flush=True)
    body = "\n".join([
        "# Dense encoder fine-tuning, leave one collection out (issue 51 item 4)",
        f"Machine: {machine_line('torch', 'transformers', 'faiss-cpu')}.",
        "",
        f"Fine-tuning (fixed a priori): {json.dumps(cfg.__dict__)}; in-batch negatives plus one BM25 hard"
        f" negative (top {NEGATIVE_DEPTH}, not judged relevant) per query; at most {args.max_pairs} queries"
        f" per source; SQuAD 2.0 dev at most {args.squad_questions} questions, xquad-en paragraphs left out.",
        "",
        f"Validation (written to choices.json before the test topics are read): held-out queries of the"
        f" training sources (holdout {SPLIT.holdout}, seed {SPLIT.seed}; at most {VAL_QUERIES} per source),"
        f" nDCG@10 of the dense score reranking BM25's top {VAL_DEPTH}.",
        "",
        "| held-out collection | validation source (queries) | original | fine-tuned |",
        "|---|---|---:|---:|",
        *validation_rows,
        "",
        "Test: the held-out collection's own topics, its whole corpus encoded by each encoder (precision"
        " auto); hybrid at the registry's defaults. Paired t-test of fine-tuned against original;"
        " * p < 0.05.",
        "",
        "| topics | system | nDCG@10 original | fine-tuned | diff | p | MAP original | fine-tuned | diff"
        " | p |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
    ])
    publish(RESULTS, body)


if __name__ == "__main__":
    main()
