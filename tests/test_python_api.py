"""The Python API (issue 53): one-query search, rerank on plain inputs, result objects, operators and
reprs, one policy for queries without text, DataFrames, the PyTerrier adapter, measures as researchers
write them, the Experiment, and the warnings of a comparison (runs of other depths, judged documents the
collection lacks) on Cranfield and CACM."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ir_measures
import pytest

from retrieval import collections
from retrieval.errors import InputError
from retrieval.evaluation.measures import evaluate, parse_measures, per_query, split_names
from retrieval.index.native import Index, build_index
from retrieval.late import LateModel, LateReranker, rerank
from retrieval.pipeline.params import LATE_WEIGHT, RERANK_DEPTH
from retrieval.pipeline.stage import Cut, Pipeline, Scaled, ScoreSum, Union
from retrieval.sparse.rankers import BM25, RM3, QueryLikelihood
from retrieval.types import Qrels, Queries, Result, Results, Run

DOCS = [("d1", "Cats", "The cat sat on the mat. Cats like mats."),
        ("d2", "Dogs", "Dogs chase cats in the garden."),
        ("d3", "", "Information retrieval systems rank documents."),
        ("d4", "Retrieval", "Ranking documents by BM25 is retrieval's classic baseline."),
        ("d5", "", "A garden with no animals at all.")]
QUERIES = Queries({"1": "cats garden", "2": "retrieval documents"})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Index:
    corpus = tmp_path_factory.mktemp("tiny") / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in DOCS))
    path = corpus.parent / "idx"
    build_index(collections.load_documents(corpus), path, progress=False)
    return Index.open(path)


@pytest.fixture(scope="module")
def zero_shot() -> LateModel:
    return LateModel("zero-shot", threads=1)


# ---------------------------------------------------------------- search, results, rerank

def test_search_gives_one_querys_results_with_their_text(tiny):
    results = BM25(tiny).search("cats garden", 2)
    assert isinstance(results, Results) and [type(r) for r in results] == [Result, Result]
    assert results.ids() == [d for d, _ in BM25(tiny)(Queries({"q": "cats garden"}))["q"][:2]]
    assert [r.rank for r in results] == [1, 2]
    assert results[0].text == tiny.text(results[0].id)
    table = repr(results).splitlines()
    assert table[0].split() == ["rank", "score", "id", "text"] and table[1].split()[:3] == [
        "1", f"{results[0].score:.4f}", results[0].id]
    assert repr(results[0]).startswith(f"Result(rank=1, id={results[0].id!r}, score=")
    with pytest.raises(InputError, match="one query text"):
        BM25(tiny).search("", 3)


def test_rerank_takes_strings_pairs_and_dicts_for_one_query_or_many(zero_shot):
    texts = [t for _, _, t in DOCS]
    as_strings = rerank("where did the cat sit", texts, zero_shot)
    as_pairs = rerank("where did the cat sit", [(d, t) for d, _, t in DOCS], zero_shot)
    as_dicts = rerank("where did the cat sit", [{"id": d, "text": t} for d, _, t in DOCS], zero_shot)
    as_docnos = rerank("where did the cat sit", [{"docno": d, "text": t} for d, _, t in DOCS], zero_shot)
    assert as_strings[0].text == "The cat sat on the mat. Cats like mats."
    assert [(r.score, r.text) for r in as_strings] == [(r.score, r.text) for r in as_pairs]
    assert as_pairs == as_dicts == as_docnos
    assert [r.id for r in as_strings] == [str(texts.index(r.text)) for r in as_strings]  # ids: positions
    many = rerank({"a": "where did the cat sit", "b": "ranking documents"},
                  {"a": texts, "b": texts}, zero_shot, k=2)
    assert many["a"] == as_strings[:2] and len(many["b"]) == 2
    assert rerank(["where did the cat sit"], [texts], zero_shot) == [as_strings]


@pytest.mark.parametrize(("docs", "match"), [
    ("one string", "a list of texts"),
    ([("d1", "text", "extra")], "document 0 is"),
    ([{"id": "d1"}], "document 0 is"),
    ([("d1", "a"), ("d1", "b")], "same id"),
])
def test_rerank_refuses_what_is_not_documents_in_one_line(zero_shot, docs, match):
    with pytest.raises(InputError, match=match) as e:
        rerank("cats", docs, zero_shot)
    assert "\n" not in str(e.value)


def test_rerank_from_the_package_uses_the_shipped_checkpoint():
    import retrieval

    results = retrieval.rerank("where did the cat sit", ["Dogs chase cats.", "The cat sat on the mat."])
    assert results.ids() == ["1", "0"] and results[0].text == "The cat sat on the mat."


# ---------------------------------------------------------------- operators and reprs

def test_plus_adds_scores_times_scales_them_and_bar_unites_documents(tiny):
    bm25, qld = BM25(tiny), QueryLikelihood(tiny)
    a, b = bm25(QUERIES), qld(QUERIES)
    summed = (0.7 * bm25 + qld * 0.3)(QUERIES)
    for q in QUERIES:
        sa, sb = dict(a[q]), dict(b[q])
        expected = {d: 0.7 * sa.get(d, 0.0) + 0.3 * sb.get(d, 0.0) for d in sa.keys() | sb.keys()}
        assert dict(summed[q]) == pytest.approx(expected)
    united = (bm25 % 1 | qld % 2)(QUERIES)
    for q in QUERIES:
        assert dict(united[q]) == dict.fromkeys({a[q][0][0]} | {d for d, _ in b[q][:2]}, 0.0)
    assert dict((-1 * bm25)(QUERIES)["1"]) == {d: -s for d, s in a["1"]}
    with pytest.raises(TypeError):
        bm25 + 1  # noqa: B018
    with pytest.raises(InputError, match="finite number"):
        Scaled(bm25, float("nan"))


def test_reprs_show_the_pipeline(tiny, zero_shot):
    bm25, qld = BM25(tiny), QueryLikelihood(tiny)
    pipeline = bm25 % 100 >> LateReranker(tiny, zero_shot)
    late = f"LateReranker(interpolate={LATE_WEIGHT}, depth={RERANK_DEPTH})"
    assert repr(pipeline) == f"BM25(k1=0.9, b=0.4) % 100 >> {late}"
    assert repr(RM3(BM25(tiny, k1=1.2, hits=50), fb_docs=5)) == (
        "RM3(ranker=BM25(k1=1.2, b=0.4, hits=50), fb_docs=5, fb_terms=10, original_weight=0.5, hits=50)")
    assert repr((bm25 | qld) >> qld % 10) == (
        "(BM25(k1=0.9, b=0.4) | QueryLikelihood(mu=1000.0)) >> QueryLikelihood(mu=1000.0) % 10")
    assert repr(0.5 * bm25 + qld) == "0.5 * BM25(k1=0.9, b=0.4) + QueryLikelihood(mu=1000.0)"
    assert isinstance(bm25 + qld, ScoreSum) and isinstance(bm25 | qld, Union)
    assert isinstance(bm25 % 3, Pipeline) and isinstance((bm25 % 3).stages[1], Cut)


# ---------------------------------------------------------------- one policy for queries without text

@pytest.fixture(scope="module")
def sharded(tiny, tmp_path_factory):
    from retrieval.analysis import Analyzer
    from retrieval.building import build_with_parts
    from retrieval.index.kinds import open_index

    path = tmp_path_factory.mktemp("sharded") / "idx"
    docs = [d for d in collections.load_documents(tiny.path.parent / "corpus.jsonl")]
    build_with_parts(docs, path, source="tiny", analyzer=Analyzer(), shards=2)
    return open_index(path)


@pytest.mark.parametrize("stage", ["bm25", "qld", "rm3", "late", "sharded", "pyterrier"])
def test_every_stage_refuses_a_run_naming_queries_it_has_no_text_for(tiny, zero_shot, sharded, stage):
    from retrieval.registry import build

    stages = {"bm25": lambda: BM25(tiny), "qld": lambda: QueryLikelihood(tiny),
              "rm3": lambda: RM3(BM25(tiny)), "late": lambda: LateReranker(tiny, zero_shot),
              "sharded": lambda: build("bm25", sharded), "pyterrier": _from_pyterrier_identity}
    run = Run({"1": [("d1", 2.0), ("d2", 1.0)], "7": [("d3", 1.0)], "8": [("d4", 1.0)]})
    with pytest.raises(InputError, match=r"2 queries with no query text \('7', '8'\)"):
        stages[stage]()(Queries({"1": "cats"}), run)


def test_dense_rescoring_refuses_queries_without_text_too(tiny, tmp_path):
    import shutil

    from retrieval.dense import DenseRetriever, add_dense

    path = tmp_path / "dense"
    shutil.copytree(tiny.path, path)
    add_dense(Index.open(path))
    with pytest.raises(InputError, match="1 query with no query text"):
        DenseRetriever(path)(Queries({"1": "cats"}), Run({"1": [("d1", 1.0)], "9": [("d2", 1.0)]}))


# ---------------------------------------------------------------- DataFrames and PyTerrier

def test_runs_topics_and_qrels_to_and_from_dataframes(tiny):
    run = BM25(tiny)(QUERIES)
    df = run.to_df(QUERIES)
    assert list(df.columns) == ["qid", "query", "docno", "score", "rank"]
    assert df[df.qid == "1"]["rank"].tolist() == list(range(len(run["1"])))  # from 0, as PyTerrier
    assert Run.from_df(df) == run and Run.from_df(df.sample(frac=1, random_state=0)) == run
    assert list(run.to_df().columns) == ["qid", "docno", "score", "rank"]
    assert Queries.from_df(df) == QUERIES == Queries.from_df(QUERIES.to_df())
    qrels = Qrels({"1": {"d1": 1, "d2": 0}, "2": {"d4": 2}})
    assert list(qrels.to_df().columns) == ["qid", "docno", "label"] and Qrels.from_df(qrels.to_df()) == qrels
    with pytest.raises(InputError, match="lacks the column"):
        Run.from_df(df.drop(columns=["score"]))
    with pytest.raises(InputError, match="two texts"):
        Queries.from_df(df.assign(query=["x"] + df["query"].tolist()[1:]))


def test_dataframes_without_pandas_say_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(InputError, match=r"pip install 'retrieval\[pandas\]'"):
        Run({"1": [("d1", 1.0)]}).to_df()


def _from_pyterrier_identity():
    import pyterrier as pt

    from retrieval.pipeline.pyterrier import from_pyterrier

    return from_pyterrier(pt.Transformer.identity())


def test_our_stages_in_pyterrier_pipelines_and_theirs_in_ours(tiny):
    import pyterrier as pt

    from retrieval.pipeline.pyterrier import from_pyterrier, to_pyterrier

    bm25, qld = BM25(tiny), QueryLikelihood(tiny)
    by_length = pt.apply.doc_score(lambda row: float(len(row["docno"]) + int(row["docno"][1:])))
    theirs = to_pyterrier(bm25) % 2 >> by_length >> to_pyterrier(qld)  # a PyTerrier pipeline
    frame = theirs.transform(QUERIES.to_df())
    ours = bm25 % 2 >> from_pyterrier(by_length) >> qld  # the same, as our pipeline
    assert Run.from_df(frame) == ours(QUERIES) == (bm25 % 2 >> qld)(QUERIES)
    doubled = (bm25 >> from_pyterrier(pt.apply.doc_score(lambda row: 2 * row["score"])))(QUERIES)
    assert doubled == (2 * bm25)(QUERIES)
    qrels = Qrels({"1": {"d2": 1}, "2": {"d4": 1}})
    table = pt.Experiment([to_pyterrier(bm25)], QUERIES.to_df(), qrels.to_df(), ["map"])
    assert table["map"][0] == pytest.approx(evaluate(bm25(QUERIES), qrels, ["MAP"])["MAP"])
    from retrieval import Experiment

    ours_table = Experiment([to_pyterrier(bm25), bm25], QUERIES, qrels, ["MAP"], names=["pt", "ours"])
    assert ours_table["MAP"].tolist() == [evaluate(bm25(QUERIES), qrels, ["MAP"])["MAP"]] * 2
    with pytest.raises(InputError, match="wrap it"):
        bm25 >> by_length  # noqa: B018
    assert repr(from_pyterrier(by_length)).startswith("from_pyterrier(")


# ---------------------------------------------------------------- measures as researchers write them

RUN = Run({"1": [("d1", 3.0), ("d2", 2.0), ("d3", 1.0)], "2": [("d4", 2.0), ("d5", 1.0)]})
QRELS = Qrels({"1": {"d2": 2, "d3": 1, "d9": 1}, "2": {"d4": 1}})


@pytest.mark.parametrize(("name", "same_as"), [
    ("nDCG(dcg='exp-log2')@10", ir_measures.nDCG(dcg="exp-log2") @ 10), ("ERR@10", ir_measures.ERR @ 10),
    ("map", ir_measures.AP), ("ndcg_cut_10", ir_measures.nDCG @ 10), ("P_30", ir_measures.P @ 30),
    ("P.30", ir_measures.P @ 30), ("recip_rank", ir_measures.RR), ("recall_100", ir_measures.R @ 100),
    ("bpref", ir_measures.Bpref), ("iprec_at_recall_0.10", ir_measures.IPrec @ 0.1),
    (ir_measures.nDCG @ 3, ir_measures.nDCG @ 3),
])
def test_measure_forms_are_accepted_and_computed(name, same_as):
    (shown, measure), = parse_measures([name])
    assert measure == same_as and shown == str(name)
    expected = ir_measures.calc_aggregate([same_as], QRELS, RUN.scores())[same_as]
    assert evaluate(RUN, QRELS, [name])[str(name)] == pytest.approx(expected)


@pytest.mark.parametrize(("name", "says"), [
    ("alpha_nDCG@10", "needs a provider that is not installed (pyndeval: pip install"),
    ("gm_map", "trec_eval's gm_map has no ir-measures counterpart"),
    ("ndcg_cut", "stands for 9 measures"),
    ("nDCG(dcg='exp')@10", "dcg must be one of 'log2', 'exp-log2'"),
    ("SDCG@10", "needs the parameter max_rel"),
    ("P(nope=1)@10", "takes no parameter 'nope'"),
    ("P@0", "cutoff must be a whole number >= 1"),
    ("nonsense", "unknown measure 'nonsense'"),
])
def test_measures_no_provider_computes_are_refused_in_one_line(name, says):
    with pytest.raises(InputError) as e:
        parse_measures([name])
    assert says in str(e.value) and "\n" not in str(e.value)


def test_err_and_exp_gains_work_whatever_the_query_ids():
    """gdeval reads numeric query ids only: ids are numbered for it and the values given back."""
    named = Run({f"topic-{q}x": hits for q, hits in RUN.items()})
    named_qrels = Qrels({f"topic-{q}x": judged for q, judged in QRELS.items()})
    for measure in ("ERR@10", "nDCG(dcg='exp-log2')@5"):
        assert per_query(named, named_qrels, [measure]) == {
            f"topic-{q}x": v for q, v in per_query(RUN, QRELS, [measure]).items()}
        assert evaluate(RUN, QRELS, [measure])[measure] > 0
    with pytest.raises(InputError, match="grades up to 4"):
        evaluate(RUN, Qrels({"1": {"d1": 5}}), ["ERR@10"])


def test_measure_lists_split_outside_parentheses():
    assert split_names("MAP, nDCG(dcg='exp-log2',judged_only=False)@10 P@30") == [
        "MAP", "nDCG(dcg='exp-log2',judged_only=False)@10", "P@30"]


# ---------------------------------------------------------------- warnings and the Experiment

def test_missing_judged_documents_are_counted_on_cacm(cacm_index, tmp_path, capsys):
    from retrieval import Experiment
    from retrieval.cli import main
    from retrieval.formats import write_run

    topics = collections.load_topics("cacm")
    df = Experiment([BM25(cacm_index)], topics, "cacm", ["MAP"], names=["bm25"])
    expected = "55 of the qrels' 796 judgements (55 relevant) name documents that are not in the collection"
    assert expected in df.attrs["warnings"][0] and "CACM-756" in df.attrs["warnings"][0]
    assert expected in capsys.readouterr().err
    write_run(BM25(cacm_index)(topics), tmp_path / "bm25.run")
    assert main(["eval", "--qrels", "cacm", "--collection", "cacm", str(tmp_path / "bm25.run")]) == 0
    assert expected in capsys.readouterr().err
    assert main(["eval", "--qrels", "cacm", "--index", str(cacm_index.path), str(tmp_path / "bm25.run")]) == 0
    assert expected in capsys.readouterr().err


CRANFIELD = """name: cranfield-depth
collection: cranfield
index: {{path: {index}}}
measures: [MAP, P@10, nDCG@10, ndcg_cut_20]
baseline: bm25
pipelines:
  bm25: {{model: bm25}}
  qld: {{model: qld}}
  bm25>>qld:
    - {{model: bm25, cutoff: 100}}
    - qld
