"""Late-interaction parts of a sharded index, and reranking over them.

Every shard gets a `late/` part holding its own documents' token embeddings.
They are encoded once over the whole collection in doc id order, in the
batches the single index's `build_late` forms, then routed to their shards,
so each document's embeddings are bit for bit the single index's (and a
reranked run is byte-identical). Reranking reads each document's embeddings
from its shard's memory-mapped store (shard directories must be readable
from the manager, as for Ray actors) and scores MaxSim in the manager.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from retrieval import storage
from retrieval.errors import InputError
from retrieval.index.native import Index
from retrieval.late.model import LateModel
from retrieval.late.store import PART, LateStore, StoreWriter, encoded_documents, store_entry
from retrieval.types import Document


class LateSource:
    """What shard late parts are built with: a late model and a compression."""

    def __init__(self, model: LateModel | None = None, compression: str = "fp16"):
        self.model, self.compression = model, compression

    def write(self, docs: list[Document], parts: list[list[Document]], dirs: list[Path],
              progress: bool = True) -> dict[str, Any]:
        """Encode every document once (doc id order) and write each shard's late part."""
        model = self.model or LateModel()
        shard_of = {d.id: s for s, shard_docs in enumerate(parts) for d in shard_docs}
        ordered = sorted(docs, key=lambda d: d.id)  # the single index's docno order
        with contextlib.ExitStack() as stack:
            tmps = [stack.enter_context(storage.atomic_directory(d / PART)) for d in dirs]
            writers = [StoreWriter(tmp, self.compression, model.dim) for tmp in tmps]
            bar = stack.enter_context(tqdm(total=len(ordered), desc="late store", unit="doc",
                                           disable=not progress or None))
            texts = [d.contents for d in ordered]
            for doc, embeddings in zip(ordered, encoded_documents(model, texts, bar=bar)):
                writers[shard_of[doc.id]].add(embeddings)
            tokens = [w.close() for w in writers]
        entry: dict[str, Any] = {}
        for shard_dir, count in zip(dirs, tokens):
            entry = store_entry(model, self.compression, count, shard_dir / PART)
            storage.add_part(shard_dir, PART, entry, shard_dir / PART)
        return {k: v for k, v in entry.items() if k not in ("files", "built", "bytes", "bytes_per_token")
                } | {"tokens": sum(tokens), "documents": len(docs)}


class ShardedLateStore:
    """The shards' late stores behind one `gather(doc_ids)`, as `LateStore` offers."""

    def __init__(self, entry: dict[str, Any], shards: list[Index], shard_of: dict[str, int]):
        self.entry, self.shard_of = entry, shard_of
        self.stores = [LateStore(shard) for shard in shards]

    def compatible(self, model: LateModel) -> bool:
        """Whether `model` produced every shard's store."""
        return all(store.compatible(model) for store in self.stores)

    def gather(self, doc_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The float32 tokens of `doc_ids` one after another, and their offsets."""
        pieces = []
        for d in doc_ids:
            if d not in self.shard_of:
                raise InputError(f"document {d!r} is not in the sharded index")
            pieces.append(self.stores[self.shard_of[d]].gather([d])[0])
        lengths = [len(p) for p in pieces]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        dim = self.stores[0].embeddings.shape[1]
        return (np.concatenate(pieces) if pieces else np.zeros((0, dim), np.float32)), offsets
