"""The late-interaction store: every document's token embeddings, in the index's `late/` part.

    late/
      offsets.npy     (docs + 1,) int64: document with docno i is rows offsets[i]:offsets[i+1]
      embeddings.npy  (tokens, dim): float16 ("fp16") or int8 ("int8")
      scales.npy      (tokens,) float16, int8 only: row = embeddings * scale / 127

int8 is symmetric per token (each unit vector's largest component maps to
127), about half the bytes of fp16. Arrays are memory-mapped on load. The
manifest entry records the model identity (base model and checkpoint SHA-256,
dim, document settings) and the compression; a model whose identity differs
cannot use the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from retrieval import storage
from retrieval.errors import InputError
from retrieval.index import Index
from retrieval.late.model import LateModel

PART = "late"
COMPRESSIONS = ("fp16", "int8")


def compress(x: np.ndarray, compression: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Embeddings (tokens, dim) float32 -> stored rows and per-token scales (int8 only)."""
    if compression == "fp16":
        return x.astype(np.float16), None
    if compression == "int8":
        scale = np.clip(np.abs(x).max(axis=1), 1e-8, None).astype(np.float16)
        q = np.rint(x / scale.astype(np.float32)[:, None] * 127)
        return np.clip(q, -127, 127).astype(np.int8), scale
    raise InputError(f"unknown compression {compression!r}; expected one of {', '.join(COMPRESSIONS)}")


def decompress(rows: np.ndarray, scales: np.ndarray | None) -> np.ndarray:
    """Stored rows back to float32 embeddings."""
    if scales is None:
        return np.asarray(rows, dtype=np.float32)
    return np.asarray(rows, dtype=np.float32) * (np.asarray(scales, dtype=np.float32)[:, None] / 127)


def build_late(index: Index | str | Path, model: LateModel | None = None, compression: str = "fp16",
               batch_docs: int = 256, progress: bool = True) -> dict[str, Any]:
    """Encode every document of the index and add the `late/` part atomically; returns its entry."""
    index = index if isinstance(index, Index) else Index.open(index)
    if compression not in COMPRESSIONS:
        raise InputError(f"unknown compression {compression!r}; expected one of {', '.join(COMPRESSIONS)}")
    model = model or LateModel()
    ids = index.doc_id_list
    with storage.atomic_directory(index.path / PART) as tmp:
        scales, lengths = [], []
        bar = tqdm(total=len(ids), desc="late store", unit="doc", disable=not progress or None)
        with open(tmp / "embeddings.raw", "wb") as rows_f:
            for start in range(0, len(ids), batch_docs):
                texts = [d.contents for d in index.docstore.get_many(ids[start:start + batch_docs])]
                for emb in model.documents(texts):
                    rows, scale = compress(emb, compression)
                    rows_f.write(rows.tobytes())
                    lengths.append(len(emb))
                    if scale is not None:
                        scales.append(scale)
                bar.update(len(texts))
        bar.close()
        dtype = np.float16 if compression == "fp16" else np.int8
        raw = np.fromfile(tmp / "embeddings.raw", dtype=dtype).reshape(-1, model.dim)
        storage.save_array(tmp / "embeddings.npy", raw)
        del raw
        (tmp / "embeddings.raw").unlink()
        storage.save_array(tmp / "offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        if compression == "int8":
            storage.save_array(tmp / "scales.npy", np.concatenate(scales))
    tokens = int(sum(lengths))
    size = sum(p.stat().st_size for p in (index.path / PART).iterdir())
    entry = {**model.describe(), "compression": compression, "tokens": tokens, "bytes": size,
             "bytes_per_token": round(size / max(tokens, 1), 2)}
    storage.add_part(index.path, PART, entry, index.path / PART)
    return entry


class LateStore:
    """A memory-mapped late store: token embeddings of documents by docno."""

    def __init__(self, index: Index):
        self.index = index
        path = index.require(PART)
        self.entry = index.parts[PART]
        self.compression = self.entry.get("compression", "fp16")
        self.embeddings = storage.load_array(path / "embeddings.npy")
        self.offsets = storage.load_array(path / "offsets.npy", mmap=False)
        self.scales = storage.load_array(path / "scales.npy") if self.compression == "int8" else None
        if len(self.offsets) != index.num_docs + 1:
            raise InputError("late store does not match the index's documents; rebuild it with"
                             " `retrieval index --late`", path)

    def compatible(self, model: LateModel) -> bool:
        """Whether `model` produced this store (same base model, checkpoint, dim, settings)."""
        return all(self.entry.get(k) == v for k, v in model.identity().items())

    def gather(self, doc_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The float32 tokens of `doc_ids` one after another, and their offsets."""
        docno = self.index.docno
        spans = []
        for d in doc_ids:
            if d not in docno:
                raise InputError(f"document {d!r} is not in the index", self.index.path)
            i = docno[d]
            spans.append((int(self.offsets[i]), int(self.offsets[i + 1])))
        rows = np.concatenate([np.arange(a, b) for a, b in spans]) if spans else np.zeros(0, np.int64)
        emb = decompress(self.embeddings[rows], None if self.scales is None else self.scales[rows])
        offsets = np.concatenate([[0], np.cumsum([b - a for a, b in spans])]).astype(np.int64)
        return emb, offsets


def convert_late(index: Index | str | Path, compression: str) -> dict[str, Any]:
    """Rewrite an existing late store with another compression (no re-encoding); returns its entry."""
    index = index if isinstance(index, Index) else Index.open(index)
    store = LateStore(index)
    entry = dict(store.entry)
    with storage.atomic_directory(index.path / PART) as tmp:
        out, scales = [], []
        for start in range(0, len(store.embeddings), 1 << 18):
            rows = slice(start, start + (1 << 18))
            x = decompress(store.embeddings[rows], None if store.scales is None else store.scales[rows])
            r, s = compress(x, compression)
            out.append(r)
            if s is not None:
                scales.append(s)
        dim = store.embeddings.shape[1]
        storage.save_array(tmp / "embeddings.npy", np.concatenate(out) if out else
                           np.zeros((0, dim), np.float16 if compression == "fp16" else np.int8))
        storage.save_array(tmp / "offsets.npy", store.offsets)
        if compression == "int8":
            storage.save_array(tmp / "scales.npy",
                               np.concatenate(scales) if scales else np.zeros(0, np.float16))
    size = sum(p.stat().st_size for p in (index.path / PART).iterdir())
    for key in ("built", "files"):
        entry.pop(key, None)
    entry.update(compression=compression, bytes=size,
                 bytes_per_token=round(size / max(entry["tokens"], 1), 2))
    storage.add_part(index.path, PART, entry, index.path / PART)
    return entry
