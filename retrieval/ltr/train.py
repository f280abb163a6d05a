"""Training learned rankers on judged features, every setting chosen on validation queries.

    model = train(train_runs, train_qrels, valid_runs, valid_qrels, kind="lambdamart")

LambdaMART is LightGBM's gradient-boosted trees with a ranking objective:
`lambdarank` (list-wise LambdaMART), `rank_xendcg` (list-wise cross-entropy) or
`regression` (point-wise, on the grades); the number of trees by early
stopping on the validation queries' nDCG@10; optionally boosted from the first
stage's normalised score (`base`, model.py). `lambdarank` has two more
settings: `gain`, the label gain of graded judgements (`exp`: LightGBM's
2^grade - 1; `linear`: the grade itself, as trec_eval's nDCG counts it), and
`truncation`, how deep its pairs reach (LightGBM's lambdarank_truncation_level;
default 30). `monotone` (true or false) constrains the trees to LightGBM's
monotone_constraints: a tree's output may only rise with every stage score
(bm25, qld, qljm, rm3, dense, late, hybrid, the first stage's score, the
per-field scores) and only fall with the first stage's rank (MONOTONE), so a
model cannot learn a training collection's non-monotone quirks of a score;
document length and the query features stay free. `feature_fraction` is
LightGBM's share of features each tree sees (default 1). The linear model is a pair-wise
logistic ranker (RankNet's loss on a linear score, L2-regularised, fitted by
scipy's L-BFGS). Coordinate ascent (coordinate.py) fits linear weights to the
training queries' nDCG@10 or MAP directly, RankLib's way. For each kind, each
setting of GRIDS is trained and the one with the best validation nDCG@10 (our
own evaluation, every judged validation query counted) is kept; the settings
and validation figures go into the model.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from retrieval.errors import InputError
from retrieval.evaluation.measures import evaluate
from retrieval.ltr.coordinate import Lists, coordinate_ascent
from retrieval.ltr.model import KINDS, LTRModel, columns, normalise_query, query_stats
from retrieval.ltr.run import FeatureRun
from retrieval.types import Qrels, Run

Qrel = Mapping[str, Mapping[str, int]]
VALIDATION_MEASURE = "nDCG@10"
MAX_TREES = 300
EARLY_STOPPING = 30
LEARNING_RATE = 0.05  # LambdaMART's, unless the settings name one
GRIDS: dict[str, dict[str, Sequence[Any]]] = {
    "lambdamart": {"objective": ("lambdarank", "rank_xendcg", "regression"), "num_leaves": (3, 7),
                   "min_data_in_leaf": (50, 200), "normalisation": ("minmax", "zscore"), "base": (0.0, 1.0)},
    "linear": {"l2": (0.01, 1.0, 100.0), "normalisation": ("minmax", "zscore")},
    "coordascent": {"measure": ("nDCG@10", "MAP"), "normalisation": ("minmax", "zscore"), "restarts": (3,)},
}
MAX_PAIRS = 2000  # per query, for the linear model's loss (drawn with a fixed seed)


MONOTONE = {"first_score": 1, "first_rank": -1, "bm25": 1, "qld": 1, "qljm": 1, "rm3": 1, "dense": 1,
            "late": 1, "hybrid": 1, "bm25f": 1}  # the direction relevance goes with each stage score
MONOTONE_PREFIX = "bm25_"  # the per-field BM25 scores: rising too


def monotone_constraints(names: Sequence[str]) -> list[int]:
    """LightGBM's monotone_constraints for the features: +1 for a stage score, -1 for the first stage's
    rank, 0 (free) for document length and the query features."""
    return [MONOTONE.get(n, 1 if n.startswith(MONOTONE_PREFIX) else 0) for n in names]


LAMBDARANK_ONLY = ("gain", "truncation")  # settings no other objective reads
GAINS = ("exp", "linear")
MAX_GRADE = 31


def settings_grid(kind: str, grid: Mapping[str, Sequence[Any]] | None = None) -> list[dict[str, Any]]:
    """Every combination of the grid's values, once each: a setting only `lambdarank` reads is dropped
    from the other objectives' combinations (which would otherwise repeat)."""
    grid = GRIDS[kind] if grid is None else grid
    out: list[dict[str, Any]] = []
    for values in itertools.product(*grid.values()):
        settings = dict(zip(grid, values))
        if settings.get("objective", "lambdarank") != "lambdarank":
            settings = {k: v for k, v in settings.items() if k not in LAMBDARANK_ONLY}
        if settings not in out:
            out.append(settings)
    return out


