"""RM3's relevance model, as Anserini's Rm3Reranker builds it: one rule for single and sharded indexes.

Each feedback document contributes its `fb_terms` most frequent eligible terms
(2-20 characters of [a-z0-9], in at most 10% of the collection's documents),
weighted by tf / (sum of those tfs) times the document's score; the top
`fb_terms` terms over all feedback documents, L1-normalised, are the model.
A sharded index gathers each document's terms from the shard holding it and
combines them here, so its RM3 matches a single index's bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

FEEDBACK_TERM_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")

# a feedback document's top terms: (term names, their tfs as float64, the tfs' sum)
FeedbackVector = tuple[list[str], np.ndarray, float]


def eligible_terms(terms: Sequence[str], df: np.ndarray, num_docs: int) -> np.ndarray:
    """Which terms (by id) may serve as feedback terms: their shape, and df at most 10% of documents."""
    ratio = df.astype(np.float32) / np.float32(num_docs)
    shape = np.array([2 <= len(t) <= 20 and set(t) <= FEEDBACK_TERM_CHARS for t in terms], dtype=bool)
    return shape & (ratio <= np.float32(0.1))


def feedback_vector(terms: np.ndarray, tfs: np.ndarray, eligible: np.ndarray, names: Sequence[str],
                    fb_terms: int) -> FeedbackVector:
    """A document's `fb_terms` most frequent eligible terms (ties by term id), from its term ids and tfs."""
    keep = eligible[terms]
    t, f = terms[keep], tfs[keep].astype(np.float64)
    top = np.lexsort((t, -f))[:fb_terms]
    return [names[i] for i in t[top].tolist()], f[top], float(f[top].sum())


def relevance_model(scored: Iterable[tuple[FeedbackVector, float]], fb_terms: int) -> dict[str, float]:
    """The pruned, L1-normalised relevance model from (feedback vector, document score) pairs."""
    weights: dict[str, float] = {}
    for (terms, tfs, norm), score in scored:
        if norm <= 0.001:
            continue
        for term, tf in zip(terms, tfs.tolist()):
            weights[term] = weights.get(term, 0.0) + tf / norm * score
    best = sorted(weights.items(), key=lambda kv: (-kv[1], kv[0]))[:fb_terms]
    total = sum(w for _, w in best)
    return {t: w / total for t, w in best} if total > 0 else {}
