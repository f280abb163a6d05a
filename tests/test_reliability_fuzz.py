"""Bad input, fuzzed and hand-picked: a parse of the right type or an InputError naming the file.

The generators live in eval/reliability.py (which also writes the summary table
with more examples); here every reader gets FUZZ_EXAMPLES generated cases.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from retrieval.errors import InputError
from retrieval.evaluation.measures import evaluate
from retrieval.formats import read_documents
from retrieval.index.native import Index, build_index
from retrieval.sparse.rankers import BM25, RM3, QueryLikelihood
from retrieval.types import Document, Qrels, Run

ROOT = Path(__file__).resolve().parents[1]
FUZZ_EXAMPLES = int(os.environ.get("RELIABILITY_FUZZ_EXAMPLES", "500"))


def _cases():
    """eval/reliability.py as a module (eval/ is a folder of scripts, not a package)."""
    if "reliability_cases" in sys.modules:
        return sys.modules["reliability_cases"]
    spec = importlib.util.spec_from_file_location("reliability_cases", ROOT / "eval" / "reliability.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["reliability_cases"] = module
    spec.loader.exec_module(module)
    return module


cases = _cases()


@pytest.mark.parametrize("name", [r.name for r in cases.READERS])
def test_fuzzed_reader_parses_or_raises_input_error(name):
    tally = cases.fuzz(cases.BY_NAME[name], FUZZ_EXAMPLES, seed=None)
    assert sum(tally.values()) >= FUZZ_EXAMPLES // 2  # hypothesis may stop early on a small space
    assert tally["other"] == 0


@pytest.mark.parametrize("name", [r.name for r in cases.READERS])
def test_valid_sample_parses(name, tmp_path):
    reader = cases.BY_NAME[name]
    assert cases.outcome(reader, reader.sample, tmp_path) == "parsed"


def _hand_picked():
    for reader in cases.READERS:
        for label in cases.HAND_PICKED:
            bug = cases.KNOWN_BUGS.get((reader.name, label))
            marks = [pytest.mark.xfail(strict=True, reason=bug)] if bug else []
            yield pytest.param(reader.name, label, marks=marks, id=f"{reader.name}-{label}")


@pytest.mark.parametrize("name,label", list(_hand_picked()))
def test_hand_picked_bad_files(name, label, tmp_path):
    result = cases.outcome(cases.BY_NAME[name], cases.HAND_PICKED[label], tmp_path)
    assert result in ("parsed", "InputError"), result


@pytest.mark.parametrize("name", ["TREC documents", "TREC qrels", "TREC run", "BEIR corpus JSONL",
                                  "SMART documents", "YAML config"])
def test_invalid_utf8_and_nul_name_the_line(name, tmp_path):
    reader = cases.BY_NAME[name]
    lines = reader.sample.split(b"\n")
    for bad in (b"\xff", b"\x00"):
        data = b"\n".join(lines[:2] + [lines[2] + bad] + lines[3:])
        path = tmp_path / reader.filename
        path.write_bytes(data)
        with pytest.raises(InputError) as e:
            reader.read(path)
        assert e.value.path == str(path) and e.value.line == 3, str(e.value)


def _jsonl(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in rows))
    return path


@pytest.fixture(scope="module")
def small_index(tmp_path_factory) -> Index:
    root = tmp_path_factory.mktemp("small")
    words = ["cat", "dog", "garden", "retrieval", "ranking", "document", "bm25", "mat", "animal",
             "system", "query"]
    rows = [(f"d{i}", " ".join(words[(i * j) % len(words)] for j in range(1, 12))) for i in range(40)]
    build_index(read_documents(_jsonl(root / "c.jsonl", rows)), root / "idx", progress=False)
    return Index.open(root / "idx")


def test_duplicate_doc_ids_are_an_input_error(tmp_path):
    docs = _jsonl(tmp_path / "c.jsonl", [("a", "one"), ("b", "two"), ("a", "three")])
    with pytest.raises(InputError, match="duplicate document id 'a'"):
        build_index(read_documents(docs), tmp_path / "idx", progress=False)
    assert not (tmp_path / "idx").exists()  # nothing half-built left behind


def test_empty_collection_is_an_input_error(tmp_path):
    (tmp_path / "c.jsonl").write_text("\n")
    with pytest.raises(InputError):
        build_index(read_documents(tmp_path / "c.jsonl"), tmp_path / "idx", progress=False)
    assert not (tmp_path / "idx").exists()


@pytest.mark.parametrize("text", ["the of and a to", "?!... ,;: --- ()", "THE And oF"])
def test_stopword_or_punctuation_query_gives_empty_ranking_and_warning(small_index, text, capsys):
    for ranker in (BM25(small_index), QueryLikelihood(small_index), RM3(BM25(small_index))):
        run = ranker({"q1": text, "q2": "cat garden"})
        assert list(run["q1"]) == []
        assert len(run["q2"]) > 0
    err = capsys.readouterr().err
    assert "warning" in err and "'q1'" in err


def test_thousand_term_query(small_index):
    words = [f"w{i}" for i in range(990)] + ["cat", "dog", "garden"] * 4
    text = " ".join(words)
    assert len(text.split()) >= 1000
    for ranker in (BM25(small_index), QueryLikelihood(small_index), RM3(BM25(small_index))):
        run = ranker({"long": text})
        assert 0 < len(run["long"]) <= small_index.num_docs


def test_qrels_naming_unknown_queries_are_ignored(small_index):
    run = BM25(small_index)({"q1": "cat garden", "q2": "retrieval ranking"})
    top = run["q1"][0][0]
    qrels = Qrels({"q1": {top: 1}, "q2": {"d3": 1}, "unknown-query": {"d1": 1}, "also-unknown": {"zz": 2}})
    scores = evaluate(run, qrels, ["MAP", "nDCG@10"])  # works, no exception
    assert 0.0 < scores["MAP"] <= 1.0


def test_qrels_naming_unanswered_queries_count_as_zero_unless_only_answered(small_index):
    """trec_eval -c by default: a judged query the run does not answer scores 0 in the mean."""
    run = BM25(small_index)({"q1": "cat garden", "q2": "retrieval ranking"})
    qrels = Qrels({"q1": {run["q1"][0][0]: 1}, "q2": {"d3": 1}, "unknown-query": {"d1": 1}})
    known = Qrels({k: qrels[k] for k in ("q1", "q2")})
    answered = evaluate(run, known, ["MAP"])["MAP"]
    assert evaluate(run, qrels, ["MAP"], only_answered=True)["MAP"] == answered
    assert evaluate(run, qrels, ["MAP"])["MAP"] == pytest.approx(answered * 2 / 3)


def test_fifty_megabyte_document_indexes_and_searches(tmp_path):
    words = [f"term{i}" for i in range(5000)]
    size, parts, filler = 0, [], " ".join(words)
    while size < 50 * 1024 * 1024:
        parts.append(filler)
        size += len(filler) + 1
    big = " ".join(parts) + " needle"
    path = tmp_path / "big.jsonl"
    with open(path, "w") as f:
        f.write(json.dumps({"_id": "big", "text": big}) + "\n")
        f.write(json.dumps({"_id": "small", "text": "a small haystack with a needle"}) + "\n")
    assert path.stat().st_size > 50 * 1024 * 1024
    del big, parts
    build_index(read_documents(path), tmp_path / "idx", progress=False)
    index = Index.open(tmp_path / "idx")
    run = BM25(index)({"q": "needle", "r": "term42"})
    assert {d for d, _ in run["q"]} == {"big", "small"}
    assert [d for d, _ in run["r"]] == ["big"]
    assert len(index.docstore.get("big").text) > 50 * 1000 * 1000


def test_run_reader_round_trips_what_it_accepts(tmp_path):
    run = Run({"1": [("d1", 2.5), ("d2", 1.0)], "2": [("d3", -0.5)]})
    from retrieval.formats import read_run, write_run

    write_run(run, tmp_path / "r.txt")
    assert read_run(tmp_path / "r.txt") == run


def test_document_type_is_plain():
    assert Document("a", "", "b").contents.strip() == "b"


def test_per_query_accepts_any_query_id():
    from retrieval.evaluation.measures import per_query

    run, qrels = Run({"\u00b2": [("d", 1.0)]}), Qrels({"\u00b2": {"d": 1}})
    assert per_query(run, qrels, ["MAP"]) == {"\u00b2": {"MAP": 1.0}}
