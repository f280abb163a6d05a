"""Hybrid passage scores for p(z | x): dense inner product plus a weighted BM25 score.

Candidates are the union of the dense and the BM25 top `depth`; each gets
cos(q, d) + weight * BM25(q, d) (both computed exactly for every candidate),
and p(z | x) is the tempered softmax of that over the top k. weight = 0 is
plain dense retrieval (REALM's p(z | x)).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from retrieval.types import Queries, Run


def hybrid_run(retriever: Any, index: Any, queries: Mapping[str, str], q_vectors: np.ndarray,
               weight: float, depth: int = 20) -> Run:
    """A Run scored by cos + weight * BM25 over the union of both top-`depth` lists."""
    from retrieval.sparse.rankers import BM25

    qids = list(queries)
    retriever_k, retriever.hits = retriever.hits, depth
    dense = retriever.search_vectors(qids, q_vectors)
    retriever.hits = retriever_k
    bm25 = BM25(index, k1=0.9, b=0.4, hits=depth)
    sparse = bm25(Queries(queries))
    union = Run({q: [(d, 0.0) for d in dict.fromkeys([d for d, _ in dense[q]] + [d for d, _ in sparse[q]])]
                 for q in qids})
    bm25_all = BM25(index, k1=0.9, b=0.4, hits=2 * depth)(Queries(queries), union)
    row = {str(d): i for i, d in enumerate(retriever.doc_ids)}
    out = {}
    for i, q in enumerate(qids):
        ids = [d for d, _ in union[q]]
        vecs = np.stack([retriever.faiss.reconstruct(row[d]) for d in ids])
        cos = vecs @ q_vectors[i]
        b = dict(bm25_all.get(q, []))
        out[q] = [(d, float(c) + weight * b.get(d, 0.0)) for d, c in zip(ids, cos)]
    return Run(out)
