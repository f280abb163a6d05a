"""Find the default dense model's outlier channels for int8 and store them (retrieval/int8_outliers.json).

    python eval/calibrate_int8.py [--per-layer 1] [--documents 96]

Runs the fp32 model over unlabelled documents (--documents drawn with seed 0
from each of CACM, Cranfield and Vaswani: document text only, never a topic or
a qrel, and nothing of SciFact, on which int8 is then validated) and records,
for every feed-forward down-projection, the --per-layer input channels of
largest absolute value (retrieval.int8_outliers.calibrate). One channel per
layer was chosen on validation (SciFact's training queries, nDCG@10 against
fp32, limit 0.005): the fewest of 1, 4 and 16 within the limit; see
eval/results/dense.md for the figures with the stored channels.
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

from retrieval.collections import load_documents  # noqa: E402
from retrieval.dense.encoder import Encoder, padded_batches  # noqa: E402
from retrieval.int8_outliers import CALIBRATION_FILE, calibrate  # noqa: E402

COLLECTIONS = ("cacm", "cranfield", "vaswani")


def calibration_texts(per_collection: int) -> list[str]:
    """`per_collection` documents of each calibration collection, drawn with seed 0."""
    rng = random.Random(0)
    texts = []
    for name in COLLECTIONS:
        texts += rng.sample([d.contents for d in load_documents(name)], per_collection)
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-layer", type=int, default=1)
    parser.add_argument("--documents", type=int, default=96, help="per calibration collection")
    args = parser.parse_args()
    encoder = Encoder(precision="fp32", progress=False)
    from transformers import AutoModel

    model = AutoModel.from_pretrained(encoder.model_dir, local_files_only=True).eval()
    ids = encoder.tokenize(calibration_texts(args.documents))
    batches = ({"input_ids": torch.from_numpy(batch), "attention_mask": torch.from_numpy(mask)}
               for _, batch, mask in padded_batches(ids, 16, encoder.tokenizer.pad_token_id or 0))
    channels = calibrate(model, batches, args.per_layer)
    stored = json.loads(CALIBRATION_FILE.read_text()) if CALIBRATION_FILE.is_file() else {"models": {}}
    stored["models"][encoder.checksum] = {
        "model": encoder.name, "channels": channels,
        "calibration": f"{args.documents} documents each of {', '.join(COLLECTIONS)} (seed 0), max length"
                       f" {encoder.max_length}, fp32; the {args.per_layer} input channel(s) of largest"
                       " absolute value per down-projection",
        "command": "python eval/calibrate_int8.py" + "".join(f" {a}" for a in sys.argv[1:])}
    CALIBRATION_FILE.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    print(json.dumps(channels))


if __name__ == "__main__":
    main()
