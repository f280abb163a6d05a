"""Token pruning for the dense encoder: fewer tokens in the same 256-token window, speed and nDCG@10.

    python eval/bench_pruning.py [--precision fp32] [--threads 2] [--sample 256] [--repeats 3]

Issue 13 asks what wins on CPUs without bf16; one lever is doing less work on
the same input. Each document is cut to the same first 256 word pieces as
unpruned encoding, then tokens of a drop set are removed before the encoder
runs (queries are never pruned): none; punctuation-only word pieces;
punctuation and Lucene's 33 English stopwords. Speed: round-robin over the
variants on a random sample of SciFact documents after a warm-up, median and
range over --repeats. Quality: full-corpus encoding per variant, nDCG@10 on
validation (SciFact's 809 training queries) and test (300 queries), flat
index, query id removed from its hits. This is a measurement, not the
encoder's behaviour: `retrieval.dense.Encoder` does not prune.
Writes eval/results/pruning.md.
"""

from __future__ import annotations

import argparse
import statistics
import string
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_dense import evaluate  # noqa: E402
from benchlib import machine_line, publish, timing_sample  # noqa: E402

from retrieval.analysis import LUCENE_ENGLISH_STOPWORDS  # noqa: E402
from retrieval.collections import load_documents, load_qrels, load_topics  # noqa: E402
from retrieval.dense.encoder import Encoder  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)


class PrunedEncoder(Encoder):
    """The encoder with `drop` word-piece ids removed after truncation (special tokens kept)."""

    def __init__(self, drop: set[int], **kwargs):
        super().__init__(**kwargs)
        self.drop = drop

    def tokenize(self, texts):
        return [[i for i in ids if i not in self.drop] for ids in super().tokenize(texts)]


def drop_sets(vocab: dict[str, int]) -> dict[str, set[int]]:
    """The variants measured, by row label."""
    punctuation = {i for token, i in vocab.items() if token and all(c in string.punctuation for c in token)}
    stopwords = {vocab[w] for w in LUCENE_ENGLISH_STOPWORDS if w in vocab}
    return {"none": set(), "punctuation": punctuation,
            "punctuation + Lucene stopwords": punctuation | stopwords}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sample", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "eval" / "results" / "pruning.md")
    args = ap.parse_args()
    def encoder(drop: set[int]) -> PrunedEncoder:
        return PrunedEncoder(drop, precision=args.precision, threads=args.threads, progress=False)

    base = encoder(set())  # unpruned: the reference row, and the query encoder of every row
    encoders = {label: base if not drop else encoder(drop)
                for label, drop in drop_sets(base.tokenizer.get_vocab()).items()}
    corpus = list(load_documents("scifact"))
    doc_ids, texts = [d.id for d in corpus], [d.contents for d in corpus]
    sample = timing_sample(texts, args.sample)
    times: dict[str, list[float]] = {label: [] for label in encoders}
    for enc in encoders.values():
        enc.encode(sample[:32])  # warm-up
    for _ in range(args.repeats):
        for label, enc in encoders.items():
            start = time.perf_counter()
            enc.encode(sample)
            times[label].append(time.perf_counter() - start)
    splits = {"validation": "scifact:train", "test": "scifact"}
    queries = {}
    for split, name in splits.items():
        topics, qrels = load_topics(name), load_qrels(name)
        qids = [q for q in topics if q in qrels]
        queries[split] = (qids, base.encode([topics[q] for q in qids]), qrels)
    rows = ["| pruned | mean tokens / doc | docs/s median (range) | × none | validation nDCG@10 | Δ |"
            " test nDCG@10 | Δ |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    scores: dict[str, dict[str, float]] = {}
    for label, enc in encoders.items():
        print(f"full-corpus encoding, pruned: {label} ...", file=sys.stderr, flush=True)
        docs = enc.encode(texts)
        scores[label] = {split: evaluate(doc_ids, docs, q, qids, qrels)
                         for split, (qids, q, qrels) in queries.items()}
        tokens = np.mean([len(ids) for ids in enc.tokenize(texts)])
        rate = [args.sample / t for t in times[label]]
        speed = statistics.median(times["none"]) / statistics.median(times[label])
        cells = " | ".join(f"{scores[label][s]:.4f} | {scores[label][s] - scores['none'][s]:+.4f}"
                           for s in splits)
        rows.append(f"| {label} | {tokens:.1f} | {statistics.median(rate):.1f} ({min(rate):.1f}–"
                    f"{max(rate):.1f}) | {speed:.2f}× | {cells} |")
    publish(args.out, "\n".join([
        "# Token pruning for the dense encoder (all-MiniLM-L6-v2, SciFact)", "",
        f"Precision {base.precision}, {args.threads} cores, max length 256 before pruning; speed over"
        f" {args.sample} documents, {args.repeats} round-robin repeats after a warm-up. Validation:"
        " SciFact's 809 training queries; test: its 300 test queries. The encoder does not prune; this"
        " table measures whether it should.", "", *rows, "",
        "Machine: " + machine_line("torch", "transformers")]))


if __name__ == "__main__":
    main()
