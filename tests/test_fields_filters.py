"""Fields and filters (issue 56): fielded indexes and rankers, and filters exact inside the top k.

The property test builds a small collection with random text (a tiny vocabulary, so scores tie
often) and random metadata, and checks for random filters that every ranker's filtered top k
equals brute force: the same ranker over every document, failing documents dropped, first k.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from retrieval.cli import main
from retrieval.errors import InputError
from retrieval.formats.jsonl import read_jsonl_documents
from retrieval.index.docstore import DocStore
from retrieval.index.filters import Filter, allow_mask, parse_filter
from retrieval.index.native import Index, build_index
from retrieval.registry import build
from retrieval.sparse import selective
from retrieval.sparse.fielded import BM25F, MultifieldBM25
from retrieval.types import Document, Queries

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta"]
CATEGORIES = ["news", "sport", "science", "art"]
TAGS = ["red", "green", "blue", "retracted"]


def _documents(n: int, seed: int) -> list[Document]:
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        title = " ".join(rng.choices(WORDS[:4], k=rng.randint(0, 3)))
        text = " ".join(rng.choices(WORDS, k=rng.randint(1, 12)))
        meta: dict = {}
        if rng.random() < 0.9:
            meta["year"] = rng.randint(1980, 2000)
        if rng.random() < 0.8:
            meta["cat"] = rng.choice(CATEGORIES)
        meta["tags"] = rng.sample(TAGS, rng.randint(0, 3))
        docs.append(Document(f"d{i:03d}", title, text, None, meta))
    return docs


@pytest.fixture(scope="module")
def random_index(tmp_path_factory) -> tuple[Index, list[Document]]:
    docs = _documents(260, 7)
    path = tmp_path_factory.mktemp("fields") / "index"
    build_index(docs, path, progress=False, fields=["title", "text"])
    return Index.open(path), docs


def _random_filter(rng: random.Random, depth: int = 0) -> tuple[str, object]:
    """(expression, predicate on a metadata dict), built side by side."""
    roll = rng.random()
    if depth < 2 and roll < 0.3:
        (a, pa), (b, pb) = _random_filter(rng, depth + 1), _random_filter(rng, depth + 1)
        if rng.random() < 0.5:
            return f"({a} and {b})", lambda m: pa(m) and pb(m)
        return f"({a} or {b})", lambda m: pa(m) or pb(m)
    if depth < 2 and roll < 0.4:
        a, pa = _random_filter(rng, depth + 1)
        return f"not {a}", lambda m: not pa(m)
    kind = rng.choice(["year", "cat", "tags", "in"])
    if kind == "year":
        op, y = rng.choice(["=", "!=", "<", "<=", ">", ">="]), rng.randint(1979, 2001)
        compare = {"=": lambda v: v == y, "!=": lambda v: v != y, "<": lambda v: v < y,
                   "<=": lambda v: v <= y, ">": lambda v: v > y, ">=": lambda v: v >= y}[op]
        if op == "!=":
            return f"year != {y}", lambda m: not ("year" in m and m["year"] == y)
        return f"year {op} {y}", lambda m: "year" in m and compare(m["year"])
    if kind == "cat":
        c = rng.choice(CATEGORIES)
        return f'cat = "{c}"', lambda m: m.get("cat") == c
    if kind == "tags":
        t = rng.choice(TAGS)
        return f'tags = "{t}"', lambda m: t in m["tags"]
    chosen = rng.sample(CATEGORIES, 2)
    return f"cat in {chosen}".replace("'", '"'), lambda m: m.get("cat") in chosen


RANKERS = {
    "bm25": lambda index, **f: build("bm25", index, **f),
    "qld": lambda index, **f: build("qld", index, **f),
    "qljm": lambda index, **f: build("qljm", index, **f),
    "bm25+rm3": lambda index, **f: build("bm25", index, rm3=True, fb_docs=3, **f),
    "multifield": lambda index, **f: build("multifield", index, field_weights="title=2,text=1", **f),
    "multifield_qld": lambda index, **f: build("multifield_qld", index, mu=50, field_weights="title=1.5",
                                               **f),
    "multifield_qld+rm3": lambda index, **f: build("multifield_qld", index, rm3=True, fb_docs=3, **f),
    "bm25f": lambda index, **f: build("bm25f", index, field_weights="title=2.5", field_b="title=0.2", **f),
    "bm25f+rm3": lambda index, **f: build("bm25f", index, rm3=True, fb_docs=3, **f),
}
QUERIES = Queries({"1": "alpha beta", "2": "gamma", "3": "omega sigma alpha", "4": "theta kappa delta",
                   "5": "beta beta zeta"})


@pytest.mark.parametrize("name", list(RANKERS))
def test_filtered_top_k_equals_brute_force(random_index, name, monkeypatch):
    index, docs = random_index
    meta = {d.id: d.metadata for d in docs}
    rng = random.Random(hash(name) % 1000)
    full = RANKERS[name](index, hits=len(docs))(QUERIES)
    for _ in range(12):
        expression, passes = _random_filter(rng)
        for k in (1, 3, 10, 150):  # 150: the kernels' buffer path (k >= LARGE_K)
            # exhaustive kernels with the mask; MaxScore; the passing documents alone (selective.py)
            for method, seek_cost in (("exhaustive", math.inf), ("maxscore", math.inf), ("exhaustive", 0.0)):
                monkeypatch.setattr(selective, "SEEK_COST", seek_cost)
                stage = RANKERS[name](index, hits=k, filter=expression)
                inner = getattr(stage, "ranker", stage)
                if not isinstance(inner, BM25F):  # BM25F scores with numpy, no kernel to choose
                    inner.searcher.auto_method = lambda k, m=method: m
                got = stage(QUERIES)
                for q in QUERIES:
                    if name.endswith("+rm3"):  # feedback comes from the filtered ranking: checked
                        continue  # below to pass the filter
                    expected = [(d, s) for d, s in full.get(q, []) if passes(meta[d])][:k]
                    assert list(got.get(q, [])) == expected, (name, expression, k, method, seek_cost, q)
                    assert all(passes(meta[d]) for d, _ in got.get(q, []))
                if name.endswith("+rm3"):
                    for q in QUERIES:
                        assert all(passes(meta[d]) for d, _ in got.get(q, []))


def test_rm3_filtered_equals_rm3_over_the_passing_documents_only(random_index, tmp_path):
    index, docs = random_index
    expression = 'year >= 1990 and not tags = "retracted"'
    got = build("bm25", index, rm3=True, fb_docs=3, hits=20, filter=expression)(QUERIES)
    assert all(d.metadata.get("year", 0) >= 1990 and "retracted" not in d.metadata["tags"]
               for q in QUERIES for d in (index.docstore.get(i) for i, _ in got.get(q, [])))


def test_include_exclude_lists_and_rescoring(random_index):
    index, docs = random_index
    full = build("bm25", index, hits=len(docs))(QUERIES)
    keep = [d.id for d in docs[::3]]
    drop = keep[:10]
    got = build("bm25", index, hits=5, filter=Filter(None, keep, drop))(QUERIES)
    for q in QUERIES:
        assert list(got.get(q, [])) == [(d, s) for d, s in full.get(q, []) if d in keep and d not in drop][:5]
    # a filtered rescorer drops the failing candidates of its input run
    rescored = build("qld", index, filter="year < 1990")(QUERIES, full)
    for q in QUERIES:
        assert all(index.docstore.get(d).metadata.get("year", 3000) < 1990 for d, _ in rescored.get(q, []))


def test_filter_language_errors_are_one_line():
    for bad, where in (("year >=", "expected a value"), ("year = 1 and", "expected a field name"),
                       ("(year = 1", "expected ')'"), ('cat in ["a" "b"]', "expected ',' or ']'"),
                       ("year ~ 3", "unexpected character"), ("", "empty expression"),
                       ("year 3", "expected a comparison")):
        with pytest.raises(InputError) as e:
            parse_filter(bad)
        assert where in str(e.value) and "\n" not in str(e.value)


def test_unknown_metadata_field_is_refused(random_index):
    index, _ = random_index
    with pytest.raises(InputError, match="no document has the field 'yaer'"):
        allow_mask("yaer > 3", index)
    assert allow_mask(None, index) is None
    ids = allow_mask('id in ["d001", "d005"]', index)
    assert [index.doc_id_list[i] for i in np.flatnonzero(ids)] == ["d001", "d005"]


def _bm25(tf: float, dl: float, avgdl: float, df: int, n: int, k1: float = 0.9, b: float = 0.4) -> float:
    from retrieval.index.lucene_norms import quantised_lengths

    ql = float(quantised_lengths(np.array([int(dl)], dtype=np.int32))[0])
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    return idf * tf / (tf + k1 * (1 - b + b * ql / avgdl))


def test_multifield_is_the_sum_of_per_field_bm25(random_index, tmp_path):
    index, docs = random_index
    per_field = {}
    for field in ("title", "text"):
        build_index([Document(d.id, "", d.field(field)) for d in docs], tmp_path / field, progress=False)
        per_field[field] = build("bm25", tmp_path / field, hits=len(docs))(QUERIES)
    got = MultifieldBM25(index, field_weights="title=2", hits=len(docs))(QUERIES)
    for q in QUERIES:
        expected: dict[str, float] = {}
        for field, w in (("title", 2.0), ("text", 1.0)):
            for d, s in per_field[field].get(q, []):
                expected[d] = expected.get(d, 0.0) + w * s
        assert {d: pytest.approx(s, rel=1e-12) for d, s in expected.items()} == dict(got.get(q, []))


def test_bm25f_matches_its_formula(random_index):
    from retrieval.index.lucene_norms import quantised_lengths

    index, docs = random_index
    analyse = index.analyzer
    weights, bs, k1 = {"title": 3.0, "text": 1.0}, {"title": 0.2, "text": 0.4}, 0.9
    fields = {f: [analyse(d.field(f)) for d in docs] for f in weights}
    flat = [analyse(d.contents) for d in docs]
    n = sum(1 for t in flat if t)
    avg = {f: sum(len(t) for t in fields[f]) / sum(1 for t in fields[f] if t) for f in weights}
    got = BM25F(index, field_weights="title=3", field_b="title=0.2", hits=len(docs))(QUERIES)
    for q, text in QUERIES.items():
        expected = {}
        for i, d in enumerate(docs):
            score, matched = 0.0, False
            for term in sorted(set(analyse(text))):
                df = sum(1 for t in flat if term in t)
                if not df:
                    continue
                tf = 0.0
                for f, w in weights.items():
                    c = fields[f][i].count(term)
                    matched |= c > 0
                    ql = float(quantised_lengths(np.array([len(fields[f][i])], dtype=np.int32))[0])
                    tf += w * c / (1 - bs[f] + bs[f] * ql / avg[f])
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                score += analyse(text).count(term) * idf * tf / (k1 + tf)
            if matched:
                expected[d.id] = score
        assert dict(got.get(q, [])) == {d: pytest.approx(s, rel=1e-9) for d, s in expected.items()}


def test_fields_leave_the_flat_run_unchanged(random_index, tmp_path):
    index, docs = random_index
    build_index(docs, tmp_path / "flat", progress=False)
    assert build("bm25", tmp_path / "flat", hits=50)(QUERIES) == build("bm25", index, hits=50)(QUERIES)
    assert index.fields == ["title", "text"] and Index.open(tmp_path / "flat").fields == []
    with pytest.raises(InputError, match="has no fields"):
        build("multifield", tmp_path / "flat")


def test_jsonl_fields_and_metadata_reach_the_doc_store(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "a", "title": "T", "text": "body", "venue": "CACM", "year": 1990,'
                      ' "tags": ["x", "y"], "metadata": {"lang": "en"}}\n'
                      '{"_id": "b", "title": "", "text": "other"}\n')
    docs = list(read_jsonl_documents(corpus))
    assert docs[0].fields == {"venue": "CACM"}
    assert docs[0].metadata == {"venue": "CACM", "year": 1990, "tags": ["x", "y"], "lang": "en"}
    assert docs[1][:] == ("b", "", "other", None, None)
    build_index(docs, tmp_path / "i", progress=False, fields=["title", "venue"])
    store = DocStore(tmp_path / "i" / "docs.sqlite")
    assert store.get("a") == docs[0] and list(store) == docs
    hits = build("multifield", tmp_path / "i", filter='lang = "en"')(Queries({"q": "cacm t"}))
    assert [d for d, _ in hits["q"]] == ["a"]


def test_cli_index_fields_and_search_filter(tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(f'{{"_id": "{d.id}", "title": "{d.title}", "text": "{d.text}",'
                              f' "year": {d.metadata.get("year", 0)}}}\n' for d in _documents(40, 3)))
    assert main(["index", "--collection", str(corpus), "--index", str(tmp_path / "i"),
                 "--fields", "title,text"]) == 0
    topics = tmp_path / "topics.tsv"
    topics.write_text("1\talpha beta\n")
    out = tmp_path / "run"
    assert main(["search", "--index", str(tmp_path / "i"), "--topics", str(topics), "--model", "bm25f",
                 "--field-weights", "title=2", "--filter", "year >= 1990", "--output", str(out)]) == 0
    index = Index.open(tmp_path / "i")
    ids = [line.split()[2] for line in out.read_text().splitlines()]
    assert ids and all(index.docstore.get(d).metadata["year"] >= 1990 for d in ids)
    capsys.readouterr()
    assert main(["search", "--index", str(tmp_path / "i"), "--topics", str(topics), "--filter",
                 "year >=", "--output", str(out)]) == 2
    assert "filter: expected a value" in capsys.readouterr().err
    assert main(["search", "--index", str(tmp_path / "i"), "--topics", str(topics), "--model",
                 "multifield", "--field-weights", "body=2", "--output", str(out)]) == 2
    assert "no field 'body'" in capsys.readouterr().err
    assert main(["index", "--collection", str(corpus), "--index", str(tmp_path / "j"),
                 "--fields", "Title"]) == 2


def test_dense_filter_flat_part_equals_brute_force(random_index, tmp_path):
    import shutil

    from retrieval.dense.encoder import Encoder
    from retrieval.dense.faiss_index import write_dense_part
    from retrieval.dense.retriever import DenseRetriever

    index, docs = random_index
    copy = tmp_path / "dense"
    shutil.copytree(index.path, copy)
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((len(docs), 16)).astype(np.float32)
    write_dense_part(copy, index.doc_id_list, vectors, {"model": "fake", "model_sha256": "0" * 64})
    fake = Encoder.__new__(Encoder)
    fake.checksum, fake.threads = "0" * 64, 1
    meta = {d.id: d.metadata for d in docs}
    queries = rng.standard_normal((4, 16)).astype(np.float32)
    qids = [str(i) for i in range(4)]
    full = DenseRetriever(copy, fake, hits=len(docs)).search_vectors(qids, queries)
    for expression, passes in (("year >= 1995", lambda m: m.get("year", 0) >= 1995),
                               ('tags = "red" and cat = "art"', lambda m: "red" in m["tags"]
                                and m.get("cat") == "art")):
        for k in (1, 5, 40):
            got = DenseRetriever(copy, fake, hits=k, filter=expression).search_vectors(qids, queries)
            for q in qids:
                assert [d for d, _ in got[q]] == [d for d, _ in full[q] if passes(meta[d])][:k]
    # HNSW: deeper searches until k passing documents are found (all of them pass, as many as exist)
    write_dense_part(copy, index.doc_id_list, vectors, {"model": "fake", "model_sha256": "0" * 64}, "hnsw")
    passing = sum(1 for d in docs if d.metadata.get("year", 0) >= 1995)
    got = DenseRetriever(copy, fake, hits=40, filter="year >= 1995").search_vectors(qids, queries)
    assert all(len(got[q]) == min(40, passing) and all(meta[d].get("year", 0) >= 1995 for d, _ in got[q])
               for q in qids)


def test_sharded_and_live_filters_equal_the_single_index(random_index, tmp_path):
    from retrieval.shards.build import build_sharded_index
    from retrieval.shards.live import add_documents, delete_documents

    _, docs = random_index
    build_index(docs, tmp_path / "flat", progress=False)
    build_sharded_index(docs, tmp_path / "sharded", 3, source="t", progress=False)
    filters = ["year >= 1990", 'cat = "art" or tags = "red"', 'not tags = "retracted" and year < 1995']
    for expression in filters:
        for name, extra in (("bm25", {}), ("qld", {}), ("bm25", {"rm3": True, "fb_docs": 3})):
            want = build(name, tmp_path / "flat", hits=20, filter=expression, **extra)(QUERIES)
            assert build(name, tmp_path / "sharded", hits=20, filter=expression, **extra)(QUERIES) == want
        run = build("bm25", tmp_path / "flat", hits=40)(QUERIES)
        assert build("qld", tmp_path / "sharded", filter=expression)(QUERIES, run) == \
            build("qld", tmp_path / "flat", filter=expression)(QUERIES, run)
    # live: half built, half added, every seventh deleted: a fresh build of what is left, filtered
    build_index(docs[:150], tmp_path / "live", progress=False)
    add_documents(tmp_path / "live", docs[150:])
    delete_documents(tmp_path / "live", [d.id for d in docs[::7]])
    build_index([d for i, d in enumerate(docs) if i % 7], tmp_path / "fresh", progress=False)
    for expression in filters:
        assert build("bm25", tmp_path / "live", hits=20, filter=expression)(QUERIES) == \
            build("bm25", tmp_path / "fresh", hits=20, filter=expression)(QUERIES)
    with pytest.raises(InputError, match="filter: expected a value"):
        build("bm25", tmp_path / "sharded", filter="year >")


def test_service_engine_filters_on_native_and_live_indexes(random_index, tmp_path):
    from retrieval.service.engine import Engine

    _, docs = random_index
    build_index(docs[:100], tmp_path / "i", progress=False)
    engine = Engine(tmp_path / "i")
    rows = [{"id": d.id, "title": d.title, "text": d.text, "metadata": d.metadata} for d in docs[100:]]
    engine.add(rows)  # a live index now: segments keep the metadata
    build_index(docs, tmp_path / "fresh", progress=False)
    for expression in ("year >= 1990", 'tags = "red" and not cat = "art"'):
        got = engine.search("alpha beta", k=5, filter=expression, exclude=["d003"])
        want = build("bm25", tmp_path / "fresh", hits=5, filter=Filter(expression, None, ["d003"]))(
            Queries({"q": "alpha beta"}))["q"]
        assert [(r["id"], r["score"]) for r in got["results"]] == want
    with pytest.raises(InputError, match="metadata must be an object"):
        engine.add([{"id": "x", "text": "t", "metadata": [1]}])
