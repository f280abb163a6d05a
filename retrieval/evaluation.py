"""Evaluation through ir-measures (which runs trec_eval's own code).

Measures are named as ir-measures names them ("AP", "nDCG@10", "P@30",
"R@100", "RR"); "MAP" and "MRR" are accepted as aliases.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import ir_measures

from retrieval.errors import InputError
from retrieval.types import Qrels, Run, natural_key

ALIASES = {"MAP": "AP", "MRR": "RR", "map": "AP", "mrr": "RR", "ndcg": "nDCG"}


def parse_measures(names: str | Iterable[str]) -> list[tuple[str, object]]:
    """[(name as the user wrote it, ir-measures measure)], in order, each checked to be computable."""
    if isinstance(names, str):
        names = names.replace(",", " ").split()
    if not all(isinstance(n, str) for n in names):
        raise InputError(f"measures must be names such as 'MAP' or 'nDCG@10', got {names!r}")
    parsed = []
    for name in names:
        base, sep, cutoff = name.partition("@")
        try:
            measure = ir_measures.parse_measure(ALIASES.get(base, base) + sep + cutoff)
        except Exception:  # ir-measures raises many kinds (ValueError, NameError, TypeError, ...)
            raise InputError(f"unknown measure {name!r}; expected e.g. MAP, nDCG@10, P@30, R@100,"
                             " MRR") from None
        _check_params(name, measure)
        parsed.append((name, measure))
    if not parsed:
        raise InputError("no measures given")
    return parsed


def _check_params(name: str, measure: object) -> None:
    """Cutoffs and relevance levels are integers (cutoff >= 1), other parameters finite numbers:
    trec_eval aborts the process on a cutoff of 0 and fails on fractions."""
    for key, value in getattr(measure, "params", {}).items():
        if key == "cutoff":
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
            expected = "a whole number >= 1"
        elif key == "rel":
            ok = isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**31
            expected = "a whole number"
        else:
            ok = isinstance(value, (int, float)) and math.isfinite(value)
            expected = "a finite number"
        if not ok:
            raise InputError(f"measure {name!r}: {key} must be {expected}, got {value!r}")
    try:
        ir_measures.calc_aggregate([measure], {"q": {"d": 1}}, {"q": {"d": 1.0}})
    except Exception as e:  # a measure no installed provider computes
        reason = str(e).splitlines()[0][:80] if str(e) else type(e).__name__
        raise InputError(f"measure {name!r} cannot be computed here ({reason})") from None


def _answered(run: Run, qrels: Qrels) -> Qrels:
    """The judgements of queries the run answers (trec_eval's default, i.e. without -c)."""
    if not isinstance(run, Run):
        raise InputError(f"expected a Run to evaluate (e.g. from read_run), got {type(run).__name__}")
    if not isinstance(qrels, Mapping) or not all(isinstance(j, Mapping) for j in qrels.values()):
        raise InputError("expected qrels as {query id: {doc id: relevance}} (e.g. from read_qrels),"
                         f" got {type(qrels).__name__}")
    judged = Qrels({q: j for q, j in qrels.items() if run.get(q)})
    if not judged:
        raise InputError("the run and the qrels share no query ids; wrong qrels for this run?")
    return judged


def evaluate(run: Run, qrels: Qrels, measures: str | Sequence[str]) -> dict[str, float]:
    """Mean of each measure over the judged queries the run answers (trec_eval's default)."""
    qrels = _answered(run, qrels)
    parsed = parse_measures(measures)
    values = ir_measures.calc_aggregate([m for _, m in parsed], qrels, run.scores())
    return {name: float(values[m]) for name, m in parsed}


def per_query(run: Run, qrels: Qrels, measures: str | Sequence[str]) -> dict[str, dict[str, float]]:
    """{query id: {measure: value}} for every judged query the run answers."""
    qrels = _answered(run, qrels)
    parsed = parse_measures(measures)
    by_measure = {m: name for name, m in parsed}
    out: dict[str, dict[str, float]] = {}
    for metric in ir_measures.iter_calc([m for _, m in parsed], qrels, run.scores()):
        out.setdefault(metric.query_id, {})[by_measure[metric.measure]] = float(metric.value)
    return {q: {name: out[q][name] for name, _ in parsed} for q in sorted(out, key=natural_key)}
