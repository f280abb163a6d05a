"""DenseRetriever: a first stage that encodes queries and searches the dense part."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import faiss
import numpy as np

from retrieval import params
from retrieval.dense.encoder import Encoder
from retrieval.dense.faiss_index import configure_search, load_dense_part
from retrieval.errors import InputError
from retrieval.pipeline import Stage
from retrieval.types import Queries, Run


def _index_dir(index: Any) -> Path:
    """An index directory from a path or an Index handle (anything with `.path`)."""
    return Path(getattr(index, "path", index))


class DenseRetriever(Stage):
    """Top-k documents by inner product of query and document embeddings.

    `model` defaults to the model the index was built with; a model whose
    weights differ (SHA-256) from the index's is refused. `precision` defaults to
    `auto`, this machine's fastest path, whatever the index was built with.
    `ef_search` / `nprobe` override HNSW / IVF search settings.
    """

    def __init__(self, index: Any, model: str | Path | Encoder | None = None, k: int = 1000, *,
                 precision: str | None = None, threads: int | None = None,
                 ef_search: int | None = None, nprobe: int | None = None,
                 batch_size: int = 64):
        params.check(k=k, threads=threads, ef_search=ef_search, nprobe=nprobe)
        self.index_dir = _index_dir(index)
        self.faiss, self.doc_ids, self.entry = load_dense_part(self.index_dir)
        if isinstance(model, Encoder):
            self.encoder = model
        else:
            self.encoder = Encoder(model if model is not None else self.entry["model"],
                                   precision=precision,
                                   max_length=self.entry.get("max_length"), threads=threads,
                                   pooling=self.entry.get("pooling"),
                                   normalize=self.entry.get("normalize"), batch_size=batch_size)
        if self.encoder.checksum != self.entry["model_sha256"]:
            raise InputError(f"index was built with another model ({self.entry['model']}, weights"
                             f" sha256 {self.entry['model_sha256'][:12]}…) than"
                             f" {self.encoder.name} (sha256 {self.encoder.checksum[:12]}…);"
                             " use the index's model or rebuild the dense part", self.index_dir)
        self.k = k
        self.threads = self.encoder.threads
        configure_search(self.faiss, {key: v for key, v in
                                      (("ef_search", ef_search), ("nprobe", nprobe)) if v})

    def encode(self, queries: Queries) -> np.ndarray:
        """Query embeddings, one row per query in `queries` order."""
        return self.encoder.encode(list(queries.values()), desc="encoding queries")

    def search_vectors(self, qids: list[str], vectors: np.ndarray) -> Run:
        """A Run from query embeddings (rows in `qids` order)."""
        faiss.omp_set_num_threads(self.threads)
        k = min(self.k, self.faiss.ntotal)
        scores, rows = self.faiss.search(np.ascontiguousarray(vectors, dtype=np.float32), k)
        return Run({q: [(str(self.doc_ids[r]), float(s)) for r, s in zip(rows[i], scores[i])
                        if r >= 0] for i, q in enumerate(qids)})

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        """Retrieve for every query (a first stage: `run` is ignored)."""
        params.check_queries(queries)
        empty = [q for q, text in queries.items() if not str(text).strip()]
        if empty:
            raise InputError(f"empty query text for query id(s) {', '.join(empty[:5])}")
        return self.search_vectors(list(queries), self.encode(queries))
