"""Rank-biased precision and its residual against values worked out by hand from the formula."""

import json

import pytest

from retrieval.cli import main
from retrieval.errors import InputError
from retrieval.evaluation.measures import evaluate, parse_measures, per_query
from retrieval.evaluation.rbp import rbp
from retrieval.formats import write_run
from retrieval.types import Qrels, Run

QRELS = Qrels({"1": {"a": 1, "b": 0, "c": 2}, "2": {"x": 1}})
RUN = Run({"1": [("a", 3.0), ("z", 2.0), ("c", 1.0)], "2": [("y", 1.0)]})


def test_rbp_by_hand():
    # query 1, p = 0.8, rel = 1: a at rank 1 and c at rank 3 relevant, z unjudged at rank 2
    value, residual = rbp(["a", "z", "c"], QRELS["1"], p=0.8, rel=1)
    assert value == pytest.approx(0.2 * 1 + 0.2 * 0.8 ** 2)  # 0.328
    assert residual == pytest.approx(0.2 * 0.8 + 0.8 ** 3)  # 0.672
    # p = 0.5, graded (no rel): gains 1/2 for a, 2/2 for c
    value, residual = rbp(["a", "z", "c"], QRELS["1"], p=0.5)
    assert value == pytest.approx(0.5 * 0.5 + 0.5 * 0.25)  # 0.375
    assert residual == pytest.approx(0.5 * 0.5 + 0.5 ** 3)
    # cut at 2: c is not looked at
    assert rbp(["a", "z", "c"], QRELS["1"], p=0.5, cutoff=2) == pytest.approx((0.25, 0.25 + 0.25))


def test_rbp_measures_and_means():
    names = "RBP(p=0.8,rel=1),RBPres(p=0.8,rel=1) RBP(p=0.5) MAP"
    assert [n for n, _ in parse_measures(names)] == ["RBP(p=0.8,rel=1)", "RBPres(p=0.8,rel=1)",
                                                     "RBP(p=0.5)", "MAP"]
    means = evaluate(RUN, QRELS, names)
    assert means["RBP(p=0.8,rel=1)"] == pytest.approx(0.328 / 2)  # query 2 finds nothing relevant
    assert means["RBPres(p=0.8,rel=1)"] == pytest.approx((0.672 + 1.0) / 2)
    assert means["RBP(p=0.5)"] == pytest.approx(0.375 / 2)
    assert means["MAP"] == pytest.approx((1 + 2 / 3) / 2 / 2)
    each = per_query(RUN, QRELS, "RBP(p=0.5)@2")
    assert each == {"1": {"RBP(p=0.5)@2": pytest.approx(0.25)}, "2": {"RBP(p=0.5)@2": 0.0}}
    # a judged query the run leaves out (or retrieves nothing for) scores 0, with residual 1
    for run in (Run({"1": RUN["1"]}), Run({"1": RUN["1"], "2": []})):
        alone = evaluate(run, QRELS, "RBP(p=0.8,rel=1),RBPres(p=0.8,rel=1)")
        assert alone["RBP(p=0.8,rel=1)"] == pytest.approx(0.164)
        assert alone["RBPres(p=0.8,rel=1)"] == pytest.approx((0.672 + 1.0) / 2)
        each = per_query(run, QRELS, "RBPres(p=0.5),RBP(p=0.5),MAP")
        assert each["2"] == {"RBPres(p=0.5)": 1.0, "RBP(p=0.5)": 0.0, "MAP": 0.0}


def test_rbp_refuses_bad_persistence():
    with pytest.raises(InputError, match="p must be in"):
        parse_measures("RBP(p=1.0)")


def test_rbp_on_the_command_line(tmp_path, capsys):
    run, qrels = tmp_path / "run.txt", tmp_path / "qrels.txt"
    write_run(RUN, run, tag="t")
    qrels.write_text("".join(f"{q} 0 {d} {g}\n" for q, j in QRELS.items() for d, g in j.items()))
    assert main(["eval", "--qrels", str(qrels), str(run), "--measures", "RBP(p=0.8,rel=1),MAP",
                 "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["RBP(p=0.8,rel=1)"] == pytest.approx(0.164)
    assert out["MAP"] == pytest.approx(5 / 12)
