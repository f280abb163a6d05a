"""Learned rankers over features: LambdaMART (LightGBM) and two linear models (pair-wise logistic,
and coordinate ascent on a list measure), stored without pickle.

A model is a directory:

- `model.json`: the kind (`lambdamart`, `linear` or `coordascent`), the feature names it was
  trained on (in its column order), the normalisation (per-query and global
  statistics) and the linear weights;
- `training.json`: the settings, the validation figures that chose them and the
  feature importances;
- `model.txt`: LightGBM's own text model format (LambdaMART only).

LambdaMART may be boosted from the first stage: its trees then add to `base`
times the normalised `first_score` (the hybrid's score, say) instead of to 0, so
few, small trees reorder the first stage's ranking locally rather than replace
it (LightGBM's init_score; `base` is a setting chosen on validation).

A model may be a fallback (`retrieval train ltr --fallback`): when its
validation nDCG@10 was not strictly above the first stage's own on the same
validation queries, it keeps the first stage's ranking of the candidates
(`fallback` in model.json; the trained ranker is stored beside it all the same).

Normalisation, so that scales transfer across collections: each document
feature is scaled within its query's candidate list (`minmax` to [0, 1],
`zscore`, or `rank`: its rank among the candidates scaled to [0, 1]); the query
features (features.QUERY_FEATURES: the same for every candidate of a query) are
z-scored with the training set's mean and deviation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from retrieval import storage
from retrieval.errors import InputError
from retrieval.ltr.run import QUERY_FEATURES, FeatureRun
from retrieval.pipeline import params
from retrieval.pipeline.stage import Stage
from retrieval.types import Queries, Run

KINDS = ("lambdamart", "linear", "coordascent")
LINEAR_KINDS = ("linear", "coordascent")  # a weight per feature, stored as JSON
BASE_FEATURE = "first_score"
NORMALISATIONS = ("minmax", "zscore", "rank", "none")


def within_query_rank(column: np.ndarray) -> np.ndarray:
    """Each value's rank among the query's candidates scaled to [0, 1] (1 the highest; ties share
    their mean rank; all 0 when the column is constant)."""
    from scipy.stats import rankdata

    n = column.size
    if n < 2 or column.min() == column.max():
        return np.zeros(n)
    return (rankdata(column, method="average") - 1.0) / (n - 1)


def normalise_query(matrix: np.ndarray, names: Sequence[str], how: str,
                    stats: Mapping[str, tuple[float, float]]) -> np.ndarray:
    """One query's feature matrix normalised: document features within the query, query features by
    the global (mean, deviation) in `stats`."""
    x = np.array(matrix, dtype=np.float64, copy=True)
    for j, name in enumerate(names):
        column = x[:, j]
        if name in QUERY_FEATURES:
            mean, sd = stats.get(name, (0.0, 1.0))
            x[:, j] = (column - mean) / (sd if sd > 0 else 1.0)
        elif how == "minmax" and column.size:
            lo, hi = column.min(), column.max()
            x[:, j] = (column - lo) / (hi - lo) if hi > lo else 0.0
        elif how == "zscore" and column.size:
            sd = column.std()
            x[:, j] = (column - column.mean()) / sd if sd > 0 else 0.0
        elif how == "rank":
            x[:, j] = within_query_rank(column)
    return x


def query_stats(runs: Sequence[FeatureRun], names: Sequence[str]) -> dict[str, tuple[float, float]]:
    """(mean, deviation) over queries of each query feature, from training runs."""
    out = {}
    for name in names:
        if name in QUERY_FEATURES:
            values = [float(m[0, r.names.index(name)]) for r in runs for _, m in r.features.values()
                      if len(m)]
            out[name] = (float(np.mean(values)), float(np.std(values))) if values else (0.0, 1.0)
    return out


def columns(run: FeatureRun, names: Sequence[str]) -> list[int]:
    """Where the model's features are in the run's columns; InputError naming any it lacks."""
    missing = [n for n in names if n not in run.names]
    if missing:
        raise InputError(f"the features lack {', '.join(missing)}, which the model was trained on;"
                         f" compute them (they have {', '.join(run.names)})")
    return [run.names.index(n) for n in names]


@dataclass
class LTRModel:
    """A trained ranker: its kind, features, normalisation and parameters (see the module docstring)."""

    kind: str
    names: tuple[str, ...]
    normalisation: str
    stats: dict[str, tuple[float, float]]
    weights: list[float] | None = None  # linear
    booster: Any = None  # lambdamart: a lightgbm.Booster
    info: dict[str, Any] = field(default_factory=dict)  # settings, validation, importances
    base: float = 0.0  # lambdamart: the trees start from base * the normalised first-stage score
    fallback: bool = False  # validation did not put it above the first stage: keep the first stage's ranking

    def base_scores(self, x: np.ndarray) -> np.ndarray:
        """The scores the trees add to: `base` times the normalised `first_score` column (or 0)."""
        if not self.base:
            return np.zeros(len(x))
        if BASE_FEATURE not in self.names:
            raise InputError(f"a model boosted from the first stage needs the feature {BASE_FEATURE}")
        return self.base * x[:, self.names.index(BASE_FEATURE)]

    def matrix(self, run: FeatureRun, qid: str) -> np.ndarray:
        """The query's normalised matrix in the model's column order."""
        ids, m = run.features[qid]
        return normalise_query(m[:, columns(run, self.names)], self.names, self.normalisation, self.stats)

    def predict(self, x: np.ndarray) -> np.ndarray:
        if not len(x):
            return np.zeros(0)
        if self.kind in LINEAR_KINDS:
            return x @ np.asarray(self.weights, dtype=np.float64)
        return np.asarray(self.booster.predict(x, num_threads=1), dtype=np.float64) + self.base_scores(x)

    def rerank(self, run: FeatureRun, hits: int | None = None) -> Run:
        """Each query's candidates ordered by the model's score (ties by doc id); a fallback model's: the
        first stage's ranking of them."""
        if self.fallback:
            first = run.first_stage()
            return first.cut(hits) if hits else first
        out = {}
        for q, (ids, _) in run.features.items():
            scores = self.predict(self.matrix(run, q))
            out[q] = list(zip(ids, scores.tolist()))
        ranked = Run(out)
        return ranked.cut(hits) if hits else ranked

    def importances(self) -> dict[str, float]:
        """Each feature's share of the model: LightGBM's gain importance, or |weight| for linear."""
        if self.kind in LINEAR_KINDS:
            raw = np.abs(np.asarray(self.weights, dtype=np.float64))
        else:
            raw = np.asarray(self.booster.feature_importance("gain"), dtype=np.float64)
        total = raw.sum()
        return {n: float(v / total) if total > 0 else 0.0 for n, v in zip(self.names, raw)}

    def save(self, path: str | Path) -> None:
        """Write the model directory atomically (JSON and LightGBM's text format; no pickle)."""
        meta = {"kind": self.kind, "features": list(self.names), "normalisation": self.normalisation,
                "query_stats": {k: list(v) for k, v in self.stats.items()}, "weights": self.weights,
                "base": self.base, "fallback": self.fallback}
        training = {"importances": self.importances(), **self.info}
        files = {"model.json": (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode(),
                 "training.json": (json.dumps(training, indent=2, sort_keys=True) + "\n").encode()}
        if self.kind == "lambdamart":
            files["model.txt"] = self.booster.model_to_string().encode()
        with storage.atomic_directory(Path(path), ours=storage.is_model_dir) as tmp:
            for name, data in files.items():
                (tmp / name).write_bytes(data)


def load_model(path: str | Path) -> LTRModel:
    """A model directory written by LTRModel.save."""
    path = Path(path)
    try:
        meta = json.loads((path / "model.json").read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"not a learning-to-rank model directory (model.json: {e})", path) from None
    if meta.get("kind") not in KINDS:
        raise InputError(f"unknown model kind {meta.get('kind')!r}; expected one of {', '.join(KINDS)}", path)
    booster = None
    if meta["kind"] == "lambdamart":
        import lightgbm

        try:
            booster = lightgbm.Booster(model_str=(path / "model.txt").read_text())
        except OSError as e:
            raise InputError(f"cannot read the LightGBM model: {e.strerror}", path / "model.txt") from None
    try:
        info = json.loads((path / "training.json").read_text())
    except (OSError, ValueError):
        info = {}
    info.pop("importances", None)
    return LTRModel(meta["kind"], tuple(meta["features"]), meta["normalisation"],
                    {k: (float(a), float(b)) for k, (a, b) in meta["query_stats"].items()},
                    meta.get("weights"), booster, info, float(meta.get("base", 0.0)),
                    bool(meta.get("fallback", False)))


class LTRStage(Stage):
    """Reranks a features stage's candidates by a trained model (`bm25 % 1000 >> features >> ltr`)."""

    name = "ltr"

    def __init__(self, checkpoint: str | Path | LTRModel, hits: int | None = None):
        params.check(hits=hits)
        self.checkpoint = checkpoint if isinstance(checkpoint, str) else None
        self.model = checkpoint if isinstance(checkpoint, LTRModel) else load_model(checkpoint)
        self.hits = hits

    def __repr__(self) -> str:
        return f"LTRStage({self.model.kind}, features={len(self.model.names)})"

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        params.check_queries(queries)
        params.check_run(run, queries)
        if not isinstance(run, FeatureRun):
            raise InputError("the ltr stage reranks the output of a features stage; put `features` before"
                             " it (bm25 % 1000 >> features >> ltr)")
        return self.model.rerank(run, self.hits)
