"""Collection-wide statistics for a sharded index, so every shard scores like the single index.

BM25 needs the document count, the average length and each term's df; query
likelihood needs the collection length and each term's cf; RM3 needs df and
the number of documents. A shard alone knows only its own. At build time the
shards' statistics are summed by term string into `global/` (the whole
vocabulary: `terms_utf8.npy`, `terms_offsets.npy`, `df.npy`, `cf.npy`), and each
shard gets a `global/` part holding the same df and cf aligned with its own
term ids (`df.npy`, `cf.npy`; the scalars in its manifest entry). A shard then
computes exactly the impacts the single index would (sparse.models).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from retrieval import storage
from retrieval.errors import InputError
from retrieval.index import Index
from retrieval.sparse.inverted import InvertedIndex
from retrieval.sparse.models import CollectionStats

PART = "global"
SCALARS = ("num_docs", "doc_count", "total_terms")


def merge_vocabularies(shards: list[InvertedIndex]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(sorted vocabulary, df, cf) of the whole collection from its shards' postings."""
    terms = sorted(set().union(*(s.terms for s in shards)))
    position = {t: i for i, t in enumerate(terms)}
    df = np.zeros(len(terms), dtype=np.int64)
    cf = np.zeros(len(terms), dtype=np.int64)
    for shard in shards:
        ids = global_ids(shard.terms, position)
        np.add.at(df, ids, shard.df)
        np.add.at(cf, ids, shard.cf)
    return terms, df, cf


def global_ids(terms: list[str], position: dict[str, int]) -> np.ndarray:
    """Global term id of each of a shard's terms."""
    return np.fromiter((position[t] for t in terms), dtype=np.int64, count=len(terms))


def collection_scalars(shards: list[InvertedIndex]) -> dict[str, int]:
    """Document count (all, and with at least one term) and collection length."""
    return {"num_docs": sum(s.num_docs for s in shards),
            "doc_count": sum(int(np.count_nonzero(s.doc_lengths)) for s in shards),
            "total_terms": sum(int(np.sum(s.doc_lengths, dtype=np.int64)) for s in shards)}


def write_vocabulary(out: Path, terms: list[str], df: np.ndarray, cf: np.ndarray) -> None:
    """Write the global vocabulary (UTF-8 blob + offsets, as the inverted index) with df and cf."""
    out.mkdir(parents=True, exist_ok=True)
    encoded = [t.encode() for t in terms]
    offsets = np.zeros(len(terms) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    storage.save_array(out / "terms_utf8.npy", np.frombuffer(b"".join(encoded), dtype=np.uint8))
    storage.save_array(out / "terms_offsets.npy", offsets)
    storage.save_array(out / "df.npy", df)
    storage.save_array(out / "cf.npy", cf)


def write_global_statistics(root: Path, shard_dirs: list[Path]) -> dict[str, Any]:
    """Write `root/global/` and each shard's `global/` part; returns the collection statistics."""
    shards = [InvertedIndex(d / "inverted") for d in shard_dirs]
    terms, df, cf = merge_vocabularies(shards)
    scalars = collection_scalars(shards)
    write_vocabulary(root / PART, terms, df, cf)
    position = {t: i for i, t in enumerate(terms)}
    for shard_dir, shard in zip(shard_dirs, shards):
        ids = global_ids(shard.terms, position)
        target = shard_dir / PART
        with storage.atomic_directory(target) as tmp:
            storage.save_array(tmp / "df.npy", df[ids])
            storage.save_array(tmp / "cf.npy", cf[ids])
        storage.add_part(shard_dir, PART, dict(scalars, unique_terms=len(terms)), target)
    return {"documents": scalars["num_docs"], "unique_terms": len(terms),
            "total_terms": scalars["total_terms"], "postings": sum(len(s.tfs) for s in shards)}


def load_shard_statistics(index: Index) -> CollectionStats:
    """The collection statistics stored in a shard's `global/` part, for its term ids."""
    entry = index.parts.get(PART)
    if entry is None:
        raise InputError("shard has no global statistics part; rebuild the sharded index", index.path)
    root = index.path / PART
    df, cf = storage.load_array(root / "df.npy"), storage.load_array(root / "cf.npy")
    if len(df) != index.inverted.num_terms or len(cf) != len(df):
        raise InputError(f"global statistics cover {len(df)} terms, the shard has"
                         f" {index.inverted.num_terms}; rebuild the sharded index", root)
    return CollectionStats(**{k: int(entry[k]) for k in SCALARS}, df=np.asarray(df), cf=np.asarray(cf))
