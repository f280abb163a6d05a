"""Find the default dense model's outlier channels for int8, choose how many, and store them.

    python eval/calibrate_int8.py [--per-layer 1 4 16] [--documents 96]

Calibration: the fp32 model runs over unlabelled documents (--documents drawn
with seed 0 from each of CACM, Cranfield and Vaswani: document text only,
never a topic or a qrel, and nothing of SciFact) and records, for every
feed-forward down-projection, the input channels of largest absolute value
(retrieval.int8_outliers.channel_peaks, once).

Choice, on validation only: for each count in --per-layer, in order, the
channels are stored and the int8 encoder's SciFact nDCG@10 on the 809
*training* queries is compared with fp32's; the first count whose change is
within the dense limit (0.005, either way) is kept in
retrieval/int8_outliers.json (none within: the model's entry is removed, and
int8 keeps its down-projections in fp32). Test queries are never read. Prints
one line per count tried.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "eval"))

from bench_dense import LIMIT, evaluate  # noqa: E402

from retrieval import precision as precisions  # noqa: E402
from retrieval.collections import load_documents, load_qrels, load_topics  # noqa: E402
from retrieval.dense.encoder import Encoder, padded_batches  # noqa: E402
from retrieval.int8_outliers import CALIBRATION_FILE, channel_peaks, largest_channels  # noqa: E402

COLLECTIONS = ("cacm", "cranfield", "vaswani")


def calibration_texts(per_collection: int) -> list[str]:
    """`per_collection` documents of each calibration collection, drawn with seed 0."""
    rng = random.Random(0)
    texts = []
    for name in COLLECTIONS:
        texts += rng.sample([d.contents for d in load_documents(name)], per_collection)
    return texts


def calibration_batches(encoder: Encoder, texts: list[str]) -> list[dict[str, torch.Tensor]]:
    """The model's inputs for `texts`, 16 a batch, as the encoder tokenises and pads them."""
    pad = encoder.tokenizer.pad_token_id or 0
    return [{"input_ids": torch.from_numpy(batch), "attention_mask": torch.from_numpy(mask)}
            for _, batch, mask in padded_batches(encoder.tokenize(texts), 16, pad)]


def store(encoder: Encoder, channels: dict[str, list[int]], note: str) -> None:
    """Write the model's channels into int8_outliers.json (other models' entries kept)."""
    stored = json.loads(CALIBRATION_FILE.read_text()) if CALIBRATION_FILE.is_file() else {"models": {}}
    stored["models"][encoder.checksum] = {
        "model": encoder.name, "channels": channels, "calibration": note,
        "command": "python eval/calibrate_int8.py" + "".join(f" {a}" for a in sys.argv[1:])}
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
    parser.add_argument("--per-layer", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--documents", type=int, default=96, help="per calibration collection")
    args = parser.parse_args()
    encoder = Encoder(precision="fp32", progress=False)
    from transformers import AutoModel

    model = AutoModel.from_pretrained(encoder.model_dir, local_files_only=True).eval()
    peaks = channel_peaks(model, calibration_batches(encoder, calibration_texts(args.documents)))
    reference = validation_ndcg("fp32")
    print(f"fp32: validation nDCG@10 {reference:.4f} ({precisions.instruction_sets()})")
    for count in args.per_layer:
        channels = largest_channels(peaks, count)
        store(encoder, channels, f"{args.documents} documents each of {', '.join(COLLECTIONS)} (seed 0),"
              f" max length {encoder.max_length}, fp32; the {count} input channel(s) of largest absolute"
              " value per down-projection; the fewest of --per-layer within the limit on validation"
              " (SciFact train)")
        change = validation_ndcg("int8") - reference
        within = precisions.within_limit(change, LIMIT)
        print(f"{count} per layer: int8 changes validation nDCG@10 by {change:+.4f}"
              f" ({'within' if within else 'beyond'} ±{LIMIT}): {json.dumps(channels)}")
        if within:
            return
    stored = json.loads(CALIBRATION_FILE.read_text())
    del stored["models"][encoder.checksum]  # int8 keeps this model's down-projections in fp32
    CALIBRATION_FILE.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    sys.exit(f"no count in {args.per_layer} is within the limit; no channels stored for this model")


if __name__ == "__main__":
    main()
