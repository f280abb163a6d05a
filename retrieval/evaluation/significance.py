"""Is the difference real? Paired tests over per-query values, Holm-corrected.

Each system is compared with the baseline on the queries both were scored on
(paired by query id): a paired t-test (`scipy.stats.ttest_rel`) and the
Wilcoxon signed-rank test (`scipy.stats.wilcoxon`, two-sided). For each
measure and test, the p-values of all systems against the baseline form one
family, corrected by Holm's step-down method.

The converse question, whether a difference is shown to be small (a faster
precision giving the reference's ranking), is `equivalent`: two one-sided
t-tests against a margin.
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


def difference_interval(a: Sequence[float], b: Sequence[float],
                        confidence: float = 0.90) -> tuple[float, float]:
    """Student's t confidence interval of the mean paired difference a - b; the point itself when
    every difference is the same, and unbounded with fewer than two pairs."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if len(d) < 2:
        return -np.inf, np.inf
    if np.all(d == d[0]):
        return float(d[0]), float(d[0])
    low, high = stats.ttest_1samp(d, 0.0).confidence_interval(confidence)
    return float(low), float(high)


def equivalent(a: Sequence[float], b: Sequence[float], margin: float, alpha: float = 0.05) -> bool:
    """Whether paired values a and b are shown to differ by at most `margin` on average, either way: two
    one-sided t-tests (TOST) at level `alpha`, i.e. the (1 - 2 alpha) interval lies within ±margin."""
    low, high = difference_interval(a, b, 1 - 2 * alpha)
    return -margin <= low and high <= margin
