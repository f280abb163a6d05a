"""Rocchio feedback, sparse and dense: beta = 0 gives the original query's run; feedback changes it."""

import pytest

from retrieval import registry
from retrieval.collections import load_qrels, load_topics
from retrieval.evaluation.measures import evaluate
from retrieval.formats.trec import format_run
from retrieval.sparse.rocchio import feedback_split, rocchio_vector
from retrieval.types import Queries


def test_rocchio_vector_by_hand():
    q = {"cat": 1.0, "mat": 1.0}
    rel = [{"cat": 0.6, "dog": 0.8}, {"dog": 1.0}]
    non = [{"mat": 1.0}]
    out = rocchio_vector(q, rel, non, alpha=1.0, beta=0.5, gamma=0.25, fb_terms=10)
    assert out == pytest.approx({"cat": 1.0 + 0.15, "dog": 0.45, "mat": 0.75})
    assert feedback_split([("a", 3), ("b", 2), ("c", 1), ("d", 0)], 2, None, True) == (["a", "b"], ["c", "d"])
    assert feedback_split([("a", 3), ("b", 2), ("c", 1)], 2, {"a": 0, "b": 2}, True) == (["b"], ["a"])


def test_sparse_rocchio_beta_zero_is_the_original_query(cacm_index):
    topics = Queries(list(load_topics("cacm").items())[:12])
    bm25 = registry.build("bm25", cacm_index, hits=100)(topics)
    same = registry.build("rocchio", cacm_index, hits=100, beta=0.0)(topics)
    assert format_run(same, "t") == format_run(bm25, "t")
    fed = registry.build("rocchio", cacm_index, hits=100)(topics)
    assert format_run(fed, "t") != format_run(bm25, "t")


def test_sparse_rocchio_explicit_feedback_helps(cacm_index):
    topics, qrels = load_topics("cacm"), load_qrels("cacm")
    bm25 = registry.build("bm25", cacm_index)(topics)
    explicit = registry.build("rocchio", cacm_index, qrels="cacm", gamma=0.15)(topics)
    assert evaluate(explicit, qrels, "MAP")["MAP"] > evaluate(bm25, qrels, "MAP")["MAP"] + 0.02


def test_dense_rocchio_beta_zero_is_the_original_query(tiny_docs, tmp_path):
    from retrieval.collections import load_documents
    from retrieval.dense import add_dense
    from retrieval.index.native import build_index

    path = tmp_path / "index"
    build_index(load_documents(str(tiny_docs)), path, progress=False)
    add_dense(path)
    topics = Queries({"1": "cats on mats", "2": "ranking documents"})
    dense = registry.build("dense", path, hits=5)(topics)
    same = registry.build("dense_rocchio", path, hits=5, beta=0.0, fb_docs=2)(topics)
    assert format_run(same, "t") == format_run(dense, "t")
    moved = registry.build("dense_rocchio", path, hits=5, beta=2.0, fb_docs=2)(topics)
    assert [d for d, _ in moved["1"]][:1] == [d for d, _ in dense["1"]][:1]
    assert format_run(moved, "t") != format_run(dense, "t")
