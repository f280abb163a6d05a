"""Hostile values (issue items 3, 4, 5, 6, 11, 12): measures, model parameters, ids, candidates,
messages and API types give a correct result or one clean error (eval/hostile_values.py), and
hypothesis properties over CLI argument values allow nothing else."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval.errors import InputError
from retrieval.evaluation.measures import parse_measures
from retrieval.formats import read_run

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "eval"))
_spec = importlib.util.spec_from_file_location("hostile_values", ROOT / "eval" / "hostile_values.py")
hostile_values = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hostile_values)
run_cli = hostile_values.run_cli


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[tuple[str, str], str]:
    rows = hostile_values.run_cases(tmp_path_factory.mktemp("hostile-values"))
    return {(category, case): outcome for category, case, outcome in rows}


@pytest.mark.parametrize("category", sorted({c for c, *_ in hostile_values.CASES}))
def test_every_case_is_a_result_or_a_clean_error(outcomes, category):
    cases = {case: o for (c, case), o in outcomes.items() if c == category}
    assert len(cases) >= 3
    assert {case: o for case, o in cases.items() if o not in ("error", "fine")} == {}


def test_each_case_gets_what_it_expects(outcomes):
    expected = {(c, n): e for c, n, _, e in hostile_values.CASES}
    assert {k: o for k, o in outcomes.items() if o != expected[k]} == {}


def test_classification_catches_what_it_should():
    assert hostile_values.outcome((-6, "", True), "error") == "crash"
    assert hostile_values.outcome((134, "", True), "error") == "crash"
    assert hostile_values.outcome((0, "", False), "fine") == "silent"
    assert hostile_values.outcome((1, "Traceback (most recent call last):\n", True), "error") == "traceback"
    assert hostile_values.outcome(TypeError("x"), "error") == "traceback"


# ---------------------------------------------------------------- properties over CLI values

@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    return hostile_values.Fixture(tmp_path_factory.mktemp("hostile-values-prop"))


def _result_or_clean_error(code: int, err: str, out: Path) -> None:
    assert code in (0, 2), err
    if code == 2:
        assert err.startswith("retrieval: error: ") and err.count("\n") == 1, err
        assert not out.exists()
    else:
        run = read_run(out)  # our own reader accepts what we wrote
        assert run and all(math.isfinite(s) for r in run.values() for _, s in r)


NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10).map(float),
                    st.sampled_from([0.0, -0.0, 1.0, 1e-300, 1e300, 0.5]))
SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@SETTINGS
@given(flag=st.sampled_from(["--k1", "--b", "--mu", "--lam", "--original-weight"]), value=NUMBERS,
       model=st.sampled_from(["bm25", "qld", "qljm"]), rm3=st.booleans())
def test_any_model_parameter_gives_a_valid_run_or_a_clean_error(fx, tmp_path, flag, value, model, rm3):
    out = tmp_path / f"r{abs(hash((flag, value, model, rm3)))}.txt"
    out.unlink(missing_ok=True)
    code, err = fx.search("--model", model, f"{flag}={value!r}", *(["--rm3"] if rm3 else []), output=out)
    _result_or_clean_error(code, err, out)


@SETTINGS
@given(flag=st.sampled_from(["--hits", "--fb-docs", "--fb-terms", "--threads"]),
       value=st.one_of(st.integers(-5, 2000), st.sampled_from(["1.5", "x", "", "1e3"])))
def test_any_count_gives_a_valid_run_or_a_clean_error(fx, tmp_path, flag, value):
    out = tmp_path / f"c{abs(hash((flag, str(value))))}.txt"
    out.unlink(missing_ok=True)
    try:
        code, err = fx.search("--rm3", f"{flag}={value}", output=out)
    except SystemExit as e:  # argparse rejects a non-integer: its own usage line, exit 2
        assert e.code == 2
        return
    _result_or_clean_error(code, err, out)


MEASURE = st.one_of(
    st.sampled_from(["MAP", "nDCG", "P", "R", "MRR", "Judged", "Bpref", "infAP", "RR", "Success"]).flatmap(
        lambda base: st.one_of(st.just(base), st.builds(lambda c: f"{base}@{c}", st.one_of(
            st.integers(-3, 50), st.floats(allow_nan=True), st.text(max_size=3)))) ),
    st.text(max_size=12))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(name=MEASURE)
def test_any_measure_name_is_parsed_or_refused_cleanly(name):
    """Checked in this process: a cutoff that would abort trec_eval never gets past parsing."""
    try:
        parsed = parse_measures(name)
    except InputError:
        return
    for _, measure in parsed:
        cutoff = getattr(measure, "params", {}).get("cutoff")
        assert cutoff is None or (isinstance(cutoff, int) and cutoff >= 1)


ID = st.one_of(st.text(min_size=0, max_size=6), st.sampled_from(["", " ", "a b", "a\tb", "x\u00a0y", "ok"]))


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(qid=ID, docid=ID, score=NUMBERS)
def test_any_run_written_is_one_our_eval_reads(tmp_path, qid, docid, score):
    from retrieval.formats import write_run
    from retrieval.types import Run

    out = tmp_path / "w.txt"
    out.unlink(missing_ok=True)
    try:
        write_run(Run({qid: [(docid, score)]}, presorted=True), out)
    except InputError:
        assert not out.exists()
        return
    run = read_run(out)
    assert list(run) == [qid] and run[qid] == [(docid, score)]


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(docid=ID)
def test_any_document_id_is_indexed_or_refused_cleanly(tmp_path, docid):
    source = tmp_path / "c.jsonl"
    import json

    source.write_text(json.dumps({"_id": docid, "text": "cats and dogs"}) + "\n")
    index = tmp_path / f"i{abs(hash(docid))}"
    code, err = run_cli("index", "--collection", source, "--index", index)
    assert code in (0, 2), err
    if code == 0:
        from retrieval.index.native import Index

        assert Index.open(index).doc_id_list == [docid]
    else:
        assert err.startswith("retrieval: error: ") and err.count("\n") == 1, err
