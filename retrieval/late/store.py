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

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from retrieval import storage
from retrieval.errors import InputError, UnknownDocument
from retrieval.index.native import Index, changing_part
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


class StoreWriter:
    """Writes a store's arrays into a directory, one document's token embeddings at a time.

    The rows go straight into embeddings.npy behind a header slot that is filled in once the
    number of rows is known, so neither memory nor disk ever holds the store twice.
    """

    HEADER = 128  # bytes of a .npy version 1.0 header for any 2-D float16 or int8 array

    def __init__(self, directory: Path, compression: str, dim: int):
        if compression not in COMPRESSIONS:
            raise InputError(f"unknown compression {compression!r}; expected one of "
                             + ", ".join(COMPRESSIONS))
        self.directory, self.compression, self.dim = Path(directory), compression, dim
        self.path = self.directory / "embeddings.npy"
        self.rows = open(self.path, "wb")  # noqa: SIM115 (closed in close())
        with storage.naming(self.path):
            self.rows.write(bytes(self.HEADER))
        self.scales: list[np.ndarray] = []
        self.lengths: list[int] = []

    def add(self, embeddings: np.ndarray) -> None:
        """Append the next document's (tokens, dim) float32 embeddings."""
        rows, scale = compress(embeddings, self.compression)
        with storage.naming(self.path):
            self.rows.write(rows.tobytes())
        self.lengths.append(len(embeddings))
        if scale is not None:
            self.scales.append(scale)

    def _header(self, tokens: int) -> bytes:
        """The .npy header np.save writes for a (tokens, dim) array of the stored type."""
        header = storage.npy_header(np.float16 if self.compression == "fp16" else np.int8, (tokens, self.dim))
        if len(header) != self.HEADER:
            raise RuntimeError(f"a .npy header of {len(header)} bytes, not {self.HEADER}")
        return header

    def close(self, offsets: np.ndarray | None = None) -> int:
        """Fill in the header, write the other arrays; returns the number of tokens stored.
        `offsets` (default: one document per add) is for rows added in chunks of any size."""
        tokens = int(sum(self.lengths))
        if offsets is None:
            offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        if int(offsets[-1]) != tokens:
            raise ValueError(f"offsets end at {int(offsets[-1])}, but {tokens} rows were added")
        with storage.naming(self.path), self.rows:
            self.rows.seek(0)
            self.rows.write(self._header(tokens))
        storage.save_array(self.directory / "offsets.npy", offsets)
        if self.compression == "int8":
            storage.save_array(self.directory / "scales.npy", np.concatenate(self.scales) if self.scales
                               else np.zeros(0, np.float16))
        return tokens


def store_entry(model: LateModel, compression: str, tokens: int, part_dir: Path) -> dict[str, Any]:
    """The manifest entry of a store just written to `part_dir`."""
    size = sum(p.stat().st_size for p in part_dir.iterdir())
    return {**model.describe(), "compression": compression, "tokens": tokens, "bytes": size,
            "bytes_per_token": round(size / max(tokens, 1), 2)}


def encoded_documents(model: LateModel, texts: Sequence[str], batch_docs: int = 256,
                      bar: Any = None) -> Iterator[np.ndarray]:
    """Each text's token embeddings, encoded `batch_docs` texts at a time (the batches decide
    padding, hence the last bits: every store encodes in these batches, in doc id order)."""
    for start in range(0, len(texts), batch_docs):
        chunk = texts[start:start + batch_docs]
        yield from model.documents(chunk)
        if bar is not None:
            bar.update(len(chunk))


def build_late(index: Index | str | Path, model: LateModel | None = None, compression: str = "fp16",
               batch_docs: int = 256, progress: bool = True, in_place: bool = False) -> dict[str, Any]:
    """Encode every document of the index and add the `late/` part atomically; returns its entry.
    A part being replaced is replaced with the whole index (see index.changing_part)."""
    model = model or LateModel()
    with changing_part(index, PART, in_place) as target:
        return _write_store(target, model, compression, batch_docs, progress)


