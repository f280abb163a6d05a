"""The seams: one ranker registry, one index face, commands built from them."""

from __future__ import annotations

import pytest

from retrieval.cli import main, parser
from retrieval.errors import InputError
from retrieval.index.kinds import AnyIndex, index_kind, open_index
from retrieval.index.native import build_index
from retrieval.pipeline.params import PARAMS
from retrieval.pipeline.stage import Pipeline, Stage
from retrieval.registry import RANKERS, build
from retrieval.types import Document, Queries

DOCS = [Document("d1", "Cats", "The cat sat on the mat."), Document("d2", "Dogs", "Dogs chase cats."),
        Document("d3", "", "Retrieval systems rank documents."), Document("d4", "", "A garden of cats.")]


@pytest.fixture()
def tiny(tmp_path):
    build_index(DOCS, tmp_path / "idx", progress=False)
    return tmp_path / "idx"


def test_every_ranker_declares_known_parameters_and_kinds():
    for entry in RANKERS.values():
        assert set(entry.params) <= set(PARAMS), entry.name
        assert set(entry.builders) <= {"native", "sharded", "lucene"}, entry.name
        assert {"hits", "threads"} <= set(entry.params), entry.name


def test_unknown_or_out_of_range_parameters_are_refused(tiny):
    with pytest.raises(InputError, match="unknown parameter 'mu' for bm25"):
        build("bm25", tiny, mu=500.0)
    with pytest.raises(InputError, match="b must be a number in"):
        build("bm25", tiny, b=2.0)
    with pytest.raises(InputError, match="fb_docs applies only with rm3"):
        build("qld", tiny, fb_docs=5)
    with pytest.raises(InputError, match="unknown model"):
        build("bm26", tiny)


def test_search_flags_come_from_the_registry(tiny, tmp_path, capsys):
    sub = next(a for a in parser()._actions if a.dest == "command").choices["search"]
    flags = {o for a in sub._actions for o in a.option_strings}
    for name in {n for r in RANKERS.values() for n in r.params} - {"checkpoint"}:
        assert PARAMS[name].flag in flags, name
    topics = tmp_path / "t.tsv"
    topics.write_text("1\tcats\n")
    assert main(["search", "--index", str(tiny), "--topics", str(topics), "--mu", "500"]) == 2
    assert "--mu does not apply to bm25" in capsys.readouterr().err


