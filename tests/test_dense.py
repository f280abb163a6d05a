"""Dense retrieval: encoder, FAISS parts, retriever stage, fusion."""

from __future__ import annotations

import json

import numpy as np
import pytest

from retrieval import collections, storage
from retrieval.dense import DenseRetriever, Encoder, add_dense, build_dense_part
from retrieval.dense.encoder import pool, read_st_config
from retrieval.dense.faiss_index import build_faiss, index_params
from retrieval.errors import InputError
from retrieval.index.native import build_index
from retrieval.pipeline.fusion import RRF, Interpolate, interpolate, minmax, rrf
from retrieval.runtime.local_models import default_model_dir
from retrieval.types import Document, Queries, Run

TEXTS = ["The cat sat on the mat.", "Dogs chase cats in the garden.",
         "Information retrieval systems rank documents by relevance.",
         "BM25 is the classic baseline of ranking documents.", "A garden with no animals at all."]
IDS = ["d1", "d2", "d3", "d4", "d5"]


@pytest.fixture(scope="session")
def fp32() -> Encoder:
    return Encoder(precision="fp32", progress=False)


@pytest.fixture(scope="session")
def default() -> Encoder:
    return Encoder(progress=False)


@pytest.fixture()
def index_dir(tmp_path):
    path = tmp_path / "index"
    build_index([Document(i, "", t) for i, t in zip(IDS, TEXTS)], path, progress=False)
    return path


def test_model_config_read_from_sentence_transformers_files():
    config = read_st_config(default_model_dir())
    assert config == {"pooling": "mean", "normalize": True, "max_length": 256}


def test_missing_model_dir_is_input_error(tmp_path):
    with pytest.raises(InputError, match="model directory not found"):
        Encoder(tmp_path / "nope")
    with pytest.raises(InputError, match="config.json is missing"):
        Encoder(tmp_path)
    with pytest.raises(InputError, match="unknown precision"):
        Encoder(precision="fp8")


def test_loading_a_model_shows_no_transformers_bar_and_keeps_its_setting(capfd):
    """Python API users see our progress lines only; transformers' own setting is left as it was."""
    from transformers.utils import logging as hf_logging

    from retrieval.dense import Encoder

    before = hf_logging.is_progress_bar_enabled()
    hf_logging.enable_progress_bar()  # as a fresh Python session has it
    try:
        Encoder(precision="fp32")
        assert "Loading weights" not in capfd.readouterr().err
        assert hf_logging.is_progress_bar_enabled()
    finally:
        if not before:
            hf_logging.disable_progress_bar()


def test_pooling_modes():
    hidden = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    mask = np.array([[1, 1, 0]])
    assert pool(hidden, mask, "cls").tolist() == [[0, 1, 2, 3]]
    assert pool(hidden, mask, "mean").tolist() == [[2, 3, 4, 5]]
    assert pool(hidden, mask, "max").tolist() == [[4, 5, 6, 7]]
    np.testing.assert_allclose(pool(hidden, mask, "mean_sqrt_len"), [[4, 6, 8, 10]] / np.sqrt(2))


def test_fp32_matches_sentence_transformers(fp32):
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(str(default_model_dir()), device="cpu", local_files_only=True)
    ref = model.encode(TEXTS, normalize_embeddings=True)
    ours = fp32.encode(TEXTS)
    assert ours.shape == (5, 384) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, ref, atol=1e-5)


def test_output_order_and_batching_do_not_change_embeddings(fp32):
    batched = fp32.encode(TEXTS)
    single = np.vstack([fp32.encode([t]) for t in TEXTS])
    np.testing.assert_allclose(batched, single, atol=1e-5)
    np.testing.assert_array_equal(fp32.encode(TEXTS), batched)
    assert fp32.encode([]).shape == (0, 384)


def test_default_path_close_to_fp32(fp32, default):
    # bf16 measured >= 0.999, the int8 default 0.983-0.990 (one text a batch, outlier channels in fp32:
    # retrieval.runtime.int8_outliers; mean over SciFact's documents 0.989, eval/results/dense.md)
    cos = (default.encode(TEXTS) * fp32.encode(TEXTS)).sum(axis=1)
    assert cos.min() > 0.98


