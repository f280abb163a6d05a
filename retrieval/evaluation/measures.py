"""Evaluation through ir-measures (which runs trec_eval's own code).

Measures are named as ir-measures names them ("AP", "nDCG@10", "P@30",
"R@100", "RR"); "MAP" and "MRR" are accepted as aliases.

Every judged query counts: a query in the qrels that the run answers with
nothing scores 0 on every measure (trec_eval's -c), so a system that fails on
hard queries is not flattered by leaving them out of its mean or out of the
paired tests. `only_answered=True` gives trec_eval's default instead (means
over the judged queries the run answers).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import ir_measures

from retrieval.errors import InputError
from retrieval.types import Qrels, Run, natural_key

ALIASES = {"MAP": "AP", "MRR": "RR", "map": "AP", "mrr": "RR", "ndcg": "nDCG"}


def parse_measures(names: str | Iterable[str]) -> list[tuple[str, object]]:
    """[(name as the user wrote it, ir-measures measure)], in order, each checked to be computable."""
    if isinstance(names, str):
        names = names.replace(",", " ").split()
    if not isinstance(names, Iterable) or not all(isinstance(n, str) for n in names):
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


def _judged(run: Run, qrels: Qrels, only_answered: bool) -> tuple[Qrels, list[str]]:
    """The judgements to score the run against, and the judged queries it leaves unanswered."""
    if not isinstance(run, Run):
        raise InputError(f"expected a Run to evaluate (e.g. from read_run), got {type(run).__name__}")
    if not isinstance(qrels, Mapping) or not all(isinstance(j, Mapping) for j in qrels.values()):
        raise InputError("expected qrels as {query id: {doc id: relevance}} (e.g. from read_qrels),"
                         f" got {type(qrels).__name__}")
    for q, judged in qrels.items():
        for d, grade in judged.items():
            if not isinstance(d, str) or type(grade) is not int:  # what pytrec_eval takes
                raise InputError(f"qrels of query {q!r}: expected a doc id string and an int"
                                 f" grade, got {d!r}: {grade!r}")
    answered = Qrels({q: j for q, j in qrels.items() if run.get(q)})
    if not answered:
        raise InputError("the run and the qrels share no query ids; wrong qrels for this run?")
    unanswered = [] if only_answered else [q for q in qrels if q not in answered]
    return answered, unanswered


def evaluate(run: Run, qrels: Qrels, measures: str | Sequence[str],
             only_answered: bool = False) -> dict[str, float]:
    """Mean of each measure over every judged query (0 where the run has no hits), or with
    `only_answered` over the judged queries the run answers (trec_eval without -c)."""
    answered, unanswered = _judged(run, qrels, only_answered)
    parsed = parse_measures(measures)
    if not unanswered:
        values = ir_measures.calc_aggregate([m for _, m in parsed], answered, run.scores())
        return {name: float(values[m]) for name, m in parsed}
    sums: Counter[str] = Counter()
    for values in per_query(run, qrels, [n for n, _ in parsed], only_answered).values():
        sums.update(values)
    total = len(answered) + len(unanswered)
    return {name: sums[name] / total for name, _ in parsed}


def per_query(run: Run, qrels: Qrels, measures: str | Sequence[str],
              only_answered: bool = False) -> dict[str, dict[str, float]]:
    """{query id: {measure: value}} for every judged query (0 for those the run does not
    answer), or with `only_answered` for the judged queries the run answers."""
    answered, unanswered = _judged(run, qrels, only_answered)
    parsed = parse_measures(measures)
    by_measure = {m: name for name, m in parsed}
    out: dict[str, dict[str, float]] = {q: {name: 0.0 for name, _ in parsed} for q in unanswered}
    for metric in ir_measures.iter_calc([m for _, m in parsed], answered, run.scores()):
        out.setdefault(metric.query_id, {})[by_measure[metric.measure]] = float(metric.value)
    return {q: {name: out[q][name] for name, _ in parsed} for q in sorted(out, key=natural_key)}
