"""Dense parts of a sharded index: vectors for every shard, and the manager's query encoder.

Every shard gets a FAISS index over its own documents' vectors. The vectors
are encoded once over the whole collection in collection order — the batches
the single index's `add_dense` would form — and then split by shard, so each
document's vector is bit for bit the single index's (encoding each shard apart
would batch documents differently, and padding changes the last bits).
Alternatively they are copied from an existing single index's flat dense part
(`reuse`), which skips encoding altogether.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from retrieval.errors import InputError
from retrieval.types import Document


class DenseSource:
    """Where shard dense parts get their vectors: an encoder, or an existing index's flat part."""

    def __init__(self, encoder: Any = None, index_type: str = "flat",
                 params: dict[str, int] | None = None, reuse: str | Path | None = None):
        from retrieval.dense.faiss_index import index_params

        index_params(index_type, params)  # refuse bad parameters before any slow work
        self.encoder, self.index_type, self.params = encoder, index_type, params
        self.reuse = Path(reuse) if reuse is not None else None

    def vectors(self, docs: list[Document]) -> tuple[np.ndarray, dict[str, Any]]:
        """(one vector per document, in `docs` order; the encoder's description)."""
        if self.reuse is not None:
            return reuse_vectors(self.reuse, [d.id for d in docs])
        from retrieval.dense.encoder import Encoder

        encoder = self.encoder or Encoder()
        return encoder.encode([d.contents for d in docs], desc="encoding documents"), encoder.describe()

    def write(self, docs: list[Document], parts: list[list[Document]], dirs: list[Path]) -> dict[str, Any]:
        """Write each shard's dense part; returns the top-level manifest entry."""
        from retrieval.dense.faiss_index import write_dense_part

        vectors, model = self.vectors(docs)
        row = {d.id: i for i, d in enumerate(docs)}
        entry: dict[str, Any] = {}
        for shard_docs, shard_dir in zip(parts, dirs):
            rows = [row[d.id] for d in shard_docs]
            entry = write_dense_part(shard_dir, [d.id for d in shard_docs], vectors[rows], model,
                                     self.index_type, self.params)
        return {k: v for k, v in entry.items() if k not in ("files", "built")} | {"count": len(docs)}


def reuse_vectors(index_dir: Path, doc_ids: list[str]) -> tuple[np.ndarray, dict[str, Any]]:
    """The vectors of `doc_ids` stored in a single index's flat dense part, and its model."""
    from retrieval.dense.faiss_index import load_dense_part

    faiss_index, stored_ids, entry = load_dense_part(index_dir)
    if entry.get("index_type") != "flat":
        raise InputError(f"can only reuse a flat dense part (exact vectors), not {entry.get('index_type')}",
                         index_dir)
    row = {d: i for i, d in enumerate(stored_ids.tolist())}
    missing = [d for d in doc_ids if d not in row]
    if missing or len(row) != len(doc_ids):
        raise InputError(f"its dense part holds other documents than the collection"
                         f" (e.g. {missing[0] if missing else 'extra ones'!r}); rebuild it", index_dir)
    vectors = faiss_index.reconstruct_n(0, faiss_index.ntotal)
    model = {k: entry[k] for k in ("model", "model_sha256", "dim", "pooling", "normalize",
                                   "max_length") if k in entry}
    return vectors[[row[d] for d in doc_ids]], model
