"""Is the difference real? Paired tests over per-query values, Holm-corrected.

Each system is compared with the baseline on the queries both were scored on
(paired by query id): a paired t-test (`scipy.stats.ttest_rel`) and the
Wilcoxon signed-rank test (`scipy.stats.wilcoxon`, two-sided). For each
measure and test, the p-values of all systems against the baseline form one
family, corrected by Holm's step-down method.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

PerQuery = Mapping[str, Mapping[str, float]]  # query id -> measure -> value
TESTS = ("t", "wilcoxon")


@dataclass(frozen=True)
class Comparison:
    """One system vs the baseline on one measure; p-values raw and Holm-adjusted."""

    system: str
    measure: str
    queries: int
    mean_difference: float
    p: dict[str, float]
    p_holm: dict[str, float]

    def significant(self, test: str, alpha: float) -> bool:
        return self.p_holm[test] < alpha


def paired(system: PerQuery, baseline: PerQuery, measure: str) -> tuple[np.ndarray, np.ndarray]:
    """The two systems' values on the queries both have, in query id order."""
    common = sorted(set(system) & set(baseline))
    return (np.array([system[q][measure] for q in common], dtype=float),
            np.array([baseline[q][measure] for q in common], dtype=float))


def p_values(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Two-sided p-values of the paired t-test and Wilcoxon signed-rank test (1.0 if a == b)."""
    if len(a) < 2 or np.all(a == b):
        return {"t": 1.0, "wilcoxon": 1.0}
    return {"t": float(stats.ttest_rel(a, b).pvalue),
            "wilcoxon": float(stats.wilcoxon(a, b).pvalue)}


def holm(p: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input order (NaN stays NaN)."""
    p = np.asarray(p, dtype=float)
    order = np.argsort(np.where(np.isnan(p), np.inf, p), kind="stable")
    m = int(np.sum(~np.isnan(p)))
    adjusted = np.full(len(p), np.nan)
    running = 0.0
    for rank, i in enumerate(order[:m]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


def compare(per_query: Mapping[str, PerQuery], baseline: str,
            measures: Sequence[str]) -> dict[tuple[str, str], Comparison]:
    """{(system, measure): Comparison} for every system except the baseline."""
    others = [s for s in per_query if s != baseline]
    out: dict[tuple[str, str], Comparison] = {}
    for measure in measures:
        raw = {}
        for system in others:
            a, b = paired(per_query[system], per_query[baseline], measure)
            raw[system] = (len(a), float(np.mean(a - b)) if len(a) else 0.0, p_values(a, b))
        adjusted = {test: holm([raw[s][2][test] for s in others]) for test in TESTS}
        for i, system in enumerate(others):
            n, diff, p = raw[system]
            out[system, measure] = Comparison(system, measure, n, diff, p,
                                              {t: adjusted[t][i] for t in TESTS})
    return out
