"""Evaluation through ir-measures (which runs trec_eval's own code).

Measures are named as ir-measures names them ("AP", "nDCG@10", "P@30",
"R@100", "RR"); "MAP" and "MRR" are accepted as aliases.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import ir_measures

from retrieval.errors import InputError
from retrieval.types import Qrels, Run, natural_key

ALIASES = {"MAP": "AP", "MRR": "RR", "map": "AP", "mrr": "RR", "ndcg": "nDCG"}


def parse_measures(names: str | Iterable[str]) -> list[tuple[str, object]]:
    """[(name as the user wrote it, ir-measures measure)], in order."""
    if isinstance(names, str):
        names = names.replace(",", " ").split()
    parsed = []
    for name in names:
        base, sep, cutoff = name.partition("@")
        try:
            parsed.append((name, ir_measures.parse_measure(ALIASES.get(base, base) + sep + cutoff)))
        except (ValueError, NameError, TypeError, SyntaxError):
            raise InputError(f"unknown measure {name!r}; expected e.g. MAP, nDCG@10, P@30, R@100,"
                             " MRR") from None
    if not parsed:
        raise InputError("no measures given")
    return parsed


def _answered(run: Run, qrels: Qrels) -> Qrels:
    """The judgements of queries the run answers (trec_eval's default, i.e. without -c)."""
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
