#!/usr/bin/env bash
# The main job on the bundled data: index CACM, run BM25 / QLD / RM3, evaluate.
set -euo pipefail
cd "$(dirname "$0")/.."
retrieval index  --collection cacm --index indexes/cacm
for model in bm25 qld; do
  retrieval search --index indexes/cacm --topics cacm --model "$model" --output "runs/cacm.$model.txt"
  retrieval search --index indexes/cacm --topics cacm --model "$model" --rm3 --output "runs/cacm.$model-rm3.txt"
done
retrieval eval --qrels cacm runs/cacm.*.txt --measures "MAP P@30 nDCG@10"
