"""Late interaction and the QA reader in each precision on this CPU: speed and quality against fp32.

    python eval/bench_precision.py [--threads 2] [--sample 128] [--repeats 3] [--precisions ...]

Late interaction (the committed checkpoint): document token-encoding docs/s on
a random sample of SciFact documents, and nDCG@10 of BM25 top-100 reranked by
MaxSim with queries and documents encoded in that precision, on validation
(the checkpoint's held-out SciFact training queries) and on SciFact test. QA
reader (the committed reader): reading speed (question + gold paragraph
pairs/s) on the first --sample XQuAD-en questions, and closed-setting EM/F1
(each question read with its gold paragraph) on validation (the answerable
squad2-dev:validation questions) and on all 1,190 XQuAD-en questions. Whether
int8 is within each model's loss limit is decided on validation only and
checked against the package's choice (INT8_WITHIN_LIMIT); test is reported. Speed
is timed round-robin over the precisions after a warm-up, median and range
over --repeats. The dense encoder's table is eval/bench_dense.py's; these
models have no peer library here, so ratios are against our own fp32. Writes
this machine's section of eval/results/precision.md (one section per machine
and command); with RETRIEVAL_NO_BF16=1 it measures what a CPU without bf16
gets, with RETRIEVAL_EMULATE_CPU=avx2 what an AVX2 CPU gets. The file keeps
runs on an Intel Xeon, an AMD EPYC Zen 4 (bf16 without AMX) and an AMD EPYC
Zen 3 (a real AVX2 CPU, no emulation).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import (  # noqa: E402
    machine_line,
    mean_of,
    precision_decisions,
    publish,
    round_robin,
    timing_sample,
)

from retrieval.collections import (  # noqa: E402
    data_dir,
    load_documents,
    load_examples,  # noqa: E402
    load_qrels,
    load_topics,
)
from retrieval.evaluation.measures import per_query  # noqa: E402
from retrieval.formats.squad import gold_answers, passage_id, read_squad  # noqa: E402
from retrieval.index.native import Index, build_index  # noqa: E402
from retrieval.late import DEFAULT_CHECKPOINT  # noqa: E402
from retrieval.late import encoder as late_encoder  # noqa: E402
from retrieval.late.config import TrainConfig  # noqa: E402
from retrieval.late.model import LateModel, maxsim  # noqa: E402
from retrieval.late.train import training_split  # noqa: E402
from retrieval.qa import reader as reader_module  # noqa: E402
from retrieval.qa.marginal import marginalise  # noqa: E402
from retrieval.qa.metrics import evaluate as squad_evaluate  # noqa: E402
from retrieval.qa.metrics import score as answer_score  # noqa: E402
from retrieval.qa.pipeline import best_answers  # noqa: E402
from retrieval.qa.reader import SpanReader  # noqa: E402
from retrieval.runtime import precision as precisions  # noqa: E402
from retrieval.sparse.rankers import BM25  # noqa: E402
from retrieval.types import Run, rank  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)
DEPTH = 100
# How far a precision may move each model's validation score, either way (precision.within_limit).
LATE_LIMIT = 0.003    # nDCG@10 (retrieval/late/encoder.py)
READER_LIMIT = 0.5    # closed-setting F1 points (retrieval/qa/reader.py)


def rate_cell(n: int, seconds: list[float]) -> str:
    return f"{n / statistics.median(seconds):.1f} ({n / max(seconds):.1f}–{n / min(seconds):.1f})"


def bm25_top(workdir: Path, topics: str = "scifact") -> Run:
    """SciFact BM25 top-100 for `topics` (query ids removed from their hits, as Anserini does)."""
    path = workdir / "scifact"
    if not (path / "manifest.json").is_file():
        build_index(load_documents("scifact"), path, source="collection:scifact", progress=False)
    run = BM25(Index.open(path), k1=0.9, b=0.4, hits=1000)(load_topics(topics))
    return run.without_query_ids().cut(DEPTH)


def late_ndcg(model: LateModel, first: Run, texts: dict[str, str], queries, qrels) -> dict[str, float]:
    """nDCG@10 of each judged query of the first stage's top 100 reranked by MaxSim, every document
    encoded once."""
    union = sorted({d for hits in first.values() for d, _ in hits})
    docs = dict(zip(union, model.documents([texts[d] for d in union])))
    reranked = {}
    for q, emb in zip(first, model.queries([queries[q] for q in first])):
        ids = [d for d, _ in first[q]]
        offsets = np.concatenate([[0], np.cumsum([len(docs[d]) for d in ids])]).astype(np.int64)
        reranked[q] = rank(zip(ids, maxsim(emb, np.concatenate([docs[d] for d in ids]), offsets).tolist()))
    return {q: values["nDCG@10"] for q, values in per_query(Run(reranked), qrels, ["nDCG@10"]).items()}


def late_validation(args, texts: dict[str, str]) -> tuple[Run, dict, dict]:
    """The checkpoint's own held-out SciFact *training* queries (never trained on): their BM25
    top 100, texts and qrels; the split is the one training used (its recorded seed and share)."""
    from safetensors import safe_open

    with safe_open(str(DEFAULT_CHECKPOINT), framework="numpy") as f:
        recorded = json.loads(f.metadata()["info"])["config"]
    cfg = TrainConfig(seed=recorded["seed"], holdout=recorded["holdout"])
    queries, qrels = load_topics("scifact:train"), load_qrels("scifact:train")
    _, held = training_split(queries, qrels, texts, cfg)
    first = bm25_top(args.workdir, "scifact:train")
    return (Run({q: first[q] for q in first if q in held}), queries,
            {q: qrels[q] for q in held})


def late_rows(args) -> tuple[list[str], str]:
    corpus = list(load_documents("scifact"))
    texts = {d.id: d.contents for d in corpus}
    sample = timing_sample([d.contents for d in corpus], args.sample)
    models = {p: LateModel(None, threads=args.threads, precision=p) for p in args.precisions}
    auto = precisions.resolve(precisions.AUTO, int8_within_limit=late_encoder.INT8_WITHIN_LIMIT)
    times = round_robin({p: (lambda m=m: m.documents(sample)) for p, m in models.items()}, args.repeats)
    val_first, val_queries, val_qrels = late_validation(args, texts)
    valid_per_query = {p: late_ndcg(m, val_first, texts, val_queries, val_qrels) for p, m in models.items()}
    first, queries, qrels = bm25_top(args.workdir), load_topics("scifact"), load_qrels("scifact")
    valid = {p: mean_of(got) for p, got in valid_per_query.items()}
    test = {p: mean_of(late_ndcg(m, first, texts, queries, qrels)) for p, m in models.items()}
    rows = [f"| precision | documents/s median (range over {args.repeats}) | × fp32 | validation nDCG@10 "
            "| Δ vs fp32 | test nDCG@10 | Δ vs fp32 |", "|---|---:|---:|---:|---:|---:|---:|"]
    for p in models:
        speedup = statistics.median(times["fp32"]) / statistics.median(times[p])
        rows.append(f"| {_label(p, auto)} | {rate_cell(args.sample, times[p])} | {speedup:.2f}× |"
                    f" {valid[p]:.4f} | {valid[p] - valid['fp32']:+.4f} | {test[p]:.4f} |"
                    f" {test[p] - test['fp32']:+.4f} |")
    measured_on = f"{len(val_qrels)} held-out SciFact training queries, BM25 top-100 reranked, nDCG@10"
    verdict = precision_decisions("late interaction", valid_per_query, LATE_LIMIT, late_encoder, measured_on)
    return rows, verdict


def reader_scores(readers: dict, examples: list) -> tuple[dict[str, dict[str, float]],
                                                         dict[str, dict[str, float]]]:
    """Closed-setting SQuAD EM/F1 of each reader (every question read with its own paragraph), and
    each reader's F1 per question (0-100, as the means)."""
    gold, scores, f1 = gold_answers(examples), {}, {}
    for p, reader in readers.items():
        readings = reader.read([e.question for e in examples], [e.context for e in examples])
        pred = {e.id: best_answers({e.id: marginalise([passage_id(e.context)], [1.0], [r])})[e.id]
                for e, r in zip(examples, readings)}
        scores[p] = squad_evaluate(gold, pred)
        f1[p] = {q: 100.0 * answer_score(gold[q], pred[q])[1] for q in gold}
    return scores, f1