def test_dense_part_and_retriever(index_dir, default):
    entry = build_dense_part(index_dir, IDS, TEXTS, encoder=default)
    assert entry["dim"] == 384 and entry["index_type"] == "flat"
    assert entry["model_sha256"] == default.checksum
    manifest = json.loads((index_dir / "manifest.json").read_text())
    assert "dense/faiss.index" in manifest["parts"]["dense"]["files"]
    run = DenseRetriever(index_dir, model=default, hits=3)(
        Queries({"q1": "a cat on a mat", "q2": "ranking documents for search"}))
    assert isinstance(run, Run) and len(run["q1"]) == 3
    assert run["q1"][0][0] == "d1" and run["q2"][0][0] in ("d3", "d4")
    with pytest.raises(InputError, match="empty query"):
        DenseRetriever(index_dir, model=default)(Queries({"q": " "}))


def test_retriever_refuses_another_model(index_dir, default):
    build_dense_part(index_dir, IDS, TEXTS, encoder=default)
    manifest = json.loads((index_dir / "manifest.json").read_text())
    manifest["parts"]["dense"]["model_sha256"] = "0" * 64
    storage.write_json_atomic(index_dir / "manifest.json", manifest)
    with pytest.raises(InputError, match="another model"):
        DenseRetriever(index_dir, model=default)


def test_a_model_of_ones_own_is_named_not_located(index_dir, default, tmp_path):
    """The manifest names a model directory by its name, not by a path of the building machine;
    searching then needs that directory (--encoder), and says so."""
    import shutil

    own = tmp_path / "my-minilm"
    shutil.copytree(default.model_dir, own)
    build_dense_part(index_dir, IDS, TEXTS, encoder=Encoder(own, precision="fp32"))
    assert json.loads((index_dir / "manifest.json").read_text())["parts"]["dense"]["model"] == "my-minilm"
    with pytest.raises(InputError, match="not bundled; pass its directory"):
        DenseRetriever(index_dir)
    assert DenseRetriever(index_dir, model=own, precision="fp32").encoder.checksum == default.checksum


def test_no_dense_part_is_input_error(index_dir):
    with pytest.raises(InputError, match="no dense part"):
        DenseRetriever(index_dir)


def test_add_dense_to_a_built_index(tmp_path, tiny_docs, default):
    from retrieval.index.native import Index, build_index

    build_index(collections.load_documents(tiny_docs), tmp_path / "ix", progress=False)
    add_dense(tmp_path / "ix", encoder=default, index_type="hnsw", params={"m": 8})
    index = Index.open(tmp_path / "ix")
    assert index.parts["dense"]["params"]["m"] == 8
    run = DenseRetriever(index, model=default, hits=5)(Queries({"q": "dogs in a garden"}))
    assert run["q"][0][0] == "d2" and len(run["q"]) == 5
    assert DenseRetriever(index, model=default, ef_search=4).faiss.hnsw.efSearch == 4
    with pytest.raises(InputError, match="nprobe applies only to an ivfpq dense part; this index's is hnsw"):
        DenseRetriever(index, model=default, nprobe=3)  # not silently ignored


def test_hnsw_and_ivfpq_approximate_flat():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((600, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[:20] + 0.1 * rng.standard_normal((20, 32)).astype(np.float32)
    flat, _ = build_faiss(x)
    truth = flat.search(q, 10)[1]
    for kind, params in (("hnsw", {"m": 16}), ("ivfpq", {"nlist": 8, "m": 8, "nbits": 6,
                                                         "nprobe": 8})):
        index, used = build_faiss(x, kind, params)
        found = index.search(q, 10)[1]
        recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(truth, found)])
        assert recall > 0.5, (kind, recall)
        assert used["m"] == params["m"]


def test_bad_index_parameters():
    with pytest.raises(InputError, match="unknown dense index type"):
        index_params("lsh")
    with pytest.raises(InputError, match="unknown parameter"):
        index_params("hnsw", {"nprobe": 3})
    with pytest.raises(InputError, match="too few documents"):
        build_faiss(np.eye(16, dtype=np.float32), "ivfpq", {"m": 4})


