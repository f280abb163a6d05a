"""Scoring functions as Lucene computes them, evaluated once per posting ("impacts").

Each model turns the index's postings into one float per posting; a query's
score for a document is then sum over query terms of weight * impact, which
is exactly how Lucene sums BoostQuery-weighted TermQuery clauses. Document
lengths are Lucene's quantised norms (see lucene_norms).

The collection statistics (document count, total length, df, cf) come from
the index itself unless a `CollectionStats` is given: a shard of a sharded
index scores with the whole collection's statistics, so its impacts equal the
single index's (see retrieval.shards.stats).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrieval.sparse.inverted import InvertedIndex
from retrieval.sparse.lucene_norms import quantised_lengths


@dataclass(frozen=True, eq=False)
class CollectionStats:
    """The statistics a model scores with; `df` and `cf` are aligned with the index's term ids."""

    num_docs: int      # documents, empty ones included
    doc_count: int     # documents with at least one term (Lucene's docCount)
    total_terms: int   # collection length
    df: np.ndarray     # document frequency per term id
    cf: np.ndarray     # collection frequency per term id (int64)

    @classmethod
    def of(cls, index: InvertedIndex) -> CollectionStats:
        """An index's own statistics."""
        return cls(num_docs=index.num_docs, doc_count=int(np.count_nonzero(index.doc_lengths)),
                   total_terms=int(np.sum(index.doc_lengths, dtype=np.int64)), df=index.df, cf=index.cf)


def _posting_lengths(index: InvertedIndex) -> np.ndarray:
    return quantised_lengths(index.doc_lengths)[index.docnos]


def _collection_probability(stats: CollectionStats) -> np.ndarray:
    """Lucene's DefaultCollectionModel: (cf + 1) / (total terms + 1), per term."""
    return (stats.cf + 1.0) / (float(stats.total_terms) + 1.0)


@dataclass(frozen=True)
class BM25Model:
    """Lucene's BM25Similarity: idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))."""

    k1: float
    b: float

    def impacts(self, index: InvertedIndex, stats: CollectionStats | None = None) -> np.ndarray:
        stats = stats or CollectionStats.of(index)
        doc_count = stats.doc_count  # docs that have the field
        avgdl = float(stats.total_terms) / max(doc_count, 1)
        df = stats.df.astype(np.float64)
        idf = np.log(1.0 + (doc_count - df + 0.5) / (df + 0.5))
        tf = np.asarray(index.tfs, dtype=np.float64)
        norm = self.k1 * (1.0 - self.b + self.b * _posting_lengths(index) / avgdl)
        return np.repeat(idf, index.df) * tf / (tf + norm)


@dataclass(frozen=True)
class DirichletModel:
    """Lucene's LMDirichletSimilarity: max(0, log(1 + tf / (mu p(t|C))) + log(mu / (dl + mu)))."""

    mu: float

    def impacts(self, index: InvertedIndex, stats: CollectionStats | None = None) -> np.ndarray:
        pc = np.repeat(_collection_probability(stats or CollectionStats.of(index)), index.df)
        tf = np.asarray(index.tfs, dtype=np.float64)
        score = np.log1p(tf / (self.mu * pc)) + np.log(self.mu / (_posting_lengths(index) + self.mu))
        return np.maximum(score, 0.0)


@dataclass(frozen=True)
class JelinekMercerModel:
    """Lucene's LMJelinekMercerSimilarity: log(1 + (1 - lam) tf / dl / (lam p(t|C))).

    `lam` is the weight of the collection model, as in Lucene and Anserini.
    """

    lam: float

    def impacts(self, index: InvertedIndex, stats: CollectionStats | None = None) -> np.ndarray:
        pc = np.repeat(_collection_probability(stats or CollectionStats.of(index)), index.df)
        tf = np.asarray(index.tfs, dtype=np.float64)
        return np.log1p((1.0 - self.lam) * tf / _posting_lengths(index) / (self.lam * pc))