def reader_rows(args) -> tuple[list[str], str]:
    examples = read_squad(data_dir() / "xquad-en" / "xquad.en.json")
    validation = [e for e in load_examples("squad2-dev:validation") if not e.impossible]
    readers = {p: SpanReader(precision=p, threads=args.threads) for p in args.precisions}
    auto = precisions.resolve(precisions.AUTO, int8_within_limit=reader_module.INT8_WITHIN_LIMIT)
    head = examples[:args.sample]
    times = round_robin({p: (lambda r=r: r.read([e.question for e in head], [e.context for e in head]))
                     for p, r in readers.items()}, args.repeats)
    (valid, valid_f1), (scores, _) = reader_scores(readers, validation), reader_scores(readers, examples)
    rows = [f"| precision | questions/s median (range over {args.repeats}) | × fp32 | validation EM / F1 |"
            " Δ vs fp32 | test EM / F1 | Δ vs fp32 |", "|---|---:|---:|---:|---:|---:|---:|"]
    for p in readers:
        speedup = statistics.median(times["fp32"]) / statistics.median(times[p])
        cells = []
        for got in (valid, scores):
            em, f1 = got[p]["exact"], got[p]["f1"]
            base = got["fp32"]
            cells.append(f"{em:.1f} / {f1:.1f} | {em - base['exact']:+.1f} / {f1 - base['f1']:+.1f}")
        rows.append(f"| {_label(p, auto)} | {rate_cell(len(head), times[p])} | {speedup:.2f}× | "
                    + " | ".join(cells) + " |")
    verdict = precision_decisions("the reader", valid_f1, READER_LIMIT, reader_module,
                                  f"{len(validation)} answerable squad2-dev:validation questions,"
                                  " closed-setting F1")
    return rows, verdict


