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
from retrieval.index.blocks import CODE_FILES
from retrieval.index.codebook import PackedImpacts, from_values
from retrieval.index.impacts import BASES_FILE, CODES_FILE, IMPACTS_MODEL_FILE, TABLE_FILE, BM25Model
from retrieval.index.native import Index
from retrieval.index.postings import InvertedIndex, InvertedIndexBuilder
from retrieval.sparse.rankers import BM25, QueryLikelihood
from retrieval.sparse.searcher import ImpactSearcher


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x[0].tolist() == y[0].tolist() and x[1].tolist() == y[1].tolist()
                                    for x, y in zip(a, b))


def zipf_index(path: Path, rng: np.random.Generator, documents: int, exponent: float,
               vocab: int) -> InvertedIndex:
    """An index of `documents` random documents of 1-9 terms with Zipf-like frequencies, written to path."""
    builder = InvertedIndexBuilder()
    for _ in range(documents):
        builder.add([f"t{t}" for t in rng.zipf(exponent, size=int(rng.integers(1, 10))) % vocab])
    builder.write(path)
    return InvertedIndex(path)


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
        for method in ("skipping", "blocks", "blockmax"):
            assert same(searcher.search_many(weighted, k, method=method), expected)


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
        expected = [searcher.search(q, k) for q in queries]
        for method in ("auto", "skipping", "blocks", "blockmax"):
            assert same(searcher.search_many(queries, k, method=method), expected), (k, method)


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
            for method in ("skipping", "blocks", "blockmax"):
                assert same(ranker.searcher.search_many(queries, k, method=method), exhaustive), (method, k)


def test_a_large_index_searches_in_long_windows_with_the_same_results(cacm_index, monkeypatch):
    """From kernels.LONG_WINDOW_FROM documents on, exhaustive and skipping search take windows of
    LONG_WINDOW documents: the same top k as the reference (here CACM is made "large", with a long
    window of 64 documents, so that it holds dozens of them, and one wider than the collection)."""
    from retrieval.collections import load_topics
    from retrieval.sparse import kernels

    ranker = BM25(cacm_index)
    queries = [ranker.weighted(ranker.analyse(t)) for t in load_topics("cacm").values()]
    expected = {k: [ranker.searcher.search(q, k) for q in queries] for k in (1, 10, 100, 1000)}
    monkeypatch.setattr(kernels, "LONG_WINDOW_FROM", 0)
    for long_window in (64, 8192):
        monkeypatch.setattr(kernels, "LONG_WINDOW", long_window)
        searcher = ImpactSearcher(cacm_index.inverted, ranker.searcher.impacts)
        assert searcher.window == long_window
        for k, reference in expected.items():
            for method in ("auto", "exhaustive", "skipping"):
                got = searcher.search_many(queries, k, method=method)
                assert same(got, reference), (long_window, k, method)


IMPACT_FILES = (*CODE_FILES, TABLE_FILE, BASES_FILE, IMPACTS_MODEL_FILE)


def test_default_bm25_impacts_are_stored_at_build_time_and_equal_computed_ones(cacm_index):
    inverted = cacm_index.inverted
    model = BM25Model(k1=0.9, b=0.4)
    assert json.loads((inverted.path / IMPACTS_MODEL_FILE).read_text()) == model.key
    assert not (inverted.path / CODES_FILE).exists()  # packed in blocks instead
    table, bases = (np.load(inverted.path / name) for name in (TABLE_FILE, BASES_FILE))
    searcher = BM25(cacm_index).searcher
    assert isinstance(searcher.impacts, PackedImpacts)
    assert not searcher.impacts.packed.words.flags.owndata  # memory-mapped, not computed on load
    codes = searcher.impacts.codes
    assert (inverted.path / "code_words.npy").stat().st_size < codes.astype(np.uint16).nbytes  # < 2 B each
    terms = np.repeat(np.arange(inverted.num_terms), np.diff(inverted.indptr))
    stored = table[bases[terms] + codes]
    assert stored.tobytes() == model.impacts(inverted).tobytes()  # the codebook is exact
    for name in IMPACT_FILES:
        assert f"inverted/{name}" in cacm_index.parts["inverted"]["files"]  # checksummed


def test_a_term_with_more_distinct_impacts_than_uint16_numbers_gets_uint32_codes():
    indptr = np.array([0, 2, 70_002])
    values = np.concatenate([[1.0, 1.0], np.arange(70_000) / 7.0])
    impacts = from_values(indptr, values)
    assert impacts.codes.dtype == np.uint32 and len(impacts.table) == 1 + 70_000
    assert impacts.values(1, 2, 70_002).tobytes() == values[2:].tobytes()
    assert impacts.maxima().tolist() == [1.0, values.max()]


