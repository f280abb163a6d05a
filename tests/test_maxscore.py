"""The compiled MaxScore top k equals exhaustive scoring: same documents, same float64 scores, same order."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval import storage
from retrieval.index import Index
from retrieval.sparse.inverted import InvertedIndex, InvertedIndexBuilder
from retrieval.sparse.models import IMPACTS_FILE, IMPACTS_MODEL_FILE, MAX_IMPACTS_FILE, BM25Model
from retrieval.sparse.rankers import BM25, QueryLikelihood
from retrieval.sparse.searcher import ImpactSearcher


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x[0].tolist() == y[0].tolist() and x[1].tolist() == y[1].tolist()
                                    for x, y in zip(a, b))


@st.composite
def collections_and_queries(draw):
    vocab = draw(st.integers(1, 12))
    docs = draw(st.lists(st.lists(st.integers(0, vocab - 1), max_size=8), min_size=1, max_size=40))
    # Few distinct impact and weight values: many exact ties and equal bounds.
    values = draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 3.0, 0.1, 0.7]),
                           min_size=1, max_size=4))
    queries = draw(st.lists(st.lists(st.tuples(st.integers(0, vocab - 1),
                                               st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0, 0.3])),
                                     max_size=6), min_size=1, max_size=5))
    k = draw(st.integers(1, len(docs) + 2))
    seed = draw(st.integers(0, 2**32 - 1))
    return docs, values, queries, k, seed


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(collections_and_queries())
def test_maxscore_equals_exhaustive_on_random_indexes(case):
    docs, values, queries, k, seed = case
    builder = InvertedIndexBuilder()
    for doc in docs:
        builder.add([f"t{t}" for t in doc])
    with tempfile.TemporaryDirectory() as tmp:
        builder.write(Path(tmp))
        index = InvertedIndex(Path(tmp))
        rng = np.random.default_rng(seed)
        impacts = rng.choice(np.array(values), size=len(index.docnos))
        ids = index.term_ids
        # As rankers give them: distinct terms in term order (the scipy product would add the weights
        # of a repeated term before multiplying).
        weighted = [sorted({ids[f"t{t}"]: w for t, w in q if f"t{t}" in ids}.items()) for q in queries]
        searcher = ImpactSearcher(index, impacts)
        expected = [searcher.search(q, k) for q in weighted]
        assert same(searcher.search_many(weighted, k, method="maxscore"), expected)
        assert same(searcher.search_many(weighted, k, threads=2, method="maxscore"), expected)
        assert same(searcher.search_many(weighted, k, method="exhaustive"), expected)


@pytest.mark.parametrize("seed", range(12))
def test_maxscore_equals_exhaustive_on_lists_of_many_blocks(seed, tmp_path):
    """Longer lists (hundreds of postings, long skips), Zipf-like term frequencies."""
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(5, 40))
    builder = InvertedIndexBuilder()
    for _ in range(int(rng.integers(200, 3000))):
        builder.add([f"t{t}" for t in rng.zipf(1.3, size=int(rng.integers(1, 12))) % vocab])
    builder.write(tmp_path)
    index = InvertedIndex(tmp_path)
    impacts = rng.choice(rng.random(int(rng.integers(1, 20))) * 3, size=len(index.docnos))
    queries = [sorted({int(t): float(rng.choice([0.5, 1.0, 2.0])) for t in
                       rng.integers(0, index.num_terms, size=int(rng.integers(1, 9)))}.items())
               for _ in range(30)]
    searcher = ImpactSearcher(index, impacts)
    for k in (1, 5, 10, 100):
        assert same(searcher.search_many(queries, k), [searcher.search(q, k) for q in queries]), k


@pytest.mark.parametrize("collection", ["cacm", "scifact"])
def test_maxscore_equals_exhaustive_on_real_collections(collection, cacm_index, scifact_index):
    from retrieval.collections import load_topics

    index = {"cacm": cacm_index, "scifact": scifact_index}[collection]
    topics = load_topics(collection)
    for ranker in (BM25(index), BM25(index, k1=1.2, b=0.75), QueryLikelihood(index),
                   QueryLikelihood(index, "jelinek-mercer", lam=0.3)):
        queries = [ranker.weighted(ranker.analyse(t)) for t in topics.values()]
        for k in (1, 10, 100, 1000):
            exhaustive = ranker.searcher.search_many(queries, k, method="exhaustive")
            assert same(ranker.searcher.search_many(queries, k, threads=2), exhaustive), (ranker.model, k)


def test_default_bm25_impacts_are_stored_at_build_time_and_equal_computed_ones(cacm_index):
    inverted = cacm_index.inverted
    model = BM25Model(k1=0.9, b=0.4)
    assert json.loads((inverted.path / IMPACTS_MODEL_FILE).read_text()) == model.key
    stored = np.load(inverted.path / IMPACTS_FILE)
    assert stored.tobytes() == model.impacts(inverted).tobytes()
    for name in (IMPACTS_FILE, MAX_IMPACTS_FILE, IMPACTS_MODEL_FILE):
        assert f"inverted/{name}" in cacm_index.parts["inverted"]["files"]  # checksummed
    searcher = BM25(cacm_index).searcher
    assert not searcher.impacts.flags.owndata  # memory-mapped, not computed on load


def test_index_without_stored_impacts_opens_and_computes_them(cacm_index, tmp_path):
    """An index built before impacts were stored: they are computed on load, and runs are unchanged."""
    import shutil

    from retrieval.collections import load_topics

    old = tmp_path / "old"
    shutil.copytree(cacm_index.path, old)
    manifest = json.loads((old / storage.MANIFEST).read_text())
    for name in (IMPACTS_FILE, MAX_IMPACTS_FILE, IMPACTS_MODEL_FILE):
        (old / "inverted" / name).unlink()
        del manifest["parts"]["inverted"]["files"][f"inverted/{name}"]
    (old / storage.MANIFEST).write_text(json.dumps(manifest))
    queries = load_topics("cacm")
    assert BM25(Index.open(old))(queries) == BM25(cacm_index)(queries)


@pytest.mark.parametrize("window", [1, 2, 7, 64])
def test_exhaustive_kernel_is_the_same_for_any_window(window, tmp_path):
    """Windows of documents only bound the accumulators: any window size gives the reference top k."""
    from retrieval.sparse import kernels

    rng = np.random.default_rng(window)
    builder = InvertedIndexBuilder()
    for _ in range(500):
        builder.add([f"t{t}" for t in rng.zipf(1.5, size=int(rng.integers(1, 10))) % 25])
    builder.write(tmp_path)
    index = InvertedIndex(tmp_path)
    impacts = rng.choice([0.0, 0.5, 1.0, 2.5], size=len(index.docnos))
    queries = [sorted({int(t): float(rng.choice([0.0, 1.0, 2.0])) for t in
                       rng.integers(0, index.num_terms, size=int(rng.integers(1, 6)))}.items())
               for _ in range(20)]
    searcher = ImpactSearcher(index, impacts)
    query_ptr = np.cumsum([0] + [len(q) for q in queries])
    terms = np.array([t for q in queries for t, _ in q], dtype=np.int64)
    weights = np.array([w for q in queries for _, w in q])
    for k in (1, 10, 600):
        docs, scores = np.empty((len(queries), k), np.int64), np.empty((len(queries), k))
        counts = np.empty(len(queries), np.int64)
        kernels.exhaustive_batch(index.indptr, index.docnos, impacts, query_ptr, terms, weights, k, window,
                                 docs, scores, counts)
        got = [(docs[r, :n], scores[r, :n]) for r, n in enumerate(counts)]
        assert same(got, [searcher.search(q, k) for q in queries]), k
