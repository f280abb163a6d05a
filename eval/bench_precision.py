"""Late interaction and the QA reader in each precision on this CPU: speed and quality against fp32.

    python eval/bench_precision.py [--threads 2] [--sample 128] [--repeats 3] [--precisions ...]

Late interaction (the committed checkpoint): document token-encoding docs/s on
a random sample of SciFact documents, and SciFact test nDCG@10 of BM25 top-100
reranked by MaxSim with queries and documents encoded in that precision. QA
reader (the committed reader): reading speed (question + gold paragraph
pairs/s) on the first --sample XQuAD-en questions, and closed-setting EM/F1
over all 1,190 XQuAD-en questions (each read with its gold paragraph). Speed
is timed round-robin over the precisions after a warm-up, median and range
over --repeats. The dense encoder's table is eval/bench_dense.py's; these
models have no peer library here, so ratios are against our own fp32. Writes
eval/results/precision.md; with RETRIEVAL_NO_BF16=1 it measures what a CPU
without bf16 gets.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import machine_line, publish  # noqa: E402

from retrieval import precision as precisions  # noqa: E402
from retrieval.collections import data_dir, load_documents, load_qrels, load_topics  # noqa: E402
from retrieval.evaluation import evaluate  # noqa: E402
from retrieval.index import Index, build_index  # noqa: E402
from retrieval.late import encoder as late_encoder  # noqa: E402
from retrieval.late.model import LateModel, maxsim  # noqa: E402
from retrieval.qa import reader as reader_module  # noqa: E402
from retrieval.qa.marginal import marginalise  # noqa: E402
from retrieval.qa.metrics import evaluate as squad_evaluate  # noqa: E402
from retrieval.qa.pipeline import best_answers  # noqa: E402
from retrieval.qa.reader import SpanReader  # noqa: E402
from retrieval.qa.squad import gold_answers, passage_id, read_squad  # noqa: E402
from retrieval.sparse.rankers import BM25  # noqa: E402
from retrieval.types import Run, rank  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)
DEPTH = 100


def timings(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Seconds per call of each fn, round-robin over `repeats` after one warm-up each."""
    for fn in fns.values():
        fn()
    out: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            out[name].append(time.perf_counter() - start)
    return out


def rate_cell(n: int, seconds: list[float]) -> str:
    return f"{n / statistics.median(seconds):.1f} ({n / max(seconds):.1f}–{n / min(seconds):.1f})"


def bm25_top(workdir: Path) -> Run:
    """SciFact test BM25 top-100 (query ids removed from their hits, as Anserini does)."""
    path = workdir / "scifact"
    if not (path / "manifest.json").is_file():
        build_index(load_documents("scifact"), path, source="collection:scifact", progress=False)
    run = BM25(Index.open(path), k1=0.9, b=0.4, hits=1000)(load_topics("scifact"))
    return run.without_query_ids().cut(DEPTH)


def late_ndcg(model: LateModel, first: Run, texts: dict[str, str], queries) -> float:
    """nDCG@10 of the first stage's top 100 reranked by MaxSim, every document encoded once."""
    union = sorted({d for hits in first.values() for d, _ in hits})
    docs = dict(zip(union, model.documents([texts[d] for d in union])))
    reranked = {}
    for q, emb in zip(first, model.queries([queries[q] for q in first])):
        ids = [d for d, _ in first[q]]
        offsets = np.concatenate([[0], np.cumsum([len(docs[d]) for d in ids])]).astype(np.int64)
        reranked[q] = rank(zip(ids, maxsim(emb, np.concatenate([docs[d] for d in ids]), offsets).tolist()))
    return evaluate(Run(reranked), load_qrels("scifact"), ["nDCG@10"])["nDCG@10"]


def late_rows(args) -> list[str]:
    corpus = list(load_documents("scifact"))
    texts = {d.id: d.contents for d in corpus}
    rng = np.random.default_rng(0)
    sample = [corpus[i].contents for i in rng.choice(len(corpus), args.sample, replace=False)]
    models = {p: LateModel(None, threads=args.threads, precision=p) for p in args.precisions}
    auto = precisions.resolve(precisions.AUTO, int8_within_limit=late_encoder.INT8_WITHIN_LIMIT)
    times = timings({p: (lambda m=m: m.documents(sample)) for p, m in models.items()}, args.repeats)
    first, queries = bm25_top(args.workdir), load_topics("scifact")
    ndcg = {p: late_ndcg(m, first, texts, queries) for p, m in models.items()}
    rows = [f"| precision | documents/s median (range over {args.repeats}) | × fp32 | SciFact nDCG@10 "
            "(BM25 top-100 reranked) | Δ vs fp32 |", "|---|---:|---:|---:|---:|"]
    for p in models:
        rows.append(f"| {_label(p, auto)} | {rate_cell(args.sample, times[p])} | "
                    f"{statistics.median(times['fp32']) / statistics.median(times[p]):.2f}× | {ndcg[p]:.4f} |"
                    f" {ndcg[p] - ndcg['fp32']:+.4f} |")
    return rows


def reader_rows(args) -> list[str]:
    examples = read_squad(data_dir() / "xquad-en" / "xquad.en.json")
    readers = {p: SpanReader(precision=p, threads=args.threads) for p in args.precisions}
    auto = precisions.resolve(precisions.AUTO, int8_within_limit=reader_module.INT8_WITHIN_LIMIT)
    head = examples[:args.sample]
    times = timings({p: (lambda r=r: r.read([e.question for e in head], [e.context for e in head]))
                     for p, r in readers.items()}, args.repeats)
    gold, scores = gold_answers(examples), {}
    for p, reader in readers.items():
        readings = reader.read([e.question for e in examples], [e.context for e in examples])
        pred = {e.id: best_answers({e.id: marginalise([passage_id(e.context)], [1.0], [r])})[e.id]
                for e, r in zip(examples, readings)}
        scores[p] = squad_evaluate(gold, pred)
    rows = [f"| precision | questions/s median (range over {args.repeats}) | × fp32 | closed EM | closed F1 |"
            " Δ EM / F1 vs fp32 |", "|---|---:|---:|---:|---:|---:|"]
    for p in readers:
        em, f1 = scores[p]["exact"], scores[p]["f1"]
        speedup = statistics.median(times["fp32"]) / statistics.median(times[p])
        rows.append(f"| {_label(p, auto)} | {rate_cell(len(head), times[p])} | {speedup:.2f}× | {em:.1f} |"
                    f" {f1:.1f} | {em - scores['fp32']['exact']:+.1f} / {f1 - scores['fp32']['f1']:+.1f} |")
    return rows


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
    late, reader = late_rows(args), reader_rows(args)
    publish(args.out, "\n".join([
        "# Late interaction and the QA reader in each precision", "",
        f"{args.threads} cores; **auto** is each model's default on this CPU (`retrieval.precision`)."
        f" Speed is timed round-robin on {args.sample} SciFact documents / XQuAD-en questions after a"
        " warm-up.", "",
        "Late-interaction document encoding (committed checkpoint, max length 256):", "", *late, "",
        "QA reader (committed reader, windows of 384 tokens), closed setting over all 1,190 XQuAD-en"
        " questions:", "", *reader, "",
        "Machine: " + machine_line("torch", "transformers"), "",
        ""]))


if __name__ == "__main__":
    main()