@pytest.mark.parametrize("seed", range(3))
def test_codebook_runs_are_each_terms_distinct_values_in_ascending_bit_order(seed):
    rng = np.random.default_rng(seed)
    df = rng.choice([0, 1, 2, 5, 40, 3000], size=60)
    indptr = np.concatenate([[0], np.cumsum(df)])
    pool = np.concatenate([[0.0, -0.0, 1.0, -1.5, np.inf], rng.random(200) * 10])  # -0.0 apart from 0.0
    values = pool[rng.integers(0, len(pool), int(indptr[-1]))]
    impacts = from_values(indptr, values)
    for term in range(len(df)):
        lo, hi = indptr[term], indptr[term + 1]
        run = impacts.table[impacts.bases[term]:impacts.bases[term + 1]]
        assert run.view(np.int64).tolist() == np.unique(values[lo:hi].view(np.int64)).tolist()
        assert impacts.values(term, lo, hi).tobytes() == values[lo:hi].tobytes()


@pytest.mark.parametrize("change", ["code past its run", "block maximum"])
def test_codes_beyond_their_terms_run_are_refused_on_load(cacm_index, tmp_path, change):
    """A crafted index whose codes point past a term's run would make the kernels read outside the
    table, and a wrong block maximum would make pruning skip documents: opening it (checksums and
    all) is refused, naming the file."""
    import shutil

    from retrieval.errors import InputError

    crafted = tmp_path / "crafted"
    shutil.copytree(cacm_index.path, crafted)
    inverted = crafted / "inverted"
    widths = np.load(inverted / "code_widths.npy")
    name = "code_words.npy" if change == "code past its run" else "code_maxima.npy"
    array = np.load(inverted / name)
    if change == "code past its run":  # the first codes of a block, made the largest its width holds
        maxima = np.load(inverted / "code_maxima.npy")
        block = int(np.flatnonzero((widths > 0) & (maxima < (1 << widths.astype(np.int64)) - 1))[0])
        array[BM25(cacm_index).searcher.impacts.packed.offsets[block]] = 0xFFFFFFFF
    else:
        array[0] += 1
    np.save(inverted / name, array)
    manifest = json.loads((crafted / storage.MANIFEST).read_text())
    manifest["parts"]["inverted"]["files"][f"inverted/{name}"] = {
        "sha256": storage.sha256_file(inverted / name), "bytes": (inverted / name).stat().st_size}
    (crafted / storage.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="stored impacts do not match the postings") as error:
        BM25(Index.open(crafted)).searcher  # noqa: B018
    assert error.value.path == str(inverted / CODE_FILES[0])


def test_index_without_stored_impacts_opens_and_computes_them(cacm_index, tmp_path):
    """An index built before impacts were stored: they are computed on load, and runs are unchanged."""
    import shutil

    from retrieval.collections import load_topics

    old = tmp_path / "old"
    shutil.copytree(cacm_index.path, old)
    manifest = json.loads((old / storage.MANIFEST).read_text())
    for name in IMPACT_FILES:
        (old / "inverted" / name).unlink()
        del manifest["parts"]["inverted"]["files"][f"inverted/{name}"]
    (old / storage.MANIFEST).write_text(json.dumps(manifest))
    queries = load_topics("cacm")
    assert BM25(Index.open(old))(queries) == BM25(cacm_index)(queries)


@pytest.mark.parametrize("window", [1, 2, 7, 64])
def test_exhaustive_kernel_is_the_same_for_any_window(window, tmp_path):
    """Windows of documents only bound the accumulators: any window size gives the reference top k,
    whether the top k is selected through the heap or the buffer."""
    from retrieval.sparse import kernels

    rng = np.random.default_rng(window)
    index = zipf_index(tmp_path, rng, documents=500, exponent=1.5, vocab=25)
    impacts = rng.choice([0.0, 0.5, 1.0, 2.5], size=len(index.docnos))
    queries = [sorted({int(t): float(rng.choice([0.0, 1.0, 2.0])) for t in
                       rng.integers(0, index.num_terms, size=int(rng.integers(1, 6)))}.items())
               for _ in range(20)]
    searcher = ImpactSearcher(index, impacts)
    query_ptr = np.cumsum([0] + [len(q) for q in queries])
    terms = np.array([t for q in queries for t, _ in q], dtype=np.int64)
    weights = np.array([w for q in queries for _, w in q])
    for k in (1, 10, 60, 120, 200, 600):
        for large_k in (k + 1, k):  # the heap, then the buffer
            docs, scores = np.empty((len(queries), k), np.int64), np.empty((len(queries), k))
            counts = np.empty(len(queries), np.int64)
            book = searcher.impacts
            kernels.exhaustive_batch(index.indptr, index.docnos, book.codes, book.table, book.bases,
                                     query_ptr, terms, weights, k, window, large_k, docs, scores, counts)
            got = [(docs[r, :n], scores[r, :n]) for r, n in enumerate(counts)]
            assert same(got, [searcher.search(q, k) for q in queries]), (k, large_k)


