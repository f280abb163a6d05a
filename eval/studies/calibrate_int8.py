"""Find a model's outlier channels for int8, choose how many, and store them.

    python eval/studies/calibrate_int8.py [--model dense|reader] [--per-layer 1 4 16] [--documents 96]

--model dense is the default dense model, whose weights the late-interaction
encoder shares (the late checkpoint is a projection on top): its channels
serve both, and eval/bench_precision.py decides whether int8 is within the
late limit. --model reader is the committed QA reader (its own weights).

Calibration: the fp32 model runs over unlabelled documents (--documents drawn
with seed 0 from each of CACM, Cranfield and Vaswani: document text only,
never a topic or a qrel, and nothing of SciFact or SQuAD; the reader reads
them as passages without a question) and records, for every
feed-forward down-projection, the input channels of largest absolute value
(retrieval.runtime.int8_outliers.channel_peaks, once).

Choice, on validation only: for each count in --per-layer, in order, the
channels are stored and int8's validation score is compared with fp32's:
the dense encoder's SciFact nDCG@10 on the 809 *training* queries (limit
0.005 either way), the reader's closed-setting F1 on the 460 answerable
squad2-dev:validation questions (articles it never trained on; limit 0.5).
The first count whose mean change is within the limit is kept in
retrieval/runtime/int8_outliers.json (none within: the model's entry is removed, and
int8 keeps its down-projections in fp32). That picks a configuration; whether
`auto` then runs int8 is decided by the benchmarks, which ask more: that the
change is shown within the limit (precision.shown_within_limit). Test sets
are never read. Prints one line per count tried.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "eval"))

from bench_dense import LIMIT, evaluate  # noqa: E402
from bench_precision import READER_LIMIT, reader_scores  # noqa: E402

from retrieval.collections import (  # noqa: E402
    load_documents,
    load_examples,  # noqa: E402
    load_qrels,
    load_topics,
)
from retrieval.dense.encoder import Encoder  # noqa: E402
from retrieval.qa.features import MAX_LENGTH  # noqa: E402
from retrieval.qa.reader import DEFAULT_READER, SpanReader, load_reader_model  # noqa: E402
from retrieval.runtime import precision as precisions  # noqa: E402
from retrieval.runtime.cpu_batches import padded_batches  # noqa: E402
from retrieval.runtime.int8_outliers import CALIBRATION_FILE, channel_peaks, largest_channels  # noqa: E402

COLLECTIONS = ("cacm", "cranfield", "vaswani")


def calibration_texts(per_collection: int) -> list[str]:
    """`per_collection` documents of each calibration collection, drawn with seed 0."""
    rng = random.Random(0)
    texts = []
    for name in COLLECTIONS:
        texts += rng.sample([d.contents for d in load_documents(name)], per_collection)
    return texts


def calibration_batches(tokenize: Callable[[list[str]], list[list[int]]], pad: int,
                        texts: list[str]) -> list[dict[str, torch.Tensor]]:
    """The model's inputs for `texts`, 16 a batch, tokenised by `tokenize` and padded with `pad`."""
    return [{"input_ids": torch.from_numpy(batch), "attention_mask": torch.from_numpy(mask)}
            for _, batch, mask in padded_batches(tokenize(texts), 16, pad)]


@dataclass
class Target:
    """A model to calibrate: its identity, fp32 weights, inputs and validation score in a precision."""

    name: str
    checksum: str
    model: torch.nn.Module
    tokenize: Callable[[list[str]], list[list[int]]]  # truncating to max_length
    max_length: int
    pad: int
    validate: Callable[[str], float]
    limit: float
    measure: str


def dense_target() -> Target:
    from transformers import AutoModel

    encoder = Encoder(precision="fp32", progress=False)
    model = AutoModel.from_pretrained(encoder.model_dir, local_files_only=True).eval()
    return Target(encoder.name, encoder.checksum, model, encoder.tokenize, encoder.max_length,
                  encoder.tokenizer.pad_token_id or 0, validation_ndcg, LIMIT, "SciFact train nDCG@10")


def reader_target() -> Target:
    model, tokenizer, checksum = load_reader_model(DEFAULT_READER)
    questions = [e for e in load_examples("squad2-dev:validation") if not e.impossible]

    def validate(precision: str) -> float:
        return reader_scores({precision: SpanReader(precision=precision)}, questions)[precision]["f1"]

    def tokenize(texts: list[str]) -> list[list[int]]:
        return tokenizer(texts, truncation=True, max_length=MAX_LENGTH)["input_ids"]

    measure = f"closed-setting F1 on {len(questions)} answerable squad2-dev:validation questions"
    return Target(DEFAULT_READER.name, checksum, model, tokenize, MAX_LENGTH, tokenizer.pad_token_id or 0,
                  validate, READER_LIMIT, measure)


def store(target: Target, channels: dict[str, list[int]], note: str) -> None:
    """Write the model's channels into int8_outliers.json (other models' entries kept)."""
    stored = json.loads(CALIBRATION_FILE.read_text()) if CALIBRATION_FILE.is_file() else {"models": {}}
    stored["models"][target.checksum] = {
        "model": target.name, "channels": channels, "calibration": note,
        "command": "python eval/studies/calibrate_int8.py" + "".join(f" {a}" for a in sys.argv[1:])}
    CALIBRATION_FILE.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")


def validation_ndcg(precision: str) -> float:
    """SciFact nDCG@10 on the training queries (validation) with the dense encoder in `precision`."""
    encoder = Encoder(precision=precision, progress=False)
    corpus = list(load_documents("scifact"))
    topics = load_topics("scifact:train")
    docs = encoder.encode([d.contents for d in corpus])
    queries = encoder.encode(list(topics.values()))
    return evaluate([d.id for d in corpus], docs, queries, list(topics), load_qrels("scifact:train"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("dense", "reader"), default="dense")
    parser.add_argument("--per-layer", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--documents", type=int, default=96, help="per calibration collection")
    args = parser.parse_args()
    target = dense_target() if args.model == "dense" else reader_target()
    texts = calibration_texts(args.documents)
    peaks = channel_peaks(target.model, calibration_batches(target.tokenize, target.pad, texts))
    reference = target.validate("fp32")
    print(f"{target.name} fp32: validation {target.measure} {reference:.4f}"
          f" ({precisions.instruction_sets()})")
    for count in args.per_layer:
        channels = largest_channels(peaks, count)
        store(target, channels, f"{args.documents} documents each of {', '.join(COLLECTIONS)} (seed 0),"
              f" max length {target.max_length}, fp32; the {count} input channel(s) of largest absolute"
              f" value per down-projection; the fewest of --per-layer within the limit on validation"
              f" ({target.measure})")
        change = target.validate("int8") - reference
        within = precisions.within_limit(change, target.limit)
        print(f"{count} per layer: int8 changes validation {target.measure} by {change:+.4f}"
              f" ({'within' if within else 'beyond'} ±{target.limit}): {json.dumps(channels)}")
        if within:
            return
    stored = json.loads(CALIBRATION_FILE.read_text())
    del stored["models"][target.checksum]  # int8 keeps this model's down-projections in fp32
    CALIBRATION_FILE.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    sys.exit(f"no count in {args.per_layer} is within the limit; no channels stored for {target.name}")


if __name__ == "__main__":
    main()