"""


def test_experiment_equals_retrieval_run_and_marks_other_depths_on_cranfield(tmp_path, capsys):
    """The Python Experiment's figures and table are `retrieval run`'s on the same config; the reranked
    run cut at 100 is compared with the 1000-deep baseline on MAP: warned, and marked † in both."""
    from retrieval import Experiment
    from retrieval.cli import main

    config = tmp_path / "cranfield.yaml"
    config.write_text(CRANFIELD.format(index=tmp_path / "index"))
    assert main(["run", str(config), "--output-dir", str(tmp_path / "out")]) == 0
    printed, err = capsys.readouterr()
    assert "bm25>>qld ranks at most 100 documents per query and the baseline bm25 1000: MAP counts" in err
    figures = json.loads((tmp_path / "out" / "results.json").read_text())

    index = Index.open(tmp_path / "index")
    bm25, qld = BM25(index), QueryLikelihood(index)
    df = Experiment({"bm25": bm25, "qld": qld, "bm25>>qld": bm25 % 100 >> qld}, "cranfield", "cranfield",
                    ["MAP", "P@10", "nDCG@10", "ndcg_cut_20"], baseline="bm25")
    assert "bm25>>qld ranks at most 100" in capsys.readouterr().err
    assert df.attrs["table"] in printed  # the same table, cell for cell
    for _, row in df.iterrows():
        for measure in ("MAP", "P@10", "nDCG@10", "ndcg_cut_20"):
            assert row[measure] == figures["means"][row["name"]][measure]
            if row["name"] != "bm25":
                assert row[f"{measure} p(t)"] == figures["p_holm"][f"{row['name']}|{measure}"]["t"]
    marks = df.set_index("name")
    assert marks.loc["bm25>>qld", "MAP marks"].endswith("†")
    assert "†" not in marks.loc["bm25>>qld", "P@10 marks"] + marks.loc["qld", "MAP marks"]
    assert "†: compared at another depth than the baseline" in df.attrs["legend"]
    assert Path(tmp_path / "out" / "report.md").read_text().count("†") >= 2
