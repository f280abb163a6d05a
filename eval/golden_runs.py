"""SHA-256 of the run file every ranker writes on CACM and SciFact, through the CLI.

    python eval/golden_runs.py --work /tmp/golden [--neural] [--write tests/golden_runs.json]

Builds the indexes in --work (once), runs `retrieval search` (and `retrieval
rerank` for the late reranker) for every ranker, and prints {name: sha256}.
tests/test_run_identity.py compares the sparse rankers' hashes with the
committed tests/golden_runs.json, written by this script before the seams
refactor (issue 18), so a refactor that changes one byte of a run fails.
Neural runs (--neural, fp32) depend on the CPU's instruction set, so they are
compared before/after on one machine, not committed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

SPARSE = {"bm25": [], "qld": ["--model", "qld"], "qljm": ["--model", "qljm"],
          "bm25-rm3": ["--rm3"], "qld-rm3": ["--model", "qld", "--rm3"],
          "bm25-k1.2-b0.75": ["--k1", "1.2", "--b", "0.75"], "qld-mu500": ["--model", "qld", "--mu", "500"]}
NEURAL = {"dense": ["--model", "dense"], "hybrid": ["--model", "hybrid"],
          "hybrid-rrf": ["--model", "hybrid", "--fusion", "rrf"]}


def retrieval(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "retrieval.cli", *args], check=True,
                   env=os.environ | {"TQDM_DISABLE": "1"})


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="scratch directory for indexes and runs")
    ap.add_argument("--neural", action="store_true", help="also dense, hybrid and late (fp32)")
    ap.add_argument("--write", type=Path, help="write the sparse hashes here as JSON")
    args = ap.parse_args()
    hashes = {}
    for collection in ("cacm", "scifact"):
        index = args.work / collection
        if not (index / "manifest.json").is_file():
            retrieval("index", "--collection", collection, "--index", str(index), "--threads", "2",
                      *(["--dense", "--precision", "fp32"] if args.neural else []))
        systems = SPARSE | (NEURAL if args.neural else {})
        for name, flags in systems.items():
            out = args.work / f"{collection}.{name}.run"
            neural = ["--precision", "fp32"] if name in NEURAL else []
            retrieval("search", "--index", str(index), "--topics", collection, *flags, *neural,
                      "--output", str(out))
            hashes[f"{collection}/{name}"] = sha(out)
        if args.neural:
            out = args.work / f"{collection}.bm25-late.run"
            retrieval("rerank", "--index", str(index), "--topics", collection, "--run",
                      str(args.work / f"{collection}.bm25.run"), "--precision", "fp32", "--output", str(out))
            hashes[f"{collection}/bm25-late"] = sha(out)
    print(json.dumps(hashes, indent=2))
    if args.write:
        sparse = {k: v for k, v in hashes.items() if k.split("/")[1] in SPARSE}
        args.write.write_text(json.dumps({"command": "python eval/golden_runs.py --work DIR --write "
                                          + str(args.write), "runs": sparse}, indent=2) + "\n")


if __name__ == "__main__":
    main()