def test_hits_applies_when_rescoring_candidates(tiny, tmp_path):
    topics, cands, out = tmp_path / "t.tsv", tmp_path / "c.run", tmp_path / "o.run"
    topics.write_text("1\tcats\n")
    cands.write_text("".join(f"1 Q0 d{i} {i} {5 - i}.0 x\n" for i in range(1, 5)))
    assert main(["search", "--index", str(tiny), "--topics", str(topics), "--model", "qld",
                 "--candidates", str(cands), "--hits", "2", "--output", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 2


def test_every_index_kind_opens_behind_one_face(tiny, tmp_path):
    from retrieval.shards.build import build_sharded_index

    build_sharded_index(DOCS, tmp_path / "sharded", 2, progress=False)
    for path, kind in ((tiny, "native"), (tmp_path / "sharded", "sharded")):
        index = open_index(path)
        assert isinstance(index, AnyIndex) and index.kind == kind == index_kind(path)
        assert index.statistics["documents"] == 4 and index.has("inverted")
        assert index.text("d2") == "Dogs Dogs chase cats."
        assert index.describe()["kind"] == kind
        assert open_index(index) is index
    queries = Queries({"1": "cats"})
    runs = [build("bm25", p)(queries) for p in (tiny, tmp_path / "sharded")]
    assert runs[0] == runs[1]


def test_stages_compose_with_operators(tiny):
    bm25, qld = build("bm25", tiny), build("qld", tiny)
    assert isinstance(bm25, Stage)
    cascade = bm25 % 2 >> qld
    assert isinstance(cascade, Pipeline) and len(cascade.stages) == 3
    run = cascade(Queries({"1": "cats"}))
    assert len(run["1"]) == 2


def test_sharded_stages_take_the_declared_defaults(tmp_path):
    from retrieval.shards import ShardedIndex, ShardedSparse
    from retrieval.shards.build import build_sharded_index

    build_sharded_index(DOCS, tmp_path / "sharded", 2, progress=False)
    index = ShardedIndex.open(tmp_path / "sharded")
    queries = Queries({"1": "cats"})
    assert ShardedSparse(index, "bm25")(queries) == build("bm25", index)(queries)
    assert ShardedSparse(index, "qld")(queries) == build("qld", index)(queries)


def test_a_new_bag_of_words_model_is_one_registration_away(tiny, tmp_path, monkeypatch, capsys):
    """README's recipe: a model in SPARSE_MODELS, its parameter in PARAMS, a Ranker with sparse_builders.
    Then it runs from the CLI on a single and a sharded index alike, and its parameter is range-checked."""
    from dataclasses import dataclass

    from retrieval import registry as rankers
    from retrieval.index import impacts as models
    from retrieval.pipeline import params
    from retrieval.shards.build import build_sharded_index

    @dataclass(frozen=True)
    class BM25Plus(models.BM25Model):
        delta: float = 1.0

        def _chunk(self, index, stats, lengths, lo, hi):
            return super()._chunk(index, stats, lengths, lo, hi) + self.delta

    monkeypatch.setitem(models.SPARSE_MODELS, "bm25plus", (BM25Plus, ("k1", "b", "delta")))
    monkeypatch.setitem(params.PARAMS, "delta", params.Param("delta", float, 1.0, "BM25+ floor",
                                                             lambda v: v >= 0, "a number >= 0"))
    monkeypatch.setitem(RANKERS, "bm25plus", rankers.Ranker(
        "bm25plus", "BM25+", ("k1", "b", "delta") + rankers.SPARSE, rankers.sparse_builders("bm25plus")))
    build_sharded_index(DOCS, tmp_path / "sharded", 2, progress=False)
    topics = tmp_path / "t.tsv"
    topics.write_text("1\tcats\n2\tdocuments\n")
    runs = []
    for index in (tiny, tmp_path / "sharded"):
        out = tmp_path / f"{index.name}.run"
        assert main(["search", "--index", str(index), "--topics", str(topics), "--model", "bm25plus",
                     "--delta", "0.5", "--rm3", "--fb-docs", "2", "--output", str(out)]) == 0
        runs.append(out.read_text())
    assert runs[0] == runs[1] and "d1" in runs[0]
    bm25 = build("bm25", tiny)(Queries({"1": "cats"}))["1"]
    plus = build("bm25plus", tiny, delta=0.5)(Queries({"1": "cats"}))["1"]
    assert [d for d, _ in plus] == [d for d, _ in bm25] and plus[0][1] == pytest.approx(bm25[0][1] + 0.5)
    assert main(["search", "--index", str(tiny), "--topics", str(topics), "--model", "bm25plus",
                 "--delta", "-1"]) == 2
    assert "delta must be a number >= 0" in capsys.readouterr().err


def test_the_python_api_page_example_runs(tmp_path, monkeypatch, capsys):
    """The Python API page's first block (docs/design/python-api.md), run as written (CACM from the
    data directory): the native classes, then live updates, then the registry on the live index."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "docs" / "design" / "python-api.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "build_index" in b)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(block, "docs/design/python-api.md", "exec"), namespace)
    assert "'MAP': 0.36" in capsys.readouterr().out  # BM25 + RM3 on CACM
    assert namespace["live"].kind == "sharded" and len(namespace["run"]) == 64
    assert "N1" in namespace["live"].shard_of and "CACM-0001" not in namespace["live"].shard_of
    with pytest.raises(InputError, match="and this needs a single one \\(in Python, any kind opens with"):
        namespace["Index"].open("indexes/cacm")
