"""Token pruning for the dense encoder: fewer tokens in the same 256-token window, speed and nDCG@10.

    python eval/studies/bench_pruning.py [--precision fp32] [--threads 2] [--sample 256] [--repeats 3]
        [--out F]

Issue 13 asks what wins on CPUs without bf16; one lever is doing less work on
the same input. Each document is cut to the same first 256 word pieces as
unpruned encoding, then tokens of a drop set are removed before the encoder
runs (queries are never pruned, and are encoded at the row's precision):
none; punctuation-only word pieces; punctuation and Lucene's 33 English
stopwords; each at --precision, beside fp32 unpruned (the reference for every
change). Speed: round-robin over the variants and sentence-transformers fp32
(the peer as shipped, at its best batch size) on eval/bench_dense.py's
sample of SciFact documents after a warm-up, median and range over
--repeats. Quality: full-corpus encoding per variant, nDCG@10 on validation
(SciFact's 809 training queries, with the 90% interval of the paired change
against the reference) and test (300 queries), flat index, query id removed
from its hits. This is a measurement, not the encoder's behaviour:
`retrieval.dense.Encoder` does not prune. Writes eval/studies/results/pruning.md
(a section per machine and command: --precision int8 on an AMD EPYC Zen 3 among them).
"""

from __future__ import annotations

import argparse
import statistics
import string
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "eval")]

from bench_dense import LIMIT, PEER, fastest_peer, per_query_ndcg  # noqa: E402
from benchlib import machine_line, mean_of, publish, round_robin, spread, timing_sample  # noqa: E402

from retrieval.analysis import LUCENE_ENGLISH_STOPWORDS  # noqa: E402
from retrieval.collections import load_documents, load_qrels, load_topics  # noqa: E402
from retrieval.dense.encoder import Encoder  # noqa: E402
from retrieval.evaluation.significance import difference_interval  # noqa: E402

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
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32, 64],
                    help="the peer's batch sizes to try, as bench_dense.py")
    ap.add_argument("--out", type=Path, default=ROOT / "eval" / "studies" / "results" / "pruning.md")
    args = ap.parse_args()

    def encoder(drop: set[int], precision: str = args.precision) -> PrunedEncoder:
        return PrunedEncoder(drop, precision=precision, threads=args.threads, progress=False)

    base = encoder(set())  # unpruned at --precision: the query encoder of every pruned row
    reference = base if base.precision == "fp32" else encoder(set(), "fp32")
    encoders = {REFERENCE: reference} | {f"{base.precision}, {label}": base if not drop else encoder(drop)
                                         for label, drop in drop_sets(base.tokenizer.get_vocab()).items()}
    corpus = list(load_documents("scifact"))
    doc_ids, texts = [d.id for d in corpus], [d.contents for d in corpus]
    sample = timing_sample(texts, args.sample)
    peer = fastest_peer(args.threads, sample, args.batch_sizes)
    times = round_robin({PEER: lambda: peer.encode(sample)}
                        | {label: lambda enc=enc: enc.encode(sample) for label, enc in encoders.items()},
                        args.repeats)
    splits = {"validation": "scifact:train", "test": "scifact"}
    judged = {split: judged_queries(name) for split, name in splits.items()}
    query_encoders = dict.fromkeys((reference, base))  # queries are never pruned
    query_vectors = {(enc.precision, split): enc.encode([topics[q] for q in qids])
                     for enc in query_encoders for split, (qids, topics, _) in judged.items()}
    per_query: dict[str, dict[str, dict[str, float]]] = {}  # row -> split -> query -> nDCG@10
    for label, enc in encoders.items():
        print(f"full-corpus encoding: {label} ...", file=sys.stderr, flush=True)
        docs = enc.encode(texts)
        per_query[label] = {split: per_query_ndcg(doc_ids, docs, query_vectors[enc.precision, split], qids,
                                                  qrels) for split, (qids, _, qrels) in judged.items()}
    rows = [f"| encoder, pruned | mean tokens / doc | docs/s median (range) | × {PEER} fp32 | × {REFERENCE} |"
            f" validation nDCG@10 | Δ vs {REFERENCE} (90% interval) | test nDCG@10 | Δ |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows += [pruned_row(label, enc, texts, args.sample, times, per_query) for label, enc in encoders.items()]
    peer_rate = spread([args.sample / t for t in times[PEER]])
    rows.insert(2, f"| {PEER} fp32, batch {peer.batch_size} (the peer) | | {peer_rate} | 1.00× | | | | | |")
    publish(args.out, "\n".join([
        "# Token pruning for the dense encoder (all-MiniLM-L6-v2, SciFact)", "",
        f"Precision {base.precision} (and fp32 unpruned, the reference), {args.threads} cores, max length 256"
        f" before pruning; speed over {args.sample} documents, {args.repeats} round-robin rounds after a"
        f" warm-up, {PEER} fp32 (the peer, as shipped, at its best batch size of {args.batch_sizes}) timed"
        " in the same rounds. Validation: SciFact's 809 training queries; test: its 300 test queries; Δ is"
        f" against {REFERENCE}, the interval that of the mean paired difference over validation queries"
        f" (a change is shown within the dense limit of ±{LIMIT} when the interval lies inside it: two"
        " one-sided t-tests at 5%). The encoder does not prune; this table measures whether it should.", "",
        *rows, "", "Machine: " + machine_line("torch", "transformers", "sentence-transformers")]))


REFERENCE = "fp32, none"


def judged_queries(name: str) -> tuple[list[str], dict[str, str], object]:
    """(ids of the judged topics, the topics, the qrels) of a SciFact split."""
    topics, qrels = load_topics(name), load_qrels(name)
    return [q for q in topics if q in qrels], topics, qrels


def pruned_row(label: str, enc: PrunedEncoder, texts: list[str], sample: int, times: dict[str, list[float]],
               per_query: dict[str, dict[str, dict[str, float]]]) -> str:
    """One row of the table: tokens, speed against the peer and the reference, nDCG@10 and its change."""
    tokens = np.mean([len(ids) for ids in enc.tokenize(texts)])
    speed = {other: statistics.median(times[other]) / statistics.median(times[label])
             for other in (PEER, REFERENCE)}
    valid, valid_ref = (per_query[row]["validation"] for row in (label, REFERENCE))
    items = sorted(valid_ref)
    low, high = difference_interval([valid[q] for q in items], [valid_ref[q] for q in items])
    interval = "" if label == REFERENCE else f" ({low:+.4f} to {high:+.4f})"
    test, test_ref = (mean_of(per_query[row]["test"]) for row in (label, REFERENCE))
    change = mean_of(valid) - mean_of(valid_ref)
    return (f"| {label} | {tokens:.1f} | {spread([sample / t for t in times[label]])} | {speed[PEER]:.2f}× |"
            f" {speed[REFERENCE]:.2f}× | {mean_of(valid):.4f} | {change:+.4f}{interval} |"
            f" {test:.4f} | {test - test_ref:+.4f} |")


if __name__ == "__main__":
    main()
