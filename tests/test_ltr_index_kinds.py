"""The features stage on every index kind: fielded (per-field features), sharded, and Lucene."""

from __future__ import annotations

import random

import numpy as np
import pytest

from retrieval import registry
from retrieval.errors import InputError
from retrieval.index.native import build_index
from retrieval.shards.build import build_sharded_index
from retrieval.types import Document, Queries, Run

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta", "zeta", "iota"]
QUERIES = Queries({"1": "alpha gamma", "2": "omega theta beta", "3": "kappa"})


def _documents(n: int = 120, seed: int = 3) -> list[Document]:
    rng = random.Random(seed)
    return [Document(f"d{i:03d}", " ".join(rng.choices(WORDS[:5], k=rng.randint(1, 3))),
                     " ".join(rng.choices(WORDS, k=rng.randint(2, 15)))) for i in range(n)]


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltr-kinds")
    docs = _documents()
    build_index(docs, root / "fielded", progress=False, fields=["title", "text"])
    build_index(docs, root / "flat", progress=False)
    build_sharded_index(docs, root / "sharded", 3, source="test", progress=False)
    return root


def test_per_field_features_are_each_fields_bm25_and_bm25f(indexes):
    path = indexes / "fielded"
    first = registry.build("bm25", path, hits=50)(QUERIES)
    run = registry.build("features", path, depth=20)(QUERIES, first)
    assert run.names[:9] == ("first_score", "first_rank", "bm25", "qld", "qljm", "rm3", "bm25_title",
                             "bm25_text", "bm25f")
    for field, other in (("title", "text"), ("text", "title")):
        alone = registry.build("multifield", path, field_weights=f"{field}=1,{other}=0", hits=200)(QUERIES)
        column = run.names.index(f"bm25_{field}")
        for q, (ids, matrix) in run.features.items():
            scores = dict(alone[q])  # a candidate without the query's terms in the field scores 0
            assert matrix[:, column].tolist() == [scores.get(d, 0.0) for d in ids]
    bm25f = dict(registry.build("bm25f", path, hits=200)(QUERIES)["2"])
    ids, matrix = run.features["2"]
    assert matrix[:, run.names.index("bm25f")].tolist() == pytest.approx([bm25f.get(d, 0.0) for d in ids])
    assert registry.build("features", path, feature_set="bm25+fields")(QUERIES, first).names[:6] == (
        "first_score", "first_rank", "bm25", "bm25_title", "bm25_text", "bm25f")
    with pytest.raises(InputError, match="built with fields"):
        registry.build("features", indexes / "flat", feature_set="bm25+fields")
    plain = registry.build("features", indexes / "flat", depth=20)(QUERIES, first)
    assert not any(n.startswith("bm25_") or n == "bm25f" for n in plain.names)


def test_features_on_a_sharded_index_equal_the_single_index(indexes):
    """The sparse features over shards are those of the same documents in one index."""
    first = registry.build("bm25", indexes / "flat", hits=50)(QUERIES)
    single = registry.build("features", indexes / "flat", depth=20, feature_set="bm25+qld+qljm")(
        QUERIES, first)
    sharded_stage = registry.build("features", indexes / "sharded", depth=20)
    sharded = sharded_stage(QUERIES, Run(dict(first)))
    assert sharded.names == ("first_score", "first_rank", "bm25", "qld", "qljm")
    for q, (ids, matrix) in single.features.items():
        assert sharded.features[q][0] == ids
        assert np.allclose(sharded.features[q][1], matrix[:, :5], rtol=1e-6, atol=1e-9)
    with pytest.raises(InputError, match="sharded index"):
        registry.build("features", indexes / "sharded", feature_set="bm25+rm3")


def test_ltr_runs_on_the_sharded_features(indexes, tmp_path):
    from retrieval.ltr.train import fit

    first = registry.build("bm25", indexes / "sharded", hits=50)(QUERIES)
    feats = registry.build("features", indexes / "sharded", depth=20)(QUERIES, first)
    qrels = {q: {ids[0]: 1} for q, (ids, _) in feats.features.items()}
    fit("linear", {"l2": 1.0, "normalisation": "minmax"}, feats.names, [feats], [qrels]).save(tmp_path / "m")
    ranked = registry.build("ltr", indexes / "sharded", checkpoint=str(tmp_path / "m"))(QUERIES, feats)
    assert {q: sorted(d for d, _ in hits) for q, hits in ranked.items()} == {
        q: sorted(ids) for q, (ids, _) in feats.features.items()}


def test_features_on_a_lucene_index_are_lucenes_own_scores(indexes, tmp_path):
    """On a Lucene index the features are BM25 and QLD as Lucene scores each candidate in a full search
    (a FILTER clause on the candidates' ids does not change a score; Anserini rounds scores to 4
    decimals and moves tied ones apart by a hair, which depends on the documents ranked); a learned
    ranker runs on them."""
    from retrieval.ltr.train import fit
    from retrieval.lucene import build_lucene_index

    path = tmp_path / "lucene"
    build_lucene_index(_documents(), path, threads=1)
    first = registry.build("bm25", path, hits=50)(QUERIES)
    feats = registry.build("features", path, depth=20)(QUERIES, first)
    assert feats.names == ("first_score", "first_rank", "bm25", "qld")
    full = {"bm25": registry.build("bm25", path, hits=1000)(QUERIES),
            "qld": registry.build("qld", path, hits=1000)(QUERIES)}
    for q, (ids, matrix) in feats.features.items():
        assert len(ids) == min(20, len(first[q]))
        for name, column in (("bm25", 2), ("qld", 3)):
            scores = dict(full[name][q])
            assert all(abs(scores[d] - v) < 1e-4 for d, v in zip(ids, matrix[:, column].tolist())
                       if d in scores)
        assert dict(zip(ids, matrix[:, 2].tolist())) == dict(first[q][:20])
    qrels = {q: {ids[-1]: 1} for q, (ids, _) in feats.features.items()}
    fit("linear", {"l2": 1.0, "normalisation": "rank"}, feats.names, [feats], [qrels]).save(tmp_path / "m")
    ranked = registry.build("ltr", path, checkpoint=str(tmp_path / "m"))(QUERIES, feats)
    assert {q: sorted(d for d, _ in hits) for q, hits in ranked.items()} == {
        q: sorted(ids) for q, (ids, _) in feats.features.items()}
    with pytest.raises(InputError, match="lucene index"):
        registry.build("features", path, feature_set="bm25+rm3")
