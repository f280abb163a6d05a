"""FeatureRun: a Run with a feature matrix per query (what the features stage gives the ltr stage)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from retrieval.errors import InputError
from retrieval.types import Run

QUERY_FEATURES = ("query_length", "idf_sum", "idf_max", "idf_mean")  # the same for every candidate


class FeatureRun(Run):
    """A Run (the first stage's candidates) with each query's feature matrix.

    `features[qid] = (doc ids, matrix)`: rows in doc-id order of the candidates,
    columns `names`."""

    def __init__(self, rankings: Mapping, features: Mapping[str, tuple[Sequence[str], np.ndarray]],
                 names: Sequence[str]):
        super().__init__(rankings)
        self.names = tuple(names)
        self.features = {q: (list(ids), np.asarray(m, dtype=np.float64)) for q, (ids, m) in features.items()}
        for q, (ids, matrix) in self.features.items():
            if matrix.shape != (len(ids), len(self.names)):
                raise InputError(f"query {q!r}: feature matrix of shape {matrix.shape}, expected"
                                 f" ({len(ids)}, {len(self.names)})")

    def column(self, name: str) -> dict[str, np.ndarray]:
        """One feature's values per query."""
        j = self.names.index(name)
        return {q: m[:, j] for q, (_, m) in self.features.items()}

    def first_stage(self) -> Run:
        """The first stage's ranking of the queries that have candidates (a plain Run): what a
        fallback model keeps, and the figure a learned ranker must beat on validation."""
        return Run({q: self[q] for q in self.features})