def _label_gain(settings: Mapping[str, Any]) -> dict[str, Any]:
    """LightGBM's label_gain (and truncation level) for a lambdarank setting."""
    extra: dict[str, Any] = {}
    gain = settings.get("gain", "exp")
    if gain not in GAINS:
        raise InputError(f"gain: expected one of {', '.join(GAINS)}, got {gain!r}")
    if gain == "linear":
        extra["label_gain"] = list(range(MAX_GRADE + 1))
    if "truncation" in settings:
        extra["lambdarank_truncation_level"] = int(settings["truncation"])
    return extra


def design(runs: Sequence[FeatureRun], qrels: Sequence[Qrel], names: Sequence[str], normalisation: str,
           stats: Mapping[str, tuple[float, float]]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(X, y, group sizes) over the judged queries of the runs, normalised as the model will."""
    xs, ys, groups = [], [], []
    for run, judged in zip(runs, qrels):
        cols = columns(run, names)
        for q, (ids, m) in run.features.items():
            if q not in judged or not ids:
                continue
            xs.append(normalise_query(m[:, cols], names, normalisation, stats))
            ys.append([max(int(judged[q].get(d, 0)), 0) for d in ids])
            groups.append(len(ids))
    if not xs:
        raise InputError("no judged query in the training features; wrong qrels for them?")
    return np.vstack(xs), np.concatenate(ys).astype(np.float64), groups


def judged_grades(runs: Sequence[FeatureRun], qrels: Sequence[Qrel]) -> list[list[int]]:
    """Every grade each query of design() has in its judgements (its rows' order), for list measures'
    ideals."""
    return [[int(g) for g in judged[q].values()] for run, judged in zip(runs, qrels)
            for q, (ids, _) in run.features.items() if q in judged and ids]


def score(model: LTRModel | None, runs: Sequence[FeatureRun], qrels: Sequence[Qrel]) -> float:
    """Mean validation nDCG@10 over the judged queries of all runs (pooled); with no model, the first
    stage's own ranking of the candidates."""
    values = []
    for run, judged in zip(runs, qrels):
        ranked = model.rerank(run) if model is not None else run.first_stage()
        answered = Qrels({q: j for q, j in judged.items() if q in run.features})
        if answered:
            values.append((evaluate(ranked, answered, VALIDATION_MEASURE)[VALIDATION_MEASURE], len(answered)))
    total = sum(n for _, n in values)
    return sum(v * n for v, n in values) / total if total else 0.0


def fit(kind: str, settings: Mapping[str, Any], names: Sequence[str], runs: Sequence[FeatureRun],
        qrels: Sequence[Qrel], valid_runs: Sequence[FeatureRun] = (), valid_qrels: Sequence[Qrel] = (),
        trees: int | None = None) -> LTRModel:
    """One model with fixed settings; LambdaMART stops early on the validation runs when given (else
    grows `trees` trees)."""
    if kind not in KINDS:
        raise InputError(f"unknown learned ranker {kind!r}; expected one of {', '.join(KINDS)}")
    how = settings["normalisation"]
    stats = query_stats(runs, names)
    x, y, groups = design(runs, qrels, names, how, stats)
    if kind == "linear":
        weights = _pairwise_logistic(x, y, groups, float(settings["l2"]))
        return LTRModel(kind, tuple(names), how, stats, weights=weights.tolist(),
                        info={"settings": dict(settings)})
    if kind == "coordascent":
        lists = Lists.build(x, y, groups, judged_grades(runs, qrels))
        weights, value = coordinate_ascent(lists, names, settings["measure"], int(settings["restarts"]))
        return LTRModel(kind, tuple(names), how, stats, weights=weights.tolist(),
                        info={"settings": dict(settings), "training": {settings["measure"]: value}})
    import lightgbm

    objective = settings["objective"]
    base = float(settings.get("base", 0.0))
    start = LTRModel(kind, tuple(names), how, stats, base=base)
    lgb_params = {"objective": objective, "num_leaves": settings["num_leaves"],
                  "min_data_in_leaf": settings["min_data_in_leaf"],
                  "learning_rate": float(settings.get("learning_rate", LEARNING_RATE)),
                  "feature_fraction": float(settings.get("feature_fraction", 1.0)), "lambda_l2": 1.0,
                  "max_bin": 255, "num_threads": 1,
                  "deterministic": True, "force_row_wise": True, "seed": 0, "verbose": -1,
                  "metric": "ndcg", "eval_at": [10]}
    if objective == "lambdarank":
        lgb_params |= _label_gain(settings)
    if settings.get("monotone", False):
        lgb_params |= {"monotone_constraints": monotone_constraints(names),
                       "monotone_constraints_method": "intermediate"}
    train_set = lightgbm.Dataset(x, y, group=groups, feature_name=list(names), free_raw_data=False,
                                 init_score=start.base_scores(x) if base else None)
    callbacks, valid_sets = [], []
    if valid_runs and trees is None:
        vx, vy, vgroups = design(valid_runs, valid_qrels, names, how, stats)
        valid_sets = [lightgbm.Dataset(vx, vy, group=vgroups, reference=train_set,
                                       init_score=start.base_scores(vx) if base else None)]
        callbacks = [lightgbm.early_stopping(EARLY_STOPPING, first_metric_only=True, verbose=False)]
    booster = lightgbm.train(lgb_params, train_set, num_boost_round=trees or MAX_TREES,
                             valid_sets=valid_sets, callbacks=callbacks)
    best = booster.best_iteration or booster.current_iteration()
    booster = lightgbm.Booster(model_str=booster.model_to_string(num_iteration=best))
    return LTRModel(kind, tuple(names), how, stats, booster=booster,
                    info={"settings": dict(settings) | {"trees": best}}, base=base)


def _pairwise_logistic(x: np.ndarray, y: np.ndarray, groups: Sequence[int], l2: float) -> np.ndarray:
    """Weights minimising sum over pairs (i better than j, same query) of log(1 + exp(-(x_i - x_j) w))
    / pairs + l2 / 2 * |w|^2 / pairs-count-free (scipy L-BFGS)."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(0)
    diffs = []
    start = 0
    for size in groups:
        labels = y[start:start + size]
        better, worse = np.nonzero(labels[:, None] > labels[None, :])
        if len(better) > MAX_PAIRS:
            keep = np.sort(rng.choice(len(better), MAX_PAIRS, replace=False))
            better, worse = better[keep], worse[keep]
        diffs.append(x[start + better] - x[start + worse])
        start += size
    d = np.vstack(diffs) if diffs else np.zeros((0, x.shape[1]))
    if not len(d):
        raise InputError("no pair of differently judged documents in the training features")
    n = len(d)

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        margin = d @ w
        value = np.logaddexp(0.0, -margin).sum() / n + 0.5 * l2 * (w @ w) / n
        sig = 0.5 * (1.0 - np.tanh(0.5 * margin))  # = 1 / (1 + exp(margin)), stable
        grad = -(d * sig[:, None]).sum(axis=0) / n + l2 * w / n
        return float(value), grad

    result = minimize(loss, np.zeros(d.shape[1]), jac=True, method="L-BFGS-B",
                      options={"maxiter": 500})
    return np.asarray(result.x, dtype=np.float64)


def train(kind: str, names: Sequence[str], runs: Sequence[FeatureRun], qrels: Sequence[Qrel],
          valid_runs: Sequence[FeatureRun], valid_qrels: Sequence[Qrel],
          grid: Mapping[str, Sequence[Any]] | None = None, fallback: bool = False) -> LTRModel:
    """The model of the setting with the best validation nDCG@10 (early stopping on validation too),
    with every setting's validation figure recorded in its info, and the first stage's own figure on
    the same queries. With `fallback`, the first stage is a candidate too: a model not strictly above
    it on validation is marked a fallback (it keeps the first stage's ranking)."""
    tried = []
    best: tuple[float, LTRModel] | None = None
    for settings in settings_grid(kind, grid):
        model = fit(kind, settings, names, runs, qrels, valid_runs, valid_qrels)
        value = score(model, valid_runs, valid_qrels)
        tried.append({"settings": model.info["settings"], VALIDATION_MEASURE: round(value, 6)})
        if best is None or value > best[0]:
            best = (value, model)
    value, model = best
    first = score(None, valid_runs, valid_qrels)
    model.fallback = fallback and not value > first
    model.info |= {"validation": {VALIDATION_MEASURE: value, "first_stage": first, "tried": tried}}
    return model


def split_queries(run: FeatureRun, share: float = 0.2) -> tuple[set[str], set[str]]:
    """(training, validation) query ids: every 1/share-th query of the sorted judged ids held out."""
    ids = sorted(run.features)
    step = max(int(round(1 / share)), 2)
    valid = set(ids[step - 1::step])
    return set(ids) - valid, valid


def subset(run: FeatureRun, qids: set[str]) -> FeatureRun:
    """The run's queries in `qids` only."""
    return FeatureRun(Run({q: run[q] for q in run if q in qids}),
                      {q: f for q, f in run.features.items() if q in qids}, run.names)
