"""A cascade's result is never shorter than its first stage: rerankers and rescorers keep the hits
below their depth after the ones they rescored (fusion.with_tail, fusion.Rescore)."""

from __future__ import annotations

import pytest

from retrieval import collections
from retrieval.errors import InputError
from retrieval.pipeline.fusion import Rescore, with_tail
from retrieval.registry import build
from retrieval.types import Queries, Run


def test_with_tail_keeps_the_rest_in_order_below_the_head():
    hits = [("a", 9.0), ("b", 7.0), ("c", 7.0), ("d", 1.0), ("e", 0.5)]
    head = [("b", 0.9), ("a", 0.2)]
    out = with_tail(head, hits)
    assert [d for d, _ in out] == ["b", "a", "c", "d", "e"]
    assert [s for _, s in out[2:]] == [0.2 - 1, 0.2 - 2, 0.2 - 3]  # strictly below, first-stage order
    assert with_tail(hits, hits) == hits and with_tail([], hits)[0][0] == "a"
    assert [d for d, _ in Run({"q": out})["q"]] == ["b", "a", "c", "d", "e"]  # a Run keeps that order


@pytest.mark.parametrize("model", ["qld", "qljm", "bm25"])
def test_sparse_rescoring_is_as_long_as_its_first_stage(cacm_index, model):
    queries = Queries(dict(list(collections.load_topics("cacm").items())[:8]))
    first = build("bm25", cacm_index, hits=300)(queries)
    whole = build(model, cacm_index)(queries, first)  # every hit rescored
    top = build(model, cacm_index, depth=50)(queries, first)  # the top 50 rescored, the rest after
    alone = build(model, cacm_index)(queries, first.cut(50))
    for q, hits in first.items():
        assert len(whole[q]) == len(top[q]) == len(hits)
        assert top[q][:50] == alone[q]
        assert [d for d, _ in top[q][50:]] == [d for d, _ in hits[50:]]
    assert isinstance(build("qld", cacm_index, depth=50), Rescore)
    searched = build("qld", cacm_index, depth=50, hits=20)(queries)  # without a run: a first stage
    assert all(len(h) == 20 for h in searched.values())


def test_rescore_checks_its_depth(cacm_index):
    with pytest.raises(InputError, match="depth"):
        Rescore(build("qld", cacm_index), 0)
    with pytest.raises(InputError, match="depth"):
        build("qld", cacm_index, depth=-1)
