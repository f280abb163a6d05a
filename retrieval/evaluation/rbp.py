"""Rank-biased precision (Moffat and Zobel, 2008) and its residual, computed here.

    RBP = (1 - p) * sum_i g_i * p^(i - 1)

over the ranks i of a ranking (the top `cutoff` when given), where g_i is the
gain of the document at rank i: 1 if its grade is at least `rel`, else 0; with
no `rel`, the grade divided by the query's highest grade (graded RBP; on
binary judgements the same as rel=1). An unjudged document gains 0.

The residual is how much RBP could still rise: what the unjudged documents in
the ranking would add were they fully relevant, plus p^d, the weight of every
rank below the d documents looked at. `RBP(p=0.8)` and `RBPres(p=0.8)` (same
parameters) report the two; the true RBP lies in [RBP, RBP + residual].

ir-measures declares RBP, but of its providers only cwl_eval computes it
(binary only, no residual) and it is not installed here, so this module
computes both, and `RBPres` is registered with ir-measures as a measure of its
own so that its names parse like any other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ir_measures import measures as irm


class _RBPResidual(irm.Measure):
    """The residual of rank-biased precision: the most RBP could rise were unjudged documents relevant."""

    __name__ = "RBPres"
    NAME = __name__
    PRETTY_NAME = "Rank-Biased Precision residual"
    SHORT_DESC = "The weight of unjudged documents and of the ranks below the ranking in RBP."
    SUPPORTED_PARAMS = irm.RBP.SUPPORTED_PARAMS


RBPres = _RBPResidual()
if "RBPres" not in irm.registry:
    irm.register(RBPres)

LOCAL = ("RBP", "RBPres")  # measures computed here, whichever providers are installed


def is_local(measure: object) -> bool:
    """Whether this module computes the measure (RBP and its residual)."""
    return getattr(measure, "NAME", None) in LOCAL


def _settings(measure: object) -> tuple[float, int | None, int | None]:
    params = getattr(measure, "params", {})
    return float(params.get("p", 0.8)), params.get("rel"), params.get("cutoff")


def rbp(ranking: Sequence[str], judged: Mapping[str, int], p: float = 0.8, rel: int | None = None,
        cutoff: int | None = None) -> tuple[float, float]:
    """(RBP, residual) of one ranking (doc ids, best first) against one query's judgements."""
    if not 0 < p < 1:
        raise ValueError(f"RBP's persistence p must be in (0, 1), got {p!r}")
    docs = list(ranking[:cutoff] if cutoff is not None else ranking)
    top = max(judged.values(), default=0)
    value = residual = 0.0
    weight = 1.0 - p
    for doc in docs:
        grade = judged.get(doc)
        if grade is None:
            residual += weight
        elif rel is not None:
            value += weight if grade >= rel else 0.0
        elif top > 0 and grade > 0:
            value += weight * grade / top
        weight *= p
    return value, residual + p ** len(docs)


def per_query(measure: object, qrels: Mapping[str, Mapping[str, int]],
              rankings: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """{query id: value} of RBP or RBPres for every judged query the rankings answer."""
    p, rel, cutoff = _settings(measure)
    which = 1 if measure.NAME == "RBPres" else 0
    return {q: rbp(rankings[q], judged, p, rel, cutoff)[which]
            for q, judged in qrels.items() if rankings.get(q)}


def unanswered(measure: object) -> float:
    """The value for a judged query the run retrieves nothing for: RBP 0, its residual 1 (every rank
    unseen); 0 for any other measure."""
    return 1.0 if getattr(measure, "NAME", None) == "RBPres" else 0.0


def check(measure: object) -> str | None:
    """Why the measure's settings cannot be computed (None if they can)."""
    p, _, _ = _settings(measure)
    return None if 0 < p < 1 else f"p must be in (0, 1), got {p!r}"
