"""Run files stay byte-identical across refactors: every sparse ranker on CACM and SciFact.

tests/golden_runs.json holds the SHA-256 of each run file as the code before the
seams refactor (issue 18) wrote it; `python eval/golden_runs.py --work DIR
--write tests/golden_runs.json` regenerates it (only when a change of a run is
intended). Neural runs depend on the CPU's instruction set, so for them the
registry's stage is compared with the same stage built by hand.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from retrieval import collections
from retrieval.cli import main
from retrieval.formats.trec import format_run

sys.path.insert(0, str(Path(__file__).parents[1] / "eval"))
from golden_runs import SPARSE  # noqa: E402

GOLDEN = json.loads((Path(__file__).parent / "golden_runs.json").read_text())["runs"]


@pytest.mark.parametrize("system", list(SPARSE))
@pytest.mark.parametrize("collection", ["cacm", "scifact"])
def test_sparse_run_files_unchanged(collection, system, cacm_index, scifact_index, tmp_path):
    index = {"cacm": cacm_index, "scifact": scifact_index}[collection]
    out = tmp_path / "run"
    assert main(["search", "--index", str(index.path), "--topics", collection, *SPARSE[system],
                 "--output", str(out)]) == 0
    assert hashlib.sha256(out.read_bytes()).hexdigest() == GOLDEN[f"{collection}/{system}"]


@pytest.mark.slow
def test_neural_rankers_from_the_registry_equal_hand_built_stages(scifact_dense_index):
    from retrieval.dense import DenseRetriever
    from retrieval.late import LateReranker
    from retrieval.pipeline.fusion import RRF, Interpolate
    from retrieval.registry import build
    from retrieval.sparse.rankers import BM25

    index = scifact_dense_index
    queries = dict(list(collections.load_topics("scifact").items())[:40])
    dense = DenseRetriever(index, hits=1000, threads=1)
    bm25 = BM25(index, hits=1000)
    pairs = {
        "dense": (build("dense", index), dense),
        "hybrid": (build("hybrid", index), Interpolate(bm25, dense, weight=0.5, depth=1000, hits=1000)),
        "hybrid-rrf": (build("hybrid", index, fusion="rrf"), RRF(bm25, dense, depth=1000, hits=1000)),
    }
    for name, (registered, by_hand) in pairs.items():
        assert format_run(registered(queries)) == format_run(by_hand(queries)), name
    few = dict(list(queries.items())[:10])  # late reranking encodes on the fly: 10 queries x 8 documents
    first = bm25(few)
    late = build("late", index, checkpoint="zero-shot", depth=8)
    assert format_run(late(few, first)) == format_run(
        LateReranker(index, "zero-shot", depth=8)(few, first))