@pytest.mark.parametrize("kind", ["spread", "ties", "zeros", "wide", "few"])
def test_the_radix_select_finds_what_a_partition_does(kind):
    """The buffer's k-th score (kernels._smallest, a radix select on the scores' bits) is np.partition's,
    on spread scores, many ties, zeros, scores over many magnitudes and arrays of a few."""
    from retrieval.sparse import kernels

    rng = np.random.default_rng(len(kind))
    for _ in range(40):
        size = int(rng.integers(1, 6)) if kind == "few" else 3000
        values = {
            "spread": rng.gamma(2.0, 3.0, size),
            "ties": rng.integers(0, 40, size).astype(float),
            "zeros": np.where(rng.random(size) < 0.7, 0.0, rng.random(size)),
            "wide": rng.gamma(0.05, 1e3, size) * 10.0 ** rng.integers(-300, 300, size),
            "few": rng.random(size),
        }[kind]
        ranks = range(size) if kind == "few" else (0, size // 3, size - 1000, size - 1)
        for t in ranks:
            assert kernels._smallest(values.copy(), t) == np.partition(values, t)[t], (kind, t)


@pytest.mark.parametrize("window", [1, 2, 7, 64])
def test_skipping_kernel_is_the_same_for_any_window(window, tmp_path):
    """Window skipping (kernels.skipping_top_k) with small windows, so that many are passed: the
    reference top k, whatever the lists' rows of window maxima cover (every list, the longer, none)."""
    from retrieval.sparse import kernels

    rng = np.random.default_rng(100 + window)
    index = zipf_index(tmp_path, rng, documents=800, exponent=1.4, vocab=30)
    impacts = rng.choice([0.0, 0.5, 1.0, 2.5, 0.25], size=len(index.docnos))
    queries = [sorted({int(t): float(rng.choice([0.0, 1.0, 2.0, 0.5])) for t in
                       rng.integers(0, index.num_terms, size=int(rng.integers(1, 6)))}.items())
               for _ in range(30)]
    searcher = ImpactSearcher(index, impacts)
    book = searcher.impacts
    query_ptr = np.cumsum([0] + [len(q) for q in queries])
    terms = np.array([t for q in queries for t, _ in q], dtype=np.int64)
    weights = np.array([w for q in queries for _, w in q])
    for shortest in (1, 20, 10**9):
        row, row_codes, row_firsts = kernels.window_maxima(index.indptr, index.docnos, book.codes, window,
                                                           index.num_docs, shortest, np.empty(0, np.uint32))
        for k in (1, 3, 10, 50):
            docs, scores = np.empty((len(queries), k), np.int64), np.empty((len(queries), k))
            counts = np.empty(len(queries), np.int64)
            kernels.skipping_batch(index.indptr, index.docnos, book.codes, book.table, book.bases,
                                   row, row_codes, row_firsts, query_ptr, terms, weights,
                                   np.ones(len(queries), np.bool_), k, window, k + 1, docs, scores, counts)
            got = [(docs[r, :n], scores[r, :n]) for r, n in enumerate(counts)]
            assert same(got, [searcher.search(q, k) for q in queries]), (shortest, k)


@pytest.mark.parametrize("seed", range(6))
def test_maxscore_given_a_floor_under_the_kth_score_returns_the_same_top_k(seed, tmp_path):
    """A floor just under the final k-th score (how studies/scale_floor.py times MaxScore at its best) skips
    documents from the start yet returns the reference top k; a floor at the k-th score keeps only the
    documents above it."""
    from retrieval.sparse import kernels

    rng = np.random.default_rng(seed)
    index = zipf_index(tmp_path, rng, documents=800, exponent=1.4, vocab=30)
    searcher = ImpactSearcher(index, rng.choice([0.2, 0.5, 1.0, 2.5], size=len(index.docnos)))
    book, k = searcher.impacts, 10
    for _ in range(20):
        query = sorted({int(t): float(rng.choice([0.5, 1.0, 2.0])) for t in
                        rng.integers(0, index.num_terms, size=int(rng.integers(2, 6)))}.items())
        want_docs, want_scores = searcher.search(query, k)
        if len(want_docs) < k:
            continue
        terms = np.array([t for t, _ in query], np.int64)
        weights = np.array([w for _, w in query])
        for floor in (np.nextafter(want_scores[-1], -np.inf), want_scores[-1]):
            docs, scores = np.empty(k, np.int64), np.empty(k)
            n = kernels.maxscore_top_k(index.indptr, index.docnos, book.codes, book.table, book.bases,
                                       searcher.max_impacts, terms, weights, k, index.num_docs, docs, scores,
                                       floor)
            kept = int((want_scores > floor).sum())
            assert n == kept and docs[:n].tolist() == want_docs[:n].tolist(), floor
            assert scores[:n].tolist() == want_scores[:n].tolist()