def _write_store(index: Index, model: LateModel, compression: str, batch_docs: int,
                 progress: bool) -> dict[str, Any]:
    """Encode every document of `index` into its `late/` part; the part's entry."""
    ids = index.doc_id_list
    with storage.atomic_directory(index.path / PART) as tmp:
        writer = StoreWriter(tmp, compression, model.dim)
        texts = _LazyTexts(index, ids)
        with tqdm(total=len(ids), desc="late store", unit="doc", disable=not progress or None) as bar:
            for embeddings in encoded_documents(model, texts, batch_docs, bar):
                writer.add(embeddings)
        tokens = writer.close()
    entry = store_entry(model, compression, tokens, index.path / PART)
    storage.add_part(index.path, PART, entry, index.path / PART)
    return entry


class _LazyTexts(Sequence):
    """Document texts by docno, read from the doc store a slice at a time."""

    def __init__(self, index: Index, ids: list[str]):
        self.index, self.ids = index, ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, item):  # type: ignore[override]
        if isinstance(item, slice):
            return [d.contents for d in self.index.docstore.get_many(self.ids[item])]
        return self.index.docstore.get(self.ids[item]).contents


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
        offsets, emb = self.offsets, self.embeddings
        consistent = (offsets.ndim == 1 and offsets.dtype.kind in "iu" and len(offsets) == index.num_docs + 1
                      and offsets[0] == 0 and not (np.diff(offsets) < 0).any() and emb.ndim == 2
                      and offsets[-1] == len(emb) and emb.shape[1] == self.entry.get("dim", emb.shape[1])
                      and (self.scales is None or self.scales.shape[:1] == emb.shape[:1]))
        if not consistent:
            raise InputError("late store does not match the index's documents (offsets, shapes); rebuild"
                             " it with `retrieval index --late`", path)

    def compatible(self, model: LateModel) -> bool:
        """Whether `model` produced this store (same base model, checkpoint, dim, settings)."""
        return all(self.entry.get(k) == v for k, v in model.identity().items())

    def gather(self, doc_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The float32 tokens of `doc_ids` one after another, and their offsets."""
        docno = self.index.docno
        spans = []
        for d in doc_ids:
            if d not in docno:
                raise UnknownDocument(d, self.index.path)
            i = docno[d]
            spans.append((int(self.offsets[i]), int(self.offsets[i + 1])))
        rows = np.concatenate([np.arange(a, b) for a, b in spans]) if spans else np.zeros(0, np.int64)
        emb = decompress(self.embeddings[rows], None if self.scales is None else self.scales[rows])
        offsets = np.concatenate([[0], np.cumsum([b - a for a, b in spans])]).astype(np.int64)
        return emb, offsets


def convert_late(index: Index | str | Path, compression: str) -> dict[str, Any]:
    """Rewrite an existing late store with another compression (no re-encoding), replacing the
    index as a whole (see index.changing_part); returns the part's entry."""
    with changing_part(index, PART) as target:
        return _convert_store(target, compression)


def _convert_store(index: Index, compression: str) -> dict[str, Any]:
    """Rewrite the `late/` part of `index` with another compression; its entry."""
    store = LateStore(index)
    entry = dict(store.entry)
    with storage.atomic_directory(index.path / PART) as tmp:
        writer = StoreWriter(tmp, compression, store.embeddings.shape[1])
        for start in range(0, len(store.embeddings), 1 << 18):  # a chunk of rows at a time
            rows = slice(start, start + (1 << 18))
            scales = None if store.scales is None else store.scales[rows]
            writer.add(decompress(store.embeddings[rows], scales))
        writer.close(offsets=np.asarray(store.offsets, dtype=np.int64))
    size = sum(p.stat().st_size for p in (index.path / PART).iterdir())
    for key in ("built", "files"):
        entry.pop(key, None)
    entry.update(compression=compression, bytes=size,
                 bytes_per_token=round(size / max(entry["tokens"], 1), 2))
    storage.add_part(index.path, PART, entry, index.path / PART)
    return entry
