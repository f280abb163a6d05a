"""Features of (query, document) pairs for learning to rank: every scorer's score of a first stage's top k.

    features = FeatureStage(index, {"bm25": bm25, "qld": qld, "dense": dense}, depth=100)
    run = (bm25 % 1000 >> features)(queries)     # a FeatureRun: the first stage's top 100 + features

A FeatureRun is a Run (the first stage's ranking of the candidates, so it
passes through a pipeline like any run) that also holds, per query, the
candidates' doc ids and a feature matrix (one row each, columns `names`).
The features, in this order (those the index and scorers allow):

- `first_score`, `first_rank`: the first stage's score and rank (1 = top);
- one column per scorer: its score of the document (a sparse ranker's, RM3's
  expanded query's, dense cosine, late MaxSim, ...), rescoring the candidates;
  a document a scorer leaves out gets the lowest score that scorer gives the query;
- `hybrid`: 0.5 * min-max(bm25) + 0.5 * min-max(dense) over the candidates
  (when both are scorers);
- `doc_length` (analysed terms), and the query's own `query_length`,
  `idf_sum`, `idf_max`, `idf_mean` (BM25 idf of its indexed terms), the same
  for every candidate.

Every value is a float64; the LETOR file (letor.py) keeps them exactly.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from retrieval.errors import InputError
from retrieval.ltr.letor import read_letor, write_letor
from retrieval.ltr.run import QUERY_FEATURES, FeatureRun
from retrieval.pipeline import params
from retrieval.pipeline.stage import Stage
from retrieval.types import Queries, Run


def _lowest_fill(values: list[float | None]) -> np.ndarray:
    """The scores, with the lowest given score where a scorer gave none (0 if it gave none at all)."""
    given = [v for v in values if v is not None]
    low = min(given) if given else 0.0
    return np.array([low if v is None else v for v in values], dtype=np.float64)


def _identity(stage: Stage) -> list:
    """What makes a scorer's scores: its repr and, for a late reranker, its checkpoint (the repr
    leaves the model out)."""
    model = getattr(stage, "model", None)
    late = model.identity() if hasattr(model, "identity") else None
    return [repr(stage), late]


def minmax(x: np.ndarray) -> np.ndarray:
    """Scaled to [0, 1] (all 0 when constant)."""
    if not x.size:
        return x
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


def top_candidates(queries: Queries, run: Run, depth: int) -> Run:
    """Each query's top `depth` of `run` (the queries it answers): the features stage's candidates, and
    what a fallback model's ltr stage gives back (their first-stage ranking)."""
    return Run({q: run.get(q, [])[:depth] for q in queries if run.get(q)})


class FeatureStage(Stage):
    """Computes features of the given run's top `depth` candidates (a stage that needs a run)."""

    name = "features"

    def __init__(self, index: object, scorers: Mapping[str, Stage], depth: int = 100,
                 query_stats: bool = True, cache: str | Path | None = None):
        params.check(depth=depth)
        self.index = index
        self.scorers = dict(scorers)
        self.depth = depth
        self.query_stats = query_stats and hasattr(index, "inverted")
        self.cache = Path(cache) if cache is not None else None

    @property
    def names(self) -> tuple[str, ...]:
        """The feature names, in column order."""
        names = ["first_score", "first_rank", *self.scorers]
        if "bm25" in self.scorers and "dense" in self.scorers:
            names.append("hybrid")
        if self.query_stats:
            names += ["doc_length", *QUERY_FEATURES]
        return tuple(names)

    def __repr__(self) -> str:
        return f"FeatureStage(depth={self.depth}, features={'+'.join(self.names)})"

    def key(self, queries: Queries, run: Run) -> str:
        """The cache key: the index, the queries, the candidates and the feature set."""
        digest = hashlib.sha256()
        manifest = Path(getattr(self.index, "path", "")) / "manifest.json"
        digest.update(manifest.read_bytes() if manifest.is_file() else str(manifest).encode())
        digest.update(json.dumps([list(queries.items()), self.depth, self.names,
                                  [_identity(s) for s in self.scorers.values()]]).encode())
        for q in sorted(run):
            digest.update(json.dumps([q, run[q][: self.depth]]).encode())
        return digest.hexdigest()[:24]

    def __call__(self, queries: Queries, run: Run | None = None) -> FeatureRun:
        params.check_queries(queries)
        params.check_run(run, queries)
        if run is None:
            raise InputError("the features stage needs a first stage's run; put it after one"
                             " (bm25 % 1000 >> features)")
        candidates = top_candidates(queries, run, self.depth)
        if self.cache is not None:
            path = self.cache / f"features-{self.key(queries, candidates)}.letor"
            if path.is_file():
                return read_letor(path)
            out = self.compute(queries, candidates)
            write_letor(out, path)
            return out
        return self.compute(queries, candidates)

    def compute(self, queries: Queries, candidates: Run) -> FeatureRun:
        """The FeatureRun of these candidates (each query's top `depth` already)."""
        scored = {name: stage(Queries({q: queries[q] for q in candidates}), candidates)
                  for name, stage in self.scorers.items()}
        features = {}
        for q, hits in candidates.items():
            ids = sorted(d for d, _ in hits)  # rows in doc id order
            first = dict(hits)
            rank = {d: i for i, (d, _) in enumerate(hits, 1)}
            columns = [np.array([first[d] for d in ids], dtype=np.float64),
                       np.array([rank[d] for d in ids], dtype=np.float64)]
            for name in self.scorers:
                given = dict(scored[name].get(q, []))
                columns.append(_lowest_fill([given.get(d) for d in ids]))
            if "bm25" in self.scorers and "dense" in self.scorers:
                names = list(self.scorers)
                columns.append(0.5 * minmax(columns[2 + names.index("bm25")])
                               + 0.5 * minmax(columns[2 + names.index("dense")]))
            if self.query_stats:
                columns.append(self._doc_lengths(ids))
                columns += [np.full(len(ids), v) for v in self._query_stats(queries[q])]
            features[q] = (ids, np.column_stack(columns) if ids else np.zeros((0, len(self.names))))
        return FeatureRun(candidates, features, self.names)

    def _doc_lengths(self, ids: list[str]) -> np.ndarray:
        docno, lengths = self.index.docno, self.index.inverted.doc_lengths
        return np.array([float(lengths[docno[d]]) for d in ids], dtype=np.float64)

    def _query_stats(self, text: str) -> list[float]:
        """Query length (analysed terms), and the sum, max and mean BM25 idf of its indexed terms."""
        inverted = self.index.inverted
        terms = self.index.analyzer(text)
        n = inverted.num_docs
        ids = inverted.term_ids
        idfs = [math.log(1 + (n - float(inverted.df[ids[t]]) + 0.5) / (float(inverted.df[ids[t]]) + 0.5))
                for t in terms if t in ids]
        return [float(len(terms)), float(sum(idfs)), float(max(idfs, default=0.0)),
                float(sum(idfs) / len(idfs)) if idfs else 0.0]


class RM3Rescorer(Stage):
    """RM3's expanded query (feedback from the given run's top fb_docs) scoring the run's documents."""

    name = "rm3"

    def __init__(self, rm3: Stage):
        self.rm3 = rm3

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        if run is None:
            raise InputError("the RM3 rescorer needs a run")
        ranker = self.rm3.ranker
        out = {}
        for q, hits in run.items():
            expanded = self.rm3.expand(queries[q], hits)
            out[q] = ranker.rescore_terms(ranker.weighted(expanded, q), hits)
        return Run(out)