RUN_A = Run({"q": [("a", 3.0), ("b", 2.0), ("c", 1.0)]})
RUN_B = Run({"q": [("c", 10.0), ("d", 5.0)], "r": [("x", 1.0)]})


def test_rrf():
    fused = rrf([RUN_A, RUN_B], rrf_k=60)
    scores = dict(fused["q"])
    assert scores["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert scores["a"] == pytest.approx(1 / 61) and scores["d"] == pytest.approx(1 / 62)
    assert [d for d, _ in fused["q"]] == ["c", "a", "b", "d"]  # b, d tie: doc id order
    assert list(fused["r"]) == [("x", 1 / 61)]


def test_interpolate():
    assert minmax([("a", 2.0), ("b", 2.0)]) == {"a": 1.0, "b": 1.0}
    fused = interpolate(RUN_A, RUN_B, weight=0.25)
    scores = dict(fused["q"])
    assert scores["a"] == pytest.approx(0.25)
    assert scores["c"] == pytest.approx(0.75)
    assert scores["d"] == pytest.approx(0.0) and scores["b"] == pytest.approx(0.125)
    assert interpolate(RUN_A, RUN_B, 1.0)["q"][0][0] == "a"
    with pytest.raises(InputError):
        interpolate(RUN_A, RUN_B, 1.5)


def test_fusion_stages_compose_stages():
    first, second = (lambda q, run=None: RUN_A), (lambda q, run=None: RUN_B)
    queries = Queries({"q": "anything"})
    assert Interpolate(first, second, 0.25)(queries) == interpolate(RUN_A, RUN_B, 0.25)
    assert RRF(first, second, hits=2)(queries) == rrf([RUN_A, RUN_B]).cut(2)


@pytest.mark.slow
def test_scifact_ndcg_matches_mteb(scifact_dense_index, default):
    import ir_measures

    run = DenseRetriever(scifact_dense_index, model=default, hits=1000)(
        collections.load_topics("scifact")).without_query_ids()
    qrels = collections.load_qrels("scifact")
    ndcg = ir_measures.calc_aggregate([ir_measures.parse_measure("nDCG@10")], qrels,
                                      run.scores())
    assert list(ndcg.values())[0] == pytest.approx(0.6451, abs=0.005)


def test_tune_weight_picks_the_better_run():
    from retrieval.pipeline.fusion import tune_weight

    qrels = {"q": {"a": 1}}
    best, scores = tune_weight(RUN_A, RUN_B, qrels, grid=[0.0, 0.6, 1.0])
    assert best == 0.6 and scores[0.0] < scores[1.0] == scores[0.6]


@pytest.mark.slow
def test_scifact_hybrid_with_weight_chosen_on_train(scifact_dense_index):
    from retrieval.evaluation.measures import evaluate
    from retrieval.pipeline.fusion import interpolate, tune_weight
    from retrieval.sparse.rankers import BM25

    bm25, dense = BM25(scifact_dense_index), DenseRetriever(scifact_dense_index, hits=1000)
    train = collections.load_topics("scifact:train")
    weight, _ = tune_weight(bm25(train).without_query_ids(), dense(train).without_query_ids(),
                            collections.load_qrels("scifact:train"), "nDCG@10", depth=100)
    test = collections.load_topics("scifact")
    run = interpolate(bm25(test).without_query_ids(), dense(test).without_query_ids(), weight)
    ndcg = evaluate(run, collections.load_qrels("scifact"), ["nDCG@10"])["nDCG@10"]
    assert 0.0 < weight < 1.0
    assert ndcg >= 0.73


def test_dense_part_records_no_precision_and_queries_in_this_machines(index_dir, monkeypatch):
    """An index never stores how it was encoded; its queries run in `auto` on whatever CPU opens it."""
    monkeypatch.setenv("RETRIEVAL_NO_BF16", "1")
    from retrieval.dense.encoder import INT8_WITHIN_LIMIT
    from retrieval.runtime.precision import int8_allowed

    entry = build_dense_part(index_dir, IDS, TEXTS, encoder=Encoder(precision="int8", progress=False))
    assert "precision" not in entry
    assert not any(str(v).startswith("/") for v in entry.values())
    retriever = DenseRetriever(index_dir, hits=2)
    # no bf16 here: the encoder's `auto` for this CPU's int8 kernels (set on validation), not the build's
    assert retriever.encoder.precision == ("int8" if int8_allowed(INT8_WITHIN_LIMIT) else "fp32")
    run = retriever(Queries({"q": "a cat on a mat"}))
    assert run["q"][0][0] == "d1"


def test_dense_rescoring_equals_its_search_scores(index_dir, default):
    build_dense_part(index_dir, IDS, TEXTS, encoder=default)
    dense = DenseRetriever(index_dir, model=default, hits=5)
    queries = Queries({"q1": "a cat on a mat", "q2": "ranking documents for search"})
    searched = dense(queries)
    given = Run({"q1": [("d4", 0.0), ("d1", 0.0)], "q2": [(d, 0.0) for d in IDS]})
    rescored = dense(queries, given)
    for q in queries:
        assert {d for d, _ in rescored[q]} == {d for d, _ in given[q]}
        full = dict(searched[q])
        # inner products with the stored vectors: equal to FAISS's search scores up to float32 rounding
        assert all(s == pytest.approx(full[d], abs=1e-6) for d, s in rescored[q])
    assert [d for d, _ in rescored["q1"]] == ["d1", "d4"]
    assert dense(queries, Run({"q1": [("d2", 0.0)]}))["q2"] == []
    with pytest.raises(InputError, match="not in the dense part"):
        dense(queries, Run({"q1": [("nope", 0.0)]}))


def test_dense_query_encoder_replaces_the_index_model_for_queries(index_dir, default):
    build_dense_part(index_dir, IDS, TEXTS, encoder=default)

    class Fixed:
        def encode(self, texts):
            return default.encode(["dogs chasing cats"] * len(texts))

    run = DenseRetriever(index_dir, model=default, hits=1, query_encoder=Fixed())(
        Queries({"q": "ranking documents for search"}))
    assert run["q"][0][0] == "d2"


def test_weighted_sum_is_cos_plus_weighted_bm25(index_dir, default):
    import math

    from retrieval.index.native import Index
    from retrieval.pipeline.fusion import WeightedSum
    from retrieval.sparse.rankers import BM25

    build_dense_part(index_dir, IDS, TEXTS, encoder=default)
    index = Index.open(index_dir)
    query, w, depth = "a cat on a mat in the garden", 0.3, 2
    fused = WeightedSum(DenseRetriever(index, model=default, hits=depth), BM25(index, hits=depth),
                        weights=(1.0, w), depth=depth)(Queries({"q": query}))
    # by hand: cosines of the encoder's vectors; BM25 as Lucene computes it (k1 0.9, b 0.4)
    q_vec, doc_vecs = default.encode([query])[0], default.encode(TEXTS)
    cos = {d: float(np.dot(v, q_vec)) for d, v in zip(IDS, doc_vecs)}
    terms = {d: index.analyzer(t) for d, t in zip(IDS, TEXTS)}
    avgdl = sum(len(t) for t in terms.values()) / len(IDS)

    def bm25(d: str) -> float:
        score = 0.0
        for t in set(index.analyzer(query)):
            df = sum(t in terms[x] for x in IDS)
            tf = terms[d].count(t)
            if df and tf:
                idf = math.log(1 + (len(IDS) - df + 0.5) / (df + 0.5))
                score += idf * tf / (tf + 0.9 * (1 - 0.4 + 0.4 * len(terms[d]) / avgdl))
        return score

    sparse = {d: bm25(d) for d in IDS}
    top_dense = sorted(IDS, key=lambda d: (-cos[d], d))[:depth]
    top_bm25 = sorted((d for d in IDS if sparse[d] > 0), key=lambda d: (-sparse[d], d))[:depth]
    expected = {d: cos[d] + w * sparse[d] for d in set(top_dense) | set(top_bm25)}
    assert {d for d, _ in fused["q"]} == set(expected)
    assert all(s == pytest.approx(expected[d], rel=1e-5) for d, s in fused["q"])
    assert [s for _, s in fused["q"]] == sorted((s for _, s in fused["q"]), reverse=True)
    with pytest.raises(InputError, match="one weight per stage"):
        WeightedSum(BM25(index), BM25(index), weights=(1.0,))
