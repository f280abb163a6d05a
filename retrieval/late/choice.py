"""The late stage's fusion chosen on validation, guarded so that it never lowers its first stage.

The candidates are fused settings (fusion, weight on the first stage, depth)
and `KEEP`, the first stage's own ranking (interpolation weight 1.0: the
stage then returns its input run unchanged). A fused setting is chosen only
when validation shows it beats the first stage: on the pooled per-query
objective values of the validation queries (never the evaluated topics), a
one-sided paired t-test of the setting against the first stage must give
p < `alpha` / m, where m is the number of fused candidates the validation
looked at (Bonferroni: the best of many candidates looks better than it is,
so each is held to the corrected level). Among the settings that pass, the
one with the highest mean wins (ties: interpolation before RRF, the larger
weight, the smaller depth); when none passes, the stage keeps its first
stage's ranking. The rule was written after the leave-one-collection-out
test tables of issue 51 had been seen (docs/design/late-interaction.md).

Used by `retrieval train late` (train.train: the weight it records) and by
eval/bench_neural.py (the leave-one-out fusions and the shipped defaults,
params.LATE_DEFAULTS).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

from retrieval.evaluation.measures import per_query
from retrieval.types import Qrels, Run

Setting = tuple[str, float, int]  # (fusion, interpolation weight on the first stage, depth)
KEEP_WEIGHT = 1.0
ALPHA = 0.05  # one-sided, before the Bonferroni correction


def keep(depth: int = 10) -> Setting:
    """The "keep the first stage" setting (interpolation weight 1.0; the depth does nothing)."""
    return ("interpolate", KEEP_WEIGHT, depth)


def keeps(setting: Setting) -> bool:
    """Whether `setting` returns the first stage's ranking unchanged."""
    return setting[0] == "interpolate" and setting[1] == KEEP_WEIGHT


@dataclass(frozen=True)
class Choice:
    """The guarded choice: the setting, the best fused candidate (chosen or not) and the evidence."""

    setting: Setting           # what the stage uses: the best passing fused setting, else keep()
    best: Setting              # the fused candidate with the highest validation mean (passing or not)
    mean: float                # validation mean objective of `setting`
    best_mean: float           # ... of `best`
    first_mean: float          # ... of the first stage
    p: float                   # one-sided paired t-test p of `best` against the first stage
    p_chosen: float            # ... of `setting` (1.0 when it keeps the first stage)
    level: float               # the level each candidate must pass: alpha / m
    candidates: int            # m: fused candidates looked at
    passing: int               # how many passed
    queries: int               # validation queries (pooled)

    @property
    def kept(self) -> bool:
        return keeps(self.setting)


MEASURES = ("nDCG@10", "MAP")


def objective(run: Run, qrels: Qrels) -> dict[str, float]:
    """The validation objective of each judged query: (nDCG@10 + AP) / 2."""
    return {q: (v["nDCG@10"] + v["MAP"]) / 2 for q, v in per_query(run, qrels, list(MEASURES)).items()}


def one_sided_p(a: np.ndarray, b: np.ndarray) -> float:
    """p of the paired t-test that mean(a - b) > 0 (1.0 when a == b everywhere or fewer than 2 pairs)."""
    if len(a) < 2 or np.all(a == b):
        return 1.0
    d = a - b
    if np.all(d == d[0]):  # a constant difference: t is infinite (or undefined)
        return 0.0 if d[0] > 0 else 1.0
    return float(stats.ttest_rel(a, b, alternative="greater").pvalue)


def order_key(setting: Setting, mean: float) -> tuple:
    """Sort key of a candidate: the higher mean, then interpolation, the larger weight, the smaller depth."""
    fusion, weight, depth = setting
    return (round(mean, 10), fusion == "interpolate", weight, -depth)


def guarded_choice(first: Mapping[Hashable, float], candidates: Iterable[Setting],
                   values: Callable[[Setting], Mapping[Hashable, float]], alpha: float = ALPHA,
                   m: int | None = None) -> Choice:
    """The guarded choice among fused `candidates`: `first` is the first stage's objective per
    validation query (pooled over the validation sets: keys unique across them), `values(setting)`
    the same for a setting on the same queries. `m` (default: the number of candidates) is the
    Bonferroni count when the validation looked at more candidates than these (e.g. several models)."""
    qids = sorted(first, key=str)
    base = np.array([first[q] for q in qids], dtype=float)
    scored = []
    for setting in candidates:
        if keeps(setting):
            continue
        got = values(setting)
        a = np.array([got[q] for q in qids], dtype=float)
        scored.append((setting, float(a.mean()) if len(a) else 0.0, one_sided_p(a, base)))
    count = m if m is not None else len(scored)
    level = alpha / max(count, 1)
    first_mean = float(base.mean()) if len(base) else 0.0
    if not scored:
        return Choice(keep(), keep(), first_mean, first_mean, first_mean, 1.0, 1.0, level, 0, 0, len(qids))
    best = max(scored, key=lambda s: order_key(s[0], s[1]))
    passing = [s for s in scored if s[2] < level and s[1] > first_mean]
    chosen = max(passing, key=lambda s: order_key(s[0], s[1])) if passing else None
    setting, mean, p = chosen if chosen else (keep(best[0][2]), first_mean, 1.0)
    return Choice(setting, best[0], mean, best[1], first_mean, best[2], p, level, count, len(passing),
                  len(qids))


def label(setting: Setting) -> str:
    """A setting as tables show it: `keep the first stage`, `w=0.3, depth 100` or `rrf, depth 20`."""
    fusion, weight, depth = setting
    if keeps(setting):
        return "keep the first stage"
    return f"{'rrf' if fusion == 'rrf' else f'w={weight}'}, depth {depth}"


def record(c: Choice) -> dict:
    """The choice as a checkpoint's or a choices file's record (plain JSON values)."""
    return {"setting": list(c.setting), "kept_first_stage": c.kept, "best_fused": list(c.best),
            "mean": round(c.mean, 4), "best_fused_mean": round(c.best_mean, 4),
            "first_stage_mean": round(c.first_mean, 4), "p_best": round(c.p, 6),
            "p_chosen": round(c.p_chosen, 6), "level": round(c.level, 6), "candidates": c.candidates,
            "passing": c.passing, "queries": c.queries}


def describe(c: Choice) -> str:
    """One line: what was chosen and why."""
    why = (f"best fused {label(c.best)} {c.best_mean:.4f} vs first stage {c.first_mean:.4f}, one-sided p "
           f"{c.p:.4f} (level {c.level:.5f}, {c.passing} of {c.candidates} candidates pass, "
           f"{c.queries} queries)")
    return f"{label(c.setting)} ({why})"
