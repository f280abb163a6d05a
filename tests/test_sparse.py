import math

import numpy as np
import pytest

from retrieval.errors import InputError
from retrieval.formats import read_documents
from retrieval.index import impacts as models
from retrieval.index.lucene_norms import byte4_to_int, int_to_byte4, quantised_lengths
from retrieval.index.native import Index, build_index
from retrieval.sparse.rankers import BM25, RM3, QueryLikelihood
from retrieval.types import Queries


@pytest.fixture()
def tiny(tiny_docs, tmp_path) -> Index:
    build_index(read_documents(tiny_docs), tmp_path / "idx", progress=False)
    return Index.open(tmp_path / "idx")


def test_lucene_norm_quantisation():
    assert [byte4_to_int(int_to_byte4(n)) for n in (0, 5, 23, 24, 100, 122)] == [0, 5, 23, 24, 96, 120]
    assert quantised_lengths(np.array([122, 3])).tolist() == [120.0, 3.0]


def test_bm25_matches_lucene_formula(tiny):
    run = BM25(tiny, k1=1.2, b=0.75)(Queries({"q": "garden"}))
    lengths = tiny.inverted.doc_lengths
    avgdl = lengths.sum() / len(lengths)
    idf = math.log(1 + (5 - 2 + 0.5) / (2 + 0.5))
    expected = {d: idf * 1 / (1 + 1.2 * (1 - 0.75 + 0.75 * lengths[i] / avgdl))
                for d, i in (("d2", 1), ("d5", 4))}
    assert dict(run["q"]) == pytest.approx(expected)
    assert [d for d, _ in run["q"]] == sorted(expected, key=lambda d: -expected[d])


def test_repeated_query_terms_weigh_more(tiny):
    once = dict(BM25(tiny)(Queries({"q": "cats garden"}))["q"])
    twice = dict(BM25(tiny)(Queries({"q": "cats cats garden"}))["q"])
    assert twice["d1"] == pytest.approx(2 * once["d1"])


def test_ties_broken_by_doc_id(tiny):
    run = BM25(tiny)(Queries({"q": "garden"}))
    qld = QueryLikelihood(tiny, mu=1e9)(Queries({"q": "documents"}))  # huge mu: near-ties
    assert [d for d, _ in run["q"]] == ["d2", "d5"] or run["q"][0][1] != run["q"][1][1]
    assert len(qld["q"]) == 2


def test_ql_rescoring_equals_ql_restricted(tiny):
    queries = Queries({"q": "cats garden documents"})
    first = BM25(tiny, hits=3)(queries)
    for ql in (QueryLikelihood(tiny, mu=50), QueryLikelihood(tiny, "jelinek-mercer", lam=0.3)):
        alone = dict(ql(queries)["q"])
        rescored = ql(queries, first)["q"]
        assert {d for d, _ in rescored} == {d for d, _ in first["q"]}
        assert all(s == alone[d] for d, s in rescored)
        assert [s for _, s in rescored] == sorted((s for _, s in rescored), reverse=True)
    with pytest.raises(InputError, match="lam applies only with smoothing jelinek-mercer"):
        QueryLikelihood(tiny, lam=5)  # not silently the default Dirichlet run
    with pytest.raises(InputError, match="mu applies only with smoothing dirichlet"):
        QueryLikelihood(tiny, "jm", mu=50)


def test_stopword_query_gets_empty_ranking_with_warning(tiny, capsys):
    run = BM25(tiny)(Queries({"q": "the and of"}))
    assert run["q"] == []
    assert "no indexed terms" in capsys.readouterr().err


def test_rm3_expands_with_feedback_terms(cacm_index):
    bm25 = BM25(cacm_index)
    rm3 = RM3(bm25, fb_docs=10, fb_terms=10, original_weight=0.5)
    text = "time sharing operating systems"
    expanded = rm3.expand(text, bm25(Queries({"q": text}))["q"])
    assert math.isclose(sum(expanded.values()), 1.0)
    assert len(expanded) > 4  # feedback terms were added
    assert all(expanded[t] >= 0.5 / 4 for t in ("time", "share", "oper", "system"))
    terms = cacm_index.inverted.term_ids
    added = [t for t in expanded if t not in ("time", "share", "oper", "system")]
    assert all(rm3.eligible[terms[t]] for t in added)
    run = rm3(Queries({"q": text}))
    assert len(run["q"]) == 1000
    given = rm3(Queries({"q": text}), bm25(Queries({"q": text})))  # feedback from a given run
    assert given == run


def test_rm3_ignores_terms_in_most_documents(tiny):
    rm3 = RM3(BM25(tiny), fb_docs=2, fb_terms=5)
    assert not rm3.eligible.any()  # every term is in >10% of 5 documents


def test_threads_give_identical_runs(cacm_index):
    from retrieval.collections import load_topics

    queries = load_topics("cacm")
    one = BM25(cacm_index, threads=1)(queries)
    two = BM25(cacm_index, threads=2)(queries)
    assert one == two
    assert RM3(QueryLikelihood(cacm_index, threads=2))(queries) == RM3(QueryLikelihood(cacm_index))(queries)


def test_batched_search_equals_one_query_at_a_time(cacm_index):
    from retrieval.collections import load_topics

    bm25 = BM25(cacm_index)
    queries = [bm25.weighted(bm25.analyse(t)) for t in load_topics("cacm").values()]
    for k in (5, 1000):
        batched = bm25.searcher.search_many(queries, k, threads=2)
        for q, (docs, scores) in zip(queries, batched):
            one_docs, one_scores = bm25.searcher.search(q, k)
            assert docs.tolist() == one_docs.tolist() and scores.tolist() == one_scores.tolist()


def test_ties_at_the_cut_go_to_the_smallest_doc_ids(tmp_path):
    from retrieval.types import Document

    docs = [Document(i, "", "same words here") for i in ("d4", "d2", "d9", "d1")]
    docs.append(Document("d0", "", "other text entirely"))
    build_index(docs, tmp_path / "idx", progress=False)
    index = Index.open(tmp_path / "idx")
    for k in (1, 2, 3):
        run = BM25(index, hits=k)(Queries({"q": "words"}))
        assert [d for d, _ in run["q"]] == ["d1", "d2", "d4"][:k]
    assert [d for d, _ in QueryLikelihood(index, hits=2)(Queries({"q": "words"}))["q"]] == ["d1", "d2"]


def test_impact_logs_are_the_c_librarys_on_every_cpu():
    """numpy's AVX-512 log rounds some values differently; impacts use the C library's on every CPU,
    so run files do not depend on the machine (tests/test_run_identity.py checks whole runs)."""
    x = np.random.default_rng(0).uniform(1e-6, 1e6, 100_000)
    assert models.log(x).tobytes() == np.array([math.log(v) for v in x]).tobytes()
    assert models.log1p(x).tobytes() == np.array([math.log1p(v) for v in x]).tobytes()