def _label(precision: str, auto: str) -> str:
    return f"**{precision} (auto)**" if precision == auto else precision


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sample", type=int, default=128, help="documents / questions timed per repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precisions", nargs="+", default=[p for p in precisions.TORCH_PRECISIONS
                                                        if p != "bf16" or precisions.cpu_has_bf16()])
    ap.add_argument("--workdir", type=Path, default=Path("indexes") / "bench-precision",
                    help="where the SciFact index for BM25 is built once")
    ap.add_argument("--out", type=Path, default=ROOT / "eval" / "results" / "precision.md")
    args = ap.parse_args()
    args.precisions = list(dict.fromkeys(["fp32", *args.precisions]))
    (late, late_verdict), (reader, reader_verdict) = late_rows(args), reader_rows(args)
    publish(args.out, "\n".join([
        "# Late interaction and the QA reader in each precision", "",
        f"{args.threads} cores; **auto** is each model's default on this CPU (`retrieval.runtime.precision`)."
        f" Speed is timed round-robin on {args.sample} SciFact documents / XQuAD-en questions after a"
        " warm-up.", "",
        "Late-interaction document encoding (committed checkpoint, max length 256); validation: the"
        " checkpoint's held-out SciFact training queries, test: SciFact test, each BM25 top-100"
        " reranked:", "", *late, "", late_verdict, "",
        "QA reader (committed reader, windows of 384 tokens), closed setting; validation: the answerable"
        " squad2-dev:validation questions (articles the reader never trained on), test: all 1,190"
        " XQuAD-en questions:", "", *reader, "", reader_verdict, "",
        "Machine: " + machine_line("torch", "transformers"), "",
        ""]))


if __name__ == "__main__":
    main()
